// Package recovery brings jobs from the store into memory: it holds the
// leases of the partitions a process owns, reloads their pending jobs on
// start-up or take-over, and polls to bring in jobs as they enter the
// horizon. It sees the store and the in-memory side only through the small
// interfaces Store and Sink.
//
// The protocol ("announce, then scan"): before reading a window of the
// pending set, the poller announces the window's end, first in memory
// (LoadedUntil) and then in Redis (persist.Store.PollMany, which
// reads the window's first page in the same script). A writer reads the
// announcement after its write: the owner's own Schedule arms the job when
// its due time is within LoadedUntil, and a script run by anyone else puts
// it in the partition's inbox, which the poller drains. So every job due
// within the horizon is armed by at least one of them; arming is
// idempotent by key.
package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/wheel"
)

// NotOwned is LoadedUntil's value for a partition this process does not own.
const NotOwned = math.MinInt64

// Store is what recovery needs of persist.Store.
type Store interface {
	Partitions() int
	LeaseAll(ctx context.Context, parts []int, op persist.LeaseOp, token string, ttl time.Duration, dead ...string) ([]bool, error)
	PollMany(ctx context.Context, loaded int64, ttl time.Duration, maxInbox, pageSize int, reqs []persist.PollRequest, out []persist.PollReply) ([]persist.PollReply, error)
	RangePending(ctx context.Context, p int, after, until int64, cur persist.Cursor, limit int) ([]persist.Entry, persist.Cursor, error)
	Census(ctx context.Context, before int64) (persist.Census, error)
	Repair(ctx context.Context, p int, tok string, cur persist.RepairCursor, count int, now int64) (persist.RepairCursor, persist.RepairResult, error)
	Members(ctx context.Context, op persist.MemberOp, id string, ttl time.Duration) (persist.Roster, error)
}

var _ Store = (*persist.Store)(nil)

// RosterWatcher is what a Store may offer besides: a call that runs until
// ctx ends and calls changed whenever the roster changes, so that a
// process reacts to a member joining or leaving at once instead of at its
// next pass. persist.Store has it.
type RosterWatcher interface {
	WatchRoster(ctx context.Context, changed func()) error
}

var _ RosterWatcher = (*persist.Store)(nil)

// Sink is the in-memory side: the queue's wheel.
type Sink interface {
	// Arm puts jobs in memory at their due times (unix µs), in the order
	// given (due order: overdue jobs run oldest first). It is idempotent by
	// key.
	Arm(entries []persist.Entry)
	// Release tells that partition p is no longer owned: none of its jobs
	// may start here any more.
	Release(p int)
	// Renewed tells that the leases were renewed: Owns may say yes again
	// for partitions whose validity had run out while the renewal was late.
	Renewed()
	// Busy reports whether runs of partition p claimed here still have
	// outcomes not stored in Redis. A partition handed over to another
	// process keeps its lease until Busy says no, so that those outcomes
	// are stored under the lease they were claimed under.
	Busy(p int) bool
}

// Config configures a Recoverer. A zero field means its default.
type Config struct {
	// Token identifies this process's leases; it must be unique per
	// process start. Required.
	Token string
	// Member is this process's id in the namespace's roster of live
	// workers, by which partitions are assigned (see Assign): a stable
	// instance id keeps its share across restarts. Default Token.
	Member string
	// Horizon is how far ahead jobs are held in memory. Default 1 minute.
	Horizon time.Duration
	// PollInterval is how often the poller advances the window and drains
	// inboxes. Default 100ms.
	PollInterval time.Duration
	// LeaseTTL is how long a lease lasts without renewal; a dead owner's
	// partitions are taken over after it. Renewals come every third of
	// it. Default 10s.
	LeaseTTL time.Duration
	// PageSize is how many jobs one read of the pending set returns.
	// Default 2000.
	PageSize int
	// Clock is the time source. Default wheel.RealClock().
	Clock wheel.Clock
	// Logger receives warnings (Redis errors, lost leases). Default: none.
	Logger *slog.Logger
	// SweepInterval is how often the poller also re-arms jobs overdue by
	// more than SweepAge: a safety net for a job whose arming was lost
	// (a reply lost when Redis died between a write and its inbox push).
	// Arming is idempotent and runs are claimed, so a sweep never runs a
	// job twice. Default 10s; SweepAge default 5s.
	SweepInterval time.Duration
	SweepAge      time.Duration
	// OverdueWarn is how far past its due time the oldest pending job of a
	// partition may be before a sweep logs a warning naming the
	// partitions, whether this process owns them or not: a job that should
	// have run cannot hide (a partition no process runs, a stuck owner).
	// The warning is one line for all partitions, repeated at most once
	// every OverdueWarn while jobs stay overdue. Default 1 minute.
	OverdueWarn time.Duration
	// DeadTokens, if set, returns tokens of processes of the namespace
	// that are known to be gone (the queue proves it by their lock files),
	// whose member ids were their tokens. Start calls it, and the poller
	// before each lease renewal and between passes (at most every
	// PollInterval); a token it returns is removed from the roster, and
	// for a LeaseTTL from then its leases are taken over at once rather
	// than left to lapse. Only a token whose process can never act again
	// may be returned; one returned again counts once.
	DeadTokens func() []string
	// PausedTopics, if set, returns the topics paused now: the overdue
	// warning names them, since their jobs wait for Resume by design.
	PausedTopics func() []string
	// CallTimeout bounds every Redis call of the poller (leases, polls,
	// scans), so that a call whose reply never comes cannot hold the
	// poller. Default LeaseTTL/3.
	CallTimeout time.Duration
	// DriftMargin is taken off every lease's validity: a process acts on a
	// partition only until renewal-sent + LeaseTTL - DriftMargin by its own
	// monotonic clock, so that its clock may run slower than Redis's by
	// that much without its validity outlasting the lease in Redis.
	// Default LeaseTTL/10.
	DriftMargin time.Duration
	// OnPass, if set, is called after every poller pass (a test signal).
	OnPass func()
}

