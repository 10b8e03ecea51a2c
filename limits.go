package wheelq

// Per-topic limits: a job of a limited topic is admitted before its claim
// (so that one held back stays pending in Redis: not early, not lost, not
// an attempt). The local cap is counted here; the global cap and rate are
// decided by limit.lua: a permit per run, renewed while it is held and
// lapsing a lease after its holder stopped, and a start time per job
// spaced by the rate. A job refused by a cap waits here for a permit to
// come free; one given a later start by the rate is armed again for it.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wheelq/wheelq/internal/batch"
	"github.com/wheelq/wheelq/internal/errs"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/runctx"
	"github.com/wheelq/wheelq/wheel"
)

// Limit caps how a topic's jobs start. Every field is optional (0: no
// limit of that kind); give every process of the namespace the same
// limits for a topic (each process enforces the caps it was given). The
// global caps are enforced through Redis: they hold across processes,
// and a permit held by a process that died is freed within LeaseTTL.
//
// A job held back by a limit stays pending in Redis (not claimed): it is
// not early, not lost and not counted as an attempt; Stats.Throttled
// counts the holds, and its extra lateness is in the lateness figures.
//
// A global permit is a lease: a process paused (SIGSTOP) or cut off from
// Redis for longer than LeaseTTL loses its permits as a dead one does,
// and a run it had started goes on when it comes back, beside the runs
// that took the permits meanwhile.
//
// The permits and the rate's next start are written to the primary and
// not waited for on its replicas (ReplicaAcks does not apply): after a
// failover, permits the new primary never received are gone, and the cap
// may be exceeded until the runs that held them end. The lease times and
// starts are read on the asking process's clock: a process whose clock is
// off moves them by its error.
//
// The zero value of a field means no limit of that kind (Limit{} removes
// a topic's limits); a negative one is an error.
type Limit struct {
	// Concurrency is the most runs of the topic at once in this process.
	Concurrency int
	// GlobalConcurrency is the most runs of the topic at once across every
	// process of the namespace.
	GlobalConcurrency int
	// Rate is the most starts of the topic per Per across every process:
	// starts are spaced Per/Rate apart, so that any window of Per holds
	// about Rate of them (199 to 202 for 200 a second over three
	// processes: docs/benchmarks.md).
	Rate int
	// Per is Rate's interval; default one second.
	Per time.Duration
}

// limiter holds the limits and what they hold back.
type limiter struct {
	on atomic.Bool // any limit: the claim's fast path checks only this

	mu      sync.Mutex
	topics  map[string]*topicLimit
	held    map[string]heldPermit // job key -> the permits of its run
	granted map[string]int64      // job key -> the start the rate gave it (unix µs)
	// waits holds the keys in the topics' waiting queues: a job armed
	// again while it waits (the poller's sweep re-arms overdue jobs) is
	// not queued twice.
	waits map[string]struct{}
	// throttled counts the jobs held back (Stats.Throttled).
	throttled atomic.Uint64

	// releases sends the global permits given back (ZREM), in batches.
	releases *batch.Retrier[persist.PermitRef]
	warned   atomic.Int64 // the last warning of a failed Admit (unix ns)
	loop     struct {
		stop  chan struct{}
		done  chan struct{}
		kick  chan struct{} // limits set, or a job queued for a global cap: the loop looks again
		wakes atomic.Int64  // how often the loop woke (tests)
	}
}

type topicLimit struct {
	Limit
	interval int64      // µs between starts (0: no rate)
	running  int        // local permits held
	waiting  []firedJob // refused by a cap: refired as permits come free
	globalW  bool       // some of waiting were refused by the global cap
}

type heldPermit struct {
	topic string
	id    string // the global permit ("": none)
	// asking says Redis is being asked for its start and permit: a second
	// firing of the job meanwhile (a refire, the sweep's re-arm, in
	// either claimer) waits for that answer rather than run as holding.
	asking bool
}

// limitRetry is how often jobs refused by a global cap ask again (a
// permit freed in another process is not announced).
const limitRetry = 2 * time.Millisecond

