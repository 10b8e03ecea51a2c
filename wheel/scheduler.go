package wheel

import (
	"fmt"
	"runtime"
	"sync"
	"time"
)

// maxIdle bounds how long the scheduler's goroutine sleeps with nothing due,
// so the wheel's time never lags the clock by more than this (the wheel has
// room for twice MaxDelay ahead of its time; see Wheel.Capacity).
const maxIdle = time.Hour

// Fired is an entry handed to a Scheduler's callback.
type Fired struct {
	// ID is the entry's id.
	ID string
	// Due is the time the entry was due, on the scheduler's clock.
	Due time.Time
}

// SchedulerConfig configures a Scheduler. A zero field means its default.
type SchedulerConfig struct {
	// Tick and MaxDelay are as in Config. MaxDelay is measured from the
	// clock's Now when Add is called.
	Tick     time.Duration
	MaxDelay time.Duration
	// Clock is the time source. Default RealClock().
	Clock Clock
	// Backup starts a second runner beside the first. It waits for each
	// deadline on an OS thread of its own, in a blocking read of a
	// timerfd, while the first waits through Go's network poller; whichever
	// wakes first fires what is due, and the other finds it done.
	//
	// On a VM one waiting thread is late whenever the virtual CPU it is
	// queued on is not running: on a 2-vCPU VM, a thread alone was stalled
	// 1-7 ms in most runs of 2 s, which put the wheel's p99.9 lateness at
	// 0.1-2.4 ms.
	// Two threads are seldom stalled together: with Backup, p99.9 was
	// 0.07-0.45 ms in 30 runs, median 0.1 ms (docs/benchmarks-history.md).
	//
	// The cost: while its thread waits in the kernel it holds one of the
	// process's Ps, which the runtime hands to other goroutines only when
	// its monitor takes it back, 20 µs to 10 ms later. A process with
	// other work runs with about one P less: wheelq's Queue, measured with
	// it, had a p99 lateness three times worse, so it does not set it. Use
	// it where the scheduler is the process's main work.
	//
	// It needs RealClock (or a nil Clock), Linux and GOMAXPROCS of at least
	// 2 when NewScheduler is called; otherwise NewScheduler fails with
	// ErrNoBackup. While GOMAXPROCS is lowered below 2 later, the backup
	// runner stands down (it waits for Add's wake-ups alone, holding no P)
	// and the first runner keeps every deadline.
	Backup bool
	// Slack lets an entry be handed out up to Slack before its due time:
	// a runner that wakes for an entry hands out with it those due within
	// Slack after it, so that entries close together cost one wake, not
	// one each. For entries whose exact time does not matter (wheelq's
	// claims, which go out ahead of their jobs' time). Default 0: never
	// early.
	Slack time.Duration
}

// Scheduler runs a Wheel on a clock: it owns one goroutine (a runner; two
// with Backup) that sleeps until the next entry is due, advances the wheel,
// and hands the expired entries to a callback. It is safe for concurrent
// use.
//
// Guarantees: an entry is handed to the callback at most once per Add, never
// before its due time on the scheduler's clock (less SchedulerConfig.Slack),
// and in due order among the
// entries pending together: an entry added (or moved) before its due time
// is handed out no later than any entry due after it, in an earlier batch
// or earlier in the same one. An entry whose due time had passed when it was
// added fires as soon as a runner sees it, after entries due later that
// had fired meanwhile: the order of what already fired cannot be undone. The
// callback runs on a runner's goroutine (with Backup, either runner's, one
// of them locked to its OS thread), never concurrently with itself, and
// never while the scheduler's lock is held, so it may call Add or Cancel;
// it should return quickly, since nothing else fires while it runs.
type Scheduler struct {
	clock   Clock
	origin  time.Time
	sleeper Sleeper
	// backup, when not nil, is the sleeper of the backup runner (see
	// SchedulerConfig.Backup).
	backup Sleeper
	onFire func([]Fired)
	slack  time.Duration // SchedulerConfig.Slack

	// fireMu is held by a runner from the moment it advances the wheel
	// until its callback returned, so that with two runners batches still
	// go out one at a time and in due order. It is taken before mu.
	fireMu sync.Mutex

	mu         sync.Mutex
	w          *Wheel        // guarded by mu
	sleepUntil time.Duration // guarded by mu: wheel time the goroutine sleeps to
	started    bool          // guarded by mu
	stopped    bool          // guarded by mu
	done       chan struct{} // closed when the goroutine has returned
}

// NewScheduler returns a stopped scheduler that calls onFire with each batch
// of expired entries. The batch slice is reused after onFire returns.
func NewScheduler(cfg SchedulerConfig, onFire func(batch []Fired)) (*Scheduler, error) {
	if onFire == nil {
		return nil, fmt.Errorf("wheel: nil fire callback")
	}
	w, err := New(Config{Tick: cfg.Tick, MaxDelay: cfg.MaxDelay})
	if err != nil {
		return nil, err
	}
	clock := cfg.Clock
	if clock == nil {
		clock = RealClock()
	}
	var backup Sleeper
	if cfg.Backup {
		b, ok := clock.(interface{ newBackupSleeper() (Sleeper, error) })
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: the clock is not RealClock on Linux", ErrNoBackup)
		case runtime.GOMAXPROCS(0) < 2:
			return nil, fmt.Errorf("%w: GOMAXPROCS is %d", ErrNoBackup, runtime.GOMAXPROCS(0))
		}
		if backup, err = b.newBackupSleeper(); err != nil {
			return nil, err
		}
	}
	return &Scheduler{
		clock:   clock,
		origin:  clock.Now(),
		sleeper: clock.NewSleeper(),
		backup:  backup,
		onFire:  onFire,
		slack:   max(cfg.Slack, 0),
		w:       w,
		done:    make(chan struct{}),
	}, nil
}

