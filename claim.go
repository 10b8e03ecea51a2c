package wheelq

// Claiming: fired jobs are claimed in Redis in batches by two claimers
// (dispatch), and the claimed ones are handed to the start gate in the
// order their batches were taken (turnstile).

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/recovery"
	"github.com/wheelq/wheelq/internal/runctx"
	"github.com/wheelq/wheelq/wheel"
)

// claimDeps is what the claimers claim with, and the steps of the other
// stages a claim takes.
type claimDeps struct {
	stageDeps
	leases       claimLeases
	gate         *startGate
	settle       *settler
	bursts       *burstLeads
	lead         time.Duration   // Config.ClaimLead: a job fires this long before its due time
	slack        time.Duration   // the claims' wheel's SchedulerConfig.Slack
	runWhileDown bool            // Config.RunWhileRedisDown
	stop         <-chan struct{} // closed at shutdown: the claimers return

	// limits.go: whether any topic is limited, the admission of a batch,
	// and the release of a job's permits.
	limited func() bool
	admit   func(batch []firedJob, slot *runctx.Slot) []firedJob
	release func(key string)
	// pull.go and handout.go: whether a job's topic is pulled, its task,
	// and the reservation ahead of pulled jobs fired.
	pulled    func(key string) bool
	pullTask  func(key string, due time.Time, part int) *task
	pullAhead func(ts []*task, slot *runctx.Slot)
	// pause.go: a job of a paused topic parked (known paused: without
	// Redis).
	park              func(key string, dueUs int64)
	parkIfKnownPaused func(key string, dueUs int64) bool
	// arm puts a job in the wheel again; newTask makes a claimed job's
	// task (the queue's pool).
	arm     func(key string, dueUs int64, rec *persist.Record)
	newTask func(key string, rec *persist.Record, due time.Time, part int, epoch uint64, verified bool) *task
}

// claimLeases is what a claim asks of the partitions' leases
// (*recovery.Recoverer).
type claimLeases interface {
	LoadedUntil(p int) int64
	Epoch(p int) uint64
}

// claimer is the claim stage: the fired jobs waiting to be claimed, the
// claimers (dispatch) that claim them in batches, and the turn in which
// claimed batches are handed to the start gate.
type claimer struct {
	claimDeps
	mu    sync.Mutex
	fired []firedJob    // guarded by mu
	seq   uint64        // guarded by mu: the turn of the next batch taken off fired
	sig   chan struct{} // a job fired (or a batch is left for the other claimer)

	// limit is the most jobs a batch takes (0: maxClaim), guarded by mu.
	// A claim that defers jobs past its byte budget (large records) sets
	// it to about what the budget held, so that the deferred jobs are
	// claimed in batches both claimers take at once: one claim's records
	// cross the link while Redis runs the other's, rather than one batch
	// of everything claimed again and again, one call at a time (a
	// backlog of 1 MiB jobs drained through a 1 Gbit/s link at 2.6x the
	// payloads' transfer time that way). A claim that defers nothing
	// doubles it back towards maxClaim.
	limit int

	// The claimers' batches may be in flight at once, and a later one's
	// claim may come back first; their tasks are held in turn, in the
	// order the batches were taken, so that overdue jobs start oldest
	// first.
	turns turnstile
}

// turnstile lets batches through one at a time in the order of their
// turns (0, 1, 2, ...), whatever the order they arrive in: wait(seq)
// returns once every turn before seq has passed.
type turnstile struct {
	mu   sync.Mutex
	cond *sync.Cond // on mu; made by wait or pass, whichever comes first
	next uint64     // guarded by mu: the turn that may go through now
}

func (t *turnstile) condLocked() *sync.Cond {
	if t.cond == nil {
		t.cond = sync.NewCond(&t.mu)
	}
	return t.cond
}

// wait blocks until turn seq may go through.
func (t *turnstile) wait(seq uint64) {
	t.mu.Lock()
	for t.next != seq {
		t.condLocked().Wait()
	}
	t.mu.Unlock()
}

// pass ends the current turn: the next may go through.
func (t *turnstile) pass() {
	t.mu.Lock()
	t.next++
	c := t.condLocked()
	t.mu.Unlock()
	c.Broadcast()
}