// Limit sets the limits of topic's jobs, replacing any earlier ones; a
// zero Limit removes them. It may be called before or after Start. A
// pulled topic cannot be limited (its consumers decide how many they
// take): ErrTopicMode. A negative field, or Per without Rate, is an
// ErrInvalidOption naming the field.
func (q *Queue) Limit(topic string, l Limit) error {
	if err := validTopic(topic); err != nil {
		return err
	}
	bad := func(field string, v any) error {
		return fmt.Errorf("%w: Limit.%s: %v, want > 0 (0: no limit)", ErrInvalidOption, field, v)
	}
	switch {
	case l.Concurrency < 0:
		return bad("Concurrency", l.Concurrency)
	case l.GlobalConcurrency < 0:
		return bad("GlobalConcurrency", l.GlobalConcurrency)
	case l.Rate < 0:
		return bad("Rate", l.Rate)
	case l.Per < 0:
		return bad("Per", l.Per)
	case l.Per > 0 && l.Rate == 0:
		return fmt.Errorf("%w: Limit.Per %v without a Rate", ErrInvalidOption, l.Per)
	}
	if l.Rate > 0 && l.Per == 0 {
		l.Per = time.Second
	}
	var interval int64
	if l.Rate > 0 {
		interval = l.Per.Microseconds() / int64(l.Rate)
		if interval < 1 {
			return fmt.Errorf("%w: Limit.Rate %d per %v: more than one start a microsecond", ErrInvalidOption, l.Rate, l.Per)
		}
	}
	if q.pull.isDeclared(topic) {
		return &TopicModeError{Topic: topic, Reason: TopicPulled}
	}
	lm := q.limits
	lm.mu.Lock()
	var refire []firedJob
	if l == (Limit{}) {
		if tl := lm.topics[topic]; tl != nil {
			refire = lm.unwait(tl, len(tl.waiting))
			delete(lm.topics, topic)
		}
	} else if tl := lm.topics[topic]; tl != nil {
		tl.Limit, tl.interval = l, interval
		refire, tl.globalW = lm.unwait(tl, len(tl.waiting)), false
	} else {
		// Runs admitted under the topic's limits before they were removed
		// (and jobs waiting for the start a rate gave them) still hold
		// their places: each one's end frees one of the new limit's.
		tl := &topicLimit{Limit: l, interval: interval}
		for _, hp := range lm.held {
			if hp.topic == topic && !hp.asking { // an ask in flight is refired through the new limits
				tl.running++
			}
		}
		lm.topics[topic] = tl
	}
	lm.setOn()
	lm.mu.Unlock()
	wake(lm.loop.kick)
	if len(refire) > 0 {
		q.claims.refire(refire)
	}
	return nil
}

// newLimiter returns a limiter with no limits, giving global permits back
// through releases.
func newLimiter(releases *batch.Retrier[persist.PermitRef]) *limiter {
	lm := &limiter{topics: map[string]*topicLimit{}, held: map[string]heldPermit{}, granted: map[string]int64{},
		waits: map[string]struct{}{}, releases: releases}
	lm.loop.kick = make(chan struct{}, 1)
	return lm
}

// enabled reports whether any topic has a limit, or permits taken under
// limits since removed are still held (their runs' ends give them back).
func (lm *limiter) enabled() bool { return lm.on.Load() }

// setOn sets on: any topic limited, or any permit held (a run admitted
// under a topic's limits that were removed meanwhile gives its permits
// back at its end: with on false, release would not look, and the held
// entry, with its global permit, would stay for good); lm.mu is held.
func (lm *limiter) setOn() { lm.on.Store(len(lm.topics) > 0 || len(lm.held) > 0) }

// has reports whether topic has a limit.
func (lm *limiter) has(topic string) bool {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	return lm.topics[topic] != nil
}

// throttledTotal is the number of jobs held back so far (Stats.Throttled).
func (lm *limiter) throttledTotal() uint64 { return lm.throttled.Load() }

// wait queues f in tl's waiting queue, unless it waits already; lm.mu
// is held.
func (lm *limiter) wait(tl *topicLimit, f firedJob, global bool) {
	if global {
		tl.globalW = true
		wake(lm.loop.kick)
	}
	if _, ok := lm.waits[f.key]; ok {
		return
	}
	lm.waits[f.key] = struct{}{}
	tl.waiting = append(tl.waiting, f)
	lm.throttled.Add(1)
}