// Recoverer owns the leases, the reload and the poller. Start starts its
// goroutine; Stop stops it and releases the leases.
type Recoverer struct {
	store Store
	sink  Sink
	cfg   Config
	log   *slog.Logger

	loaded []atomic.Int64           // per partition: loaded-until (unix µs) or NotOwned
	tokens atomic.Pointer[[]string] // per partition: Token where owned, else ""
	base   time.Time                // the clock's reading at New: validity is counted from it
	valid  []atomic.Int64           // per partition: owned until base+valid (ns), by this process's clock
	epoch  []atomic.Uint64          // per partition: counts acquisitions and releases
	// draining: per partition, handed over to another process but its
	// lease kept (and renewed) until the outcomes of its runs claimed here
	// are stored (Sink.Busy), then released.
	draining []atomic.Bool
	// target: per partition, assigned to this process by the last roster
	// read (all of them until one succeeds); poller goroutine only.
	target []bool
	// version is the roster's version at the last read; poller goroutine
	// only. members is the number of live members it listed.
	version int64
	members atomic.Int32
	// eager is until when the poller retries a hand-over every
	// handOverStep (see await); poller goroutine only.
	eager   time.Time
	reset   []bool                 // per partition: needs a full reload; poller goroutine only
	waiting []bool                 // per partition: held by another process, said in the log; poller goroutine only
	repairs []persist.RepairCursor // per partition: where the repair walk stands; poller goroutine only
	sweepAt []persist.Cursor       // per partition: where the sweep's walk stands; poller goroutine only
	// polls and replies are a pass's requests and replies, kept for the
	// next pass; poller goroutine only.
	polls   []persist.PollRequest
	replies []persist.PollReply
	scanned []int64 // per partition: the end of the last window scanned whole (unix µs); poller goroutine only
	// nextLease is when the leases are renewed next; poller goroutine only.
	nextLease time.Time
	// lastNow, lastWall are the clock's readings at the last pass, to tell
	// a step of the wall clock; poller goroutine only.
	lastNow, lastWall time.Time
	ready             chan struct{}             // closed when the first reload finished
	readyMu           sync.Once                 //
	cancel            context.CancelFunc        //
	done              chan struct{}             // closed when the goroutine returned
	mu                sync.Mutex                // guards started, stopped and cancel
	started           bool                      //
	stopped           bool                      // Stop was called: no Start after it
	armed             atomic.Int64              // jobs armed by reloads and polls
	dead              map[string]time.Time      // the poller's own (and Start's): DeadTokens found -> until when their leases are taken over
	seenDead          map[string]bool           // the poller's own (and Start's): every DeadTokens token found
	leaveDead         []string                  // the poller's own: dead tokens still to remove from the roster
	nextDeadScan      time.Time                 // the poller's own: when DeadTokens is called next
	overdueWarned     time.Time                 // the poller's own: when the overdue warning was last logged
	owned             atomic.Int32              // partitions owned
	swept             atomic.Int64              // jobs re-armed by sweeps
	fixed             atomic.Int64              // inconsistencies fixed by repair steps
	lastErr           atomic.Pointer[errString] //
}

