package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/wheelq/wheelq/server/client"
)

// A service that does not embed wheelq expires an unpaid order through a
// wheelq server, and cancels the expiry when the order is paid.
func Example() {
	c := client.New("http://127.0.0.1:8780", os.Getenv("WHEELQ_TOKEN"))
	ctx := context.Background()
	_, err := c.Schedule(ctx, "orders.expire", []byte(`{"order":"1001"}`), client.Schedule{ID: "1001", Delay: 30 * time.Minute})
	if errors.Is(err, client.ErrDuplicate) {
		fmt.Println("already scheduled")
	} else if err != nil {
		log.Fatal(err)
	}
	// The order was paid.
	if err := c.Cancel(ctx, "orders.expire", "1001"); err != nil && !errors.Is(err, client.ErrNotFound) {
		log.Fatal(err)
	}
}

// A worker pulls due jobs, works, and acks (or nacks to retry).
func Example_worker() {
	c := client.New("http://127.0.0.1:8780", os.Getenv("WHEELQ_TOKEN"))
	ctx := context.Background()
	for {
		jobs, err := c.Reserve(ctx, client.Reserve{Topics: []string{"orders.expire"}, Max: 10, Wait: 30 * time.Second})
		if err != nil {
			log.Print(err)
			time.Sleep(time.Second)
			continue
		}
		for i := range jobs {
			j := &jobs[i]
			if err := expire(j.Bytes()); err != nil {
				_ = c.Nack(ctx, j, err.Error(), 0, false) // retried after the server's backoff
				continue
			}
			_ = c.Ack(ctx, j)
		}
	}
}

func expire([]byte) error { return nil }

// A service declares a nightly report through a wheelq server (declaring
// it again at each start changes nothing), lists the schedules, and
// removes one it no longer needs. ErrContended says other clients were
// changing the schedule at that moment: nothing was done, and the same
// call may be sent again.
func Example_recurring() {
	c := client.New("http://127.0.0.1:8780", os.Getenv("WHEELQ_TOKEN"))
	ctx := context.Background()
	r := client.Recurring{Name: "nightly-report", Topic: "reports", Cron: "0 2 * * *", TimeZone: "Europe/Paris",
		Payload: []byte(`{"report":"sales"}`)}
	var ri client.RecurringInfo
	var err error
	for try := 0; try < 3; try++ {
		if ri, err = c.DeclareRecurring(ctx, r); !errors.Is(err, client.ErrContended) {
			break
		}
		time.Sleep(time.Second) // the server's Retry-After
	}
	if err != nil {
		log.Fatal(err)
	}
	if len(ri.Next) > 0 { // none once an End has passed
		fmt.Println("next run:", ri.Next[0])
	}
	list, err := c.Recurrings(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range list {
		if s.Last != nil {
			fmt.Println(s.Name, "last run:", s.Last.State)
		}
	}
	if err := c.RemoveRecurring(ctx, "weekly-digest"); err != nil && !errors.Is(err, client.ErrNotFound) {
		log.Fatal(err)
	}
}

// A worker is handed each job the moment it comes due, over a stream, and
// opens the next stream when one ends (its wait passed, or the server
// stopped). fn runs on this goroutine and is kept short: jobs that come
// due meanwhile wait for it, reserved.
func Example_stream() {
	c := client.New("http://127.0.0.1:8780", os.Getenv("WHEELQ_TOKEN"))
	ctx := context.Background()
	// At most 10 jobs reserved and not yet worked through (a stream per
	// 10 jobs, over the whole wait).
	work := client.Reserve{Topics: []string{"orders.expire"}, Max: 10, Wait: 30 * time.Second}
	for {
		err := c.ReserveStream(ctx, work, func(j client.Reservation) error {
			var err error
			if werr := expire(j.Bytes()); werr != nil {
				err = c.Nack(ctx, &j, werr.Error(), 0, false) // retried after the server's backoff
			} else {
				err = c.Ack(ctx, &j)
			}
			if err != nil {
				log.Print(err) // the job comes back after its time-to-run
			}
			return nil // go on with the stream
		})
		switch {
		case err == nil: // the wait passed: stream again
		case errors.Is(err, client.ErrUnauthorized), errors.Is(err, client.ErrForbidden):
			log.Fatal(err) // the token was revoked
		default:
			log.Print(err)
			time.Sleep(time.Second)
		}
	}
}
