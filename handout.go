package wheelq

// Handing out pulled jobs (see pull.go): the start gate passes a pulled
// job whose time came to pullArrive; one reserved ahead goes to its
// consumer from there, the others to the pull loop, which runs due.lua
// for them: each goes to a Reserve blocked here, or to its topic's ready
// set for any process. The claimers reserve ahead (pullAhead) the jobs a
// blocked Reserve wants. A reservation that lapsed is stored as a failed
// attempt (lapsed).

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wheelq/wheelq/internal/crashpoint"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/recovery"
	"github.com/wheelq/wheelq/internal/runctx"
	"github.com/wheelq/wheelq/wheel"
)

// pullArrive hands jobs of pulled topics whose time came (from the start
// gate) to the pull loop.
func (q *Queue) pullArrive(ts []*task) {
	if len(ts) == 0 {
		return
	}
	// Those reserved ahead whose time has come by the wall clock go to
	// their consumers from here (no Redis, nothing that blocks), without
	// a hop through the pull loop: as a claimed task goes to an idle
	// worker from the start wheel's callback.
	var given []delivery
	rest := ts[:0:0]
	_, wall := wheel.Readings(q.clock)
	for _, t := range ts {
		if t.res != nil && !wall.Before(t.due) {
			q.delivered(t.res, wall)
			given = append(given, delivery{t.to, t.res})
			q.freeTask(t)
			continue
		}
		rest = append(rest, t)
	}
	q.deliver(given)
	if len(rest) == 0 {
		return
	}
	ps := q.pull
	ps.mu.Lock()
	ps.due = append(ps.due, rest...)
	ps.mu.Unlock()
	wake(ps.sig)
}

// waitStopped waits until the pull loop returned.
func (ps *pullStage) waitStopped() { <-ps.done }

// pullLoop hands due jobs of pulled topics out (pullStep) until the queue
// stops.
func (q *Queue) pullLoop(slot *runctx.Slot) {
	defer close(q.pull.done)
	spare := time.NewTimer(time.Hour)
	spare.Stop()
	defer spare.Stop()
	for {
		select {
		case <-q.pull.sig:
		case <-spare.C:
		case <-q.stopDispatch:
			q.releaseSpare(true, slot)
			return
		}
		if next := q.releaseSpare(false, slot); next > 0 {
			spare.Reset(next)
		}
		for {
			ps := q.pull
			ps.mu.Lock()
			ts := ps.due
			ps.due = nil
			ps.mu.Unlock()
			if len(ts) == 0 {
				break
			}
			q.pullStep(ts, slot)
		}
	}
}

// pullStep hands out pulled jobs whose time came (from the start gate).
// One reserved ahead (pullAhead) goes to its consumer with no round trip.
// The others pass the start gate's checks (the wall clock shows their
// time, their partition is owned in the epoch they fired in) and go
// through due.lua, a call per partition: each to a consumer blocked here
// that wants it, or to its topic's ready set.
func (q *Queue) pullStep(ts []*task, slot *runctx.Slot) {
	now, wall := wheel.Readings(q.clock)
	var due []*task
	var given []delivery
	for _, t := range ts {
		p := int(t.part)
		switch {
		case wall.Before(t.due):
			q.gate.hold(t, now, wall) // the wall clock stepped back: never early
		case t.res != nil:
			// Reserved in Redis ahead of its time: the reservation holds
			// whoever owns the partition now.
			q.delivered(t.res, wall)
			given = append(given, delivery{t.to, t.res})
			q.freeTask(t)
		case q.recov.Epoch(p) != t.epoch || q.recov.LoadedUntil(p) == recovery.NotOwned:
			q.stats.dropped.Add(1) // its new owner hands it out
			q.freeTask(t)
		case !q.recov.Owns(p, now):
			// A renewal is late: look again shortly.
			q.arm(t.key, wall.Add(10*time.Millisecond).UnixMicro(), nil)
			q.freeTask(t)
		default:
			due = append(due, t)
		}
	}
	q.deliver(given)
	if len(due) > 0 {
		q.pullDue(due, wall, false, slot)
	}
}

