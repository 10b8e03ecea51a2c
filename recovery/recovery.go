// Package recovery brings jobs from the store into memory: it holds the
// leases of the partitions a process owns, reloads their pending jobs on
// start-up or take-over, and polls to bring in jobs as they enter the
// horizon. It sees the store and the in-memory side only through the small
// interfaces Store and Sink.
//
// The protocol ("announce, then scan"): before reading a window of the
// pending set, the poller announces the window's end, first in memory
// (LoadedUntil) and then in Redis (persist.Store.Poll). A writer reads the
// announcement after its write: the owner's own Schedule arms the job when
// its due time is within LoadedUntil, and a script run by anyone else puts
// it in the partition's inbox, which the poller drains. So every job due
// within the horizon is armed by at least one of them; arming is
// idempotent by key.
//
// Stability: this package is importable, but its API is for wheelq's own
// use and may change in any minor release.
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

	"github.com/wheelq/wheelq/persist"
	"github.com/wheelq/wheelq/wheel"
)

// NotOwned is LoadedUntil's value for a partition this process does not own.
const NotOwned = math.MinInt64

// Store is what recovery needs of persist.Store.
type Store interface {
	Partitions() int
	LeaseAll(ctx context.Context, parts []int, op persist.LeaseOp, token string, ttl time.Duration) ([]bool, error)
	Poll(ctx context.Context, p int, tok string, loaded int64, ttl time.Duration, reset bool, maxInbox int) (persist.PollResult, error)
	RangePending(ctx context.Context, p int, after, until int64, cur persist.Cursor, limit int) ([]persist.Entry, persist.Cursor, error)
}

var _ Store = (*persist.Store)(nil)

// Sink is the in-memory side: the queue's wheel.
type Sink interface {
	// Arm puts jobs in memory at their due times (unix µs), in the order
	// given (due order: overdue jobs run oldest first). It is idempotent by
	// key.
	Arm(entries []persist.Entry)
	// Release tells that partition p is no longer owned: none of its jobs
	// may start here any more.
	Release(p int)
}

// Config configures a Recoverer. A zero field means its default.
type Config struct {
	// Token identifies this process's leases; it must be unique per
	// process start. Required.
	Token string
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

	loaded  []atomic.Int64            // per partition: loaded-until (unix µs) or NotOwned
	tokens  atomic.Pointer[[]string]  // per partition: Token where owned, else ""
	renewed []time.Time               // per partition: last successful renewal; poller goroutine only
	reset   []bool                    // per partition: needs a full reload; poller goroutine only
	redo    []int64                   // per partition: rescan from here after a failed scan; poller goroutine only
	ready   chan struct{}             // closed when the first reload finished
	readyMu sync.Once                 //
	cancel  context.CancelFunc        //
	done    chan struct{}             // closed when the goroutine returned
	mu      sync.Mutex                // guards started
	started bool                      //
	armed   atomic.Int64              // jobs armed by reloads and polls
	owned   atomic.Int32              // partitions owned
	swept   atomic.Int64              // jobs re-armed by sweeps
	lastErr atomic.Pointer[errString] //
}

type errString struct{ s string }

