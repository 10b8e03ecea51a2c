//go:build linux

package wheel

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// timerfdSleeper waits, on the sleeping goroutine itself, for a read of a
// timerfd(2) through Go's network poller, with a read deadline as a
// second timer:
//
//   - the timerfd: the kernel fires it at its exact expiry (no timer
//     slack), and a P idle in the poller wakes for it at once; but while
//     every P is busy nobody waits in the poller, and a ready timerfd is
//     noticed only when a P runs out of work or the runtime's monitor polls
//     (after up to 10 ms without a poll).
//   - the read deadline, a runtime timer (set readGrace after the
//     deadline, so that it rarely fires when the timerfd has done its
//     work). Every P checks the timers each time it schedules a goroutine,
//     so while the Ps are busy it fires promptly; but an idle P sleeps in
//     the poller for whole milliseconds, so alone it is up to a millisecond
//     late (time.AfterFunc's median lateness is half of that).
//
// Arming the timerfd drops an expiry not yet read, so an earlier
// deadline's expiry (its wait ended by the read deadline or by Wake) never
// ends a later wait. Wake sets a flag and makes the timerfd expire at
// once.
//
// An earlier version read the timerfd on a goroutine of its own, which
// told the sleeping one through a channel, and raced a time.Timer: two
// goroutines woke per wake. The wheel alone used 0.96-1.04 s of CPU for
// 20,000 timers due over 2 s (cmd/wheelq-bench -workload precision,
// cpu_ms), this one 0.84-0.92 s, and its median lateness fell from 42-51
// to 36-42 µs.
//
// Lateness on this project's 2-core VM (cmd/wheelq-bench -wakes): a wake
// 0.5 ms or more late was, where it could be told (the goroutine woke on
// the thread it slept on), that thread waiting about as long on a run
// queue, for a CPU held by other tasks of the machine; a locked thread
// sleeping in clock_nanosleep(2) is late the same way.
type timerfdSleeper struct {
	f     *os.File
	rc    syscall.RawConn // f's, to set the timerfd while f is open
	woken atomic.Bool     // Wake was called and no Sleep has returned for it
	buf   [8]byte

	// Sleep's setting of the timerfd, bound once so that a Sleep
	// allocates nothing (a closure given to rc.Control escapes): spec and
	// setErr are the sleeping goroutine's alone.
	spec   unix.ItimerSpec
	setErr error
	set    func(fd uintptr)
	// Wake's: expire at once (wakeSpec is never written after
	// newPreciseSleeper); any goroutine may call it.
	wakeSpec   unix.ItimerSpec
	wakeFailed atomic.Bool
	expire     func(fd uintptr)
}

// readGrace is how much later than the timerfd the read deadline is set.
const readGrace = 100 * time.Microsecond

func newPreciseSleeper() Sleeper {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return newRuntimeSleeper()
	}
	f := os.NewFile(uintptr(fd), "wheel-timerfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return newRuntimeSleeper()
	}
	s := &timerfdSleeper{f: f, rc: rc, wakeSpec: unix.ItimerSpec{Value: unix.NsecToTimespec(1)}}
	s.set = func(fd uintptr) { s.setErr = unix.TimerfdSettime(int(fd), 0, &s.spec, nil) }
	s.expire = func(fd uintptr) {
		if unix.TimerfdSettime(int(fd), 0, &s.wakeSpec, nil) != nil {
			s.wakeFailed.Store(true)
		}
	}
	return s
}

// arm sets the timerfd to expire after d (d > 0), or disarms it (d == 0),
// dropping any expiry not yet read. It reports false if the timerfd could
// not be set (closed). Only the sleeping goroutine calls it.
func (s *timerfdSleeper) arm(d time.Duration) bool {
	s.spec = unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if cerr := s.rc.Control(s.set); cerr != nil {
		return false
	}
	return s.setErr == nil
}

func (s *timerfdSleeper) Sleep(deadline time.Time) {
	var r time.Duration
	if !deadline.IsZero() {
		if r = time.Until(deadline); r <= 0 {
			return
		}
	}
	armed := s.arm(r)
	if s.woken.Swap(false) {
		return // a Wake came before the timerfd was armed, or since
	}
	if deadline.IsZero() {
		_ = s.f.SetReadDeadline(time.Time{})
	} else if armed {
		_ = s.f.SetReadDeadline(deadline.Add(readGrace))
	} else {
		_ = s.f.SetReadDeadline(deadline) // the runtime timer alone, then
	}
	for {
		_, err := s.f.Read(s.buf[:])
		if s.woken.Swap(false) || err != nil {
			return // woken, the read deadline passed, or closed
		}
		if deadline.IsZero() || !time.Now().Before(deadline) {
			return
		}
		// The timerfd fired before the deadline: not armed by this Sleep
		// (arming drops an earlier expiry), so by a Wake whose flag an
		// earlier Sleep took. Wait on.
	}
}

func (s *timerfdSleeper) Wake() {
	if s.woken.Swap(true) {
		return // already pending
	}
	if cerr := s.rc.Control(s.expire); cerr != nil || s.wakeFailed.Load() {
		// Closed, or the timerfd cannot be set: end the read through its
		// deadline instead.
		_ = s.f.SetReadDeadline(time.Unix(1, 0))
	}
}

// Close closes the timerfd, which ends a Sleep in progress.
func (s *timerfdSleeper) Close() error {
	err := s.f.Close()
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}