// pullAhead is the claimers' step for pulled jobs fired ClaimLead before
// their time: those of a topic a Reserve blocked here wants are reserved
// in Redis now (due.lua), so that at their time they are handed over with
// no round trip, as a claim does for a handler; the others are held
// unclaimed until their time (pullStep). A job reserved ahead answers
// Cancel with ErrRunning for up to ClaimLead before its time, as a
// claimed one does.
func (q *Queue) pullAhead(ts []*task, slot *runctx.Slot) {
	ps := q.pull
	var wanted, bare []*task
	ps.mu.Lock()
	for _, t := range ts {
		topic, _, _ := strings.Cut(t.key, persist.KeySep)
		want := false
		for _, w := range ps.byTopic[topic] {
			if w.wants(topic) {
				want = true
				break
			}
		}
		if !want {
			bare = append(bare, t)
			continue
		}
		wanted = append(wanted, t)
	}
	ps.mu.Unlock()
	now, wall := wheel.Readings(q.clock)
	for _, t := range bare {
		q.gate.hold(t, now, wall)
	}
	if len(wanted) > 0 {
		q.pullDue(wanted, wall, true, slot)
	}
}

// unheldAhead is told of a task taken out of the start gate before its
// time by Cancel or Reschedule, or let go of by the gate for a later
// reservation of its job: a reservation made ahead for a waiting Reserve
// is not handed to it after all (the job is gone, or runs at its new
// time), and that Reserve, which counted it as promised (so took no other
// job), looks again.
func (q *Queue) unheldAhead(t *task) {
	if t.res == nil || t.to == nil {
		return
	}
	ps := q.pull
	ps.mu.Lock()
	t.to.promised--
	ps.mu.Unlock()
	wake(t.to.sig)
}

// delivery is a reservation for a waiter (see deliver).
type delivery struct {
	w *pullWaiter
	r *Reservation
}

// delivered counts a reservation handed to a consumer at wall.
func (q *Queue) delivered(r *Reservation, wall time.Time) {
	q.late.record(wall.Sub(r.Job.Due))
	q.stats.fired.Add(1)
	if obs := q.cfg.Observer; obs != nil {
		obs.JobStarted(r.Topic, max(wall.Sub(r.Job.Due), 0))
	}
}

// deliver hands reservations to their waiters, all at once: a Reserve
// returns at its first job, and the rest of its jobs would otherwise find
// it gone. A job whose waiter has gone goes to another that wants it with
// the same time-to-run (the deadline in Redis is that), else to the spare
// reservations, for the next Reserve here (or, after spareTTL, back to the
// ready set).
func (q *Queue) deliver(given []delivery) {
	if len(given) == 0 {
		return
	}
	ps := q.pull
	var woken []*pullWaiter
	ps.mu.Lock()
	for _, d := range given {
		w := d.w
		w.promised--
		if w.gone {
			w = nil
			for _, o := range ps.byTopic[d.r.Topic] {
				if o.ttr == d.w.ttr && o.wants(d.r.Topic) {
					w = o
					break
				}
			}
		}
		if w == nil {
			ps.spare = append(ps.spare, spareJob{r: d.r, ttr: d.w.ttr, at: q.clock.Now()})
			wake(ps.sig) // the pull loop releases it if no Reserve takes it
			continue
		}
		w.got = append(w.got, d.r)
		if !slices.Contains(woken, w) {
			woken = append(woken, w)
		}
	}
	ps.mu.Unlock()
	for _, w := range woken {
		wake(w.sig)
	}
}

// takeSpare empties the spare reservations and returns their releases
// (at Shutdown, once the pull loop and the claimers returned).
func (ps *pullStage) takeSpare() []persist.ResolveOp {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ops := make([]persist.ResolveOp, 0, len(ps.spare))
	for _, sj := range ps.spare {
		ops = append(ops, releaseOp(sj.r))
	}
	ps.spare = nil
	return ops
}

// releaseSpare releases the spare reservations that waited spareTTL (all
// of them if all), to the ready sets, and returns when the next would be
// due for release (zero: none left).
func (q *Queue) releaseSpare(all bool, slot *runctx.Slot) time.Duration {
	ps := q.pull
	now := q.clock.Now()
	var release []persist.ResolveOp
	var topics []string
	ps.mu.Lock()
	keep := ps.spare[:0]
	for _, sj := range ps.spare {
		if !all && now.Sub(sj.at) < spareTTL {
			keep = append(keep, sj)
			continue
		}
		release = append(release, releaseOp(sj.r))
		if !slices.Contains(topics, sj.r.Topic) {
			topics = append(topics, sj.r.Topic)
		}
	}
	clear(ps.spare[len(keep):])
	ps.spare = keep
	var next time.Duration
	if len(keep) > 0 {
		next = max(spareTTL-now.Sub(keep[0].at), time.Millisecond)
	}
	ps.mu.Unlock()
	if len(release) > 0 {
		ctx, end := slot.Call()
		_, wall := wheel.Readings(q.clock)
		_, err := q.store.Resolve(ctx, wall.UnixMicro(), release)
		end()
		if err != nil {
			q.log.Warn("wheelq: releasing reservations whose consumer left; they lapse instead", "err", err, "jobs", len(release))
		}
		q.announced(topics...)
	}
	return next
}

