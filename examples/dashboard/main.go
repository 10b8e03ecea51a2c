// Command dashboard serves wheelq's web dashboard beside an application's
// own handlers, behind the application's own authentication: a viewer may
// look, an operator may also requeue, cancel and run jobs. A worker runs
// demo jobs meanwhile (some fail for good, to fill the dead-letter set).
//
//	go run ./examples/dashboard                  # then open http://127.0.0.1:8080/wheelq/
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/dashboard -addr 127.0.0.1:9000
//
// It prints the two users' passwords (random, or from VIEWER_PASSWORD and
// OPERATOR_PASSWORD).
package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/dashboard"
	"github.com/wheelq/wheelq/examples/internal/exredis"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "host:port to listen on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := func() error {
		rdb, closeRedis, err := exredis.Connect(os.Stdout)
		if err != nil {
			return err
		}
		defer closeRedis()
		l, err := net.Listen("tcp", *addr)
		if err != nil {
			return err
		}
		users := map[string]string{"viewer": password("VIEWER_PASSWORD"), "operator": password("OPERATOR_PASSWORD")}
		fmt.Printf("log in as viewer (password %s) or operator (password %s)\n", users["viewer"], users["operator"])
		return run(ctx, rdb, l, users, os.Stdout)
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}

// password returns the value of env, or a random password.
func password(env string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	return rand.Text()[:12]
}

// run serves on l until ctx ends: the application at /, the dashboard at
// /wheelq/ for users (name: password; "operator" may act).
func run(ctx context.Context, rdb redis.UniversalClient, l net.Listener, users map[string]string, out io.Writer) error {
	q, err := wheelq.New(rdb, wheelq.Config{Namespace: "dashboard-demo"})
	if err != nil {
		return err
	}
	q.Handle("email", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error { return nil }))
	q.Handle("webhook", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		return wheelq.Permanent(fmt.Errorf("POST %s: 410 Gone", j.Payload))
	}))
	if err := q.Start(ctx); err != nil {
		return err
	}
	defer q.Shutdown(context.Background())
	if err := demoJobs(ctx, q); err != nil {
		return err
	}

	dash, err := dashboard.New(q, dashboard.Options{
		Title: "shop jobs",
		// Who may act: the user your authentication put in the context.
		Authorize: func(r *http.Request, a dashboard.Action) error {
			if a.Kind == dashboard.KindView || r.Context().Value(userKey{}) == "operator" {
				return nil
			}
			return fmt.Errorf("only an operator may %s jobs", a.Kind)
		},
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "the shop (your application's own handlers); jobs at /wheelq/")
	})
	mux.Handle("/wheelq/", basicAuth(users, http.StripPrefix("/wheelq", dash)))
	// For /metrics beside it, see examples/monitoring (a module of its
	// own, as the Prometheus collector is).

	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "dashboard at http://%s/wheelq/ (users: viewer, operator)\n", l.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// demoJobs schedules jobs due over the next day, and webhooks that fail
// at once (dead-lettered).
func demoJobs(ctx context.Context, q *wheelq.Queue) error {
	for i, after := range []time.Duration{20 * time.Second, 50 * time.Second, 10 * time.Minute, 3 * time.Hour, 20 * time.Hour} {
		if _, err := q.Schedule(ctx, "email", []byte(fmt.Sprintf(`{"to":"customer-%d@example.com"}`, i)),
			wheelq.ID(fmt.Sprintf("welcome-%d", i)), wheelq.After(after), wheelq.OnDuplicate(wheelq.Replace)); err != nil {
			return err
		}
	}
	for i := range 3 {
		_, err := q.Schedule(ctx, "webhook", []byte(fmt.Sprintf("https://partner-%d.example/hook", i)),
			wheelq.ID(fmt.Sprintf("evt-%d", i)), wheelq.OnDuplicate(wheelq.Replace))
		if err != nil {
			return err
		}
	}
	return nil
}

type userKey struct{}

// basicAuth stands for your application's authentication: it puts the
// user in the request's context, and refuses anyone else.
func basicAuth(users map[string]string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, pass, ok := r.BasicAuth()
		want, known := users[name]
		if !ok || !known || subtle.ConstantTimeCompare([]byte(pass), []byte(want)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="jobs", charset="UTF-8"`)
			http.Error(w, "log in to see the jobs", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, name)))
	})
}
