//go:build linux

package wheel

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestSleeperIgnoresStaleExpiry: when the read deadline ends a wait
// first, the timerfd's expiry for the same deadline still comes, later;
// the next Sleep must not take it for its own deadline. A version that
// read the timerfd in a goroutine of its own did, and returned at once:
// TestRealSleeper failed so in a full CI run ("returned before the
// deadline"). Here the timerfd is made to expire just before each Sleep,
// as if for an earlier deadline.
func TestSleeperIgnoresStaleExpiry(t *testing.T) {
	t.Parallel()
	s, ok := newPreciseSleeper().(*timerfdSleeper)
	if !ok {
		t.Skip("no timerfd here")
	}
	defer s.Close()
	for range 5 {
		spec := unix.ItimerSpec{Value: unix.Timespec{Nsec: 1}}
		require.NoError(t, unix.TimerfdSettime(s.fd, 0, &spec, nil))
		time.Sleep(time.Millisecond) // it expired: the fd is readable
		deadline := time.Now().Add(3 * time.Millisecond)
		s.Sleep(deadline)
		require.False(t, time.Now().Before(deadline), "returned before the deadline")
	}
}

// TestPreciseSleeperAllocatesNothing: the scheduler sleeps once per due
// time, thousands of times a second under load, so a Sleep or a Wake that
// allocated would be garbage per fired timer. A version that armed the
// timerfd through a fresh closure allocated three times per Sleep. (A
// wait ended by the runtime timer first may allocate: rare, hence below
// one on average rather than zero.)
func TestPreciseSleeperAllocatesNothing(t *testing.T) {
	s := newPreciseSleeper()
	defer s.Close()
	if _, ok := s.(*timerfdSleeper); !ok {
		t.Skip("no timerfd here")
	}
	s.Sleep(time.Now().Add(50 * time.Microsecond)) // warm up: the reader starts
	sleeps := testing.AllocsPerRun(50, func() { s.Sleep(time.Now().Add(50 * time.Microsecond)) })
	require.Less(t, sleeps, 1.0, "allocations per Sleep")
	wakes := testing.AllocsPerRun(50, func() {
		s.Wake()
		s.Sleep(time.Time{}) // takes the Wake
	})
	require.Less(t, wakes, 1.0, "allocations per Wake and Sleep")
}

// deafClock is the real clock whose network-poller sleeper hears only
// Wake, never its deadline: a first runner stalled at every deadline.
type deafClock struct{ realClock }

func (deafClock) NewSleeper() Sleeper { return deafSleeper{newPreciseSleeper()} }

type deafSleeper struct{ Sleeper }

func (s deafSleeper) Sleep(time.Time) { s.Sleeper.Sleep(time.Time{}) }

// TestBackupFiresWhenTheFirstRunnerIsLate: with the first runner deaf to
// its deadlines, the backup runner alone fires every entry, none early,
// in due order. Without Backup the same scheduler fires nothing (the
// control: it is the backup that fires them).
func TestBackupFiresWhenTheFirstRunnerIsLate(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("Backup needs GOMAXPROCS >= 2")
	}
	t.Parallel()
	for _, backup := range []bool{false, true} {
		rec := newRecorder(RealClock())
		s, err := NewScheduler(SchedulerConfig{Clock: deafClock{}, Backup: backup}, rec.fire)
		require.NoError(t, err)
		s.Start()
		t0 := time.Now()
		const n = 200
		for i := range n {
			_, err := s.Add(fmt.Sprint("e", i), t0.Add(50*time.Millisecond+time.Duration(n-i)*time.Millisecond))
			require.NoError(t, err)
		}
		if !backup {
			time.Sleep(400 * time.Millisecond) // every entry was due by t0+250ms
			require.Empty(t, rec.ids(), "the deaf first runner fired")
			s.Stop()
			continue
		}
		for range n {
			select {
			case <-rec.ch:
			case <-time.After(10 * time.Second):
				t.Fatalf("fired %d of %d", len(rec.ids()), n)
			}
		}
		s.Stop()
		fired, at := rec.snapshot()
		require.Len(t, fired, n)
		for i, f := range fired {
			require.False(t, at[i].Before(f.Due), "%s fired early", f.ID)
			if i > 0 {
				require.False(t, f.Due.Before(fired[i-1].Due), "out of due order at %d", i)
			}
		}
	}
}

