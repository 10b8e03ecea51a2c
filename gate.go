package wheelq

// The start gate: claimed tasks wait in the wheel for their exact due
// time (hold), are started in the order their time came (the starter, and
// workers taking the next task themselves), and pass mayStart just before
// their handler runs: the wall clock has reached their due time and this
// process still owns their partition in the lease epoch of their claim.

import (
	"sync"
	"time"

	"github.com/wheelq/wheelq/internal/recovery"
	"github.com/wheelq/wheelq/wheel"
)

// startGate holds claimed tasks until their time, in a wheel of its own
// (Queue.starts: the job wheel's entries are keyed by job key too, and a
// job may be armed again while a run of it is held).
type startGate struct {
	mu sync.Mutex
	// held holds claimed tasks waiting in the start wheel for their exact
	// due time; startQ the keys whose time has come. Both
	// guarded by mu.
	held   map[string]*task
	startQ []string
	// leaseWait holds tasks whose time came while their partition's lease
	// was owned but its validity had run out (a renewal late): they start
	// once a renewal confirms the lease (sink.Renewed), or are dropped
	// with the partition (sink.Release). Guarded by mu.
	leaseWait []*task
	// starterHolds says the starter has taken a task off startQ and is
	// handing it to a worker (guarded by mu): until then no task may pass
	// it, so that tasks start in the order their time came.
	starterHolds bool
	sig          chan struct{} // a task's time came and no worker took it at once
	done         chan struct{} // closed when the starter returned
}

// onStart is the start wheel's callback: the time of held tasks has
// come. It only queues, never blocks.
func (q *Queue) onStart(batch []wheel.Fired) {
	starts := false
	var pulls []*task
	q.gate.mu.Lock()
	for _, f := range batch {
		if t, held := q.gate.held[f.ID]; held {
			if t.pull {
				delete(q.gate.held, f.ID)
				pulls = append(pulls, t)
			} else if q.startNowLocked(t) { // room for it: no hop through the starter
				delete(q.gate.held, f.ID)
			} else {
				q.gate.startQ = append(q.gate.startQ, f.ID)
				starts = true
			}
		}
	}
	q.gate.mu.Unlock()
	q.pullArrive(pulls)
	if starts {
		wake(q.gate.sig)
	}
}

// hold keeps a claimed task until its exact due time, when the wheel
// fires its start entry. A task due already (a backlog, or a claim that
// came late) starts at once, as onFire would start it, without a round
// through the wheel. now and wall are the caller's readings of the clock
// (wheel.Readings), taken once for a batch: they only ever trail the clock,
// so no task starts early.
func (q *Queue) hold(t *task, now, wall time.Time) {
	if t.pull && !t.due.After(wall) {
		q.pullArrive([]*task{t})
		return
	}
	q.gate.mu.Lock()
	if !t.due.After(wall) {
		if q.startNowLocked(t) {
			q.gate.mu.Unlock()
			return
		}
		q.gate.held[t.key] = t
		q.gate.startQ = append(q.gate.startQ, t.key)
		q.gate.mu.Unlock()
		wake(q.gate.sig)
		return
	}
	q.gate.held[t.key] = t
	q.gate.mu.Unlock()
	if _, err := q.starts.Add(t.key, wheel.AtWall(now, wall, t.due)); err != nil {
		// Stopped: the task is unclaimed at shutdown with the others.
		q.log.Debug("wheelq: hold", "key", t.key, "err", err)
	}
}

// unhold takes back a held task that has not started, if there is one.
func (q *Queue) unhold(key string) (*task, bool) {
	q.gate.mu.Lock()
	t, ok := q.gate.held[key]
	delete(q.gate.held, key)
	q.gate.mu.Unlock()
	if ok {
		q.starts.Cancel(key)
	}
	return t, ok
}

// startNowLocked hands t to an idle worker if one can take it without
// passing a task whose time came earlier; it reports whether it did. The
// caller holds q.gate.mu.
func (q *Queue) startNowLocked(t *task) bool {
	if len(q.gate.startQ) > 0 || q.gate.starterHolds {
		return false
	}
	select {
	case q.work <- t:
		return true
	default:
		return false
	}
}

// starter hands held tasks to the workers when their time comes and no
// worker could take them at once. (Workers that finish a run take such
// tasks themselves; the starter wakes idle ones.)
func (q *Queue) starter() {
	defer close(q.gate.done)
	for {
		select {
		case <-q.gate.sig:
		case <-q.stopDispatch:
			return
		}
		for {
			q.gate.mu.Lock()
			t := q.popStartLocked()
			q.gate.starterHolds = t != nil
			q.gate.mu.Unlock()
			if t == nil {
				break
			}
			select {
			case q.work <- t:
			case <-q.stopDispatch:
				q.unclaim(t)
				return
			}
			q.gate.mu.Lock()
			q.gate.starterHolds = false
			q.gate.mu.Unlock()
		}
	}
}

