// Package runctx gives each run of a worker (a handler's run, or one of the
// engine's round trips to Redis) a context that costs no allocation and no
// runtime timer: it lives in its run, its state in the worker's Slot
// (reused from run to run), and one watchdog goroutine per Set ends the
// runs whose deadline has passed.
package runctx

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// The context a handler gets is a Ctx: the deadline of HandlerTimeout,
// cancelled at that deadline, when the run ends, or when Shutdown stops
// the handlers hard. It costs no allocation and no runtime timer per run:
// it lives in the run (the queue's jobRun), its state in the worker's Slot (reused
// from run to run), and one watchdog goroutine per Set ends the runs
// whose deadline has passed. context.WithCancel, WithTimeout and AfterFunc
// on it start no goroutine (it has the AfterFunc method the context
// package looks for). context.Cause of it is its Err, as it was of the
// context.WithTimeout it replaces (no cause was ever given).

// Ctx is the context of one run: the slot of the worker that runs it
// and the run's deadline, in nanoseconds after slot.owner.base, which also
// tells the slot's runs apart (it grows from run to run). Once the slot
// has moved on to a later run, the context is done with context.Canceled.
type Ctx struct {
	slot *Slot
	gen  int64
}

// Slot is one worker's state for the context of the run it is in.
type Slot struct {
	owner *Set

	mu      sync.Mutex
	gen     int64         // guarded by mu: the latest run begun (its deadline)
	active  bool          // guarded by mu: that run has not ended
	done    chan struct{} // guarded by mu: made on the first Done of the run
	err     error         // guarded by mu: why the run's context ended (nil: it has not)
	fns     []slotFunc    // guarded by mu: AfterFunc callbacks of the run, not yet called
	nextFn  uint64        // guarded by mu: numbers AfterFunc callbacks
	cur     Ctx           // the context of the round trip in the slot (see call)
	watched bool          // call started the watchdog (one goroutine uses a slot)
	endFn   func()        // s.endCall, bound once

	// dl is the active run's deadline (nanoseconds after owner.base), 0
	// between runs: the watchdog reads it without the lock.
	dl atomic.Int64
}

type slotFunc struct {
	id uint64
	f  func()
}

// Set is the slots of a queue's workers and the watchdog that ends
// the runs whose deadline passed. The same serves the engine's own round
// trips to Redis (claims, outcomes), with reuse set: their context ends
// only at its deadline, not when the call returns (nothing keeps it), so
// that the Done channel go-redis asks for is made once, not per call.
type Set struct {
	timeout time.Duration
	reuse   bool
	base    time.Time     // deadlines are kept as nanoseconds after it (monotonic)
	closed  chan struct{} // closed at creation: the Done of every ended run
	slots   []Slot

	hard atomic.Bool   // every run's context ends at once: a hard shutdown
	idle atomic.Bool   // the watchdog waits on wake, with no deadline to watch
	wake chan struct{} // a run began while the watchdog was idle

	mu       sync.Mutex // guards started and stopping
	started  bool
	stopping bool
	quit     chan struct{} // closed by stop
	stopped  chan struct{}
}

// New returns a Set of workers slots whose runs end timeout after they
// begin; with reuse, a slot's Done channel is kept from run to run (the
// engine's round trips, whose contexts nobody keeps).
func New(workers int, timeout time.Duration, reuse bool) *Set {
	r := &Set{
		timeout: timeout, reuse: reuse, base: time.Now(), closed: make(chan struct{}),
		slots: make([]Slot, workers), wake: make(chan struct{}, 1),
		quit: make(chan struct{}), stopped: make(chan struct{}),
	}
	close(r.closed)
	for i := range r.slots {
		r.slots[i].owner = r
		r.slots[i].endFn = r.slots[i].endCall
	}
	return r
}