// pullDue runs due.lua for jobs, in one round trip (a call per
// partition), at their time or, ahead, ClaimLead before it (see pullStep
// and pullAhead).
func (q *Queue) pullDue(ts []*task, wall time.Time, ahead bool, slot *runctx.Slot) {
	ps := q.pull
	jobs := make([]persist.DueJob, len(ts))
	to := make([]*pullWaiter, len(ts))
	var unsure []int64 // per job, the ahead bound of a reservation asked before (0: none)
	ps.mu.Lock()
	for i, t := range ts {
		jobs[i].Key = t.key
		topic, _, _ := strings.Cut(t.key, persist.KeySep)
		for _, w := range ps.byTopic[topic] {
			if w.wants(topic) {
				w.promised++
				to[i] = w
				if u, ok := ps.unsure[t.key]; ok {
					// Asked before by a call that failed: the same nonce,
					// so that due.lua knows the reservation if it made it.
					if unsure == nil {
						unsure = make([]int64, len(ts))
					}
					jobs[i].Nonce, unsure[i] = u.nonce, u.until
				} else {
					ps.seq++
					jobs[i].Nonce = ps.nonce + strconv.FormatUint(ps.seq, 10)
				}
				jobs[i].Deadline = wall.Add(w.ttr).UnixMicro()
				if ahead && t.due.After(wall) {
					jobs[i].Deadline = t.due.Add(w.ttr).UnixMicro()
				}
				break
			}
		}
	}
	ps.mu.Unlock()
	until := wall
	if ahead {
		// A job fired ClaimLead (and its slack) before its time; one
		// armed with a burst's longer lead waits for its time unreserved.
		until = wall.Add(2 * q.cfg.ClaimLead)
	}
	ctx, end := slot.Call()
	res, err := q.store.Due(ctx, q.fence, wall.UnixMicro(), until.UnixMicro(), jobs)
	end()
	if err != nil {
		ps.mu.Lock()
		for i, w := range to {
			if w != nil {
				w.promised--
				// The call may have applied: the next try sends the same
				// nonce (and the job was due by the later bound).
				if ps.unsure == nil {
					ps.unsure = map[string]unsureRes{}
				}
				u := ps.unsure[ts[i].key]
				ps.unsure[ts[i].key] = unsureRes{nonce: jobs[i].Nonce, until: max(u.until, until.UnixMicro())}
			}
		}
		ps.mu.Unlock()
		q.stats.redisErrors.Add(1)
		q.log.Warn("wheelq: handing out due jobs failed; trying again", "err", err, "jobs", len(ts))
		now, after := wheel.Readings(q.clock)
		for _, t := range ts {
			if ahead {
				q.gate.hold(t, now, after) // at its time, due.lua again
				continue
			}
			q.arm(t.key, after.Add(50*time.Millisecond).UnixMicro(), nil)
			q.freeTask(t)
		}
		return
	}
	ps.mu.Lock()
	if len(ps.unsure) > 0 {
		for _, t := range ts {
			delete(ps.unsure, t.key) // answered: reserved, replayed, or not
		}
	}
	ps.mu.Unlock()
	now, after := wheel.Readings(q.clock)
	recheck := after.Add(busyRecheck).UnixMicro()
	var given []delivery
	var queued []string
	for i, t := range ts {
		r := res[i]
		if r.Status == persist.DueReplayed {
			// Its reservation, made by the call that failed: handed over
			// no earlier than that call's bound (the job was due by it;
			// its due time itself was overwritten by the deadline).
			r.Status = persist.DueReserved
			if unsure != nil && unsure[i] != 0 {
				r.Score = unsure[i]
			} // else (not asked with a nonce kept: no such reply) its old deadline: late, never early
		}
		if to[i] != nil && r.Status != persist.DueReserved {
			ps.mu.Lock()
			to[i].promised--
			ps.mu.Unlock()
		}
		switch r.Status {
		case persist.DueFenced:
			q.stats.dropped.Add(1) // the partition's new owner hands it out
		case persist.DueGone:
			q.stats.skipped.Add(1)
			q.cache.Remove(t.key)
		case persist.DueMoved:
			// Rescheduled, or a reservation touched: armed for the new
			// time.
			q.noteDue(t.key, r.Score)
			q.arm(t.key, r.Score, nil)
		case persist.DuePaused:
			q.pauses.park(t.key, r.Score)
		case persist.DueBusy:
			q.stats.skipped.Add(1)
			q.arm(t.key, max(r.Score, recheck), nil)
		case persist.DueQueued:
			// A consumer's take reads its record from Redis: the cache's
			// copy is of no use while it waits (a backlog would fill the
			// cache with them).
			q.cache.Remove(t.key)
			if topic, _, _ := strings.Cut(t.key, persist.KeySep); !slices.Contains(queued, topic) {
				queued = append(queued, topic)
			}
		case persist.DueCorrupt:
			q.settle.deadLetterCorrupt(t.key, r.Record, persist.ErrCorrupt)
		case persist.DueLapsed:
			q.lapsed(t, r.Record)
			continue // t is settled and freed there
		case persist.DueReserved:
			rec, derr := persist.DecodeRecord(r.Record)
			if derr != nil {
				// It was read whole just now; a record that does not decode
				// is dead-lettered as a claim's would be (its mark stays
				// until then; the dead letter clears it).
				ps.mu.Lock()
				to[i].promised--
				ps.mu.Unlock()
				q.settle.deadLetterCorrupt(t.key, r.Record, derr)
				break
			}
			if q.crashAt(crashpoint.AfterReserve, t.key) {
				return // dead: the reservation lapses at its deadline
			}
			rec.Topic, rec.ID, _ = persist.SplitJobKey(t.key)
			due := time.UnixMicro(r.Score)
			res := q.reservation(t.key, r.Token, &rec, due, time.UnixMicro(jobs[i].Deadline), t.rerun)
			// The owner looks at it again at its deadline (lapsed, or
			// moved by a touch).
			q.arm(t.key, jobs[i].Deadline, nil)
			if due.After(after) {
				// Reserved ahead: handed over at its time (pullStep).
				t.due, t.res, t.to = due, res, to[i]
				q.gate.hold(t, now, after)
				continue
			}
			q.delivered(res, after)
			given = append(given, delivery{to[i], res})
		}
		q.freeTask(t)
	}
	q.deliver(given)
	if len(queued) > 0 {
		q.announced(queued...)
	}
}