type errString struct{ s string }

// New returns a stopped Recoverer.
func New(store Store, sink Sink, cfg Config) (*Recoverer, error) {
	if cfg.Token == "" {
		return nil, errors.New("recovery: empty token")
	}
	if cfg.Member == "" {
		cfg.Member = cfg.Token
	}
	if cfg.Horizon == 0 {
		cfg.Horizon = time.Minute
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = 2000
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = 10 * time.Second
	}
	if cfg.SweepAge == 0 {
		cfg.SweepAge = 5 * time.Second
	}
	if cfg.OverdueWarn == 0 {
		cfg.OverdueWarn = time.Minute
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = cfg.LeaseTTL / 3
	}
	if cfg.DriftMargin == 0 {
		cfg.DriftMargin = cfg.LeaseTTL / 10
	}
	if cfg.Clock == nil {
		cfg.Clock = wheel.RealClock()
	}
	if cfg.Horizon < 0 || cfg.PollInterval < 0 || cfg.LeaseTTL < time.Second || cfg.PageSize < 1 ||
		cfg.CallTimeout < 0 || cfg.DriftMargin < 0 || cfg.DriftMargin >= cfg.LeaseTTL/2 {
		return nil, fmt.Errorf("recovery: invalid config (horizon %v, poll %v, lease %v, page %d, call timeout %v, drift margin %v)",
			cfg.Horizon, cfg.PollInterval, cfg.LeaseTTL, cfg.PageSize, cfg.CallTimeout, cfg.DriftMargin)
	}
	if cfg.PollInterval*2 > cfg.Horizon {
		return nil, fmt.Errorf("recovery: poll interval %v must be at most half the horizon %v", cfg.PollInterval, cfg.Horizon)
	}
	n := store.Partitions()
	r := &Recoverer{
		store: store, sink: sink, cfg: cfg,
		log:      cfg.Logger,
		loaded:   make([]atomic.Int64, n),
		base:     cfg.Clock.Now(),
		valid:    make([]atomic.Int64, n),
		epoch:    make([]atomic.Uint64, n),
		draining: make([]atomic.Bool, n),
		target:   make([]bool, n),
		version:  -1,
		reset:    make([]bool, n),
		waiting:  make([]bool, n),
		repairs:  make([]persist.RepairCursor, n),
		sweepAt:  make([]persist.Cursor, n),
		scanned:  make([]int64, n),
		ready:    make(chan struct{}),
		done:     make(chan struct{}),
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	for p := range r.loaded {
		r.loaded[p].Store(NotOwned)
		r.scanned[p] = math.MinInt64 / 2
		r.target[p] = true
	}
	empty := make([]string, n)
	r.tokens.Store(&empty)
	return r, nil
}

// LoadedUntil returns partition p's loaded-until time (unix µs): a job of
// p due at or before it must be armed by whoever wrote it, if this process
// wrote it. It is NotOwned when this process does not own p.
func (r *Recoverer) LoadedUntil(p int) int64 { return r.loaded[p].Load() }

// Owns reports whether this process owns partition p at now (a reading of
// the Recoverer's clock) by its own conservative reckoning: it holds the
// lease, and now is before the lease's validity, counted from when its last
// successful renewal was sent, less the drift margin. A process starts a
// job only while it owns the job's partition: a paused or cut-off process
// stops on its own, before another can take the partition over.
func (r *Recoverer) Owns(p int, now time.Time) bool {
	return r.loaded[p].Load() != NotOwned && int64(now.Sub(r.base)) < r.valid[p].Load()
}

// Epoch returns partition p's lease epoch: it changes whenever this
// process acquires or releases p. A claim made in one epoch must not start
// in another: between them another process may have owned p.
func (r *Recoverer) Epoch(p int) uint64 { return r.epoch[p].Load() }

// Tokens returns, per partition, this process's lease token where it owns
// the partition and "" elsewhere. The slice must not be modified.
func (r *Recoverer) Tokens() []string { return *r.tokens.Load() }

// Owned returns the number of partitions owned.
func (r *Recoverer) Owned() int { return int(r.owned.Load()) }

// Holds reports whether this process holds partition p's lease in Redis:
// it owns p, or is handing p over and still stores the outcomes of the
// runs it claimed there. Outcomes of a partition not held are not stored
// (another process owns it and runs those jobs).
func (r *Recoverer) Holds(p int) bool {
	return r.loaded[p].Load() != NotOwned || r.draining[p].Load()
}

// Members returns the number of live workers in the namespace's roster at
// the last read (0 before the first).
func (r *Recoverer) Members() int { return int(r.members.Load()) }

// Armed returns the number of jobs armed by reloads, inboxes and polls.
func (r *Recoverer) Armed() int64 { return r.armed.Load() }

// Ready is closed once the first reload of the partitions owned at start
// has finished.
func (r *Recoverer) Ready() <-chan struct{} { return r.ready }

// Start acquires what leases it can and starts the goroutine that reloads
// and polls. It returns once the lease round trip is done (or failed: the
// goroutine keeps trying). Start after Start or Stop does nothing.
func (r *Recoverer) Start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.stopped {
		return
	}
	r.started = true
	r.findDead()
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	r.leases(ctx)
	go r.run(runCtx)
}