// nextStart gives a free worker the task whose time came first: one in
// the work channel, else the first of the start queue. While the starter
// hands a task over it gives none (the worker then receives that one from
// the work channel, in order). Under q.gate.mu, with the starter idle, no one
// else can send on the channel, so what is in it is older than the queue.
func (q *Queue) nextStart() *task {
	q.gate.mu.Lock()
	defer q.gate.mu.Unlock()
	if q.gate.starterHolds {
		return nil
	}
	select {
	case t := <-q.work:
		return t
	default:
	}
	return q.popStartLocked()
}

// popStartLocked takes the first task of the start queue, if there is
// one. The caller holds q.gate.mu.
func (q *Queue) popStartLocked() *task {
	for len(q.gate.startQ) > 0 {
		key := q.gate.startQ[0]
		q.gate.startQ[0] = ""
		q.gate.startQ = q.gate.startQ[1:]
		if len(q.gate.startQ) == 0 {
			q.gate.startQ = nil // let a large backlog's array go
		}
		if t, ok := q.gate.held[key]; ok {
			delete(q.gate.held, key)
			return t
		}
		// cancelled or rescheduled while held
	}
	return nil
}

// mayStart is the start gate, passed by every task just before its
// handler is called. A task starts only when the wall clock has reached its
// due time (it stepped back since the task was held: hold it again), and
// only while this process owns the partition by its own conservative
// clock, in the lease epoch its claim was made in. A task of a lost
// partition (or of an epoch gone by) is dropped: the partition's owner runs
// the job. A task whose partition is owned but whose lease validity has run
// out (a renewal is late: a pause, a slow Redis, a cut network) waits for a
// renewal and is dropped with the partition if none comes.
func (q *Queue) mayStart(t *task, now, wall time.Time) bool {
	if wall.Before(t.due) {
		q.hold(t, now, wall)
		return false
	}
	if q.recov.Epoch(int(t.part)) != t.epoch || q.recov.LoadedUntil(int(t.part)) == recovery.NotOwned {
		// Another epoch, or released: a claim whose epoch was read just
		// after a hand-over began has the new epoch but no owner here;
		// waiting for a renewal would keep the hand-over waiting for it.
		q.dropTask(t)
		return false
	}
	if q.recov.Owns(int(t.part), now) {
		return true
	}
	q.gate.mu.Lock()
	q.gate.leaseWait = append(q.gate.leaseWait, t)
	q.gate.mu.Unlock()
	// A renewal may have come between the check and the wait: look again.
	if q.recov.Owns(int(t.part), q.clock.Now()) {
		(*sink)(q).Renewed()
	}
	return false
}

// dropTask forgets a claimed task that will not start here because its
// partition is no longer (surely) this process's. Nothing is sent to
// Redis: the partition's next owner clears the claim marks when it takes
// the partition over.
func (q *Queue) dropTask(t *task) {
	q.stats.dropped.Add(1)
	q.inflight.remove(t.key)
}

// Release drops the claimed tasks of a lost partition that have not
// started: held for their time, or waiting for a renewal. The new owner
// runs those jobs (a take-over clears the claim marks). Jobs of the
// partition still in the wheel stay there until they fire and are dropped
// then (the dispatcher checks ownership), which costs memory for up to a
// horizon but no Redis traffic.
func (s *sink) Release(p int) {
	q := (*Queue)(s)
	var drop []*task
	q.gate.mu.Lock()
	for k, t := range q.gate.held {
		// A pulled job reserved ahead stays: its reservation is in Redis,
		// whoever owns the partition.
		if int(t.part) == p && t.res == nil {
			delete(q.gate.held, k)
			drop = append(drop, t)
		}
	}
	keep := q.gate.leaseWait[:0]
	for _, t := range q.gate.leaseWait {
		if int(t.part) == p {
			drop = append(drop, t)
		} else {
			keep = append(keep, t)
		}
	}
	clear(q.gate.leaseWait[len(keep):])
	q.gate.leaseWait = keep
	q.gate.mu.Unlock()
	for _, t := range drop {
		q.starts.Cancel(t.key)
		q.dropTask(t)
	}
	if len(drop) > 0 {
		q.log.Info("wheelq: partition released; its claimed jobs that had not started go to its next owner", "partition", p, "jobs", len(drop))
	}
}

// Renewed: tasks that waited for a renewal go through the start gate
// again.
func (s *sink) Renewed() {
	q := (*Queue)(s)
	q.gate.mu.Lock()
	waiting := q.gate.leaseWait
	q.gate.leaseWait = nil
	q.gate.mu.Unlock()
	if len(waiting) == 0 {
		return
	}
	now, wall := wheel.Readings(q.clock)
	for _, t := range waiting {
		q.hold(t, now, wall)
	}
}
