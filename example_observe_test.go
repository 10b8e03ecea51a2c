package wheelq_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/wheelq/wheelq"
)

// A job carries headers to its handler beside its payload: a request id
// here (contrib/otel carries trace context this way).
func ExampleHeaders() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	q, err := wheelq.New(rdb, wheelq.Config{})
	if err != nil {
		panic(err)
	}
	defer q.Shutdown(ctx)
	ran := make(chan struct{})
	_ = q.Handle("mail", wheelq.HandlerFunc(func(_ context.Context, j *wheelq.Job) error {
		fmt.Println("request", j.Headers["request-id"])
		close(ran)
		return nil
	}))
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	_, err = q.Schedule(ctx, "mail", []byte("to: a@example.com"), wheelq.Headers(map[string]string{"request-id": "r-42"}))
	if err != nil {
		panic(err)
	}
	<-ran
	// Output: request r-42
}

// runCounter is an Observer that counts succeeded runs; NopObserver
// gives it the other methods.
type runCounter struct {
	wheelq.NopObserver
	ok atomic.Int64
}

func (c *runCounter) JobSucceeded(topic string, took time.Duration) { c.ok.Add(1) }

// An Observer is told of the queue's events: contrib/prometheus is one
// that exports them as metrics.
func ExampleObserver() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()
	obs := &runCounter{}
	q, err := wheelq.New(rdb, wheelq.Config{Observer: obs})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{}, 3)
	_ = q.Handle("ping", wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error { done <- struct{}{}; return nil }))
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	for range 3 {
		if _, err := q.Schedule(ctx, "ping", nil); err != nil {
			panic(err)
		}
	}
	for range 3 {
		<-done
	}
	_ = q.Shutdown(ctx) // the succeeded runs are told before their outcomes are stored
	fmt.Println("succeeded:", obs.ok.Load())
	// Output: succeeded: 3
}