// Stop stops the goroutine and releases the leases (bounded by ctx), so
// another process can take over at once. Stop without Start, and Stop
// after Stop, do nothing.
func (r *Recoverer) Stop(ctx context.Context) error {
	r.mu.Lock()
	r.stopped = true
	started := r.started
	cancel := r.cancel
	r.cancel = nil
	r.mu.Unlock()
	if !started || cancel == nil {
		return nil
	}
	cancel()
	<-r.done
	var held []int
	for p := range r.loaded {
		if r.Holds(p) {
			held = append(held, p)
			r.lose(p)
		}
	}
	var errs []error
	if len(held) > 0 {
		_, err := r.store.LeaseAll(ctx, held, persist.LeaseRelease, r.cfg.Token, 0)
		errs = append(errs, err)
	}
	// Leave the roster after the leases are free: the others read the
	// roster's new version at their next pass and take the partitions
	// over at once.
	_, err := r.store.Members(ctx, persist.MemberLeave, r.cfg.Member, 0)
	return errors.Join(append(errs, err)...)
}

func (r *Recoverer) run(ctx context.Context) {
	defer close(r.done)
	defer r.readyMu.Do(func() { close(r.ready) })
	sl := r.cfg.Clock.NewSleeper()
	defer sl.Close()
	stop := context.AfterFunc(ctx, sl.Wake)
	defer stop()
	if w, ok := r.store.(RosterWatcher); ok {
		// A roster change wakes the poller: its next watch sees it.
		var wg sync.WaitGroup
		defer wg.Wait()
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wg.Go(func() { _ = w.WatchRoster(wctx, sl.Wake) })
	}
	nextSweep := r.cfg.Clock.Now().Add(r.cfg.SweepInterval)
	first := true
	for ctx.Err() == nil {
		r.renewIfDue(ctx)
		r.watch(ctx)
		now, wall := wheel.Readings(r.cfg.Clock)
		r.noteWallStep(now, wall)
		r.pass(ctx, wall)
		if !now.Before(nextSweep) {
			r.sweep(ctx, wall)
			nextSweep = now.Add(r.cfg.SweepInterval)
		}
		if first {
			first = false
			r.readyMu.Do(func() { close(r.ready) })
		}
		if r.cfg.OnPass != nil {
			r.cfg.OnPass()
		}
		if ctx.Err() != nil {
			return
		}
		r.await(ctx, sl, earliest(r.cfg.Clock.Now().Add(r.cfg.PollInterval), r.nextLease))
	}
}

// await sleeps until next, the next pass. During a hand-over (until
// eager) it wakes every handOverStep to finish the hand-overs whose runs
// are settled and to try again for the partitions assigned here; it
// returns early when it took one, so that the next pass loads it at once.
func (r *Recoverer) await(ctx context.Context, sl wheel.Sleeper, next time.Time) {
	for {
		now := r.cfg.Clock.Now()
		if !now.Before(r.eager) || !r.handingOver() {
			sl.Sleep(next)
			return
		}
		step := now.Add(handOverStep)
		if !step.Before(next) {
			sl.Sleep(next)
			return
		}
		sl.Sleep(step)
		if ctx.Err() != nil {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		r.finishHandOvers(cctx)
		took := r.acquire(cctx, int64(r.cfg.Clock.Now().Sub(r.base)+r.cfg.LeaseTTL-r.cfg.DriftMargin))
		cancel()
		if took {
			return
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (r *Recoverer) noteErr(what string, err error) {
	msg := what + ": " + err.Error()
	if prev := r.lastErr.Swap(&errString{msg}); prev == nil || prev.s != msg {
		r.log.Warn("wheelq: recovery", "op", what, "err", err)
	}
}
