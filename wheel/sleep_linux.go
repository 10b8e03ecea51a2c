//go:build linux

package wheel

import (
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// timerfdSleeper waits for a timerfd(2) through Go's network poller. The
// kernel fires a timerfd at its exact expiry (no timer slack), and while
// the goroutine waits it is parked like one blocked on a socket: it holds
// no P, so the goroutines it woke (workers, claims) run at once, and the
// garbage collector has both Ps. A wait in a system call instead keeps its
// P until the runtime's monitor takes it back, up to 10 ms later.
//
// Wake sets the timer to expire at once.
type timerfdSleeper struct {
	f     *os.File
	fd    int
	woken atomic.Bool
	buf   [8]byte
}

func newPreciseSleeper() Sleeper {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return newRuntimeSleeper()
	}
	return &timerfdSleeper{f: os.NewFile(uintptr(fd), "wheel-timerfd"), fd: fd}
}

func (s *timerfdSleeper) Sleep(deadline time.Time) {
	var spec unix.ItimerSpec
	if !deadline.IsZero() {
		r := time.Until(deadline)
		if r <= 0 {
			return
		}
		spec.Value = unix.NsecToTimespec(int64(r))
	}
	if err := unix.TimerfdSettime(s.fd, 0, &spec, nil); err != nil {
		// Unexpected: wait coarsely rather than spin.
		time.Sleep(time.Millisecond)
		return
	}
	if s.woken.Swap(false) {
		return // a Wake came before the timer was set
	}
	// A zero deadline leaves the timer disarmed: only Wake ends the wait.
	_, _ = s.f.Read(s.buf[:])
}

func (s *timerfdSleeper) Wake() {
	s.woken.Store(true)
	spec := unix.ItimerSpec{Value: unix.Timespec{Nsec: 1}}
	_ = unix.TimerfdSettime(s.fd, 0, &spec, nil)
}

func (s *timerfdSleeper) Close() error {
	return s.f.Close()
}