// Begin starts a run in slot s and returns its context.
func (s *Slot) Begin() Ctx {
	r := s.owner
	dl := int64(time.Since(r.base) + r.timeout)
	s.mu.Lock()
	s.gen = max(dl, s.gen+1)
	dl = s.gen
	if !r.reuse || s.err != nil {
		s.done = nil // a done channel not closed is kept (reuse)
	}
	s.active, s.err = true, nil
	if r.hard.Load() {
		s.err = context.Canceled
	}
	c := Ctx{slot: s, gen: dl}
	s.mu.Unlock()
	s.dl.Store(dl)
	if r.idle.Load() && r.idle.CompareAndSwap(true, false) {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return c
}

// Finish ends the run of generation gen: its context is cancelled.
func (s *Slot) Finish(gen int64) {
	s.dl.Store(0)
	if !s.owner.reuse {
		s.end(gen, context.Canceled)
	}
	s.mu.Lock()
	if s.gen == gen {
		s.active = false
		if s.owner.reuse {
			s.fns = nil // contexts derived in the call: not called
		}
	}
	s.mu.Unlock()
}

// Call begins a round trip in slot s (of a Set with reuse): its
// context is s.cur until endCall. One goroutine uses a slot at a time.
func (s *Slot) Call() (context.Context, func()) {
	if !s.watched {
		s.owner.Start()
		s.watched = true
	}
	s.cur = s.Begin()
	return &s.cur, s.endFn
}

// endCall ends the round trip begun by call.
func (s *Slot) endCall() { s.Finish(s.cur.gen) }

// end cancels the context of the run of generation gen with err, unless
// it ended already.
func (s *Slot) end(gen int64, err error) {
	s.mu.Lock()
	if s.gen != gen || !s.active || s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	if s.done != nil {
		close(s.done)
	}
	fns := s.fns
	s.fns = nil
	s.mu.Unlock()
	for _, f := range fns {
		go f.f()
	}
}

// Deadline returns the run's deadline.
func (c *Ctx) Deadline() (time.Time, bool) {
	return c.slot.owner.base.Add(time.Duration(c.gen)), true
}

// Done returns a channel closed when the run's context ends.
func (c *Ctx) Done() <-chan struct{} {
	s := c.slot
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != c.gen || s.err != nil {
		return s.owner.closed
	}
	if s.done == nil {
		s.done = make(chan struct{})
	}
	return s.done
}

// Err returns nil while the run's context has not ended, then
// context.DeadlineExceeded or context.Canceled.
func (c *Ctx) Err() error {
	s := c.slot
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != c.gen {
		return context.Canceled // a later run is in the slot: this one ended
	}
	return s.err
}

// Value returns nil: a run's context carries no values.
func (c *Ctx) Value(any) any { return nil }

// AfterFunc arranges to call f in its own goroutine once the context
// ends, as context.AfterFunc does; the context package calls it for the
// contexts derived from this one, instead of starting a goroutine.
func (c *Ctx) AfterFunc(f func()) (stop func() bool) {
	s := c.slot
	s.mu.Lock()
	if s.gen != c.gen || s.err != nil {
		s.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	s.nextFn++
	id := s.nextFn
	s.fns = append(s.fns, slotFunc{id: id, f: f})
	s.mu.Unlock()
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.gen != c.gen {
			return false
		}
		for i, sf := range s.fns {
			if sf.id == id {
				s.fns = append(s.fns[:i], s.fns[i+1:]...)
				return true
			}
		}
		return false
	}
}

// CancelAll ends every run's context, and those of runs begun from now
// on: a hard shutdown.
func (r *Set) CancelAll() {
	r.hard.Store(true)
	for i := range r.slots {
		s := &r.slots[i]
		s.mu.Lock()
		gen := s.gen
		s.mu.Unlock()
		s.end(gen, context.Canceled)
	}
}

// expire ends the contexts of the runs whose deadline has passed at now
// (nanoseconds after base), and returns the earliest deadline still to
// come (0: none).
func (r *Set) expire(now int64) (next int64) {
	for i := range r.slots {
		s := &r.slots[i]
		dl := s.dl.Load()
		if dl == 0 {
			continue
		}
		if dl <= now {
			s.mu.Lock()
			gen, ok := s.gen, s.active
			s.mu.Unlock()
			if ok && s.dl.Load() == dl {
				s.end(gen, context.DeadlineExceeded)
			}
			continue
		}
		if next == 0 || dl < next {
			next = dl
		}
	}
	return next
}

// Start starts the watchdog, unless it was started or closed already.
// A slot's call starts it too (a round trip needs its deadline watched).
func (r *Set) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.stopping {
		return
	}
	r.started = true
	go r.watch()
}

// watch ends runs at their deadline: it sleeps until the earliest one.
// Deadlines of runs begun later are later (every run has the same
// timeout), so a begin wakes it only when it had nothing to watch.
func (r *Set) watch() {
	defer close(r.stopped)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		next := r.expire(int64(time.Since(r.base)))
		if next == 0 {
			r.idle.Store(true)
			// A run may have begun before idle was set: look again.
			if next = r.expire(int64(time.Since(r.base))); next == 0 {
				select {
				case <-r.wake:
				case <-r.quit:
					return
				}
				continue
			}
			r.idle.Store(false)
		}
		timer.Reset(time.Duration(next - int64(time.Since(r.base))))
		select {
		case <-timer.C:
		case <-r.wake:
			timer.Stop()
		case <-r.quit:
			return
		}
	}
}

// Stop stops the watchdog, if it was started, and waits for it. Stop
// without start, stop after stop and stops from several goroutines at
// once are safe; no start follows it.
func (r *Set) Stop() {
	r.mu.Lock()
	first := !r.stopping
	r.stopping = true
	started := r.started
	r.mu.Unlock()
	if first {
		close(r.quit)
	}
	if started {
		<-r.stopped
	}
}

// Slot returns the i-th slot (one per worker).
func (r *Set) Slot(i int) *Slot { return &r.slots[i] }

// Len returns the number of slots.
func (r *Set) Len() int { return len(r.slots) }

// Gen returns the run's generation: its deadline in nanoseconds after the
// Set's base, which also tells a slot's runs apart; pass it to Finish.
func (c *Ctx) Gen() int64 { return c.gen }

// RunningFor returns how long the run has been on, from its deadline
// (the timeout after its start), so that a run costs no clock reading for
// it.
func (c *Ctx) RunningFor() time.Duration {
	r := c.slot.owner
	return time.Since(r.base) - time.Duration(c.gen) + r.timeout
}
