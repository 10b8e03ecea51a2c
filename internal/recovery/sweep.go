package recovery

// The sweep and repair: re-arming jobs overdue past SweepAge (a safety
// net for lost armings), fixing inconsistent keys, and warning of
// overdue jobs no process runs.

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/wheelq/wheelq/internal/persist"
)

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