// unwait takes the first n jobs of tl's waiting queue out, to be refired;
// lm.mu is held.
func (lm *limiter) unwait(tl *topicLimit, n int) []firedJob {
	fs := tl.waiting[:n:n]
	tl.waiting = tl.waiting[n:]
	for _, f := range fs {
		delete(lm.waits, f.key)
	}
	return fs
}

// topicOfKey returns the topic of a job key ("" if it is not one).
func topicOfKey(key string) string {
	t, _, err := persist.SplitJobKey(key)
	if err != nil {
		return ""
	}
	return t
}

// admit lets the jobs of limited topics through their limits before the
// claim, and returns the batch with the ones held back taken out: those
// refused by a cap wait in their topic's queue; those given a later start
// by a rate are armed again for it.
func (q *Queue) admit(fs []firedJob, slot *runctx.Slot) []firedJob {
	lm := q.limits
	now, wall := wheel.Readings(q.clock)
	wallUs := wall.UnixMicro()
	type ask struct {
		f  firedJob
		tl *topicLimit
	}
	var asks []ask
	var reqs []persist.LimitRequest
	out := fs[:0]
	lm.mu.Lock()
	for _, f := range fs {
		topic := topicOfKey(f.key)
		tl := lm.topics[topic]
		if tl == nil || q.pulledKey(f.key) {
			out = append(out, f)
			continue
		}
		if s, ok := lm.granted[f.key]; ok {
			if wallUs+50 < s {
				q.armForStart(f.key, s, now, wall) // fired early (a burst's lead): again at its start
				continue
			}
			delete(lm.granted, f.key)
			out = append(out, f)
			continue
		}
		if hp, ok := lm.held[f.key]; ok {
			if hp.asking {
				continue // the ask in flight decides (it refires a denied job)
			}
			out = append(out, f) // holds its permits already (a claim tried again)
			continue
		}
		if _, ok := lm.waits[f.key]; ok {
			continue // armed again while it waits: it is refired from its queue
		}
		if tl.Concurrency > 0 && tl.running >= tl.Concurrency {
			lm.wait(tl, f, false)
			continue
		}
		tl.running++
		lm.held[f.key] = heldPermit{topic: topic}
		if tl.GlobalConcurrency == 0 && tl.interval == 0 {
			out = append(out, f)
			continue
		}
		lm.held[f.key] = heldPermit{topic: topic, asking: true}
		due := wall.Add(f.due.Sub(now)).UnixMicro() // f.due is on the wheel's timeline
		id := ""
		if tl.GlobalConcurrency > 0 {
			id = q.member + ":" + strconv.FormatUint(rand.Uint64(), 36)
		}
		asks = append(asks, ask{f, tl})
		reqs = append(reqs, persist.LimitRequest{Topic: topic, Cap: tl.GlobalConcurrency, Interval: tl.interval, ID: id, Due: max(due, 0)})
	}
	lm.mu.Unlock()
	if len(reqs) == 0 {
		return out
	}
	ctx, end := slot.Call()
	starts, err := q.store.Admit(ctx, wallUs, q.cfg.LeaseTTL.Microseconds(), reqs)
	end()
	if err != nil {
		q.stats.redisErrors.Add(1)
		// Refused jobs ask again every 2 ms: warn once a second.
		if t, last := time.Now().UnixNano(), lm.warned.Load(); t-last >= int64(time.Second) && lm.warned.CompareAndSwap(last, t) {
			q.log.Warn("wheelq: limits: asking Redis for starts; asking again", "err", err, "jobs", len(reqs))
		}
	}
	var again []firedJob
	lm.mu.Lock()
	for i, a := range asks {
		topic := reqs[i].Topic
		if tl := lm.topics[topic]; tl != a.tl {
			// Its limits changed meanwhile (Limit): it is let through and
			// fires again through the new ones, or none.
			if err == nil && starts[i] != persist.Denied && reqs[i].ID != "" {
				_ = lm.releases.Add(persist.PermitRef{Topic: topic, ID: reqs[i].ID})
			}
			delete(lm.held, a.f.key)
			lm.setOn()
			again = append(again, a.f)
			continue
		}
		if err != nil || starts[i] == persist.Denied {
			// No permit: wait for one, holding none.
			a.tl.running--
			delete(lm.held, a.f.key)
			lm.wait(a.tl, a.f, true)
			continue
		}
		lm.held[a.f.key] = heldPermit{topic: topic, id: reqs[i].ID}
		if s := starts[i]; s > wallUs+50 {
			lm.granted[a.f.key] = s
			lm.throttled.Add(1)
			q.armForStart(a.f.key, s, now, wall)
			continue
		}
		out = append(out, a.f)
	}
	lm.mu.Unlock()
	if len(again) > 0 {
		q.claims.refire(again) // not under lm.mu: no two stages' locks at once
	}
	return out
}