// claimers is the number of goroutines that claim fired jobs.
const claimers = 2

// maxClaim is the most fired jobs claimed in one round trip.
const maxClaim = 1024

// maxClaimLinger bounds how long fired jobs wait to be claimed with others
// (see claimLinger).
const maxClaimLinger = time.Millisecond

// busyRecheck is how soon a job found already claimed is looked at again.
const busyRecheck = 250 * time.Millisecond

type firedJob struct {
	key string
	due time.Time
}

// task is a claimed job on its way to its run. Tasks are recycled
// (Queue.tasks) once their run is over: nothing a handler may keep points
// into one. What the handler gets, its Job and its context, is a jobRun,
// allocated when the run begins and never reused.
type task struct {
	key      string
	rec      *persist.Record
	due      time.Time // the stored due time, a wall-clock reading
	epoch    uint64    // the partition's lease epoch before the claim was sent
	part     int32     // the job's partition
	verified bool      // claimed in Redis (false: run from the cache while Redis was down; RunWhileRedisDown)
	rerun    bool      // an earlier run was claimed by an owner that is gone (ClaimResult.Rerun)
	// pull marks a pulled topic's job, not claimed: handed out at its
	// time (pull.go); res, if set, is its reservation made ahead for the
	// waiter to (pullAhead).
	pull bool
	res  *Reservation
	to   *pullWaiter
}

// jobRun is what a run's handler may keep: its Job and its context (see
// internal/runctx), in one allocation per run.
type jobRun struct {
	job Job
	ctx runctx.Ctx

	// Set by the worker before the handler is called (stuck.go reads them
	// once it has loaded the run from its slot).
	t       *task
	attempt int
	// state is runRunning until the handler returns (runDone, set by the
	// worker) or the run is abandoned (runAbandoned, set by the stuck
	// watcher); whichever moves it settles the run.
	state atomic.Int32
}

// A jobRun's states.
const (
	runRunning int32 = iota
	runDone
	runAbandoned
)

// newClaimer returns the claim stage; the claimers start with dispatch.
func newClaimer(d claimDeps) *claimer {
	return &claimer{claimDeps: d, sig: make(chan struct{}, 1)}
}

// newTask returns the task of a claimed job, a recycled one when there is
// one (see freeTask).
func (q *Queue) newTask(key string, rec *persist.Record, due time.Time, part int, epoch uint64, verified bool) *task {
	t, _ := q.tasks.Get().(*task)
	if t == nil {
		t = new(task)
	}
	*t = task{key: key, rec: rec, due: due, epoch: epoch, part: int32(part), verified: verified}
	return t
}

// newPullTask returns the task of a pulled topic's job, due at due: not
// claimed, held by the start gate until its time (see pull.go).
func (q *Queue) newPullTask(key string, due time.Time, part int) *task {
	t := q.newTask(key, nil, due, part, q.recov.Epoch(part), false)
	t.pull = true
	return t
}

// freeTask recycles a task whose run is over. Only the worker that ran it
// calls it, once the outcome is queued: by then no stage refers to it (the
// start gate let go of it before handing it over).
func (q *Queue) freeTask(t *task) {
	*t = task{}
	q.tasks.Put(t)
}

// claimBufs are a dispatcher's slices for claiming a batch, reused from
// batch to batch (at most maxClaim long) so that a claim leaves little
// garbage. Nothing of them is kept after claimBatch returns.
type claimBufs struct {
	batch, owned []firedJob
	tasks        []*task
	reqs         []persist.ClaimRequest
	results      []persist.ClaimResult
	cached       []*persist.Record
	epochs       []uint64
}

// reset empties the slices for the next batch, dropping what they point to.
func (b *claimBufs) reset() {
	clear(b.batch)
	clear(b.owned)
	clear(b.reqs)
	clear(b.cached)
	clear(b.tasks)
	b.tasks = b.tasks[:0]
	clear(b.results)
	b.results = b.results[:0]
	b.batch, b.owned, b.reqs, b.cached, b.epochs = b.batch[:0], b.owned[:0], b.reqs[:0], b.cached[:0], b.epochs[:0]
}