// Start starts the scheduler's goroutine (two with Backup). Entries added
// before Start fire once it runs. Start after Start or Stop does nothing.
func (s *Scheduler) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return
	}
	s.started = true
	if s.backup == nil {
		go func() {
			defer close(s.done)
			s.run(s.sleeper)
		}()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		s.run(s.sleeper)
	}()
	go func() {
		defer wg.Done()
		// Its own thread, so that its blocking wait is a thread the
		// kernel wakes apart from the network poller's.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		s.run(s.backup)
	}()
	go func() {
		wg.Wait()
		close(s.done)
	}()
}

// Stop stops the goroutine, waits for it (and so for a callback in
// progress), and drops every pending entry. It is idempotent. It must not be
// called from the callback.
func (s *Scheduler) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		<-s.done
		return
	}
	s.stopped = true
	started := s.started
	s.mu.Unlock()
	if started {
		s.wake()
		<-s.done
	} else {
		close(s.done)
	}
	s.mu.Lock()
	s.w.Reset()
	s.mu.Unlock()
	_ = s.sleeper.Close()
	if s.backup != nil {
		_ = s.backup.Close()
	}
}

// wake ends the runners' sleeps.
func (s *Scheduler) wake() {
	s.sleeper.Wake()
	if s.backup != nil {
		s.backup.Wake()
	}
}

// Add schedules id at due, moving it if it is already pending (replaced is
// true then). A due time in the past fires at once. It fails with
// ErrEmptyID, ErrTooFar (more than MaxDelay after the clock's Now) or
// ErrStopped.
func (s *Scheduler) Add(id string, due time.Time) (replaced bool, err error) {
	return s.set(id, due, true)
}

// Reschedule moves a pending entry to a new due time and reports whether it
// was pending; an entry that is not pending is not added.
func (s *Scheduler) Reschedule(id string, due time.Time) (bool, error) {
	return s.set(id, due, false)
}

func (s *Scheduler) set(id string, due time.Time, add bool) (bool, error) {
	if id == "" {
		return false, ErrEmptyID
	}
	at := due.Sub(s.origin)
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return false, ErrStopped
	}
	// The wheel's time never runs ahead of the clock, so a due time within
	// MaxDelay of it is within MaxDelay of the clock too; only when it is
	// not is the clock read (which costs more than the rest of Add).
	if at-s.w.Now() > s.w.MaxDelay() {
		if d := due.Sub(s.clock.Now()); d > s.w.MaxDelay() {
			s.mu.Unlock()
			return false, fmt.Errorf("%w: %v ahead, at most %v", ErrTooFar, d, s.w.MaxDelay())
		}
	}
	var ok bool
	var err error
	if add {
		ok, err = s.w.Add(id, at)
	} else {
		ok, err = s.w.Reschedule(id, at)
	}
	wake := err == nil && (add || ok) && at < s.sleepUntil
	if wake {
		s.sleepUntil = at
	}
	s.mu.Unlock()
	if wake {
		s.wake()
	}
	return ok, err
}

// Cancel removes a pending entry and reports whether it was pending. After
// Cancel returns true the entry is never handed to the callback; an entry
// already handed out (or being handed out) is not pending.
func (s *Scheduler) Cancel(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Cancel(id)
}

// Due returns the due time of a pending entry.
func (s *Scheduler) Due(id string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.w.Due(id)
	if !ok {
		return time.Time{}, false
	}
	return s.origin.Add(d), true
}

// Len returns the number of pending entries.
func (s *Scheduler) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Len()
}

// fireChunk is the most entries the scheduler hands to its callback at
// once (see Wheel.AdvanceMax): a part takes about 0.1 ms to take out of
// the wheel.
const fireChunk = 512

// run is a runner's loop: it fires what is due, then sleeps on sleeper
// until the next due time. With Backup two runners run it, each on its own
// sleeper; fireMu makes their firing take turns.
func (s *Scheduler) run(sleeper Sleeper) {
	var expired []Expired
	var batch []Fired
	for {
		s.fireMu.Lock()
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			s.fireMu.Unlock()
			return
		}
		now := s.clock.Now()
		// In parts: the first of a burst due together is handed out at
		// once, and Add and Cancel wait for one part at most.
		expired, _ = s.w.AdvanceMax(now.Sub(s.origin)+s.slack, expired[:0], fireChunk)
		var deadline time.Time
		if len(expired) > 0 {
			// Awake: Add need not wake us (this runner computes the
			// next deadline once its callback returned).
			s.sleepUntil = -1 << 63
		} else {
			idle := now.Sub(s.origin) + maxIdle
			next, ok := s.w.NextDue()
			if !ok || next > idle {
				next = idle
			}
			s.sleepUntil = next
			deadline = s.origin.Add(next)
		}
		s.mu.Unlock()
		if len(expired) == 0 {
			s.fireMu.Unlock()
			sleeper.Sleep(deadline)
			continue
		}
		batch = batch[:0]
		for _, e := range expired {
			batch = append(batch, Fired{ID: e.ID, Due: s.origin.Add(e.Due)})
		}
		clear(expired) // drop the id strings
		s.onFire(batch)
		clear(batch)
		s.fireMu.Unlock()
	}
}
