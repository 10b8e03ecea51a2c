//go:build linux

package wheel

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// preciseSleeper waits in ppoll(2) on an eventfd, which Wake writes to. The
// kernel lets a poll timeout expire late by its "slack": the thread's timer
// slack (50µs by default, lowered to 1ns on the first Sleep) or 0.1% of the
// timeout, whichever is larger. Long waits are therefore cut short by a
// little more than that fraction and finished by shorter ones, so the last
// step's slack is a few microseconds at most.
//
// Timer slack is a property of the thread, so the goroutine that calls Sleep
// should be locked to its OS thread (Scheduler does this).
type preciseSleeper struct {
	efd     int
	slacked bool
}

func newPreciseSleeper() Sleeper {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return newRuntimeSleeper()
	}
	return &preciseSleeper{efd: efd}
}

func (s *preciseSleeper) Sleep(deadline time.Time) {
	if !s.slacked {
		// Best effort: without it the sleeper is only less precise.
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
		s.slacked = true
	}
	fds := []unix.PollFd{{Fd: int32(s.efd), Events: unix.POLLIN}}
	for {
		var ts *unix.Timespec
		if !deadline.IsZero() {
			r := time.Until(deadline)
			if r <= 0 {
				return
			}
			if r > time.Millisecond {
				r -= r/512 + 2*time.Microsecond // leave room for the slack
			}
			t := unix.NsecToTimespec(int64(r))
			ts = &t
		}
		n, err := unix.Ppoll(fds, ts, nil)
		if n > 0 {
			var buf [8]byte
			_, _ = unix.Read(s.efd, buf[:]) // reset the counter
			return
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			// Unexpected: fall back to a coarse wait rather than spin.
			time.Sleep(min(time.Until(deadline), time.Millisecond))
		}
		if deadline.IsZero() && err == nil {
			return
		}
	}
}

func (s *preciseSleeper) Wake() {
	one := [8]byte{1}
	_, _ = unix.Write(s.efd, one[:]) // EAGAIN means a wake is already pending
}

func (s *preciseSleeper) Close() error {
	return unix.Close(s.efd)
}