// dispatch claims fired jobs in Redis and hands them to the workers.
func (c *claimer) dispatch(slot *runctx.Slot) {
	var bufs claimBufs
	var retry []firedJob
	backoff := 10 * time.Millisecond
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	for {
		select {
		case <-c.sig:
			if d := c.claimLinger(); d > 0 {
				linger.Reset(d)
				select {
				case <-linger.C:
				case <-c.stop:
					return
				}
			}
		case <-timer.C:
		case <-c.stop:
			return
		}
		for {
			batch, seq, more := c.take(bufs.batch[:0], retry)
			if len(batch) == 0 {
				break
			}
			if more {
				wake(c.sig) // the other claimer takes the next batch
			}
			bufs.batch = batch
			retry = c.claimBatch(batch, &bufs, seq, slot)
			bufs.reset()
			if len(retry) > 0 {
				timer.Reset(backoff)
				backoff = min(2*backoff, time.Second)
				break
			}
			backoff = 10 * time.Millisecond
			if !more {
				break
			}
		}
	}
}

// claimLinger returns how long the dispatcher may wait for more fired jobs
// before it claims the queued ones: up to maxClaimLinger, while the earliest
// queued job is still more than half the claim lead away from its due time.
// Small claim batches cost a round trip each and a kilobyte of garbage per
// job, and the collections of that garbage delay jobs that are starting.
func (c *claimer) claimLinger() time.Duration {
	queued, first := c.first()
	if queued == 0 {
		return 0
	}
	return lingerFor(queued, first.Sub(c.clock.Now()), c.lead)
}

// lingerFor is claimLinger's decision, for queued fired jobs the earliest
// of which is due in untilDue, with a claim lead of lead: none once a
// quarter of a claim is queued, none when it would leave the claim less
// than half the lead, and none shorter than 50 µs (not worth a timer).
func lingerFor(queued int, untilDue, lead time.Duration) time.Duration {
	if queued == 0 || queued >= maxClaim/4 {
		return 0
	}
	d := min(maxClaimLinger, untilDue-lead/2)
	if d < 50*time.Microsecond {
		return 0
	}
	return d
}

