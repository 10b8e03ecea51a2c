package recovery

// Leases: renewing the partitions' leases, taking the free ones this
// process's share allows (and those of dead members), losing and
// releasing them, and the fencing tokens published to the engine.

import (
	"context"
	"math"
	"time"

	"github.com/wheelq/wheelq/internal/persist"
)

// wallStepLimit is the largest difference between how far the wall clock
// and the monotonic clock moved between two passes that is not taken for a
// step of the wall clock. After a step, every owned partition is scanned
// again from the start, so that jobs armed before the step are armed anew
// against the stepped clock.
const wallStepLimit = 20 * time.Millisecond

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
