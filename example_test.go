package wheelq_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/redistest"
)

// exampleRedis starts a throwaway redis-server (or miniredis where none is
// installed) so that the examples run anywhere. In your code, pass your
// own client: redis.NewClient, redis.NewFailoverClient (Sentinel) or
// redis.NewClusterClient.
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

// A job that cancels an unpaid order runs after a delay unless the payment
// cancels it first.
func Example() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	q, err := wheelq.New(rdb, wheelq.Config{})
	if err != nil {
		panic(err)
	}
	done := make(chan string)
	q.Handle("order.expire", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		done <- fmt.Sprintf("order %s expired (attempt %d)", j.Payload, j.Attempt)
		return nil
	}))
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	defer q.Shutdown(ctx)

	for _, order := range []string{"A-1", "A-2"} {
		// The order id is the job id: scheduling twice is harmless.
		if _, err := q.Schedule(ctx, "order.expire", []byte(order), wheelq.ID(order), wheelq.After(50*time.Millisecond)); err != nil {
			panic(err)
		}
	}
	_, err = q.Schedule(ctx, "order.expire", []byte("A-1"), wheelq.ID("A-1"))
	fmt.Println("again:", errors.Is(err, wheelq.ErrDuplicate))

	// A-2 is paid: its expiry is cancelled.
	fmt.Println("cancel:", q.Cancel(ctx, "order.expire", "A-2"))
	fmt.Println(<-done)
	// Output:
	// again: true
	// cancel: <nil>
	// order A-1 expired (attempt 1)
}

// A failing handler is retried with backoff; after MaxAttempts runs the job
// is dead-lettered, where it can be inspected and requeued.
func ExampleQueue_Requeue() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	q, _ := wheelq.New(rdb, wheelq.Config{
		Backoff: func(attempt int, err error) time.Duration { return 10 * time.Millisecond },
	})
	healthy := make(chan bool, 1)
	healthy <- false
	runs := make(chan string, 10)
	q.Handle("webhook", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		ok := <-healthy
		healthy <- ok
		if !ok {
			runs <- fmt.Sprintf("attempt %d failed", j.Attempt)
			return errors.New("503 from downstream")
		}
		runs <- fmt.Sprintf("attempt %d delivered", j.Attempt)
		return nil
	}))
	q.Start(ctx)
	defer q.Shutdown(ctx)

	q.Schedule(ctx, "webhook", []byte(`{"event":"paid"}`), wheelq.ID("evt-7"), wheelq.MaxAttempts(3))
	for range 3 {
		fmt.Println(<-runs)
	}
	var dead []wheelq.JobInfo
	for len(dead) == 0 {
		dead, _ = q.DeadJobs(ctx, 10)
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Printf("dead: %s after %d attempts: %s\n", dead[0].ID, dead[0].Attempts, dead[0].LastError)

	<-healthy
	healthy <- true // the downstream is back
	fmt.Println("requeue:", q.Requeue(ctx, "webhook", "evt-7", time.Now()))
	fmt.Println(<-runs)
	// Output:
	// attempt 1 failed
	// attempt 2 failed
	// attempt 3 failed
	// dead: evt-7 after 3 attempts: 503 from downstream
	// requeue: <nil>
	// attempt 1 delivered
}

// Reschedule moves a pending job; Lookup shows where a job stands.
func ExampleQueue_Reschedule() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	q, _ := wheelq.New(rdb, wheelq.Config{})
	defer q.Shutdown(ctx)
	// A producer need not Start the queue: it only writes jobs.
	appointment := time.Now().UTC().Truncate(24 * time.Hour).Add(10 * 24 * time.Hour)
	q.Schedule(ctx, "remind", []byte("patient 42"), wheelq.ID("appt-42"), wheelq.At(appointment.Add(-2*time.Hour)))

	moved := appointment.Add(24 * time.Hour)
	fmt.Println(q.Reschedule(ctx, "remind", "appt-42", moved.Add(-2*time.Hour)))
	info, _ := q.Lookup(ctx, "remind", "appt-42")
	fmt.Println(info.State, info.Due.Sub(appointment))
	// Output:
	// <nil>
	// pending 22h0m0s
}

// A readiness check: ready while Redis answers. A Ping that got an answer
// also lets the queue's writes through at once after Redis was found
// unreachable (they fail fast with ErrUnavailable meanwhile).
func ExampleQueue_Ping() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	q, _ := wheelq.New(rdb, wheelq.Config{})
	defer q.Shutdown(ctx)
	ready := func(w http.ResponseWriter, r *http.Request) {
		if err := q.Ping(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	}
	rec := httptest.NewRecorder()
	ready(rec, httptest.NewRequest("GET", "/readyz", nil))
	fmt.Print(rec.Code, " ", rec.Body)
	// Output:
	// 200 ready
}

// A campaign's reminders go in one call: one round trip per thousand jobs,
// a result per job. A job that fails (here a duplicate id) leaves the
// others stored.
func ExampleQueue_ScheduleBatch() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	q, _ := wheelq.New(rdb, wheelq.Config{})
	defer q.Shutdown(ctx)
	var jobs []wheelq.BatchJob
	for _, patient := range []string{"41", "42", "42"} {
		jobs = append(jobs, wheelq.BatchJob{
			Topic:   "remind",
			Payload: []byte("patient " + patient),
			Options: []wheelq.Option{wheelq.ID("flu-shot-" + patient), wheelq.After(24 * time.Hour)},
		})
	}
	res, err := q.ScheduleBatch(ctx, jobs)
	if err != nil {
		panic(err) // the list as a whole was refused: empty, too long, or Redis out of reach
	}
	for _, r := range res {
		fmt.Println(r.ID, errors.Is(r.Err, wheelq.ErrInvalidOption))
	}
	errs, _ := q.CancelBatch(ctx, []wheelq.JobRef{{Topic: "remind", ID: "flu-shot-41"}, {Topic: "remind", ID: "flu-shot-40"}})
	fmt.Println(errs[0], errors.Is(errs[1], wheelq.ErrNotFound))
	// Output:
	// flu-shot-41 false
	// flu-shot-42 false
	//  true
	// <nil> true
}