// claimBatch claims a batch of fired jobs and holds the claimed ones until
// their due time, in the batch's turn seq (see turn). It returns the jobs
// to claim again later (Redis errors), in a slice of their own. It keeps
// its slices in bufs, the dispatcher's, which resets them after.
func (c *claimer) claimBatch(batch []firedJob, bufs *claimBufs, seq uint64, slot *runctx.Slot) (retry []firedJob) {
	toHold := bufs.tasks[:0]
	var pulls []*task
	defer func() {
		// Pulled jobs are reserved ahead after the claim (and after the
		// turn), not before it: the claim of the batch's other jobs does
		// not wait for that round trip.
		if len(pulls) > 0 {
			c.pullAhead(pulls, slot)
		}
	}()
	defer func() { // on every return: the next batch waits for this one
		c.turns.wait(seq)
		now, wall := wheel.Readings(c.clock)
		for _, t := range toHold {
			c.gate.hold(t, now, wall)
		}
		c.turns.pass()
		bufs.tasks = toHold
	}()
	if c.limited() {
		if batch = c.admit(batch, slot); len(batch) == 0 {
			return nil
		}
	}
	fresh := bufs.owned[:0]
	var pulledNow, pulledWall time.Time
	for _, f := range batch {
		p := c.store.PartitionOf(f.key)
		if c.leases.LoadedUntil(p) == recovery.NotOwned {
			c.release(f.key) // admitted, but its partition is gone: its next owner runs it
			continue
		}
		if c.pulled(f.key) {
			// A pulled topic's job is not claimed: at its time, the start
			// gate hands it to the pull loop (pull.go), which hands it out.
			if pulledNow.IsZero() {
				pulledNow, pulledWall = wheel.Readings(c.clock)
			}
			// f.due is on the wheel's timeline, and before the job's
			// time when it was armed with a burst's longer lead; the
			// cached due time is exact but may be an earlier one (a
			// reservation's deadline is armed without the cache). A
			// cached due time later than a burst's lead can explain is
			// of a time gone (the job moved earlier): not taken.
			due := pulledWall.Add(f.due.Sub(pulledNow))
			if rec, ok := c.cache.Peek(f.key); ok && rec.Due.After(due) && rec.Due.Sub(due) <= maxBurstLead+time.Millisecond {
				due = rec.Due
			}
			pulls = append(pulls, c.pullTask(f.key, due, p))
			continue
		}
		fresh = append(fresh, f)
	}
	owned, busy := c.inflight.claim(fresh)
	bufs.owned = owned
	_, wall := wheel.Readings(c.clock)
	recheckUs := wall.Add(busyRecheck).UnixMicro()
	for _, f := range busy {
		// Armed again while a run of it is in progress here: look again
		// once that run has settled.
		c.stats.skipped.Add(1)
		c.arm(f.key, recheckUs, nil)
	}
	if len(owned) == 0 {
		return nil
	}
	notRun := func(key string) {
		c.inflight.remove(key)
	}
	reqs := slices.Grow(bufs.reqs[:0], len(owned))[:len(owned)]
	cached := slices.Grow(bufs.cached[:0], len(owned))[:len(owned)]
	bufs.reqs, bufs.cached = reqs, cached
	for i, f := range owned {
		reqs[i].Key = f.key
		if rec, ok := c.cache.Peek(f.key); ok {
			cached[i] = rec
			reqs[i].Rev, reqs[i].HaveRev = rec.Rev, true
			if !rec.Due.IsZero() {
				reqs[i].Due = rec.Due.UnixMicro() // the reply then carries no score when it matches
			}
		}
	}
	// The lease epochs before the claim is sent: a task starts only in the
	// epoch its claim was made in (see mayStart).
	epochs := bufs.epochs[:0]
	for _, f := range owned {
		epochs = append(epochs, c.leases.Epoch(c.store.PartitionOf(f.key)))
	}
	bufs.epochs = epochs
	ctx, end := slot.Call()
	res, err := c.store.Claim(ctx, c.fence, reqs, bufs.results)
	end()
	if err == nil {
		bufs.results = res
	}
	if errors.Is(err, persist.ErrFenced) {
		// A partition was lost; the recoverer will release it, and its jobs
		// are dropped above on the next try.
		for _, f := range owned {
			notRun(f.key)
		}
		return slices.Clone(owned)
	}
	if err != nil {
		c.stats.redisErrors.Add(1)
		if !c.runWhileDown {
			// No start without a confirmed claim: claim them again later.
			c.log.Warn("wheelq: claim failed; claiming again", "err", err, "jobs", len(owned))
			for _, f := range owned {
				notRun(f.key)
			}
			return slices.Clone(owned)
		}
		c.log.Warn("wheelq: claim failed; running cached jobs unverified (RunWhileRedisDown)", "err", err, "jobs", len(owned))
		now, wall := wheel.Readings(c.clock)
		for i, f := range owned {
			due := wall.Add(f.due.Sub(now)) // f.due is on the wheel's timeline
			if c.parkIfKnownPaused(f.key, due.UnixMicro()) {
				// Its topic is known here to be paused: armed again on
				// resume (pause.go), which this process learns once Redis
				// is back.
				notRun(f.key)
				continue
			}
			if cached[i] == nil {
				notRun(f.key)
				retry = append(retry, f)
				continue
			}
			p := c.store.PartitionOf(f.key)
			toHold = append(toHold, c.newTask(f.key, cached[i], due, p, epochs[i], false))
		}
		return retry
	}
	_, wall = wheel.Readings(c.clock)
	// A job whose stored due time is more than its claim lead away (the
	// lead of a job in a burst is longer: burstLeads.most) is not due: it
	// was rescheduled since it was armed, or the wall clock stepped back
	// since. It is armed again at its stored time. One due sooner is held
	// until then.
	// The claims' wheel hands entries out up to its slack early (queue.go).
	notDueUs := wall.Add(c.lead + c.slack).UnixMicro()
	var unclaim []persist.Outcome
	var deferred []firedJob
	for i, f := range owned {
		r := res[i]
		if r.Gone || r.Busy || r.Deferred || r.Paused {
			notRun(f.key)
		}
		if r.Paused {
			c.park(f.key, r.Due) // its topic is paused: armed again on resume (pause.go)
			continue
		}
		if r.Deferred {
			// Past the claim's byte budget: claimed in a call of its own.
			deferred = append(deferred, f)
			continue
		}
		if r.Gone {
			c.stats.skipped.Add(1)
			c.cache.Remove(f.key)
			continue
		}
		if r.Busy {
			// Claimed already: armed twice (by Schedule and by a scan), or
			// rescheduled while running. Look again shortly: by then the
			// run has settled, and the job is gone or due anew.
			c.stats.skipped.Add(1)
			c.arm(f.key, max(r.Due, recheckUs), nil)
			continue
		}
		if r.Due > notDueUs && (c.runWhileDown || r.Due > notDueUs+c.bursts.most(r.Due).Microseconds()) {
			unclaim = append(unclaim, persist.Outcome{Op: persist.Unclaim, Key: f.key})
			c.arm(f.key, r.Due, nil)
			continue
		}
		rec := cached[i]
		if r.Record != nil {
			dec, err := persist.DecodeRecord(r.Record)
			if err != nil {
				c.settle.deadLetterCorrupt(f.key, r.Record, err) // leaves inflight once stored
				continue
			}
			dec.Topic, dec.ID, _ = persist.SplitJobKey(f.key)
			dec.Due = time.UnixMicro(r.Due)
			rec = &dec
			c.cache.Add(f.key, rec)
		}
		p := c.store.PartitionOf(f.key)
		tk := c.newTask(f.key, rec, time.UnixMicro(r.Due), p, epochs[i], true)
		tk.rerun = r.Rerun
		toHold = append(toHold, tk)
	}
	if len(unclaim) > 0 {
		c.settle.unclaimAll(unclaim)
	}
	c.claimed(len(owned), len(deferred))
	if len(deferred) > 0 {
		c.refire(deferred)
	}
	return nil
}

