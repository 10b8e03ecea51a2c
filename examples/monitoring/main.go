// Command monitoring serves, on one port, an application's own handlers
// beside wheelq's web dashboard and its Prometheus metrics:
//
//	POST /orders?id=42   the application: places an order, whose expiry is a wheelq job
//	GET  /healthz        the application's health check (Queue.Ready and Queue.Owned)
//	     /wheelq/        the dashboard, behind the application's authentication
//	GET  /metrics        Prometheus metrics (package wheelqprom)
//
// It is a module of its own, as contrib/prometheus is, so that the
// Prometheus client stays out of wheelq's go.mod:
//
//	cd examples/monitoring && go run . -expire 10s
//	curl -X POST 'http://127.0.0.1:8080/orders?id=42'
//	curl -s http://127.0.0.1:8080/metrics | grep order.expire
//
// It prints the dashboard's password (user admin; random, or from
// DASHBOARD_PASSWORD).
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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
	wheelqprom "github.com/wheelq/wheelq/contrib/prometheus"
	"github.com/wheelq/wheelq/dashboard"
	"github.com/wheelq/wheelq/examples/internal/exredis"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "host:port to listen on")
	expire := flag.Duration("expire", 30*time.Minute, "how long an order may stay unpaid")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := func() error {
		// REDIS_ADDR, or else an embedded miniredis (it says so).
		rdb, closeRedis, err := exredis.Connect(os.Stdout)
		if err != nil {
			return err
		}
		defer closeRedis()
		l, err := net.Listen("tcp", *addr)
		if err != nil {
			return err
		}
		pass := os.Getenv("DASHBOARD_PASSWORD")
		if pass == "" {
			pass = rand.Text()[:12]
		}
		fmt.Printf("dashboard user admin, password %s\n", pass)
		return run(ctx, rdb, l, *expire, pass, os.Stdout)
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "monitoring:", err)
		os.Exit(1)
	}
}

// run serves on l until ctx ends. Orders expire after expire; the
// dashboard's user is admin with password pass.
func run(ctx context.Context, rdb redis.UniversalClient, l net.Listener, expire time.Duration, pass string, out io.Writer) error {
	// The collector is the queue's Observer, and a prometheus.Collector
	// whose gauges it reads from the queue (Watch).
	metrics := wheelqprom.New(wheelqprom.Options{})
	q, err := wheelq.New(rdb, wheelq.Config{Namespace: "monitoring-demo", Observer: metrics})
	if err != nil {
		return err
	}
	metrics.Watch(q)
	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer, beside your own metrics
	if err := reg.Register(metrics); err != nil {
		return err
	}

	if err := q.Handle("order.expire", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		fmt.Fprintf(out, "order %s expired unpaid: cancelled\n", j.ID)
		return nil
	})); err != nil {
		return err
	}
	if err := q.Start(ctx); err != nil {
		return err
	}
	defer q.Shutdown(context.Background())

	dash, err := dashboard.New(q, dashboard.Options{Title: "shop jobs"})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	// The application's own handlers.
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		id := r.FormValue("id")
		_, err := q.Schedule(r.Context(), "order.expire", nil, wheelq.ID(id), wheelq.After(expire))
		switch {
		case errors.Is(err, wheelq.ErrInvalidID):
			http.Error(w, "the order's id must have 1 to 512 bytes", http.StatusBadRequest)
			return
		case errors.Is(err, wheelq.ErrDuplicate):
			http.Error(w, "order "+id+" exists", http.StatusConflict)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, "order %s placed: it expires in %s unless paid\n", id, expire)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-q.Ready():
		default:
			http.Error(w, "loading jobs", http.StatusServiceUnavailable)
			return
		}
		// Owning no partition is not a fault (more processes than
		// partitions, or a hand-over under way): report it, do not fail.
		fmt.Fprintf(w, "ok: running the jobs of %d partitions\n", len(q.Owned()))
	})
	// wheelq's: the dashboard behind your authentication, and the metrics
	// (serve them on an internal port, or behind auth, if the port is public).
	mux.Handle("/wheelq/", basicAuth("admin", pass, http.StripPrefix("/wheelq", dash)))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "serving on http://%s: /orders, /healthz, /wheelq/, /metrics\n", l.Addr())
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

// basicAuth stands for your application's authentication.
func basicAuth(user, pass string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 ||
			subtle.ConstantTimeCompare([]byte(p), []byte(pass)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="jobs", charset="UTF-8"`)
			http.Error(w, "log in to see the jobs", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
