// Command quickstart schedules a handful of jobs a few hundred milliseconds
// out, cancels one, prints each as it fires with its lateness, and exits.
//
//	go run ./examples/quickstart                       # embedded Redis
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/examples/internal/exredis"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	rdb, closeRedis, err := exredis.Connect(out)
	if err != nil {
		return err
	}
	defer closeRedis()

	q, err := wheelq.New(rdb, wheelq.Config{Namespace: fmt.Sprintf("quickstart-%d", time.Now().UnixNano())})
	if err != nil {
		return err
	}
	fired := make(chan string)
	q.Handle("greet", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		late := time.Since(j.Due)
		fired <- fmt.Sprintf("fired %-8s %-22s %7.3f ms late", j.ID, string(j.Payload), float64(late.Microseconds())/1000)
		return nil
	}))
	if err := q.Start(ctx); err != nil {
		return err
	}
	defer q.Shutdown(ctx)
	<-q.Ready()

	jobs := []struct {
		id    string
		after time.Duration
		msg   string
	}{
		{"first", 200 * time.Millisecond, "hello"},
		{"second", 300 * time.Millisecond, "from the timing wheel"},
		{"third", 400 * time.Millisecond, "never printed"},
		{"fourth", 500 * time.Millisecond, "goodbye"},
	}
	for _, j := range jobs {
		if _, err := q.Schedule(ctx, "greet", []byte(j.msg), wheelq.ID(j.id), wheelq.After(j.after)); err != nil {
			return err
		}
		fmt.Fprintf(out, "scheduled %-7s in %v\n", j.id, j.after)
	}
	if err := q.Cancel(ctx, "greet", "third"); err != nil {
		return err
	}
	fmt.Fprintln(out, "cancelled third")
	for range 3 {
		select {
		case line := <-fired:
			fmt.Fprintln(out, line)
		case <-time.After(10 * time.Second):
			return fmt.Errorf("jobs did not fire")
		}
	}
	return nil
}
