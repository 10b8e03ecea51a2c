package wheelq

// The start gate: claimed tasks wait in a wheel of their own for their
// exact due time (hold), are started in the order their time came (the
// starter, and workers taking the next task themselves), and pass mayStart
// just before their handler runs: the wall clock has reached their due
// time and this process still owns their partition in the lease epoch of
// their claim.

import (
	"sync"
	"time"

	"github.com/wheelq/wheelq/internal/recovery"
	"github.com/wheelq/wheelq/wheel"
)

// leaseView is what the start gate asks of the partitions' leases
// (*recovery.Recoverer).
type leaseView interface {
	Epoch(p int) uint64
	LoadedUntil(p int) int64
	Owns(p int, now time.Time) bool
}

// gateDeps is what the start gate hands tasks to, and what it asks.
type gateDeps struct {
	clock wheel.Clock
	work  chan *task      // the workers' channel, shared with them
	stop  <-chan struct{} // closed at shutdown: the starter returns
	// leases says whether a task's partition is still this process's.
	leases leaseView
	// toPull takes pulled tasks whose time came (the pull stage).
	toPull func([]*task)
	// unclaim gives back the claim of a task the starter could not hand
	// over before the shutdown; drop forgets a task of a partition no
	// longer this process's.
	unclaim, drop func(*task)
	// lookAfter arms key in the job wheel to be looked at again just
	// after due (a task reserved ahead for it is handed over then).
	lookAfter func(key string, due time.Time)
	// dropAhead is told of a task reserved ahead that the gate let go of
	// before its time (replaced by a later reservation of the job): its
	// waiter is not handed it.
	dropAhead func(*task)
	logDebug  func(msg string, args ...any)
}

// startGate holds claimed tasks until their time, in a wheel of its own
// (the job wheel's entries are keyed by job key too, and a job may be
// armed again while a run of it is held).
type startGate struct {
	d     gateDeps
	wheel *wheel.Scheduler // fires a held task's key at its due time (onStart)

	mu sync.Mutex
	// held holds claimed tasks waiting in the start wheel for their exact
	// due time; startQ the keys whose time has come. Both
	// guarded by mu.
	held   map[string]*task
	startQ []string
	// leaseWait holds tasks whose time came while their partition's lease
	// was owned but its validity had run out (a renewal late): they start
	// once a renewal confirms the lease (renewed), or are dropped with the
	// partition (release). Guarded by mu.
	leaseWait []*task
	// starterHolds says the starter has taken a task off startQ and is
	// handing it to a worker (guarded by mu): until then no task may pass
	// it, so that tasks start in the order their time came.
	starterHolds bool
	sig          chan struct{} // a task's time came and no worker took it at once
	done         chan struct{} // closed when the starter returned
}

// newStartGate returns a start gate with its wheel on cfg's clock.
func newStartGate(d gateDeps, cfg wheel.SchedulerConfig) (*startGate, error) {
	g := &startGate{d: d, held: map[string]*task{}, sig: make(chan struct{}, 1), done: make(chan struct{})}
	var err error
	if g.wheel, err = wheel.NewScheduler(cfg, g.onStart); err != nil {
		return nil, err
	}
	return g, nil
}

// len is the number of tasks in the gate's wheel.
func (g *startGate) len() int { return g.wheel.Len() }

// onStart is the start wheel's callback: the time of held tasks has
// come. It only queues, never blocks.
func (g *startGate) onStart(batch []wheel.Fired) {
	starts := false
	var pulls []*task
	g.mu.Lock()
	for _, f := range batch {
		if t, held := g.held[f.ID]; held {
			if t.pull {
				delete(g.held, f.ID)
				pulls = append(pulls, t)
			} else if g.startNowLocked(t) { // room for it: no hop through the starter
				delete(g.held, f.ID)
			} else {
				g.startQ = append(g.startQ, f.ID)
				starts = true
			}
		}
	}
	g.mu.Unlock()
	g.d.toPull(pulls)
	if starts {
		wake(g.sig)
	}
}

// hold keeps a claimed task until its exact due time, when the wheel
// fires its start entry. A task due already (a backlog, or a claim that
// came late) starts at once, without a round through the wheel. now and
// wall are the caller's readings of the clock (wheel.Readings), taken
// once for a batch: they only ever trail the clock, so no task starts
// early.
func (g *startGate) hold(t *task, now, wall time.Time) {
	if t.pull && !t.due.After(wall) {
		// (A task reserved ahead and held for the same key is due too: it
		// goes on at its time whatever this one does.)
		g.d.toPull([]*task{t})
		return
	}
	g.mu.Lock()
	var stale *task
	if old := g.held[t.key]; old != nil && old.res != nil && t.res != nil {
		// Both reserved ahead: the job was reserved again, which due.lua
		// does only once the first reservation's revision is gone (the
		// job replaced, or rescheduled by another process). The first
		// would be refused at its ack; its waiter, counting it as
		// promised, is told (below) and looks again.
		stale = old
	} else if old != nil && old.res != nil && t.res == nil {
		// The job is reserved ahead for a waiting Reserve, and that task
		// hands it over at its time; this one is of a second arm of the
		// key (the poller's, from the inbox a Nack's script also pushed
		// to; or a Reschedule's). Replacing the first lost the
		// reservation: its waiter, counting it as promised, never looked
		// again. The second arm took the place of the key's entry in the
		// job wheel (the reservation's deadline, or the new due time), so
		// the key is looked at again once the first is handed over: the
		// job's score says then what comes next.
		due := old.due
		g.mu.Unlock()
		g.d.lookAfter(t.key, due)
		return
	}
	if !t.due.After(wall) {
		if g.startNowLocked(t) {
			g.mu.Unlock()
			return
		}
		g.held[t.key] = t
		g.startQ = append(g.startQ, t.key)
		g.mu.Unlock()
		wake(g.sig)
		return
	}
	g.held[t.key] = t
	g.mu.Unlock()
	if stale != nil {
		g.d.dropAhead(stale)
	}
	if _, err := g.wheel.Add(t.key, wheel.AtWall(now, wall, t.due)); err != nil {
		// Stopped: the task is unclaimed at shutdown with the others.
		g.d.logDebug("wheelq: hold", "key", t.key, "err", err)
	}
}

