package wheel

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// recorder collects fired entries with the clock's time at the callback.
type recorder struct {
	mu    sync.Mutex
	clock Clock
	fired []Fired
	at    []time.Time
	ch    chan struct{}
}

func newRecorder(c Clock) *recorder { return &recorder{clock: c, ch: make(chan struct{}, 1<<16)} }

func (r *recorder) fire(batch []Fired) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range batch {
		r.fired = append(r.fired, f)
		r.at = append(r.at, now)
		r.ch <- struct{}{}
	}
}

// snapshot returns copies of what fired and when.
func (r *recorder) snapshot() ([]Fired, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Fired(nil), r.fired...), append([]time.Time(nil), r.at...)
}

func (r *recorder) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []string{}
	for _, f := range r.fired {
		out = append(out, f.ID)
	}
	return out
}

func TestSchedulerFakeClock(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := NewFakeClock(t0)
	rec := newRecorder(clk)
	s, err := NewScheduler(SchedulerConfig{Clock: clk}, rec.fire)
	require.NoError(t, err)
	s.Start()
	defer s.Stop()

	_, err = s.Add("b", t0.Add(2*time.Second))
	require.NoError(t, err)
	_, err = s.Add("a", t0.Add(time.Second))
	require.NoError(t, err)
	_, err = s.Add("gone", t0.Add(time.Second))
	require.NoError(t, err)
	require.True(t, s.Cancel("gone"))
	due, ok := s.Due("b")
	require.True(t, ok)
	require.Equal(t, t0.Add(2*time.Second), due)
	require.Equal(t, 2, s.Len())

	clk.BlockUntilSleeping()
	clk.Advance(999 * time.Millisecond)
	clk.BlockUntilSleeping()
	require.Empty(t, rec.ids(), "nothing is due yet")

	clk.Advance(time.Millisecond)
	clk.BlockUntilSleeping()
	require.Equal(t, []string{"a"}, rec.ids())

	// Rescheduling earlier while the scheduler sleeps wakes it.
	ok, err = s.Reschedule("b", t0.Add(1500*time.Millisecond))
	require.NoError(t, err)
	require.True(t, ok)
	clk.BlockUntilSleeping()
	clk.Advance(500 * time.Millisecond)
	clk.BlockUntilSleeping()
	require.Equal(t, []string{"a", "b"}, rec.ids())
	fired, at := rec.snapshot()
	for i, f := range fired {
		require.False(t, at[i].Before(f.Due), "fired early")
	}

	// A due time in the past fires at once.
	_, err = s.Add("past", t0)
	require.NoError(t, err)
	<-rec.ch
	<-rec.ch
	<-rec.ch
	require.Equal(t, []string{"a", "b", "past"}, rec.ids())
}

func TestSchedulerErrors(t *testing.T) {
	t.Parallel()
	clk := NewFakeClock(time.Unix(0, 0))
	s, err := NewScheduler(SchedulerConfig{Clock: clk, MaxDelay: time.Hour}, func([]Fired) {})
	require.NoError(t, err)
	_, err = s.Add("", clk.Now())
	require.ErrorIs(t, err, ErrEmptyID)
	_, err = s.Add("x", clk.Now().Add(time.Hour+time.Nanosecond))
	require.ErrorIs(t, err, ErrTooFar)
	_, err = s.Add("x", clk.Now().Add(time.Hour))
	require.NoError(t, err)
	s.Stop()
	s.Stop() // idempotent
	_, err = s.Add("y", clk.Now())
	require.ErrorIs(t, err, ErrStopped)
	require.Zero(t, s.Len(), "a stopped scheduler releases its entries")
	_, err = NewScheduler(SchedulerConfig{}, nil)
	require.Error(t, err)
	_, err = NewScheduler(SchedulerConfig{Tick: time.Nanosecond}, func([]Fired) {})
	require.Error(t, err)
}

// TestSchedulerSynctest drives the runtime-timer clock inside a synctest
// bubble, where time is virtual and exact.
func TestSchedulerSynctest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		clk := RuntimeClock()
		rec := newRecorder(clk)
		s, err := NewScheduler(SchedulerConfig{Clock: clk}, rec.fire)
		require.NoError(t, err)
		s.Start()
		start := time.Now()
		for i := range 100 {
			_, err := s.Add(fmt.Sprint(i), start.Add(time.Duration(100-i)*37*time.Millisecond))
			require.NoError(t, err)
		}
		_, err = s.Add("far", start.Add(20*24*time.Hour))
		require.NoError(t, err)
		time.Sleep(4 * time.Second)
		synctest.Wait()
		fired, at := rec.snapshot()
		require.Len(t, fired, 100)
		for i, f := range fired {
			require.Equal(t, f.Due, at[i], "virtual time fires exactly on time")
			if i > 0 {
				require.True(t, fired[i-1].Due.Before(f.Due))
			}
		}
		time.Sleep(20 * 24 * time.Hour)
		synctest.Wait()
		fired, at = rec.snapshot()
		require.Len(t, fired, 101)
		require.Equal(t, start.Add(20*24*time.Hour), at[100])
		s.Stop()
	})
}

