package wheelq

// The workers: Concurrency goroutines that run handlers (run), each with
// its slot of handler contexts (internal/runctx), and hand outcomes to settling.

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/wheelq/wheelq/internal/crashpoint"
	"github.com/wheelq/wheelq/internal/runctx"
	"github.com/wheelq/wheelq/wheel"
)

// worker i runs tasks in its run context slot, showing the stuck watcher
// the run it is in (q.current[i]).
func (q *Queue) worker(i int) {
	slot, cur := q.runs.Slot(i), &q.current[i]
	for {
		// Stop first: a task still buffered at shutdown is unclaimed.
		select {
		case <-q.stopDispatch:
			return
		default:
		}
		// A worker that just finished a run takes its next task without
		// parking.
		if t := q.gate.next(); t != nil {
			q.run(t, slot, cur)
			continue
		}
		select {
		case t := <-q.work:
			q.run(t, slot, cur)
		case <-q.stopDispatch:
			return
		}
	}
}

// run runs t's handler in the worker's slot, if t passes the start gate.
func (q *Queue) run(t *task, slot *runctx.Slot, cur *atomic.Pointer[jobRun]) {
	now, wall := wheel.Readings(q.clock)
	if !q.gate.mayStart(t, now, wall) {
		return
	}
	if q.crashAt(crashpoint.AfterClaim, t.key) {
		return
	}
	q.running.Add(1)
	q.late.record(wall.Sub(t.due))
	q.stats.fired.Add(1)
	obs := q.cfg.Observer // nil: one check here and two after the run
	if obs != nil {
		obs.JobStarted(t.rec.Topic, max(wall.Sub(t.due), 0))
	}
	attempt := t.rec.Attempt + 1
	r := &jobRun{job: Job{ // the handler may keep the Job and its context
		Topic: t.rec.Topic, ID: t.rec.ID, Payload: t.rec.Payload, Attempt: attempt, Rerun: t.rerun,
		MaxAttempts: t.rec.MaxAttempts, Due: t.due, Created: t.rec.Created, LastError: t.rec.LastError,
		Headers: t.rec.Headers,
	}}
	job := &r.job
	h := (*q.handlers.Load())[job.Topic]
	var err error
	var began time.Time // the handler's start, with an Observer
	if h == nil {
		err = fmt.Errorf("%w %q", ErrNoHandler, job.Topic)
	} else {
		r.ctx = slot.Begin()
		var ctx context.Context = &r.ctx
		if q.crashAt(crashpoint.DuringRun, t.key) {
			ctx = abandoned(ctx)
		}
		if obs != nil {
			began = time.Now()
		}
		r.t, r.attempt = t, attempt
		cur.Store(r)
		err = call(ctx, h, job)
		q.releasePermit(t.key) // the cap frees at the handler's return
		cur.Store(nil)
		slot.Finish(r.ctx.Gen())
		if !r.state.CompareAndSwap(runRunning, runDone) {
			// Abandoned (stuck.go): settled already; t is not ours.
			q.stuck.Add(-1)
			return
		}
	}
	if q.crashAt(crashpoint.AfterRun, t.key) {
		q.running.Add(-1)
		return
	}
	if obs != nil {
		observeRun(obs, job.Topic, began, err)
	}
	q.settle.settle(t, attempt, err)
	// Counted as running until its outcome is queued (UnstoredOutcomes):
	// a run not yet stored is always in one of the two.
	q.running.Add(-1)
	q.freeTask(t)
}

func call(ctx context.Context, h Handler, job *Job) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h.HandleJob(ctx, job)
}