// TestBackupRunnersTakeTurns: with both runners live, each entry fires
// once, never early, in due order, with the callback never running twice
// at once, while entries are added, cancelled and moved meanwhile (also
// from the callback).
//
// Due order is what the Scheduler promises for entries that were pending
// together: an entry whose Add (or Reschedule) returned before its due time
// fires no later than any entry due after it. An entry that was already
// due when its Add returned (the adds run while the runners fire, and under
// -race or on a busy machine they fall behind the 20 ms head start) fires
// as soon as a runner sees it, after entries due later that had fired
// meanwhile; the test checks such an entry for everything but that order.
func TestBackupRunnersTakeTurns(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("Backup needs GOMAXPROCS >= 2")
	}
	t.Parallel()
	type firing struct {
		id  string
		due time.Time
	}
	var (
		mu       sync.Mutex
		inside   atomic.Int32
		overlaps atomic.Int32 // callbacks that began while one ran
		order    []firing     // every entry fired, in the order handed out
		fired    = map[string]int{}
		onTime   = map[string]bool{} // the entry was added (last moved) before its due time
		problems []string
		s        *Scheduler
	)
	// added records whether id's Add or Reschedule, due at due, returned
	// before due.
	added := func(id string, due time.Time) {
		early := time.Now().Before(due)
		mu.Lock()
		onTime[id] = early
		mu.Unlock()
	}
	s, err := NewScheduler(SchedulerConfig{Backup: true}, func(batch []Fired) {
		if inside.Add(1) != 1 {
			overlaps.Add(1)
		}
		defer inside.Add(-1)
		now := time.Now()
		var chained []Fired
		mu.Lock()
		for _, f := range batch {
			if now.Before(f.Due) {
				problems = append(problems, f.ID+" early")
			}
			order = append(order, firing{f.ID, f.Due})
			fired[f.ID]++
			if strings.HasPrefix(f.ID, "a") { // chains a follower from the callback
				chained = append(chained, Fired{ID: "f" + f.ID, Due: now.Add(time.Millisecond)})
			}
		}
		mu.Unlock()
		for _, c := range chained {
			if _, err := s.Add(c.ID, c.Due); err != nil {
				mu.Lock()
				problems = append(problems, err.Error())
				mu.Unlock()
				continue
			}
			added(c.ID, c.Due)
		}
	})
	require.NoError(t, err)
	s.Start()
	defer s.Stop()
	r := rand.New(rand.NewPCG(3, 4))
	t0 := time.Now()
	const n = 3000
	cancelled := map[string]bool{}
	for i := range n {
		id := fmt.Sprint("a", i)
		due := t0.Add(20*time.Millisecond + time.Duration(r.Int64N(int64(300*time.Millisecond))).Truncate(time.Millisecond)) // ties
		_, err := s.Add(id, due)
		require.NoError(t, err)
		added(id, due)
		switch i % 10 {
		case 0:
			if s.Cancel(id) {
				cancelled[id] = true
			}
		case 1:
			moved, err := s.Reschedule(id, due.Add(-10*time.Millisecond))
			require.NoError(t, err)
			if moved { // not moved: it had fired already
				added(id, due.Add(-10*time.Millisecond))
			}
		}
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(fired) == 2*(n-len(cancelled))
	}, 30*time.Second, 5*time.Millisecond)
	time.Sleep(20 * time.Millisecond) // nothing more comes
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, problems)
	require.Zero(t, overlaps.Load(), "callbacks ran at once")
	require.Len(t, fired, 2*(n-len(cancelled)))
	for id, k := range fired {
		require.Equal(t, 1, k, id)
		require.False(t, cancelled[strings.TrimPrefix(id, "f")], "%s fired after Cancel", id)
	}
	// An entry on time fires after nothing due later: the latest due among
	// the entries handed out before it is no later than its own.
	var latest time.Time
	late := 0
	for _, f := range order {
		if onTime[f.id] {
			require.False(t, f.due.Before(latest), "%s (due %v) fired after an entry due %v later", f.id, f.due.Sub(t0), latest.Sub(f.due))
		} else {
			late++
		}
		if f.due.After(latest) {
			latest = f.due
		}
	}
	t.Logf("%d of %d entries were already due when added (not checked for order)", late, len(order))
}

// TestBackupNeeds: Backup with a clock that is not the real one, or with
// GOMAXPROCS 1, fails with ErrNoBackup. Not parallel: it sets GOMAXPROCS.
func TestBackupNeeds(t *testing.T) {
	for _, c := range []Clock{RuntimeClock(), NewFakeClock(time.Now())} {
		_, err := NewScheduler(SchedulerConfig{Clock: c, Backup: true}, func([]Fired) {})
		require.ErrorIs(t, err, ErrNoBackup)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	_, err := NewScheduler(SchedulerConfig{Backup: true}, func([]Fired) {})
	require.ErrorIs(t, err, ErrNoBackup)
}

// TestBackupSleeperWakeAfterClose: a Wake that comes after Close (an Add
// that released the scheduler's lock just before Stop, say) must not touch
// the closed timerfd's number, which a new timerfd may have taken. It
// did: the new timer, armed for an hour, was set to expire at once.
func TestBackupSleeperWakeAfterClose(t *testing.T) {
	old, err := realClock{}.newBackupSleeper()
	require.NoError(t, err)
	fd := old.(*blockingSleeper).fd
	require.NoError(t, old.Close())
	other, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(other)
	if other != fd {
		t.Skipf("the fd number was not reused (%d, then %d)", fd, other)
	}
	hour := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(time.Hour))}
	require.NoError(t, unix.TimerfdSettime(other, 0, &hour, nil))
	old.Wake()
	var cur unix.ItimerSpec
	require.NoError(t, unix.TimerfdGettime(other, &cur))
	require.Greater(t, time.Duration(cur.Value.Nano()), 59*time.Minute, "the late Wake re-armed another's timer")
}

