//go:build linux

package wheel

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// timerfdSleeper races two timers set to the same deadline, and returns
// at the first:
//
//   - a timerfd(2), read by a goroutine of its own through Go's network
//     poller. The kernel fires it at its exact expiry (no timer slack), and
//     a P idle in the poller wakes for it at once; but while every P is
//     busy nobody waits in the poller, and a ready timerfd is noticed only
//     when a P runs out of work or the runtime's monitor polls (after up
//     to 10 ms without a poll).
//   - a runtime timer. Every P checks the timers each time it schedules a
//     goroutine, so while the Ps are busy it fires promptly; but an idle P
//     sleeps in the poller for whole milliseconds, so alone it is up to a
//     millisecond late (time.AfterFunc's median lateness is half of that).
//
// Instrumented runs of the wheel alone on this 2-core VM (a record of each
// wake more than 300 µs late) found both late together, by 0.3-3.6 ms,
// with no GC running: the process was not scheduled. A thread sleeping
// in nanosleep on the same machine is late by p99 140 µs, p99.9 220-360
// µs, at most 0.5-2.5 ms in 2 s, so the floor is the machine's.
//
// Neither holds a P while it waits. Wake ends a wait through a channel.
type timerfdSleeper struct {
	f     *os.File
	fd    int
	fired chan struct{} // the timerfd expired (the reader saw it)
	wake  chan struct{}
	timer *time.Timer
	buf   [8]byte
	done  chan struct{} // closed when the reader returned
	// once starts the reader at the first Sleep (a sleeper made and never
	// used owns no goroutine); once Close ran, it starts none.
	once    sync.Once
	reading bool // the reader was started; set under once
	closed  sync.Once
}

func newPreciseSleeper() Sleeper {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return newRuntimeSleeper()
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &timerfdSleeper{
		f: os.NewFile(uintptr(fd), "wheel-timerfd"), fd: fd, timer: t,
		fired: make(chan struct{}, 1), wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
}

// read tells Sleep of each expiry of the timerfd, until Close.
func (s *timerfdSleeper) read() {
	defer close(s.done)
	for {
		if _, err := s.f.Read(s.buf[:]); err != nil {
			return // closed
		}
		select {
		case s.fired <- struct{}{}:
		default:
		}
	}
}

func (s *timerfdSleeper) Sleep(deadline time.Time) {
	s.once.Do(func() {
		s.reading = true
		go s.read()
	})
	if deadline.IsZero() {
		select {
		case <-s.wake:
		case <-s.done:
		}
		return
	}
	r := time.Until(deadline)
	if r <= 0 {
		return
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(r))}
	if err := unix.TimerfdSettime(s.fd, 0, &spec, nil); err != nil {
		spec = unix.ItimerSpec{} // the runtime timer alone, then
	}
	s.timer.Reset(r)
	for {
		select {
		case <-s.fired:
			if time.Now().Before(deadline) {
				// The expiry of an earlier deadline, whose wait the runtime
				// timer ended first, noticed only now: the timerfd is
				// still armed for this one.
				continue
			}
		case <-s.timer.C:
		case <-s.wake:
		case <-s.done:
		}
		break
	}
	s.timer.Stop()
}

func (s *timerfdSleeper) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Close stops the reader goroutine, if it was started, and waits for it.
func (s *timerfdSleeper) Close() error {
	var err error
	s.closed.Do(func() {
		s.once.Do(func() {}) // no reader from now on
		s.timer.Stop()
		err = s.f.Close()
		if s.reading {
			<-s.done
		}
	})
	return err
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
