// Command reminders sends appointment reminders at fixed offsets before the
// appointment (24h, 2h, 15min); moving the appointment moves them all.
//
//	go run ./examples/reminders -scale 0.00002
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

var offsets = []time.Duration{24 * time.Hour, 2 * time.Hour, 15 * time.Minute}

func main() { exredis.Main("reminders", run) }

// reminderID names the reminder of a booking at an offset, so that the
// booking's reminders can be found again to move or cancel them.
func reminderID(booking string, off time.Duration) string { return booking + "@" + off.String() }

func run(ctx context.Context, rdb redis.UniversalClient, out io.Writer, scale float64) error {
	q, err := wheelq.New(rdb, wheelq.Config{Namespace: fmt.Sprintf("reminders-%d", time.Now().UnixNano())})
	if err != nil {
		return err
	}
	sent := make(chan string, 10)
	q.Handle("remind", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		sent <- fmt.Sprintf("reminder %s: %s", j.ID, j.Payload)
		return nil
	}))
	if err := q.Start(ctx); err != nil {
		return err
	}
	defer q.Shutdown(ctx)
	<-q.Ready()

	now := time.Now()
	book := func(booking string, at time.Time) error {
		for _, off := range offsets {
			msg := fmt.Sprintf("your appointment is in %v", off)
			if _, err := q.Schedule(ctx, "remind", []byte(msg), wheelq.ID(reminderID(booking, off)),
				wheelq.At(at.Add(-exredis.D(off, scale))), wheelq.OnDuplicate(wheelq.Replace)); err != nil {
				return err
			}
		}
		return nil
	}
	move := func(booking string, at time.Time) error {
		for _, off := range offsets {
			if err := q.Reschedule(ctx, "remind", reminderID(booking, off), at.Add(-exredis.D(off, scale))); err != nil {
				return err
			}
		}
		return nil
	}
	appointment := now.Add(exredis.D(25*time.Hour, scale))
	if err := book("booking-7", appointment); err != nil {
		return err
	}
	fmt.Fprintln(out, "booked booking-7 in 25h: 3 reminders")
	// The patient moves the appointment a day later, before any reminder.
	if err := move("booking-7", appointment.Add(exredis.D(24*time.Hour, scale))); err != nil {
		return err
	}
	fmt.Fprintln(out, "moved booking-7 by 24h: its reminders moved with it")
	for range offsets {
		select {
		case s := <-sent:
			fmt.Fprintln(out, s)
		case <-time.After(exredis.D(49*time.Hour, scale) + 10*time.Second):
			return fmt.Errorf("reminders did not run")
		}
	}
	if time.Since(now) < exredis.D(48*time.Hour-24*time.Hour, scale) {
		return fmt.Errorf("reminders ran at the old times")
	}
	return nil
}
