package recovery

// Load passes: reading each owned partition's coming window (and its
// inbox) and arming what came due within it, page by page.

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/wheelq/wheelq/internal/persist"
)

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
