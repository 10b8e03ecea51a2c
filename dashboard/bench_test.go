package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/redistest"
)

// BenchmarkPageLoad measures what one reload of the page costs the server
// on a namespace of 100,000 pending jobs in 10 topics due over the next
// day: the overview (Stats and Counts) and the timeline of the next day
// (it reads its first 5000 jobs), each an HTTP round trip on loopback to
// a real redis-server.
func BenchmarkPageLoad(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	srv.RequireReal(b)
	ctx := context.Background()
	q, err := wheelq.New(srv.Client(b), wheelq.Config{Namespace: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	const n = 100_000
	sem := make(chan struct{}, 64)
	errs := make(chan error, n)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			_, err := q.Schedule(ctx, fmt.Sprintf("topic-%d", i%10), []byte("x"),
				wheelq.After(time.Minute+time.Duration(i)*(23*time.Hour/n)))
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	dash, err := New(q, Options{})
	if err != nil {
		b.Fatal(err)
	}
	web := httptest.NewServer(dash)
	b.Cleanup(web.Close)
	for _, path := range []string{"/api/overview", "/api/timeline?window=day", "/api/jobs?state=pending&topic=topic-3"} {
		b.Run(path, func(b *testing.B) {
			for b.Loop() {
				res, err := http.Get(web.URL + path)
				if err != nil {
					b.Fatal(err)
				}
				_ = res.Body.Close()
				if res.StatusCode != http.StatusOK {
					b.Fatalf("%s: %s", path, res.Status)
				}
			}
		})
	}
}