// armForStart arms key so that it fires (and is claimed) at the wall time
// s (unix µs): the start a rate gave it.
func (q *Queue) armForStart(key string, s int64, now, wall time.Time) {
	at := wheel.AtWall(now, wall, time.UnixMicro(s))
	if _, err := q.sched.Add(key, at); err != nil && !errors.Is(err, wheel.ErrStopped) {
		q.log.Error("wheelq: arm", "key", key, "err", err)
	}
}

// releasePermit gives back the permits of key's run, if it holds any, and
// lets the next job waiting for its topic's cap try again. Every way a
// job leaves this process's in-flight set comes here (and a run's end,
// earlier); a second call does nothing.
func (q *Queue) releasePermit(key string) { q.release(key, false) }

// dropStart gives back the permits of key if it waits for the start a rate
// gave it (armed for it, not in flight): Cancel, Reschedule and a replacing
// Schedule call it, since the job will not fire at that start (its entry
// gone or moved) and would otherwise hold them for good.
func (q *Queue) dropStart(key string) { q.release(key, true) }

// release is releasePermit, or with waiting dropStart: only if key waits
// for its start, checked under the same lock (a job admitted meanwhile
// keeps its permits for its run).
func (q *Queue) release(key string, waiting bool) {
	lm := q.limits
	if !lm.on.Load() {
		return
	}
	lm.mu.Lock()
	hp, ok := lm.held[key]
	if _, granted := lm.granted[key]; waiting && !granted {
		ok = false
	}
	if !ok || hp.asking {
		// Nothing held; or its ask is on its way, and its answer settles
		// the job (a denied one waits, a granted one is claimed, and a
		// job gone meanwhile gives its permit back from the claim).
		lm.mu.Unlock()
		return
	}
	delete(lm.held, key)
	delete(lm.granted, key)
	lm.setOn()
	var next []firedJob
	if tl := lm.topics[hp.topic]; tl != nil {
		tl.running--
		if len(tl.waiting) > 0 {
			next = lm.unwait(tl, 1)
		}
	}
	lm.mu.Unlock()
	if hp.id != "" {
		_ = lm.releases.Add(persist.PermitRef{Topic: hp.topic, ID: hp.id})
	}
	if len(next) > 0 {
		q.claims.refire(next)
	}
}

// startLimits starts the limits' loop: while a topic is limited it
// renews the global permits held here (every LeaseTTL/3), and while jobs
// refused by a global cap wait it lets them ask again (every limitRetry).
// With nothing to do it sleeps until kicked: an idle queue does not wake.
// Shutdown stops it.
func (q *Queue) startLimits() {
	w := &q.limits.loop
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.done)
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		defer timer.Stop()
		var renewed, retryAt time.Time // retryAt: zero while no job waits for a global cap
		for {
			var next time.Time // zero: nothing to do until kicked
			if q.limits.enabled() {
				next = renewed.Add(q.cfg.LeaseTTL / 3)
				if q.limits.globalWaiting() {
					if retryAt.IsZero() {
						retryAt = time.Now().Add(limitRetry)
					}
					if retryAt.Before(next) {
						next = retryAt
					}
				} else {
					retryAt = time.Time{}
				}
			}
			var fire <-chan time.Time
			if !next.IsZero() {
				timer.Reset(time.Until(next))
				fire = timer.C
			}
			select {
			case <-w.stop:
				return
			case <-w.kick:
			case <-fire:
			}
			timer.Stop()
			w.wakes.Add(1)
			if !q.limits.enabled() {
				continue
			}
			now := time.Now()
			if !retryAt.IsZero() && !now.Before(retryAt) {
				retryAt = time.Time{}
				q.retryGlobal()
			}
			if now.Sub(renewed) >= q.cfg.LeaseTTL/3 {
				renewed = now
				q.renewPermits()
			}
		}
	}()
}

