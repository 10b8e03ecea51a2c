package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/dashboard"
	"github.com/wheelq/wheelq/internal/redistest"
)

// exampleRedis starts a throwaway redis-server (or miniredis where none is
// installed). In your code, pass your own client.
func exampleRedis() (redis.UniversalClient, func()) {
	if srv, err := redistest.StartServer(redistest.Options{}); err == nil {
		rdb := srv.NewClient()
		return rdb, func() { rdb.Close(); srv.Close() }
	}
	srv, err := redistest.StartMiniredis()
	if err != nil {
		panic(err)
	}
	rdb := srv.NewClient()
	return rdb, func() { rdb.Close(); srv.Close() }
}

// The dashboard mounted under /wheelq/ beside the application's own
// handlers: anyone may look, only operators may act (the user comes from
// the application's authentication; here a header stands for it).
func ExampleNew() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	q, err := wheelq.New(rdb, wheelq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Shutdown(ctx)
	if _, err := q.Schedule(ctx, "invoice", []byte("#42"), wheelq.ID("inv-42"), wheelq.After(time.Hour)); err != nil {
		panic(err)
	}

	dash, err := dashboard.New(q, dashboard.Options{
		Authorize: func(r *http.Request, a dashboard.Action) error {
			if a.Kind == dashboard.KindView || r.Header.Get("X-User-Role") == "operator" {
				return nil
			}
			return errors.New("operators only")
		},
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/wheelq/", http.StripPrefix("/wheelq", dash))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	res, err := http.Get(srv.URL + "/wheelq/api/overview")
	if err != nil {
		panic(err)
	}
	var o struct {
		Topics []struct {
			Topic   string
			Pending int
		}
	}
	_ = json.NewDecoder(res.Body).Decode(&o)
	res.Body.Close()
	fmt.Printf("%s: %d pending\n", o.Topics[0].Topic, o.Topics[0].Pending)

	// What the page's Cancel button sends, by a user who is not an operator.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/wheelq/api/cancel", strings.NewReader(`{"topic":"invoice","id":"inv-42"}`))
	req.Header.Set(dashboard.HeaderName, "1")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	res.Body.Close()
	fmt.Println("cancel:", res.Status)
	// Output:
	// invoice: 1 pending
	// cancel: 403 Forbidden
}
