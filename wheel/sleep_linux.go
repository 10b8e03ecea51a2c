//go:build linux

package wheel

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// timerfdSleeper races two timers set to the same deadline, and returns
// at the first, waiting for both in one read of a timerfd(2) through Go's
// network poller:
//
//   - the timerfd. The kernel fires it at its exact expiry (no timer
//     slack), and a P idle in the poller wakes for it at once; but while
//     every P is busy nobody waits in the poller, and a ready timerfd is
//     noticed only when a P runs out of work or the runtime's monitor
//     polls (after up to 10 ms without a poll).
//   - the read's deadline (SetReadDeadline), a runtime timer. Every P
//     checks the timers each time it schedules a goroutine, so while the
//     Ps are busy it fires promptly; but an idle P sleeps in the poller
//     for whole milliseconds, so alone it is up to a millisecond late
//     (time.AfterFunc's median lateness is half of that).
//
// Instrumented runs of the wheel alone on this 2-core VM (a record of each
// wake more than 300 µs late) found both late together, by 0.3-3.6 ms,
// with no GC running: the process was not scheduled. A thread sleeping
// in nanosleep on the same machine is late by p99 140 µs, p99.9 220-360
// µs, at most 0.5-2.5 ms in 2 s, so the floor is the machine's.
//
// One goroutine (the caller of Sleep) waits, holding no P. An earlier
// version read the timerfd in a goroutine of its own and told Sleep of
// each expiry on a channel, racing a time.Timer in a select: two more
// goroutine hand-offs per wake. BenchmarkFireCPU put a fired entry at
// 59 µs of CPU then and 41 µs now, most of it the wake itself (two
// context switches: on this VM a thread's timed sleep costs about 28 µs
// of CPU a wake), against 5 µs for time.AfterFunc, whose wakes come a
// millisecond apart (docs/benchmarks-history.md). Wake moves the read's
// deadline into the past, which ends a read in progress with no system
// call.
type timerfdSleeper struct {
	f     *os.File
	fd    int
	woken atomic.Bool // a Wake not yet seen by Sleep
	buf   [8]byte
}

func newPreciseSleeper() Sleeper {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return newRuntimeSleeper()
	}
	f := os.NewFile(uintptr(fd), "wheel-timerfd")
	if f.SetReadDeadline(time.Time{}) != nil {
		// Not in the network poller: its runtime timer cannot race.
		_ = f.Close()
		return newRuntimeSleeper()
	}
	return &timerfdSleeper{f: f, fd: fd}
}

func (s *timerfdSleeper) Sleep(deadline time.Time) {
	if s.woken.Swap(false) {
		return
	}
	var spec unix.ItimerSpec // zero: disarmed (no deadline)
	if !deadline.IsZero() {
		r := time.Until(deadline)
		if r <= 0 {
			return
		}
		spec.Value = unix.NsecToTimespec(int64(r))
	}
	// Arming the timerfd clears the count of its earlier expiries: a read
	// returns only for this deadline's (or is ended by the read deadline).
	_ = unix.TimerfdSettime(s.fd, 0, &spec, nil) // failing, the read deadline alone
	if s.f.SetReadDeadline(deadline) != nil {
		return // closed
	}
	// A Wake that moved the read deadline before the line above is seen
	// here; one after it ends the read.
	if !s.woken.Load() {
		for {
			if _, err := s.f.Read(s.buf[:]); err != nil || deadline.IsZero() || !time.Now().Before(deadline) {
				break
			}
		}
	}
	// Sleep returns: the caller looks at its entries after this, so any
	// Wake so far is seen.
	s.woken.Store(false)
}

// Wake ends the current Sleep, or makes the next return at once.
func (s *timerfdSleeper) Wake() {
	s.woken.Store(true)
	_ = s.f.SetReadDeadline(time.Unix(1, 0)) // passed; fails only once closed
}

// Close releases the timerfd. It must come after the last Sleep returned;
// a Wake after it does nothing.
func (s *timerfdSleeper) Close() error {
	return s.f.Close()
}

// blockingSleeper waits in a blocking read(2) of a timerfd of its own, on
// the thread of the goroutine that calls Sleep (the backup runner, which
// locks itself to its thread). The kernel wakes that thread on its own,
// apart from the network poller's one waiting thread: see
// SchedulerConfig.Backup. While it waits it holds a P, so while GOMAXPROCS
// is below 2 (it can be lowered after NewScheduler), or if the timerfd
// cannot be armed, it stands down: it waits for Wake alone, on a channel,
// holding no P, and leaves the deadlines to the first runner.
type blockingSleeper struct {
	fd   int
	wake chan struct{} // a Wake not yet seen by Sleep
	buf  [8]byte

	mu     sync.RWMutex // Wake's use of fd against Close
	closed bool         // guarded by mu
}

func (realClock) newBackupSleeper() (Sleeper, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%w: timerfd_create: %v", ErrNoBackup, err)
	}
	return &blockingSleeper{fd: fd, wake: make(chan struct{}, 1)}, nil
}

// Sleep arms the timerfd and blocks in read(2) until it expires (or stands
// down: see blockingSleeper).
func (s *blockingSleeper) Sleep(deadline time.Time) {
	var spec unix.ItimerSpec
	if !deadline.IsZero() {
		r := time.Until(deadline)
		if r <= 0 {
			return
		}
		spec.Value = unix.NsecToTimespec(int64(r))
	}
	if runtime.GOMAXPROCS(0) < 2 || unix.TimerfdSettime(s.fd, 0, &spec, nil) != nil {
		<-s.wake
		return
	}
	// A Wake before the arming above left its token; one after it set the
	// timer to expire at once.
	select {
	case <-s.wake:
		return
	default:
	}
	_, _ = unix.Read(s.fd, s.buf[:])
}

// Wake makes the timerfd expire at once, so that a read in progress
// returns, and leaves a token, so that a Sleep about to block does not.
func (s *blockingSleeper) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return // the fd may be another's now
	}
	spec := unix.ItimerSpec{Value: unix.Timespec{Nsec: 1}}
	_ = unix.TimerfdSettime(s.fd, 0, &spec, nil)
}

// Close releases the timerfd. It must come after the last Sleep returned
// (the Scheduler stops its runners first); a Wake after it does nothing.
func (s *blockingSleeper) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return unix.Close(s.fd)
}
