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
//
// It is internal: wheelq's own, not importable from other modules.
package recovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
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

// wallStepLimit is the largest difference between how far the wall clock
// and the monotonic clock moved between two passes that is not taken for a
// step of the wall clock. After a step, every owned partition is scanned
// again from the start, so that jobs armed before the step are armed anew
// against the stepped clock.
const wallStepLimit = 20 * time.Millisecond

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

// handOverStep is how often a process tries again, during a hand-over,
// to release what it hands over (once its runs are settled) or to take
// what it is handed: a job due meanwhile waits for one step at most
// instead of a poll interval.
const handOverStep = 2 * time.Millisecond

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

// handingOver says whether a partition is being handed over here or to
// here: one being drained, or one assigned here and not yet held.
func (r *Recoverer) handingOver() bool {
	for p := range r.target {
		if r.draining[p].Load() || (r.target[p] && !r.Holds(p)) {
			return true
		}
	}
	return false
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// renewIfDue renews the leases when their time has come, or at once when
// a process of the namespace was found gone (see findDead). The poller
// calls it between passes and between the pages of a long scan, so that a
// reload does not hold back a renewal.
func (r *Recoverer) renewIfDue(ctx context.Context) {
	now := r.cfg.Clock.Now()
	if r.cfg.DeadTokens != nil && !now.Before(r.nextDeadScan) {
		r.nextDeadScan = now.Add(r.cfg.PollInterval)
		if r.findDead() {
			r.leases(ctx)
			return
		}
	}
	if !now.Before(r.nextLease) {
		r.leases(ctx)
	}
}

// findDead asks DeadTokens for processes that are gone and notes the new
// ones: to leave the roster, and their leases to take over for a
// LeaseTTL. It reports whether it found any.
func (r *Recoverer) findDead() bool {
	if r.cfg.DeadTokens == nil {
		return false
	}
	found := false
	until := r.cfg.Clock.Now().Add(r.cfg.LeaseTTL)
	for _, tok := range r.cfg.DeadTokens() {
		if r.seenDead[tok] || tok == r.cfg.Token {
			continue
		}
		if r.dead == nil {
			r.dead, r.seenDead = map[string]time.Time{}, map[string]bool{}
		}
		r.dead[tok], r.seenDead[tok] = until, true
		r.leaveDead = append(r.leaveDead, tok)
		found = true
	}
	return found
}

// noteWallStep tells a step of the wall clock since the last pass: the
// wall reading moved by more (or less) than the monotonic one. Jobs armed
// before a step would fire early or late by its size, so every owned
// partition is scanned again from the start; arming converts each due time
// against the clock as it is now, and moves the entries already armed.
// (A job that would have fired early is caught by its claim in any case:
// the store's due time is the truth.)
func (r *Recoverer) noteWallStep(now, wall time.Time) {
	prevNow, prevWall := r.lastNow, r.lastWall
	r.lastNow, r.lastWall = now, wall
	if prevNow.IsZero() {
		return
	}
	step := wall.Sub(prevWall) - now.Sub(prevNow)
	if step.Abs() <= wallStepLimit {
		return
	}
	r.log.Warn("wheelq: the wall clock stepped; arming every loaded job again", "step", step)
	for p := range r.scanned {
		r.scanned[p] = math.MinInt64 / 2
	}
}

// leases is the lease round, every LeaseTTL/3 and whenever the roster
// changed: it renews the leases it holds, then (unless that failed)
// renews this process's roster entry and reads the roster, hands over the
// partitions now assigned to another member, and tries to acquire the
// free ones assigned to it. A
// partition's validity is counted from when its call was sent; when a
// renewal fails and the validity has run out, the partition is released
// (its lease may have lapsed in Redis and been taken by another process).
func (r *Recoverer) leases(ctx context.Context) {
	sent := r.cfg.Clock.Now()
	r.nextLease = sent.Add(r.cfg.LeaseTTL / 3)
	validUntil := int64(sent.Sub(r.base) + r.cfg.LeaseTTL - r.cfg.DriftMargin)
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	renewed := true
	var held []int
	for p := range r.loaded {
		if r.Holds(p) {
			held = append(held, p)
		}
	}
	if len(held) > 0 {
		ok, err := r.store.LeaseAll(ctx, held, persist.LeaseRenew, r.cfg.Token, r.cfg.LeaseTTL)
		if err != nil {
			r.noteErr("renew leases", err)
			renewed = false
			// Unsure: the partitions are owned until their validity ends
			// (Owns says so to every start); past it they are let go.
			now := int64(r.cfg.Clock.Now().Sub(r.base))
			for _, p := range held {
				if now >= r.valid[p].Load() {
					r.log.Warn("wheelq: lease not renewed in time, releasing", "partition", p)
					r.lose(p)
				}
			}
		} else {
			for i, p := range held {
				if ok[i] {
					r.valid[p].Store(validUntil)
				} else {
					r.log.Warn("wheelq: lease lost", "partition", p)
					r.lose(p)
				}
			}
			r.sink.Renewed()
		}
	}
	if renewed {
		// A process stays in the roster only while it can keep its
		// leases: one that reaches the roster's key but not its
		// partitions (a Cluster node cut off) drops out when its entry
		// expires, and its share goes to the others.
		r.readRoster(ctx)
	}
	r.handOver(ctx)
	r.acquire(ctx, validUntil)
}

// readRoster renews this process's entry in the roster and reads it: the
// partitions assigned to this process become its target. On an error the
// last target stands.
func (r *Recoverer) readRoster(ctx context.Context) {
	for len(r.leaveDead) > 0 {
		// Former processes known to be gone leave first, so that the
		// assignment read below gives their share out at once.
		if _, err := r.store.Members(ctx, persist.MemberLeave, r.leaveDead[0], 0); err != nil {
			r.noteErr("roster", err)
			return
		}
		r.log.Info("wheelq: took over from a process that is gone (its lock file was free)", "token", r.leaveDead[0])
		r.leaveDead = r.leaveDead[1:]
	}
	ro, err := r.store.Members(ctx, persist.MemberBeat, r.cfg.Member, r.cfg.LeaseTTL)
	if err != nil {
		r.noteErr("roster", err)
		return
	}
	me, found := slices.BinarySearch(ro.Members, r.cfg.Member)
	if !found {
		r.noteErr("roster", fmt.Errorf("this process (%s) is missing from the roster it just joined", r.cfg.Member))
		return
	}
	r.version = ro.Version
	owner := Assign(ro.Members, len(r.target))
	share, changed := 0, r.members.Swap(int32(len(ro.Members))) != int32(len(ro.Members))
	for p := range r.target {
		mine := owner[p] == me
		changed = changed || mine != r.target[p]
		r.target[p] = mine
		if mine {
			share++
		}
	}
	if changed {
		r.log.Info("wheelq: partitions assigned", "members", len(ro.Members), "share", share, "partitions", len(r.target))
		// The hand-overs this change starts, here and in the other
		// members, are retried closely for a while (see await).
		r.eager = r.cfg.Clock.Now().Add(handOverWindow)
	}
}

// handOverWindow is how long after a roster change the poller retries
// hand-overs every handOverStep: a hand-over waits for the runs claimed
// under the old owner, which usually end within it. After it, they are
// retried at every pass.
const handOverWindow = time.Second

// watch runs between passes: it reads the roster's version (one small
// call), and runs a lease round at once when the roster changed (a member
// joined, left or expired); otherwise it finishes the hand-overs whose
// runs are settled and tries again for the partitions assigned here that
// another process still holds, so that a hand-over or a lapsed lease is
// taken up within a poll interval.
func (r *Recoverer) watch(ctx context.Context) {
	sent := r.cfg.Clock.Now()
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	ro, err := r.store.Members(cctx, persist.MemberPeek, r.cfg.Member, 0)
	if err != nil {
		r.noteErr("roster", err)
		return
	}
	if ro.Version != r.version {
		r.leases(ctx)
		return
	}
	r.finishHandOvers(cctx)
	r.acquire(cctx, int64(sent.Sub(r.base)+r.cfg.LeaseTTL-r.cfg.DriftMargin))
}

// handOver starts handing over every owned partition that the roster
// assigns to another member: no job of it starts here any more, and its
// lease is released once the outcomes of the runs claimed here are
// stored (finishHandOvers).
func (r *Recoverer) handOver(ctx context.Context) {
	for p := range r.loaded {
		if r.target[p] || r.loaded[p].Load() == NotOwned {
			continue
		}
		r.log.Info("wheelq: handing a partition over to the member the roster assigns it to", "partition", p)
		r.draining[p].Store(true) // before release: Holds stays true throughout
		r.release(p)
	}
	r.finishHandOvers(ctx)
}

// finishHandOvers releases the leases of the partitions being handed over
// that have no run left whose outcome is not stored.
func (r *Recoverer) finishHandOvers(ctx context.Context) {
	var done []int
	for p := range r.draining {
		if r.draining[p].Load() && !r.sink.Busy(p) {
			done = append(done, p)
		}
	}
	if len(done) == 0 {
		return
	}
	if _, err := r.store.LeaseAll(ctx, done, persist.LeaseRelease, r.cfg.Token, 0); err != nil {
		r.noteErr("hand over", err)
		return // still held: renewed, and released at the next pass
	}
	for _, p := range done {
		r.draining[p].Store(false)
	}
}

// acquire tries to take the free partitions assigned to this process,
// and says whether it took any. validUntil is the validity of a lease
// taken now (see leases).
func (r *Recoverer) acquire(ctx context.Context, validUntil int64) (took bool) {
	var want []int
	for p := range r.loaded {
		if r.target[p] && !r.Holds(p) {
			want = append(want, p)
		}
	}
	if len(want) == 0 {
		return false
	}
	var dead []string
	now := r.cfg.Clock.Now()
	for tok, until := range r.dead {
		if now.Before(until) {
			dead = append(dead, tok)
		} else {
			delete(r.dead, tok) // its leases have lapsed by now anyway
		}
	}
	got, err := r.store.LeaseAll(ctx, want, persist.LeaseAcquire, r.cfg.Token, r.cfg.LeaseTTL, dead...)
	if err != nil {
		r.noteErr("acquire leases", err)
		return false
	}
	defer r.publishTokens()
	for i, p := range want {
		if !got[i] {
			if !r.waiting[p] {
				r.waiting[p] = true
				r.log.Info("wheelq: partition assigned here is held by another process; waiting for it to hand it over or for its lease to lapse (at most LeaseTTL after that process stops renewing it)",
					"partition", p, "lease_ttl", r.cfg.LeaseTTL)
			}
			continue
		}
		if r.waiting[p] {
			r.waiting[p] = false
			r.log.Info("wheelq: took a partition over", "partition", p)
		}
		r.valid[p].Store(validUntil)
		r.epoch[p].Add(1)
		r.reset[p] = true
		r.loaded[p].Store(math.MinInt64 + 1) // owned, nothing loaded yet
		r.owned.Add(1)
		took = true
	}
	return took
}

// lose forgets partition p, owned or being handed over: its lease is no
// longer (surely) this process's.
func (r *Recoverer) lose(p int) {
	r.draining[p].Store(false)
	r.release(p)
}

func (r *Recoverer) release(p int) {
	if r.loaded[p].Swap(NotOwned) == NotOwned {
		return
	}
	r.epoch[p].Add(1)
	r.owned.Add(-1)
	r.publishTokens()
	r.sink.Release(p)
}

func (r *Recoverer) publishTokens() {
	toks := make([]string, len(r.loaded))
	for p := range r.loaded {
		if r.loaded[p].Load() != NotOwned {
			toks[p] = r.cfg.Token
		}
	}
	r.tokens.Store(&toks)
}

// minFirstPage is the least a partition's first page read with the poll
// holds (see pass).
const minFirstPage = 64

// scan is one partition's window being read.
type scan struct {
	p            int
	after, until int64
	cur          persist.Cursor
}

// pass announces the new window of every owned partition, drains the
// inboxes and reads the first page of each window, all in one call
// (persist.Store.PollMany); then it scans the rest of the windows, a page
// of each partition in turn (so a reload arms the oldest overdue jobs of
// every partition first). wall is the clock's wall reading: windows are in
// stored due times.
//
// A window starts where the last window scanned whole ended, by this
// process's own record (scanned), or earlier where Redis says the last
// announcement was: a poll whose reply was lost (applied in Redis, so its
// announcement is "previous" to the next poll) or a scan that failed leaves
// scanned where it was, and the next window covers what they missed.
func (r *Recoverer) pass(ctx context.Context, wall time.Time) {
	until := wall.Add(r.cfg.Horizon).UnixMicro()
	ttl := r.cfg.LeaseTTL + r.cfg.Horizon
	reqs := r.polls[:0]
	reloading := false
	for p := range r.loaded {
		prevLocal := r.loaded[p].Load()
		if prevLocal == NotOwned {
			continue
		}
		// Announce in memory first: a Schedule that writes after this
		// point arms its job itself.
		if !r.loaded[p].CompareAndSwap(prevLocal, max(prevLocal, until)) {
			continue // released meanwhile
		}
		reqs = append(reqs, persist.PollRequest{P: p, Token: r.cfg.Token, Reset: r.reset[p], Scanned: r.scanned[p]})
		reloading = reloading || r.reset[p] || r.scanned[p] == math.MinInt64/2
	}
	r.polls = reqs
	if len(reqs) == 0 {
		return
	}
	// The first page of every window comes with the poll, in one call.
	// When a partition is reloaded (its window starts at the floor: a new
	// lease, or a reset), that call holds about one page in all (PageSize
	// shared among the partitions), so that the oldest jobs are armed
	// after one short script and Redis is not held by a page of each (16
	// pages of 2,000: the first overdue job of a 1M reload ran about 30 ms
	// later). The scans below go on with whole pages. A pass of windows
	// of a poll interval reads whole pages.
	first := r.cfg.PageSize
	if reloading {
		first = max(r.cfg.PageSize/len(reqs), min(r.cfg.PageSize, minFirstPage))
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	replies, err := r.store.PollMany(cctx, until, ttl, 10*r.cfg.PageSize, first, reqs, r.replies)
	cancel()
	r.replies = replies
	if err != nil {
		r.noteErr("poll", err)
		return
	}
	var scans []*scan
	var round []persist.Entry
	for i := range replies {
		p, res := reqs[i].P, &replies[i]
		if errors.Is(res.Err, persist.ErrFenced) {
			r.log.Warn("wheelq: partition fenced, releasing", "partition", p)
			r.lose(p)
			continue
		}
		if res.Err != nil {
			r.noteErr("poll", res.Err)
			continue
		}
		if len(res.Inbox) > 0 {
			r.sink.Arm(res.Inbox)
			r.armed.Add(int64(len(res.Inbox)))
		}
		after := int64(persist.PollFloor)
		if res.HavePrev && !r.reset[p] {
			after = min(res.Prev, r.scanned[p])
		}
		r.reset[p] = false
		if after >= until {
			continue
		}
		if !res.Read { // not read with the poll: scanned from the start
			scans = append(scans, &scan{p: p, after: after, until: until})
			continue
		}
		if r.loaded[p].Load() == NotOwned {
			continue
		}
		round = append(round, res.Page...)
		if res.Cursor.Done {
			r.scanned[p] = until
		} else {
			scans = append(scans, &scan{p: p, after: after, until: until, cur: res.Cursor})
		}
	}
	clear(replies) // the entries are the sink's now
	r.armRound(round)
	for len(scans) > 0 && ctx.Err() == nil {
		r.renewIfDue(ctx)
		next := scans[:0]
		round = nil
		for _, s := range scans {
			cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
			es, cur, err := r.store.RangePending(cctx, s.p, s.after, s.until, s.cur, r.cfg.PageSize)
			cancel()
			if err != nil {
				// The window was announced: scanned stays where it was, so
				// the next pass scans it again.
				r.noteErr("scan", err)
				continue
			}
			if r.loaded[s.p].Load() == NotOwned {
				continue
			}
			round = append(round, es...)
			s.cur = cur
			if cur.Done {
				r.scanned[s.p] = s.until
			} else {
				next = append(next, s)
			}
		}
		r.armRound(round)
		scans = next
	}
}

// armRound arms a page of every partition scanned, merged: the oldest go
// first.
func (r *Recoverer) armRound(round []persist.Entry) {
	if len(round) == 0 {
		return
	}
	slices.SortFunc(round, func(a, b persist.Entry) int { return cmp.Compare(a.Due, b.Due) })
	r.sink.Arm(round)
	r.armed.Add(int64(len(round)))
}

// sweep re-arms the oldest page of jobs of every owned partition that are
// overdue by more than SweepAge.
func (r *Recoverer) sweep(ctx context.Context, wall time.Time) {
	until := wall.Add(-r.cfg.SweepAge).UnixMicro()
	var all []persist.Entry
	for p := range r.loaded {
		if r.loaded[p].Load() == NotOwned {
			continue
		}
		// A page per partition per sweep, each sweep going on from where
		// the last stopped and starting over once it read the last page:
		// a page that always began at the oldest would arm the same jobs
		// every time (a paused topic's overdue jobs, parked at once) and
		// never reach the others.
		cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		es, cur, err := r.store.RangePending(cctx, p, math.MinInt64/2, until, r.sweepAt[p], r.cfg.PageSize)
		cancel()
		if err != nil {
			r.noteErr("sweep", err)
			return
		}
		if cur.Done {
			cur = persist.Cursor{}
		}
		r.sweepAt[p] = cur
		all = append(all, es...)
	}
	if len(all) > 0 {
		slices.SortFunc(all, func(a, b persist.Entry) int { return cmp.Compare(a.Due, b.Due) })
		r.sink.Arm(all)
		r.swept.Add(int64(len(all)))
	}
	r.repair(ctx, wall)
	r.warnOverdue(ctx, wall)
}

// repairStep bounds one repair step: about this many elements of each of
// a partition's structures are looked at per sweep.
const repairStep = 200

// repair takes one step of the repair walk (persist.Store.Repair) of every
// owned partition; a walk done starts again at the next sweep.
func (r *Recoverer) repair(ctx context.Context, wall time.Time) {
	for p := range r.loaded {
		if r.loaded[p].Load() == NotOwned {
			continue
		}
		if r.repairs[p].Done {
			r.repairs[p] = persist.RepairCursor{}
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		cur, res, err := r.store.Repair(cctx, p, r.cfg.Token, r.repairs[p], repairStep, wall.UnixMicro())
		cancel()
		if err != nil {
			r.noteErr("repair", err)
			continue
		}
		r.repairs[p] = cur
		if n := res.PendingWithoutRecord + res.RecordsInNoSet + res.StaleMarks; n > 0 {
			r.fixed.Add(int64(n))
			r.log.Warn("wheelq: repaired inconsistent state", "partition", p,
				"pending_without_record", res.PendingWithoutRecord, "records_dead_lettered", res.RecordsInNoSet,
				"stale_claim_marks", res.StaleMarks, "keys", res.Keys)
		}
	}
}

// Repaired returns how many inconsistencies repair steps have fixed.
func (r *Recoverer) Repaired() int64 { return r.fixed.Load() }

// warnOverdue logs one warning for the partitions, owned here or not,
// whose oldest pending job is more than OverdueWarn past its due time: at
// the first sweep that finds them, then at most once every OverdueWarn
// while some stay overdue (a paused topic's jobs do, by design, and a
// line per partition per sweep flooded the log).
func (r *Recoverer) warnOverdue(ctx context.Context, wall time.Time) {
	now := r.cfg.Clock.Now()
	if !r.overdueWarned.IsZero() && now.Sub(r.overdueWarned) < r.cfg.OverdueWarn {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	c, err := r.store.Census(cctx, wall.Add(-r.cfg.OverdueWarn).UnixMicro())
	cancel()
	if err != nil {
		r.noteErr("census", err)
		return
	}
	var parts []int
	var total int64
	var oldest int64
	owned := 0
	for p, n := range c.Overdue {
		if n > 0 && c.HaveOldest[p] {
			parts = append(parts, p)
			total += n
			if len(parts) == 1 || c.Oldest[p] < oldest {
				oldest = c.Oldest[p]
			}
			if r.loaded[p].Load() != NotOwned {
				owned++
			}
		}
	}
	if len(parts) == 0 {
		r.overdueWarned = time.Time{}
		return
	}
	r.overdueWarned = now
	args := []any{"overdue", total, "partitions", fmt.Sprint(parts),
		"oldest_late", wall.Sub(time.UnixMicro(oldest)).Round(time.Millisecond), "owned_here", owned}
	msg := "wheelq: jobs overdue"
	if r.cfg.PausedTopics != nil {
		if paused := r.cfg.PausedTopics(); len(paused) > 0 {
			msg = "wheelq: jobs overdue (those of paused topics wait for Resume)"
			args = append(args, "paused_topics", paused)
		}
	}
	r.log.Warn(msg, args...)
}

// Swept returns how many overdue jobs sweeps have re-armed.
func (r *Recoverer) Swept() int64 { return r.swept.Load() }

func (r *Recoverer) noteErr(what string, err error) {
	msg := what + ": " + err.Error()
	if prev := r.lastErr.Swap(&errString{msg}); prev == nil || prev.s != msg {
		r.log.Warn("wheelq: recovery", "op", what, "err", err)
	}
}
