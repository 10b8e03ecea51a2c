// Command orders cancels an unpaid order 30 minutes after it was placed,
// unless the payment comes first: the payment cancels the job.
//
//	go run ./examples/orders -scale 0.0005   # 30 minutes in under a second
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/examples/internal/exredis"
)

func main() { exredis.Main("orders", run) }

// shop is the application: orders and their state.
type shop struct {
	mu     sync.Mutex
	status map[string]string
	// released counts, per order, the stock released when it was
	// cancelled: the handler's side effect that must happen once.
	released map[string]int
}

func newShop() *shop { return &shop{status: map[string]string{}, released: map[string]int{}} }

// expireTimeout is how long an order may stay unpaid.
const expireTimeout = 30 * time.Minute

// expire is the order.expire handler: it cancels the order if it is still
// unpaid and releases its stock. It is idempotent: a second run (after a
// crash before the ack) changes nothing. notify, if set, is told of each
// run.
func (s *shop) expire(notify func(id string)) wheelq.Handler {
	return wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		id := string(j.Payload)
		s.mu.Lock()
		if s.status[id] == "unpaid" { // idempotent: a second run changes nothing
			s.status[id] = "cancelled"
			s.released[id]++
		}
		s.mu.Unlock()
		if notify != nil {
			notify(id)
		}
		return nil
	})
}

// place records an unpaid order and schedules its expiry after d.
func (s *shop) place(ctx context.Context, q *wheelq.Queue, id string, d time.Duration) error {
	s.mu.Lock()
	s.status[id] = "unpaid"
	s.mu.Unlock()
	// The order id is the job id: a retried request schedules nothing new.
	_, err := q.Schedule(ctx, "order.expire", []byte(id), wheelq.ID(id), wheelq.After(d))
	return err
}

// pay records a payment and cancels the order's expiry.
func (s *shop) pay(ctx context.Context, q *wheelq.Queue, id string) error {
	err := q.Cancel(ctx, "order.expire", id)
	if err != nil && !errors.Is(err, wheelq.ErrNotFound) {
		return err // ErrRunning would mean: too late, it is being cancelled
	}
	s.mu.Lock()
	s.status[id] = "paid"
	s.mu.Unlock()
	return nil
}

func run(ctx context.Context, rdb redis.UniversalClient, out io.Writer, scale float64) error {
	s := newShop()
	q, err := wheelq.New(rdb, wheelq.Config{Namespace: fmt.Sprintf("orders-%d", time.Now().UnixNano())})
	if err != nil {
		return err
	}
	expired := make(chan string, 10)
	q.Handle("order.expire", s.expire(func(id string) { expired <- id }))
	if err := q.Start(ctx); err != nil {
		return err
	}
	defer q.Shutdown(ctx)
	<-q.Ready()

	for _, id := range []string{"order-1", "order-2", "order-3"} {
		if err := s.place(ctx, q, id, exredis.D(expireTimeout, scale)); err != nil {
			return err
		}
		fmt.Fprintf(out, "placed %s\n", id)
	}
	if err := s.pay(ctx, q, "order-2"); err != nil {
		return err
	}
	fmt.Fprintln(out, "paid order-2")
	for range 2 {
		select {
		case id := <-expired:
			fmt.Fprintf(out, "30 minutes passed: %s unpaid\n", id)
		case <-time.After(exredis.D(expireTimeout, scale) + 10*time.Second):
			return fmt.Errorf("expiry did not run")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range []string{"order-1", "order-2", "order-3"} {
		fmt.Fprintf(out, "%s: %s\n", id, s.status[id])
	}
	return nil
}