// unhold takes back a held task that has not started, if there is one.
func (g *startGate) unhold(key string) (*task, bool) {
	g.mu.Lock()
	t, ok := g.held[key]
	delete(g.held, key)
	g.mu.Unlock()
	if ok {
		g.wheel.Cancel(key)
	}
	return t, ok
}

// startNowLocked hands t to an idle worker if one can take it without
// passing a task whose time came earlier; it reports whether it did. The
// caller holds g.mu.
func (g *startGate) startNowLocked(t *task) bool {
	if len(g.startQ) > 0 || g.starterHolds {
		return false
	}
	select {
	case g.d.work <- t:
		return true
	default:
		return false
	}
}

// starter hands held tasks to the workers when their time comes and no
// worker could take them at once. (Workers that finish a run take such
// tasks themselves; the starter wakes idle ones.) It returns when the
// gate's stop channel is closed.
func (g *startGate) starter() {
	defer close(g.done)
	for {
		select {
		case <-g.sig:
		case <-g.d.stop:
			return
		}
		for {
			g.mu.Lock()
			t := g.popStartLocked()
			g.starterHolds = t != nil
			g.mu.Unlock()
			if t == nil {
				break
			}
			select {
			case g.d.work <- t:
			case <-g.d.stop:
				g.d.unclaim(t)
				return
			}
			g.mu.Lock()
			g.starterHolds = false
			g.mu.Unlock()
		}
	}
}

// next gives a free worker the task whose time came first: one in the
// work channel, else the first of the start queue. While the starter
// hands a task over it gives none (the worker then receives that one from
// the work channel, in order). Under g.mu, with the starter idle, no one
// else can send on the channel, so what is in it is older than the queue.
func (g *startGate) next() *task {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.starterHolds {
		return nil
	}
	select {
	case t := <-g.d.work:
		return t
	default:
	}
	return g.popStartLocked()
}

// popStartLocked takes the first task of the start queue, if there is
// one. The caller holds g.mu.
func (g *startGate) popStartLocked() *task {
	for len(g.startQ) > 0 {
		key := g.startQ[0]
		g.startQ[0] = ""
		g.startQ = g.startQ[1:]
		if len(g.startQ) == 0 {
			g.startQ = nil // let a large backlog's array go
		}
		if t, ok := g.held[key]; ok {
			delete(g.held, key)
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
func (g *startGate) mayStart(t *task, now, wall time.Time) bool {
	if wall.Before(t.due) {
		g.hold(t, now, wall)
		return false
	}
	p, leases := int(t.part), g.d.leases
	if leases.Epoch(p) != t.epoch || leases.LoadedUntil(p) == recovery.NotOwned {
		// Another epoch, or released: a claim whose epoch was read just
		// after a hand-over began has the new epoch but no owner here;
		// waiting for a renewal would keep the hand-over waiting for it.
		g.d.drop(t)
		return false
	}
	if leases.Owns(p, now) {
		return true
	}
	g.mu.Lock()
	g.leaseWait = append(g.leaseWait, t)
	g.mu.Unlock()
	// A renewal may have come between the check and the wait: look again.
	if leases.Owns(p, g.d.clock.Now()) {
		g.renewed()
	}
	return false
}

// release takes the claimed tasks of partition p that have not started
// out of the gate (held for their time, or waiting for a renewal) and
// returns them. A pulled job reserved ahead stays: its reservation is in
// Redis, whoever owns the partition.
func (g *startGate) release(p int) []*task {
	var drop []*task
	g.mu.Lock()
	for k, t := range g.held {
		if int(t.part) == p && t.res == nil {
			delete(g.held, k)
			drop = append(drop, t)
		}
	}
	keep := g.leaseWait[:0]
	for _, t := range g.leaseWait {
		if int(t.part) == p {
			drop = append(drop, t)
		} else {
			keep = append(keep, t)
		}
	}
	clear(g.leaseWait[len(keep):])
	g.leaseWait = keep
	g.mu.Unlock()
	for _, t := range drop {
		g.wheel.Cancel(t.key)
	}
	return drop
}

// renewed sends the tasks that waited for a lease renewal through the
// gate again.
func (g *startGate) renewed() {
	g.mu.Lock()
	waiting := g.leaseWait
	g.leaseWait = nil
	g.mu.Unlock()
	if len(waiting) == 0 {
		return
	}
	now, wall := wheel.Readings(g.d.clock)
	for _, t := range waiting {
		g.hold(t, now, wall)
	}
}

// empty takes every task out of the gate, once the starter returned (at
// shutdown): held is what waited for its time, waiting what waited for a
// renewal.
func (g *startGate) empty() (held map[string]*task, waiting []*task) {
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	held, waiting = g.held, g.leaseWait
	g.held, g.leaseWait = map[string]*task{}, nil
	return held, waiting
}
