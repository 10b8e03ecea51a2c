package wheelq

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLimitRemovedWhileRunning: a topic's limits removed (Limit{}) while a
// job of it runs holding a global permit, then set again (a configuration
// reloaded: limits off for a moment, then on). The run's end must give its
// permit back (or at least leave it to lapse): held for good, renewed by
// the limits' loop once the topic is limited again, it takes the cap's
// only permit forever, and the topic's next job never starts.
func TestLimitRemovedWhileRunning(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{LeaseTTL: 3 * time.Second})
	b.srv.RequireReal(t)
	release := make(chan struct{})
	started := make(chan string, 10)
	require.NoError(t, b.q.Limit("one", Limit{GlobalConcurrency: 1}))
	require.NoError(t, b.q.Handle("one", HandlerFunc(func(_ context.Context, j *Job) error {
		started <- j.ID
		if j.ID == "a" {
			<-release
		}
		return nil
	})))
	_, err := b.q.Schedule(b.ctx, "one", nil, ID("a"))
	require.NoError(t, err)
	select {
	case id := <-started:
		require.Equal(t, "a", id)
	case <-time.After(10 * time.Second):
		t.Fatal("a never started")
	}
	require.NoError(t, b.q.Limit("one", Limit{})) // limits off while a runs
	close(release)
	require.Eventually(t, func() bool {
		ji, err := b.q.Lookup(b.ctx, "one", "a")
		return err != nil || ji.State == StateDone
	}, 10*time.Second, 5*time.Millisecond, "a done")
	require.NoError(t, b.q.Limit("one", Limit{GlobalConcurrency: 1})) // and on again
	_, err = b.q.Schedule(b.ctx, "one", nil, ID("b"))
	require.NoError(t, err)
	select {
	case id := <-started:
		require.Equal(t, "b", id)
	case <-time.After(4 * 3 * time.Second): // four leases: a's permit, if kept, is long lapsed
		t.Fatalf("b never started: the global permit of a, which ended while the topic was unlimited, is still held (held here: %v)", heldKeys(b.q.limits))
	}
}

// TestLimitReaddedCountsRunsInFlight: a topic's local cap removed while a
// job of it runs, and set again: the run in flight holds the cap's place
// (its end frees one), so that no more than Concurrency run at once under
// the new limit. Before, the new limit counted from 0 and the old run's
// end took one off it anyway: b started beside a, and c beside b.
func TestLimitReaddedCountsRunsInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	var mu sync.Mutex
	now, most := 0, 0
	gates := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{}), "c": make(chan struct{})}
	started := make(chan string, 10)
	require.NoError(t, b.q.Limit("one", Limit{Concurrency: 1}))
	require.NoError(t, b.q.Handle("one", HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		now++
		most = max(most, now)
		mu.Unlock()
		started <- j.ID
		<-gates[j.ID]
		mu.Lock()
		now--
		mu.Unlock()
		return nil
	})))
	waitStart := func(want string, d time.Duration) bool {
		select {
		case id := <-started:
			require.Equal(t, want, id)
			return true
		case <-time.After(d):
			return false
		}
	}
	sched := func(id string) {
		_, err := b.q.Schedule(b.ctx, "one", nil, ID(id))
		require.NoError(t, err)
	}
	sched("a")
	require.True(t, waitStart("a", 10*time.Second), "a started")
	require.NoError(t, b.q.Limit("one", Limit{}))
	require.NoError(t, b.q.Limit("one", Limit{Concurrency: 1}))
	sched("b")
	early := waitStart("b", 500*time.Millisecond) // before a's end: the bug
	close(gates["a"])
	if !early {
		require.True(t, waitStart("b", 10*time.Second), "b started after a's end")
	}
	sched("c")
	early = waitStart("c", 500*time.Millisecond) // before b's end: the bug
	close(gates["b"])
	if !early {
		require.True(t, waitStart("c", 10*time.Second), "c started after b's end")
	}
	close(gates["c"])
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, most, "runs at once under Concurrency 1 (a started under the limit set before)")
}

// heldKeys returns the keys lm holds permits for.
func heldKeys(lm *limiter) []string {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	var out []string
	for k := range lm.held {
		out = append(out, k)
	}
	return out
}
