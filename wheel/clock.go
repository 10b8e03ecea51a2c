package wheel

import (
	"sync"
	"time"
)

// Clock is the source of time of a Scheduler (and of the queue built on it).
// Inject a FakeClock in tests; use RealClock in production.
type Clock interface {
	// Now returns the current time. Real clocks return a time with a
	// monotonic reading, so that wall-clock jumps do not move timers.
	Now() time.Time
	// NewSleeper returns a Sleeper that waits on this clock.
	NewSleeper() Sleeper
}

// WallClock is implemented by a Clock whose wall reading can step apart
// from the time its Now measures intervals on, as a real system clock's does
// when it is set (FakeClock.StepWall makes such a step). A Scheduler only
// ever measures intervals (on Now); a due time that is a wall reading — a
// time stored in Redis and shared across hosts — is converted to the
// Scheduler's time through Readings at the moment it is armed.
type WallClock interface {
	// Wall returns the clock's wall reading.
	Wall() time.Time
}

// Readings returns c's reading for measuring intervals (now: on a real
// clock it carries the monotonic reading) and its wall reading (wall, with
// no monotonic reading, so that subtracting it from a stored due time gives
// the wall-clock distance). For a clock that is not a WallClock, wall is now
// without its monotonic reading: one read of the clock.
func Readings(c Clock) (now, wall time.Time) {
	now = c.Now()
	if w, ok := c.(WallClock); ok {
		return now, w.Wall().Round(0)
	}
	return now, now.Round(0)
}

// AtWall returns the time on now's timeline (now from Readings) at which
// the wall clock, read as wall at the same instant, shows due. Given to
// Scheduler.Add, it makes an entry fire when the wall clock reaches due, as
// the clock stood when it was armed; a later step of the wall clock does not
// move it.
func AtWall(now, wall, due time.Time) time.Time {
	return now.Add(due.Sub(wall))
}

// Sleeper blocks one goroutine until a deadline of its clock, and can be
// woken early from any goroutine.
type Sleeper interface {
	// Sleep blocks until the clock reaches deadline, until Wake is called,
	// or spuriously; a zero deadline means no deadline. A Wake that comes
	// while no Sleep is in progress makes the next Sleep return at once.
	// Only one goroutine may call Sleep.
	Sleep(deadline time.Time)
	// Wake makes the current or next Sleep return. It never blocks.
	Wake()
	// Close releases the sleeper's resources.
	Close() error
}

// RealClock returns the system clock. On Linux its sleeper waits for a
// timerfd(2), which the kernel fires without timer slack, through Go's
// network poller, so it wakes within tens of microseconds of a deadline
// instead of the millisecond or so of Go's runtime timers, and holds no P
// while it waits. Elsewhere it is RuntimeClock.
func RealClock() Clock { return realClock{} }

// RuntimeClock returns the system clock with a sleeper built on Go's runtime
// timers: portable and cheap, and as precise as time.AfterFunc (about a
// millisecond). It also works inside a testing/synctest bubble.
func RuntimeClock() Clock { return runtimeClock{} }

type realClock struct{}

func (realClock) Now() time.Time      { return time.Now() }
func (realClock) NewSleeper() Sleeper { return newPreciseSleeper() }

type runtimeClock struct{}

func (runtimeClock) Now() time.Time      { return time.Now() }
func (runtimeClock) NewSleeper() Sleeper { return newRuntimeSleeper() }

// runtimeSleeper sleeps on a runtime timer and a wake channel.
type runtimeSleeper struct {
	wake  chan struct{}
	timer *time.Timer
}

func newRuntimeSleeper() *runtimeSleeper {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &runtimeSleeper{wake: make(chan struct{}, 1), timer: t}
}

func (s *runtimeSleeper) Sleep(deadline time.Time) {
	if deadline.IsZero() {
		<-s.wake
		return
	}
	d := time.Until(deadline)
	if d <= 0 {
		return
	}
	s.timer.Reset(d)
	select {
	case <-s.wake:
	case <-s.timer.C:
	}
	s.timer.Stop()
}

func (s *runtimeSleeper) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *runtimeSleeper) Close() error {
	s.timer.Stop()
	return nil
}

// FakeClock is a Clock whose time moves only when told to. It is safe for
// concurrent use. Its zero value is not usable; call NewFakeClock.
type FakeClock struct {
	mu       sync.Mutex
	cond     *sync.Cond // signalled when a sleeper starts sleeping
	now      time.Time
	wallStep time.Duration // Wall() - Now(): moved by StepWall
	sleepers map[*fakeSleeper]struct{}
}

// NewFakeClock returns a FakeClock set to start.
func NewFakeClock(start time.Time) *FakeClock {
	c := &FakeClock{now: start, sleepers: make(map[*fakeSleeper]struct{})}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Wall returns the clock's wall reading: Now plus every StepWall so far.
func (c *FakeClock) Wall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now.Add(c.wallStep)
}

// StepWall steps the clock's wall reading by d (back when negative), as
// setting a system's clock does, while the time Now measures intervals on
// does not move. Sleepers are not woken: they wait on Now.
func (c *FakeClock) StepWall(d time.Duration) {
	c.mu.Lock()
	c.wallStep += d
	c.mu.Unlock()
}

// Advance moves the clock forward by d and wakes every sleeper whose
// deadline has come.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for s := range c.sleepers {
		if s.sleeping && !s.deadline.IsZero() && !c.now.Before(s.deadline) {
			s.wakeLocked()
		}
	}
}

// BlockUntilSleeping waits until every open sleeper of this clock is asleep
// waiting for a deadline that has not come (or for no deadline). For a
// Scheduler, that means it has handed out everything due and is idle.
func (c *FakeClock) BlockUntilSleeping() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.allAsleepLocked() {
		c.cond.Wait()
	}
}

// Idle reports, without waiting, whether every open sleeper of this clock is
// asleep (see BlockUntilSleeping).
func (c *FakeClock) Idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.allAsleepLocked()
}

func (c *FakeClock) allAsleepLocked() bool {
	for s := range c.sleepers {
		if !s.sleeping {
			return false
		}
	}
	return true
}

// NewSleeper returns a sleeper on the fake time.
func (c *FakeClock) NewSleeper() Sleeper {
	s := &fakeSleeper{clock: c, ch: make(chan struct{}, 1)}
	c.mu.Lock()
	c.sleepers[s] = struct{}{}
	c.mu.Unlock()
	return s
}

type fakeSleeper struct {
	clock    *FakeClock
	ch       chan struct{}
	sleeping bool      // guarded by clock.mu
	deadline time.Time // guarded by clock.mu
}

func (s *fakeSleeper) wakeLocked() {
	s.sleeping = false
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

func (s *fakeSleeper) Sleep(deadline time.Time) {
	c := s.clock
	c.mu.Lock()
	if !deadline.IsZero() && !c.now.Before(deadline) {
		c.mu.Unlock()
		return
	}
	select {
	case <-s.ch: // a Wake came while awake
		c.mu.Unlock()
		return
	default:
	}
	s.sleeping, s.deadline = true, deadline
	c.cond.Broadcast()
	c.mu.Unlock()
	<-s.ch
}

func (s *fakeSleeper) Wake() {
	s.clock.mu.Lock()
	s.wakeLocked()
	s.clock.mu.Unlock()
}

func (s *fakeSleeper) Close() error {
	c := s.clock
	c.mu.Lock()
	delete(c.sleepers, s)
	c.cond.Broadcast()
	c.mu.Unlock()
	return nil
}