// New returns a stopped Recoverer.
func New(store Store, sink Sink, cfg Config) (*Recoverer, error) {
	if cfg.Token == "" {
		return nil, errors.New("recovery: empty token")
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
	if cfg.Clock == nil {
		cfg.Clock = wheel.RealClock()
	}
	if cfg.Horizon < 0 || cfg.PollInterval < 0 || cfg.LeaseTTL < time.Second || cfg.PageSize < 1 {
		return nil, fmt.Errorf("recovery: invalid config (horizon %v, poll %v, lease %v, page %d)",
			cfg.Horizon, cfg.PollInterval, cfg.LeaseTTL, cfg.PageSize)
	}
	if cfg.PollInterval*2 > cfg.Horizon {
		return nil, fmt.Errorf("recovery: poll interval %v must be at most half the horizon %v", cfg.PollInterval, cfg.Horizon)
	}
	n := store.Partitions()
	r := &Recoverer{
		store: store, sink: sink, cfg: cfg,
		log:     cfg.Logger,
		loaded:  make([]atomic.Int64, n),
		renewed: make([]time.Time, n),
		reset:   make([]bool, n),
		redo:    make([]int64, n),
		ready:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	for p := range r.loaded {
		r.loaded[p].Store(NotOwned)
		r.redo[p] = math.MaxInt64
	}
	empty := make([]string, n)
	r.tokens.Store(&empty)
	return r, nil
}

// LoadedUntil returns partition p's loaded-until time (unix µs): a job of
// p due at or before it must be armed by whoever wrote it, if this process
// wrote it. It is NotOwned when this process does not own p.
func (r *Recoverer) LoadedUntil(p int) int64 { return r.loaded[p].Load() }

// Tokens returns, per partition, this process's lease token where it owns
// the partition and "" elsewhere. The slice must not be modified.
func (r *Recoverer) Tokens() []string { return *r.tokens.Load() }

// Owned returns the number of partitions owned.
func (r *Recoverer) Owned() int { return int(r.owned.Load()) }

// Armed returns the number of jobs armed by reloads, inboxes and polls.
func (r *Recoverer) Armed() int64 { return r.armed.Load() }

// Ready is closed once the first reload of the partitions owned at start
// has finished.
func (r *Recoverer) Ready() <-chan struct{} { return r.ready }

// Start acquires what leases it can and starts the goroutine that reloads
// and polls. It returns once the lease round trip is done (or failed: the
// goroutine keeps trying). Start after Start does nothing.
func (r *Recoverer) Start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return
	}
	r.started = true
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	r.leases(ctx, r.cfg.Clock.Now())
	go r.run(runCtx)
}

// Stop stops the goroutine and releases the leases (bounded by ctx), so
// another process can take over at once. Stop after Stop does nothing.
func (r *Recoverer) Stop(ctx context.Context) error {
	r.mu.Lock()
	started := r.started
	cancel := r.cancel
	r.cancel = nil
	r.mu.Unlock()
	if !started || cancel == nil {
		return nil
	}
	cancel()
	<-r.done
	var owned []int
	for p := range r.loaded {
		if r.loaded[p].Load() != NotOwned {
			owned = append(owned, p)
			r.release(p)
		}
	}
	if len(owned) == 0 {
		return nil
	}
	_, err := r.store.LeaseAll(ctx, owned, persist.LeaseRelease, r.cfg.Token, 0)
	return err
}