// batchLimitLocked returns the most jobs the next batch takes; c.mu held.
func (c *claimer) batchLimitLocked() int {
	if c.limit <= 0 {
		return maxClaim
	}
	return c.limit
}

// nextBatchLimit is the batch limit after a claim of sent jobs, deferred
// of which were past its byte budget: what the budget held (at least 1)
// when some were deferred, else twice the limit, at most maxClaim.
func nextBatchLimit(limit, sent, deferred int) int {
	if deferred > 0 {
		return max(1, sent-deferred)
	}
	return min(maxClaim, 2*limit)
}

// fire is the job wheel's callback: jobs fired ClaimLead before their
// due time are queued to be claimed. It only queues, never blocks.
func (c *claimer) fire(batch []wheel.Fired) {
	c.mu.Lock()
	for _, f := range batch {
		c.fired = append(c.fired, firedJob{key: f.ID, due: f.Due.Add(c.lead)})
	}
	c.mu.Unlock()
	wake(c.sig)
}

// take returns the next batch to claim, in buf: the jobs to claim again
// (retry) first, then fired jobs up to the batch limit; its turn (see
// turnstile), and whether fired jobs are left for another batch.
func (c *claimer) take(buf, retry []firedJob) (batch []firedJob, seq uint64, more bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := max(0, min(len(c.fired), c.batchLimitLocked()-len(retry)))
	batch = append(append(buf, retry...), c.fired[:n]...)
	all := c.fired
	clear(all[:n])
	c.fired = all[n:]
	if len(c.fired) == 0 {
		c.fired = nil // let a large backlog's array go
		if cap(all) <= maxClaim {
			c.fired = all[:0] // a small one is reused
		}
	}
	if len(batch) > 0 {
		seq = c.seq
		c.seq++
	}
	return batch, seq, len(c.fired) > 0
}

// first returns how many fired jobs are queued, and the due time of the
// first.
func (c *claimer) first() (queued int, due time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.fired) > 0 {
		due = c.fired[0].due
	}
	return len(c.fired), due
}

// claimed sets the batch limit after a claim of sent jobs, deferred of
// which were past its byte budget (see limit).
func (c *claimer) claimed(sent, deferred int) {
	c.mu.Lock()
	c.limit = nextBatchLimit(c.batchLimitLocked(), sent, deferred)
	c.mu.Unlock()
}

// refire puts fired jobs back at the front of the fired queue, to be
// claimed at once (they are older than the jobs queued behind them).
func (c *claimer) refire(fs []firedJob) {
	c.mu.Lock()
	c.fired = append(slices.Clone(fs), c.fired...)
	c.mu.Unlock()
	wake(c.sig)
}
