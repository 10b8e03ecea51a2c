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

// inboxPerCall is about the most inbox entries one poll call takes, shared
// among its partitions (at least minInboxShare each): Redis spends about
// a microsecond on an entry, and a poll after a burst of Schedules by
// other processes took 5,000 in one call (5.6 ms; BenchmarkPollInbox in
// internal/persist), a hold of Redis every other client waited for. The
// rest is taken by further calls of the same pass (drainInboxes).
const (
	inboxPerCall  = 512
	minInboxShare = 16
)

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
	share := max(inboxPerCall/len(reqs), minInboxShare)
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	replies, err := r.store.PollMany(cctx, until, ttl, share, first, reqs, r.replies)
	cancel()
	r.replies = replies
	if err != nil {
		r.noteErr("poll", err)
		return
	}
	var scans []*scan
	var round []persist.Entry
	var more []persist.PollRequest // inboxes not taken whole
	for i := range replies {
		p, res := reqs[i].P, &replies[i]
		if !r.polled(p, res) {
			continue
		}
		if res.InboxMore {
			more = append(more, persist.PollRequest{P: p, Token: r.cfg.Token, Scanned: until})
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
	// The rest of the inboxes before the windows' scans: their jobs may be
	// due at once, the scans' are a poll interval short of the horizon.
	r.drainInboxes(ctx, until, ttl, more)
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

// drainInboxes takes the rest of the inboxes of reqs' partitions, whose
// poll took a share of them, in calls of about inboxPerCall entries in
// all that announce the same loaded-until (until) and read no window. It
// stops once they are empty, or after as many entries per partition as
// 10 pages (what one poll took before inboxes were shared out): what is
// left, or what a failed call left, waits for the next pass. A partition
// released meanwhile is left alone: its next owner drops its inbox.
func (r *Recoverer) drainInboxes(ctx context.Context, until int64, ttl time.Duration, reqs []persist.PollRequest) {
	for taken := 0; taken < 10*r.cfg.PageSize && ctx.Err() == nil; {
		r.renewIfDue(ctx)
		reqs = slices.DeleteFunc(reqs, func(q persist.PollRequest) bool { return r.loaded[q.P].Load() == NotOwned })
		if len(reqs) == 0 {
			return
		}
		share := max(inboxPerCall/len(reqs), minInboxShare)
		cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		replies, err := r.store.PollMany(cctx, until, ttl, share, 0, reqs, r.replies)
		cancel()
		r.replies = replies
		if err != nil {
			r.noteErr("poll", err)
			return
		}
		next := reqs[:0]
		for i := range replies {
			if r.polled(reqs[i].P, &replies[i]) && replies[i].InboxMore {
				next = append(next, reqs[i])
			}
		}
		clear(replies)
		reqs, taken = next, taken+share
	}
}

// polled handles the failure of partition p's part of a poll (a fenced
// partition is released), or arms the inbox entries it took; it reports
// whether the part succeeded.
func (r *Recoverer) polled(p int, res *persist.PollReply) bool {
	if errors.Is(res.Err, persist.ErrFenced) {
		r.log.Warn("wheelq: partition fenced, releasing", "partition", p)
		r.lose(p)
		return false
	}
	if res.Err != nil {
		r.noteErr("poll", res.Err)
		return false
	}
	if len(res.Inbox) > 0 {
		r.sink.Arm(res.Inbox)
		r.armed.Add(int64(len(res.Inbox)))
	}
	return true
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