// TestBackupSleeperStandsDown: with GOMAXPROCS lowered to 1 after the
// scheduler was made, the backup sleeper does not block in read(2) (it
// would hold the only P): it ignores its deadline and waits for Wake on a
// channel. Not parallel: it sets GOMAXPROCS.
func TestBackupSleeperStandsDown(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs GOMAXPROCS >= 2 to make the sleeper")
	}
	sl, err := realClock{}.newBackupSleeper()
	require.NoError(t, err)
	defer sl.Close()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	returned := make(chan struct{})
	go func() {
		sl.Sleep(time.Now().Add(time.Millisecond))
		close(returned)
	}()
	select {
	case <-returned:
		t.Fatal("the backup sleeper kept its deadline with GOMAXPROCS 1")
	case <-time.After(100 * time.Millisecond):
	}
	sl.Wake()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Wake did not end the stood-down sleep")
	}
}

// TestPreciseSleeperLosesNoWake: a Wake that races a Sleep with no
// deadline (the runner with nothing pending, while Add wakes it) ends
// that Sleep or the next, whichever way they interleave. A Wake that only
// moved the read deadline would be undone by a Sleep setting its own just
// after it, and that Sleep would wait forever.
func TestPreciseSleeperLosesNoWake(t *testing.T) {
	t.Parallel()
	s := newPreciseSleeper()
	defer s.Close()
	if _, ok := s.(*timerfdSleeper); !ok {
		t.Skip("no timerfd here")
	}
	for i := range 2000 {
		woke := make(chan struct{})
		go func() {
			if i%3 == 0 {
				runtime.Gosched()
			}
			s.Wake()
			close(woke)
		}()
		done := make(chan struct{})
		go func() {
			s.Sleep(time.Time{})
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: a Wake was lost: Sleep did not return", i)
		}
		<-woke
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU(tb testing.TB) time.Duration {
	var ru unix.Rusage
	require.NoError(tb, unix.Getrusage(unix.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFireCPU: the CPU a process spends per fired entry when entries
// come due one at a time, 100 µs apart (10,000 a second, as in wheelq's
// precision workloads), and how late they fire: a Scheduler on the real
// clock (a wake per entry, at its time) against time.AfterFunc (whose
// wakes, a millisecond apart, fire about ten entries each). Run with
//
//	go test ./wheel -run '^$' -bench FireCPU -benchtime 20000x -count 3
//
// A wake costs two context switches; on a 2-vCPU VM each is dear, which
// is most of what precision costs (docs/benchmarks-history.md).
func BenchmarkFireCPU(b *testing.B) {
	const gap = 100 * time.Microsecond
	run := func(b *testing.B, add func(due time.Time, fired func())) {
		b.ReportAllocs()
		lates := make([]time.Duration, b.N)
		var wg sync.WaitGroup
		wg.Add(b.N)
		t0 := time.Now().Add(50 * time.Millisecond)
		for i := range b.N {
			due := t0.Add(time.Duration(i) * gap)
			add(due, func() {
				lates[i] = time.Since(due)
				wg.Done()
			})
		}
		time.Sleep(time.Until(t0))
		cpu0 := processCPU(b)
		b.ResetTimer()
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/fire")
		slices.Sort(lates)
		b.ReportMetric(float64(lates[len(lates)/2])/float64(time.Microsecond), "p50-late-µs")
		b.ReportMetric(float64(lates[len(lates)*99/100])/float64(time.Microsecond), "p99-late-µs")
	}
	b.Run("Scheduler", func(b *testing.B) {
		var mu sync.Mutex
		fns := map[string]func(){}
		s, err := NewScheduler(SchedulerConfig{MaxDelay: time.Hour}, func(batch []Fired) {
			mu.Lock()
			defer mu.Unlock()
			for _, f := range batch {
				fns[f.ID]()
				delete(fns, f.ID)
			}
		})
		require.NoError(b, err)
		s.Start()
		defer s.Stop()
		i := 0
		run(b, func(due time.Time, fired func()) {
			id := strconv.Itoa(i)
			i++
			mu.Lock()
			fns[id] = fired
			mu.Unlock()
			_, err := s.Add(id, due)
			require.NoError(b, err)
		})
	})
	b.Run("AfterFunc", func(b *testing.B) {
		run(b, func(due time.Time, fired func()) { time.AfterFunc(time.Until(due), fired) })
	})
}
