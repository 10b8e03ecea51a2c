package recovery

// The roster: reading the namespace's live members, watching for
// changes, and handing partitions over when the shares move.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/wheelq/wheelq/internal/persist"
)

// handOverStep is how often a process tries again, during a hand-over,
// to release what it hands over (once its runs are settled) or to take
// what it is handed: a job due meanwhile waits for one step at most
// instead of a poll interval.
const handOverStep = 2 * time.Millisecond

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

// readRoster renews this process's entry in the roster and reads it: the
// partitions assigned to this process become its target. On an error the
// last target stands.
func (r *Recoverer) readRoster(ctx context.Context) {
	for len(r.leaveDead) > 0 {
		// Former processes known to be gone leave first, so that the
		// assignment read below gives their share out at once.
		ro, err := r.store.Members(ctx, persist.MemberLeave, r.leaveDead[0], 0)
		if err != nil {
			r.noteErr("roster", err)
			return
		}
		if ro.Left {
			// Only one that was in this namespace's roster: a lock dir
			// holds the files of processes of other Redises too.
			r.log.Info("wheelq: took over from a process that is gone (its lock file was free)", "token", r.leaveDead[0])
		}
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
