package wheelqtest_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/wheelqtest"
)

// A reminder scheduled for an hour ahead runs when the fake clock gets
// there, and not before.
func Example() {
	h, err := wheelqtest.Start(wheelqtest.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close()
	_ = h.Handle("remind", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		fmt.Printf("remind %s at +%v\n", j.Payload, h.Now().Sub(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)))
		return nil
	}))
	ctx := context.Background()
	_, _ = h.Queue().Schedule(ctx, "remind", []byte("ann"), wheelq.ID("ann"), wheelq.After(time.Hour))
	fmt.Println(h.ExpectScheduled("remind", "ann", h.Now().Add(time.Hour), time.Millisecond, []byte("ann")))
	_ = h.Advance(59 * time.Minute)
	fmt.Println("after 59m:", len(h.Runs("remind", "ann")), "runs")
	_ = h.Advance(time.Minute)
	fmt.Println("after 1h:", len(h.Runs("remind", "ann")), "run")
	fmt.Println("check:", h.Check())
	// Output:
	// <nil>
	// after 59m: 0 runs
	// remind ann at +1h0m0s
	// after 1h: 1 run
	// check: <nil>
}

// processor stands for a card processor outside the process: what it
// charged survives the crash.
type processor struct {
	mu      sync.Mutex
	charged map[string]int      // order -> times charged
	seen    map[string]struct{} // idempotency keys already used
}

// charge charges an order; with a non-empty idempotency key, a repeat of
// the key charges nothing.
func (p *processor) charge(order, idempotencyKey string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if idempotencyKey != "" {
		if _, ok := p.seen[idempotencyKey]; ok {
			return
		}
		p.seen[idempotencyKey] = struct{}{}
	}
	p.charged[order]++
}

// chargeAcrossCrash runs a charge job whose process dies after the
// handler charged the card and before the ack, restarts, and returns how
// often the card was charged and how often the handler ran.
func chargeAcrossCrash(idempotent bool) (charged, runs int) {
	h, err := wheelqtest.Start(wheelqtest.Options{})
	if err != nil {
		return -1, -1
	}
	defer h.Close()
	p := &processor{charged: map[string]int{}, seen: map[string]struct{}{}}
	_ = h.Handle("charge", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		key := ""
		if idempotent {
			key = "charge:" + j.ID // the job id is stable across runs
		}
		p.charge(string(j.Payload), key)
		return nil
	}))
	_, _ = h.Queue().Schedule(context.Background(), "charge", []byte("order-7"), wheelq.ID("order-7"), wheelq.After(time.Minute))
	_ = h.CrashAtJob(wheelqtest.AfterRun, "charge", "order-7")
	_ = h.Advance(time.Minute) // charged; the process dies before the ack
	_ = h.Restart()            // the job runs again
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.charged["order-7"], len(h.Runs("charge", "order-7"))
}

// A crash after the run and before the ack runs the job again: a handler
// that is not idempotent charges the card twice; one that gives the
// processor an idempotency key charges it once.
func ExampleHarness_CrashAtJob() {
	charged, runs := chargeAcrossCrash(false)
	fmt.Printf("not idempotent: %d runs, charged %d times\n", runs, charged)
	charged, runs = chargeAcrossCrash(true)
	fmt.Printf("idempotent: %d runs, charged %d time\n", runs, charged)
	// Output:
	// not idempotent: 2 runs, charged 2 times
	// idempotent: 2 runs, charged 1 time
}

// Restart after a crash in the middle of a reload: the next process
// reloads again, and every job runs once.
func ExampleHarness_Restart() {
	h, err := wheelqtest.Start(wheelqtest.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close()
	var mu sync.Mutex
	ran := map[string]int{}
	_ = h.Handle("job", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		mu.Lock()
		ran[j.ID]++
		mu.Unlock()
		return nil
	}))
	for _, id := range []string{"a", "b", "c"} {
		_, _ = h.Queue().Schedule(context.Background(), "job", nil, wheelq.ID(id), wheelq.After(time.Minute))
	}
	_ = h.CrashAt(wheelqtest.MidReload)
	_ = h.Restart()
	fmt.Println("crashed in the reload:", h.Crashed())
	_ = h.Restart()
	_ = h.Advance(time.Minute)
	mu.Lock()
	fmt.Println(ran["a"], ran["b"], ran["c"])
	mu.Unlock()
	fmt.Println("check:", h.Check())
	// Output:
	// crashed in the reload: true
	// 1 1 1
	// check: <nil>
}