// TestSchedulerRealClock runs the production path: the precise sleeper on
// the system clock. It asserts order and never-early, not lateness.
func TestSchedulerRealClock(t *testing.T) {
	t.Parallel()
	clk := RealClock()
	rec := newRecorder(clk)
	s, err := NewScheduler(SchedulerConfig{}, rec.fire)
	require.NoError(t, err)
	s.Start()
	defer s.Stop()
	// The first entry is due well after the last is added (adding 200
	// entries under -race on a loaded machine has taken over a
	// millisecond), so that the order asserted is the wheel's alone.
	start := clk.Now().Add(100 * time.Millisecond)
	const n = 200
	for i := range n {
		_, err := s.Add(fmt.Sprint(i), start.Add(time.Duration(i%50)*time.Millisecond+time.Duration(i)*time.Microsecond))
		require.NoError(t, err)
	}
	for range n {
		select {
		case <-rec.ch:
		case <-time.After(10 * time.Second):
			t.Fatal("entries did not fire")
		}
	}
	fired, at := rec.snapshot()
	for i, f := range fired {
		require.False(t, at[i].Before(f.Due), "entry %s fired early", f.ID)
		if i > 0 {
			require.False(t, f.Due.Before(fired[i-1].Due), "out of order")
		}
	}
}

// TestSchedulerStartStopStress starts, uses and stops schedulers from many
// goroutines at once; run it under -race.
func TestSchedulerStartStopStress(t *testing.T) {
	t.Parallel()
	clk := RealClock()
	s, err := NewScheduler(SchedulerConfig{Clock: clk}, func([]Fired) {})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				id := fmt.Sprintf("%d-%d", g, i%10)
				switch i % 4 {
				case 0:
					s.Start()
				case 1:
					_, _ = s.Add(id, clk.Now().Add(time.Duration(i)*time.Microsecond))
				case 2:
					s.Cancel(id)
				case 3:
					if g == 0 && i > 150 {
						s.Stop()
					}
				}
			}
		})
	}
	wg.Wait()
	s.Stop()
	_, err = s.Add("late", clk.Now())
	require.ErrorIs(t, err, ErrStopped)
}

// TestRealSleeper: the real clock's sleeper never returns before its
// deadline unless woken, a Wake before Sleep is not lost, and a Wake ends
// a sleep without a deadline.
func TestRealSleeper(t *testing.T) {
	t.Parallel()
	s := RealClock().NewSleeper()
	defer s.Close()
	for range 20 {
		deadline := time.Now().Add(3 * time.Millisecond)
		s.Sleep(deadline)
		require.False(t, time.Now().Before(deadline), "returned before the deadline")
	}
	within := func(what string, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Sleep did not return", what)
		}
	}
	s.Wake()
	within("wake before sleep", func() { s.Sleep(time.Time{}) })
	within("wake during sleep", func() {
		go func() { time.Sleep(10 * time.Millisecond); s.Wake() }()
		s.Sleep(time.Now().Add(time.Hour))
	})
}

// TestSchedulerSlack: with Slack, a wake hands out the entries due within
// Slack after the one it woke for, in one batch, never more than Slack
// early; without it, each at its time.
func TestSchedulerSlack(t *testing.T) {
	t.Parallel()
	for _, slack := range []time.Duration{0, time.Millisecond} {
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		clk := NewFakeClock(t0)
		rec := newRecorder(clk)
		s, err := NewScheduler(SchedulerConfig{Clock: clk, Slack: slack}, rec.fire)
		require.NoError(t, err)
		s.Start()
		for i, d := range []time.Duration{10 * time.Millisecond, 10*time.Millisecond + 300*time.Microsecond, 10*time.Millisecond + 900*time.Microsecond, 12 * time.Millisecond} {
			_, err := s.Add(fmt.Sprint(i), t0.Add(d))
			require.NoError(t, err)
		}
		clk.BlockUntilSleeping()
		clk.Advance(10 * time.Millisecond)
		clk.BlockUntilSleeping()
		if slack == 0 {
			require.Equal(t, []string{"0"}, rec.ids(), "each at its own time")
		} else {
			require.Equal(t, []string{"0", "1", "2"}, rec.ids(), "those within the slack, in one wake")
		}
		clk.Advance(2 * time.Millisecond)
		clk.BlockUntilSleeping()
		require.Equal(t, []string{"0", "1", "2", "3"}, rec.ids())
		fired, at := rec.snapshot()
		for i, f := range fired {
			require.False(t, at[i].Before(f.Due.Add(-slack)), "fired more than the slack early")
		}
		s.Stop()
	}
}