func (r *Recoverer) run(ctx context.Context) {
	defer close(r.done)
	defer r.readyMu.Do(func() { close(r.ready) })
	sl := r.cfg.Clock.NewSleeper()
	defer sl.Close()
	stop := context.AfterFunc(ctx, sl.Wake)
	defer stop()
	nextLease := r.cfg.Clock.Now().Add(r.cfg.LeaseTTL / 3)
	nextSweep := r.cfg.Clock.Now().Add(r.cfg.SweepInterval)
	first := true
	for ctx.Err() == nil {
		now := r.cfg.Clock.Now()
		if !now.Before(nextLease) {
			r.leases(ctx, now)
			nextLease = now.Add(r.cfg.LeaseTTL / 3)
		}
		r.pass(ctx, now)
		if !now.Before(nextSweep) {
			r.sweep(ctx, now)
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
		sl.Sleep(r.cfg.Clock.Now().Add(r.cfg.PollInterval))
	}
}

// leases renews the owned partitions and tries to acquire the others.
func (r *Recoverer) leases(ctx context.Context, now time.Time) {
	var owned, free []int
	for p := range r.loaded {
		if r.loaded[p].Load() != NotOwned {
			owned = append(owned, p)
		} else {
			free = append(free, p)
		}
	}
	ttl := r.cfg.LeaseTTL
	if len(owned) > 0 {
		held, err := r.store.LeaseAll(ctx, owned, persist.LeaseRenew, r.cfg.Token, ttl)
		if err != nil {
			r.noteErr("renew leases", err)
			// Unsure: keep firing until the lease would have lapsed.
			for _, p := range owned {
				if now.Sub(r.renewed[p]) > ttl*2/3 {
					r.log.Warn("wheelq: lease not renewed in time, releasing", "partition", p)
					r.release(p)
				}
			}
		} else {
			for i, p := range owned {
				if held[i] {
					r.renewed[p] = now
				} else {
					r.log.Warn("wheelq: lease lost", "partition", p)
					r.release(p)
				}
			}
		}
	}
	if len(free) > 0 {
		held, err := r.store.LeaseAll(ctx, free, persist.LeaseAcquire, r.cfg.Token, ttl)
		if err != nil {
			r.noteErr("acquire leases", err)
			return
		}
		for i, p := range free {
			if held[i] {
				r.renewed[p] = now
				r.reset[p] = true
				r.loaded[p].Store(math.MinInt64 + 1) // owned, nothing loaded yet
				r.owned.Add(1)
			}
		}
		r.publishTokens()
	}
}

func (r *Recoverer) release(p int) {
	if r.loaded[p].Swap(NotOwned) == NotOwned {
		return
	}
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

// scan is one partition's window being read.
type scan struct {
	p            int
	after, until int64
	cur          persist.Cursor
}

// pass announces the new window of every owned partition, drains the
// inboxes, then scans the windows, a page of each partition in turn (so a
// reload arms the oldest overdue jobs of every partition first).
func (r *Recoverer) pass(ctx context.Context, now time.Time) {
	until := now.Add(r.cfg.Horizon).UnixMicro()
	ttl := r.cfg.LeaseTTL + r.cfg.Horizon
	var scans []*scan
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
		res, err := r.store.Poll(ctx, p, r.cfg.Token, until, ttl, r.reset[p], 10*r.cfg.PageSize)
		if errors.Is(err, persist.ErrFenced) {
			r.log.Warn("wheelq: partition fenced, releasing", "partition", p)
			r.release(p)
			continue
		}
		if err != nil {
			r.noteErr("poll", err)
			continue
		}
		if len(res.Inbox) > 0 {
			r.sink.Arm(res.Inbox)
			r.armed.Add(int64(len(res.Inbox)))
		}
		after := int64(math.MinInt64 / 2)
		if res.HavePrev && !r.reset[p] {
			after = min(res.Prev, r.redo[p])
		}
		r.reset[p], r.redo[p] = false, math.MaxInt64
		if after < until {
			scans = append(scans, &scan{p: p, after: after, until: until})
		}
	}
	for len(scans) > 0 && ctx.Err() == nil {
		next := scans[:0]
		var round []persist.Entry
		for _, s := range scans {
			es, cur, err := r.store.RangePending(ctx, s.p, s.after, s.until, s.cur, r.cfg.PageSize)
			if err != nil {
				// The window was announced: scan it again next pass.
				r.noteErr("scan", err)
				r.redo[s.p] = min(r.redo[s.p], s.after)
				continue
			}
			if r.loaded[s.p].Load() == NotOwned {
				continue
			}
			round = append(round, es...)
			s.cur = cur
			if !cur.Done {
				next = append(next, s)
			}
		}
		// A page of every partition, merged: the oldest go first.
		slices.SortFunc(round, func(a, b persist.Entry) int { return cmp.Compare(a.Due, b.Due) })
		if len(round) > 0 {
			r.sink.Arm(round)
			r.armed.Add(int64(len(round)))
		}
		scans = next
	}
}

// sweep re-arms the oldest page of jobs of every owned partition that are
// overdue by more than SweepAge.
func (r *Recoverer) sweep(ctx context.Context, now time.Time) {
	until := now.Add(-r.cfg.SweepAge).UnixMicro()
	var all []persist.Entry
	for p := range r.loaded {
		if r.loaded[p].Load() == NotOwned {
			continue
		}
		es, _, err := r.store.RangePending(ctx, p, math.MinInt64/2, until, persist.Cursor{}, r.cfg.PageSize)
		if err != nil {
			r.noteErr("sweep", err)
			return
		}
		all = append(all, es...)
	}
	if len(all) > 0 {
		slices.SortFunc(all, func(a, b persist.Entry) int { return cmp.Compare(a.Due, b.Due) })
		r.sink.Arm(all)
		r.swept.Add(int64(len(all)))
	}
}

// Swept returns how many overdue jobs sweeps have re-armed.
func (r *Recoverer) Swept() int64 { return r.swept.Load() }

func (r *Recoverer) noteErr(what string, err error) {
	msg := what + ": " + err.Error()
	if prev := r.lastErr.Swap(&errString{msg}); prev == nil || prev.s != msg {
		r.log.Warn("wheelq: recovery", "op", what, "err", err)
	}
}