// reservation makes the Reservation of a job reserved with token.
func (q *Queue) reservation(key, token string, rec *persist.Record, due, deadline time.Time, rerun bool) *Reservation {
	return &Reservation{
		Receipt: Receipt{Topic: rec.Topic, ID: rec.ID, Token: token},
		Job: Job{Topic: rec.Topic, ID: rec.ID, Payload: rec.Payload, Attempt: rec.Attempt + 1, Rerun: rerun,
			MaxAttempts: rec.MaxAttempts, Due: due, Created: rec.Created, LastError: rec.LastError, Headers: rec.Headers},
		Deadline: deadline,
	}
}

// lapsed stores the failed attempt of a reservation whose time-to-run
// lapsed (due.lua marked the job as this owner's claim): retried by the
// backoff, or dead-lettered after its last attempt, as a handler's error.
func (q *Queue) lapsed(t *task, raw []byte) {
	rec, err := persist.DecodeRecord(raw)
	if err != nil {
		q.settle.deadLetterCorrupt(t.key, raw, err)
		q.freeTask(t)
		return
	}
	rec.Topic, rec.ID, _ = persist.SplitJobKey(t.key)
	q.inflight.add(t.key)
	t.rec, t.verified = &rec, true
	err = fmt.Errorf("%w: time-to-run lapsed", ErrReservationLost)
	if obs := q.cfg.Observer; obs != nil {
		obs.JobFailed(rec.Topic, 0, err)
	}
	q.settle.settle(t, rec.Attempt+1, err)
	q.freeTask(t)
}
