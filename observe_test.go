package wheelq

import (
	"context"
	"errors"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

// countingObserver counts events per kind and topic, and round trips
// (calls and batch sizes) per op.
type countingObserver struct {
	mu     sync.Mutex
	events map[string]int // "started/topic"
	trips  map[RoundTripOp]int
	items  map[RoundTripOp]int
	late   []time.Duration
	errs   []error
}

func newCountingObserver() *countingObserver {
	return &countingObserver{events: map[string]int{}, trips: map[RoundTripOp]int{}, items: map[RoundTripOp]int{}}
}

func (o *countingObserver) add(kind, topic string) {
	o.mu.Lock()
	o.events[kind+"/"+topic]++
	o.mu.Unlock()
}

func (o *countingObserver) count(kind, topic string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.events[kind+"/"+topic]
}

func (o *countingObserver) JobScheduled(topic string) { o.add("scheduled", topic) }
func (o *countingObserver) JobStarted(topic string, late time.Duration) {
	o.mu.Lock()
	o.late = append(o.late, late)
	o.mu.Unlock()
	o.add("started", topic)
}
func (o *countingObserver) JobSucceeded(topic string, _ time.Duration) { o.add("succeeded", topic) }
func (o *countingObserver) JobFailed(topic string, _ time.Duration, err error) {
	o.mu.Lock()
	o.errs = append(o.errs, err)
	o.mu.Unlock()
	o.add("failed", topic)
}
func (o *countingObserver) JobRetried(topic string, _ time.Duration) { o.add("retried", topic) }
func (o *countingObserver) JobDead(topic string)                     { o.add("dead", topic) }
func (o *countingObserver) JobCancelled(topic string)                { o.add("cancelled", topic) }
func (o *countingObserver) RoundTrip(op RoundTripOp, _ time.Duration, n int, err error) {
	o.mu.Lock()
	if err == nil {
		o.trips[op]++
		o.items[op] += n
	}
	o.mu.Unlock()
}

// TestObserverEvents: every event is told with its topic, as often as it
// happened, and the round trips of the jobs' path with their batch sizes.
func TestObserverEvents(t *testing.T) {
	t.Parallel()
	obs := newCountingObserver()
	b := setup(t, Config{Observer: obs})
	q := b.q
	done := make(chan string, 64)
	var flaky atomic.Int32
	require.NoError(t, q.Handle("ok", HandlerFunc(func(context.Context, *Job) error { done <- "ok"; return nil })))
	require.NoError(t, q.Handle("flaky", HandlerFunc(func(_ context.Context, j *Job) error {
		if flaky.Add(1) == 1 {
			return errors.New("first run fails")
		}
		done <- "flaky"
		return nil
	})))
	require.NoError(t, q.Handle("bad", HandlerFunc(func(context.Context, *Job) error {
		defer func() { done <- "bad" }()
		return Permanent(errors.New("never"))
	})))
	for i := range 5 {
		_, err := q.Schedule(b.ctx, "ok", nil, ID(strconv.Itoa(i)))
		require.NoError(t, err)
	}
	_, err := q.Schedule(b.ctx, "flaky", nil)
	require.NoError(t, err)
	_, err = q.Schedule(b.ctx, "bad", nil)
	require.NoError(t, err)
	_, err = q.Schedule(b.ctx, "later", nil, ID("x"), After(time.Hour))
	require.NoError(t, err)
	require.NoError(t, q.Cancel(b.ctx, "later", "x"))
	require.ErrorIs(t, q.Cancel(b.ctx, "later", "x"), ErrNotFound) // not told: nothing was cancelled

	for range 7 {
		select {
		case <-done:
		case <-time.After(wait):
			t.Fatal("jobs did not run")
		}
	}
	eventually(t, func() bool {
		s, err := q.Stats(b.ctx)
		// UnstoredOutcomes drops when the batch is taken, before its round
		// trip returns and is told to the observer: wait for that too.
		obs.mu.Lock()
		settled := obs.items[OpSettle]
		obs.mu.Unlock()
		return err == nil && s.UnstoredOutcomes == 0 && settled >= 8 && obs.count("dead", "bad") == 1 && obs.count("succeeded", "flaky") == 1
	}, "outcomes stored")

	for topic, want := range map[string]map[string]int{
		"ok":    {"scheduled": 5, "started": 5, "succeeded": 5},
		"flaky": {"scheduled": 1, "started": 2, "succeeded": 1, "failed": 1, "retried": 1},
		"bad":   {"scheduled": 1, "started": 1, "failed": 1, "dead": 1},
		"later": {"scheduled": 1, "cancelled": 1},
	} {
		for _, kind := range []string{"scheduled", "started", "succeeded", "failed", "retried", "dead", "cancelled"} {
			require.Equal(t, want[kind], obs.count(kind, topic), "%s of topic %s", kind, topic)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Len(t, obs.late, 8)
	for _, l := range obs.late {
		require.GreaterOrEqual(t, l, time.Duration(0))
	}
	require.Len(t, obs.errs, 2)
	var perm *PermanentError
	require.True(t, errors.As(obs.errs[0], &perm) != errors.As(obs.errs[1], &perm),
		"the errors as the handlers returned them: one Permanent, one not: %v", obs.errs)
	// Round trips: every job written, every run claimed and every outcome
	// stored, in at least one round trip each.
	require.Equal(t, 8, obs.items[OpWrite], "jobs written")
	require.Positive(t, obs.trips[OpWrite])
	require.Equal(t, 2, obs.items[OpCancel], "cancels sent (the second found nothing)")
	require.GreaterOrEqual(t, obs.items[OpClaim], 8, "runs claimed")
	require.GreaterOrEqual(t, obs.items[OpSettle], 8, "outcomes stored")
	require.Positive(t, obs.trips[OpPoll], "the poller's passes")
	require.Positive(t, obs.trips[OpLease], "leases taken at start")
	require.Positive(t, obs.trips[OpCensus], "Stats counted")
	require.Equal(t, "claim", OpClaim.String())
	require.Equal(t, "unknown", RoundTripOp(200).String())
	for _, op := range RoundTripOps {
		require.NotEqual(t, "unknown", op.String())
	}
}

// TestObserverCorruptRecord: a corrupt record dead-lettered is told as
// dead, with its topic, without a failed run.
func TestObserverCorruptRecord(t *testing.T) {
	t.Parallel()
	obs := newCountingObserver()
	b := setup(t, Config{Observer: obs})
	require.NoError(t, b.q.Handle("c", HandlerFunc(func(context.Context, *Job) error { return nil })))
	_, err := b.q.Schedule(b.ctx, "c", []byte("ok"), ID("x"), After(200*time.Millisecond))
	require.NoError(t, err)
	// Corrupt the stored record (keeping its revision bytes), and drop the
	// cached copy so that the claim reads it.
	key := "c/x"
	k := b.q.store.Keys(b.q.store.PartitionOf(key))
	raw, err := b.rdb.HGet(b.ctx, k.Jobs, key).Bytes()
	require.NoError(t, err)
	raw[0] = 0x7f
	require.NoError(t, b.rdb.HSet(b.ctx, k.Jobs, key, raw).Err())
	b.q.cache.Remove(key)
	eventually(t, func() bool { return obs.count("dead", "c") == 1 }, "corrupt record dead-lettered")
	require.Zero(t, obs.count("failed", "c"))
	require.Zero(t, obs.count("started", "c"))
}

// BenchmarkFireObserved is BenchmarkFire with a no-op Observer: its B/op
// and allocs/op show what the hook costs per fired job (compare with
// BenchmarkFire, runs interleaved):
//
//	go test -run '^$' -bench 'Fire$|FireObserved' -benchmem -count 3 .
func BenchmarkFireObserved(b *testing.B) {
	benchmarkFire(b, Config{Observer: NopObserver{}})
}

// benchmarkFire is BenchmarkFire's body on a queue with cfg.
func benchmarkFire(b *testing.B, cfg Config) {
	q, ctx := benchQueueConfig(b, cfg)
	var handled atomic.Int64
	_ = q.Handle("f", HandlerFunc(func(context.Context, *Job) error {
		handled.Add(1)
		return nil
	}))
	t0 := time.Now().Add(time.Second)
	spread := time.Duration(b.N) * 100 * time.Microsecond
	var next atomic.Int64
	runGoroutines(b, 32, func() error {
		i := next.Add(1) - 1
		due := t0.Add(time.Duration(i) * spread / time.Duration(b.N))
		_, err := q.Schedule(ctx, "f", make([]byte, 64), ID("job-"+strconv.FormatInt(i, 10)), At(due))
		return err
	})
	if time.Now().After(t0) {
		b.Skip("scheduling took past the first due time")
	}
	runtime.GC()
	if path := os.Getenv("WHEELQ_FIREPROF"); path != "" {
		// A profile of what the fire phase allocates, every allocation
		// sampled (scheduling, before, is sampled as usual):
		// WHEELQ_FIREPROF=/tmp/fire.prof go test -bench '^BenchmarkFire$' ...;
		// go tool pprof -sample_index=alloc_space /tmp/fire.prof
		runtime.MemProfileRate = 1
		defer func() {
			runtime.GC()                                     // the profile counts allocations up to the last cycle
			if err := writeAllocsProfile(path); err != nil { // scaled by the rate now
				b.Error(err)
			}
			runtime.MemProfileRate = 512 * 1024
		}()
	}
	time.Sleep(time.Until(t0)) // the benchmark times the fire phase, from the first due time
	b.ReportAllocs()
	b.ResetTimer()
	for handled.Load() < int64(b.N) || q.settle.outcomes.Pending() > 0 {
		time.Sleep(time.Millisecond) // a benchmark's poll (no signal for settles.Pending): within 1 ms of the end
	}
	b.StopTimer()
}

// benchQueueConfig is benchQueue with a Config.
func benchQueueConfig(b *testing.B, cfg Config) (*Queue, context.Context) {
	b.Helper()
	srv := redistest.Start(b, redistest.Options{})
	q, err := New(srv.Client(b), cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := q.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = q.Shutdown(ctx) })
	<-q.Ready()
	return q, ctx
}

// writeAllocsProfile writes the allocs profile to path.
func writeAllocsProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// heldObserver holds the JobSucceeded call until released.
type heldObserver struct {
	NopObserver
	in, release chan struct{}
}

func (o heldObserver) JobSucceeded(string, time.Duration) {
	o.in <- struct{}{}
	<-o.release
}

// TestRunCountedUntilItsOutcomeIsQueued: between a handler's return and
// its outcome's hand-over to the settler (where the Observer is told),
// Stats counted the run neither as Running nor as UnstoredOutcomes,
// while its job was still pending in Redis: a caller waiting for both to
// be 0 read a Pending count one too high (TestScrape in
// contrib/prometheus failed so beside stress-ng).
func TestRunCountedUntilItsOutcomeIsQueued(t *testing.T) {
	t.Parallel()
	obs := heldObserver{in: make(chan struct{}), release: make(chan struct{})}
	b := setup(t, Config{Observer: obs})
	q := b.q
	require.NoError(t, q.Handle("ok", HandlerFunc(func(context.Context, *Job) error { return nil })))
	_, err := q.Schedule(b.ctx, "ok", nil)
	require.NoError(t, err)
	var once sync.Once
	release := func() { once.Do(func() { close(obs.release) }) }
	defer release() // on a failure too: the queue's shutdown waits for it
	<-obs.in        // the handler returned; its outcome is not handed over yet
	s, err := q.Stats(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, s.Pending)
	require.Equal(t, 1, s.Running+s.UnstoredOutcomes, "a run whose outcome is not stored is counted")
	release()
	require.Eventually(t, func() bool {
		s, err := q.Stats(b.ctx)
		return err == nil && s.Running == 0 && s.UnstoredOutcomes == 0 && s.Pending == 0
	}, 10*time.Second, time.Millisecond)
}
