// Command flaky calls a downstream service that fails: the job is retried
// with exponential backoff, lands in the dead-letter set after its last
// attempt, and is requeued from there once the service is back.
//
//	go run ./examples/flaky -scale 0.01
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/examples/internal/exredis"
)

func main() { exredis.Main("flaky", run) }

func run(ctx context.Context, rdb redis.UniversalClient, out io.Writer, scale float64) error {
	var up atomic.Bool
	q, err := wheelq.New(rdb, wheelq.Config{
		Namespace: fmt.Sprintf("flaky-%d", time.Now().UnixNano()),
		// 1s, 2s, 4s, ... as in DefaultBackoff, but without jitter so the
		// output is the same every time.
		Backoff: func(attempt int, err error) time.Duration {
			return exredis.D(time.Second<<(attempt-1), scale)
		},
	})
	if err != nil {
		return err
	}
	runs := make(chan string, 10)
	q.Handle("webhook", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		if !up.Load() {
			runs <- fmt.Sprintf("attempt %d/%d: downstream unavailable", j.Attempt, j.MaxAttempts)
			return errors.New("503 service unavailable")
		}
		runs <- fmt.Sprintf("attempt %d/%d: delivered %s", j.Attempt, j.MaxAttempts, j.Payload)
		return nil
	}))
	if err := q.Start(ctx); err != nil {
		return err
	}
	defer q.Shutdown(ctx)
	<-q.Ready()

	next := func() (string, error) {
		select {
		case s := <-runs:
			return s, nil
		case <-time.After(exredis.D(10*time.Second, scale) + 10*time.Second):
			return "", errors.New("no run")
		}
	}
	if _, err := q.Schedule(ctx, "webhook", []byte(`{"paid":"order-1"}`), wheelq.ID("evt-1"), wheelq.MaxAttempts(3)); err != nil {
		return err
	}
	for range 3 {
		s, err := next()
		if err != nil {
			return err
		}
		fmt.Fprintln(out, s)
	}
	var dead []wheelq.JobInfo
	for len(dead) == 0 {
		if dead, err = q.DeadJobs(ctx, 10); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Fprintf(out, "dead-lettered %s after %d attempts: %s\n", dead[0].ID, dead[0].Attempts, dead[0].LastError)

	up.Store(true)
	if err := q.Requeue(ctx, "webhook", "evt-1", time.Now()); err != nil {
		return err
	}
	fmt.Fprintln(out, "downstream is back: requeued evt-1")
	s, err := next()
	if err != nil {
		return err
	}
	fmt.Fprintln(out, s)
	return nil
}
