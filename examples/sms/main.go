// Command sms sends appointment reminders from a worker that pulls them
// (Reserve, Ack) instead of registering a handler, as a service in any
// language would through the server. Each reminder is handed over at its
// due time; a worker that dies holding one loses nothing: after its
// time-to-run the reminder comes back, one attempt counted.
//
//	go run ./examples/sms -scale 0.01
package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/examples/internal/exredis"
)

func main() { exredis.Main("sms", run) }

func run(ctx context.Context, rdb redis.UniversalClient, out io.Writer, scale float64) error {
	q, err := wheelq.New(rdb, wheelq.Config{
		Namespace: fmt.Sprintf("sms-%d", time.Now().UnixNano()),
		Backoff:   func(int, error) time.Duration { return exredis.D(time.Second, scale) },
	})
	if err != nil {
		return err
	}
	if err := q.Pull("sms"); err != nil { // before Start: no handler for this topic
		return err
	}
	if err := q.Start(ctx); err != nil {
		return err
	}
	defer q.Shutdown(ctx)
	<-q.Ready()

	start := time.Now()
	for i, patient := range []string{"Ada", "Grace", "Linus"} {
		msg := fmt.Sprintf("%s, your appointment is in 2 hours", patient)
		due := start.Add(exredis.D(time.Duration(i+1)*time.Second, scale))
		if _, err := q.Schedule(ctx, "sms", []byte(msg), wheelq.ID(fmt.Sprintf("r-%d", i+1)), wheelq.At(due)); err != nil {
			return err
		}
	}
	// The time-to-run: how long a worker may take to send one before the
	// reminder is handed out again (at least half a second, so that a
	// busy machine's worker is not taken for a dead one).
	opts := wheelq.ReserveOptions{Topics: []string{"sms"}, Max: 1, TTR: max(exredis.D(30*time.Second, scale), 500*time.Millisecond)}
	crashed := false
	for sent := 0; sent < 3; {
		rs, err := q.Reserve(ctx, opts) // blocks until one is due, hands it over at its time
		if err != nil {
			return err
		}
		r := rs[0]
		if r.ID == "r-2" && !crashed {
			// The worker dies before it sends: no Ack. The reservation
			// lapses after its time-to-run and the reminder comes back.
			crashed = true
			fmt.Fprintf(out, "worker crashed holding %s (attempt %d)\n", r.ID, r.Job.Attempt)
			continue
		}
		line := fmt.Sprintf("sent %s (attempt %d): %s", r.ID, r.Job.Attempt, r.Job.Payload)
		if r.Job.LastError != "" {
			line += " [after: " + r.Job.LastError + "]"
		}
		fmt.Fprintln(out, line)
		if err := q.Ack(ctx, r.Receipt); err != nil {
			return err
		}
		sent++
	}
	info, err := q.Lookup(ctx, "sms", "r-2")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "r-2 is %s after %d attempts\n", info.State, info.Attempts)
	return nil
}
