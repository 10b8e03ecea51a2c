// Command undo deletes a resource 24 hours after the user asks, unless the
// user undoes it first. The undo is a Cancel; asking twice is idempotent,
// because the resource id is the job id.
//
//	go run ./examples/undo -scale 0.00001
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/examples/internal/exredis"
)

func main() { exredis.Main("undo", run) }

func run(ctx context.Context, rdb redis.UniversalClient, out io.Writer, scale float64) error {
	q, err := wheelq.New(rdb, wheelq.Config{Namespace: fmt.Sprintf("undo-%d", time.Now().UnixNano())})
	if err != nil {
		return err
	}
	deleted := make(chan string, 10)
	q.Handle("space.delete", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		deleted <- j.ID // delete the space here; deleting twice must be harmless
		return nil
	}))
	if err := q.Start(ctx); err != nil {
		return err
	}
	defer q.Shutdown(ctx)
	<-q.Ready()

	requestDelete := func(space string) error {
		_, err := q.Schedule(ctx, "space.delete", nil, wheelq.ID(space), wheelq.After(exredis.D(24*time.Hour, scale)))
		if errors.Is(err, wheelq.ErrDuplicate) {
			fmt.Fprintf(out, "delete of %s already requested\n", space)
			return nil
		}
		if err == nil {
			fmt.Fprintf(out, "%s will be deleted in 24h\n", space)
		}
		return err
	}
	undo := func(space string) error {
		err := q.Cancel(ctx, "space.delete", space)
		switch {
		case err == nil:
			fmt.Fprintf(out, "undo: %s kept\n", space)
		case errors.Is(err, wheelq.ErrNotFound):
			fmt.Fprintf(out, "undo: too late for %s\n", space)
		case errors.Is(err, wheelq.ErrRunning):
			fmt.Fprintf(out, "undo: %s is being deleted right now\n", space)
		default:
			return err
		}
		return nil
	}
	for _, step := range []func() error{
		func() error { return requestDelete("space-a") },
		func() error { return requestDelete("space-b") },
		func() error { return requestDelete("space-a") }, // a double click
		func() error { return undo("space-b") },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	select {
	case id := <-deleted:
		fmt.Fprintf(out, "deleted %s\n", id)
	case <-time.After(exredis.D(24*time.Hour, scale) + 10*time.Second):
		return fmt.Errorf("delete did not run")
	}
	// The job's success is stored a moment later; from then on the run
	// history says it is done (for Config.History's retention).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		info, err := q.Lookup(ctx, "space.delete", "space-a")
		if err != nil {
			return err
		}
		if info.State == wheelq.StateDone {
			fmt.Fprintf(out, "lookup: %s is %s after %d attempt(s)\n", info.ID, info.State, info.Attempts)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still %s after 10s", info.ID, info.State)
		}
	}
	return undo("space-a")
}