// stopLimits stops the loop of startLimits, if it was started.
func (q *Queue) stopLimits() {
	w := &q.limits.loop
	if w.stop == nil {
		return
	}
	close(w.stop)
	<-w.done
}

// globalWaiting reports whether jobs refused by a global cap wait here.
func (lm *limiter) globalWaiting() bool {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	for _, tl := range lm.topics {
		if tl.globalW && len(tl.waiting) > 0 {
			return true
		}
	}
	return false
}

// retryGlobal refires the jobs waiting for a global cap (as many as the
// cap, at most).
func (q *Queue) retryGlobal() {
	lm := q.limits
	var fs []firedJob
	lm.mu.Lock()
	for _, tl := range lm.topics {
		if !tl.globalW || len(tl.waiting) == 0 {
			continue
		}
		n := len(tl.waiting)
		if tl.GlobalConcurrency > 0 {
			n = min(n, tl.GlobalConcurrency)
		}
		if tl.Concurrency > 0 {
			n = min(n, max(tl.Concurrency-tl.running, 0))
		}
		fs = append(fs, lm.unwait(tl, n)...)
		if len(tl.waiting) == 0 {
			tl.globalW = false
		}
	}
	lm.mu.Unlock()
	if len(fs) > 0 {
		q.claims.refire(fs)
	}
}

// renewPermits moves the expiry of the global permits held here a lease
// ahead (by Redis's clock, as their grant).
func (q *Queue) renewPermits() {
	lm := q.limits
	lm.mu.Lock()
	var ps []persist.PermitRef
	for _, hp := range lm.held {
		if hp.id != "" {
			ps = append(ps, persist.PermitRef{Topic: hp.topic, ID: hp.id})
		}
	}
	lm.mu.Unlock()
	if len(ps) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), q.cfg.WriteTimeout)
	defer cancel()
	if err := q.store.RenewPermits(ctx, q.cfg.LeaseTTL.Microseconds(), ps); err != nil {
		q.log.Warn("wheelq: limits: renewing permits; they lapse a lease after the last renewal", "err", err)
	}
}

// throttledNow returns the jobs held back by limits here now, per topic.
func (q *Queue) throttledNow() map[string]int {
	lm := q.limits
	lm.mu.Lock()
	defer lm.mu.Unlock()
	var out map[string]int
	add := func(topic string, n int) {
		if n == 0 {
			return
		}
		if out == nil {
			out = map[string]int{}
		}
		out[topic] += n
	}
	for topic, tl := range lm.topics {
		add(topic, len(tl.waiting))
	}
	for key := range lm.granted {
		add(topicOfKey(key), 1)
	}
	return out
}

// execReleases gives back a batch of global permits.
func (q *Queue) execReleases(ctx context.Context, ps []persist.PermitRef) error {
	if err := q.store.ReleasePermits(ctx, ps); err != nil {
		return errs.Errorf("wheelq: limits: releasing permits: %w", err)
	}
	return nil
}

// stop gives back the global permits still held (of jobs admitted that
// will not run here now: Shutdown, once the workers are done), so that
// other processes need not wait for them to lapse, and stops the retrier
// that gives them back once it has, or ctx ended.
func (lm *limiter) stop(ctx context.Context) error {
	lm.dropPermits()
	return lm.releases.Stop(ctx)
}

// dropPermits queues the global permits still held to be given back.
func (lm *limiter) dropPermits() {
	lm.mu.Lock()
	var ps []persist.PermitRef
	for key, hp := range lm.held {
		if hp.id != "" {
			ps = append(ps, persist.PermitRef{Topic: hp.topic, ID: hp.id})
		}
		delete(lm.held, key)
	}
	clear(lm.granted)
	lm.setOn()
	lm.mu.Unlock()
	if len(ps) > 0 {
		_ = lm.releases.Add(ps...)
	}
}
