package wheelq

// Stuck handlers: a handler that ignores its context past HandlerTimeout
// keeps its worker, but not its run. Once it has run StuckGrace past
// HandlerTimeout, the stuck watcher abandons its run: a Warn names it,
// Stats.Stuck counts it until the handler returns, and its job is settled
// as a failed run (retried, or dead-lettered after its last attempt), so
// that neither the hand-over of its partition nor Shutdown waits for it.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// StuckGrace returns how long past timeout (Config.HandlerTimeout) a
// handler may run before its run is abandoned: a tenth of timeout, at
// least a second.
func StuckGrace(timeout time.Duration) time.Duration {
	return max(time.Second, timeout/10)
}

// ErrHandlerStuck is the error an abandoned run is settled with (its
// job's LastError).
var ErrHandlerStuck = errors.New("wheelq: handler ignored its context and did not return within HandlerTimeout and its grace (StuckGrace)")

// StuckRun is a run whose handler had not returned when Shutdown did.
type StuckRun struct {
	Topic, ID string
	// Attempt is the run's attempt number (Job.Attempt).
	Attempt int
	// Running is how long the handler had been running.
	Running time.Duration
}

// StuckRunsError is returned by Shutdown (joined with any other error)
// when handlers had not returned: runs abandoned for ignoring their
// context past HandlerTimeout (their jobs settled as failed), and, when
// Shutdown's context ended first, runs still within their time (their
// outcomes are dropped: those jobs run again). Their goroutines go on
// until the handlers return.
type StuckRunsError struct {
	Runs []StuckRun
}

func (e *StuckRunsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "wheelq: shutdown left %d handler(s) running:", len(e.Runs))
	for i, r := range e.Runs {
		if i == 10 {
			fmt.Fprintf(&b, " and %d more", len(e.Runs)-i)
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s/%s (attempt %d, running %v)", r.Topic, r.ID, r.Attempt, r.Running.Round(time.Millisecond))
	}
	return b.String()
}

// startStuckWatch starts the stuck watcher, which also publishes this
// process's figures (figures.go); Start calls it.
func (q *Queue) startStuckWatch() {
	w := &q.stuckWatch
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	every := min(max(StuckGrace(q.cfg.HandlerTimeout)/4, 100*time.Millisecond), figuresEvery/2)
	go func() {
		defer close(w.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		var published time.Time
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
				q.abandonStuck()
				if time.Since(published) >= figuresEvery {
					published = time.Now()
					ctx, cancel := context.WithTimeout(context.Background(), q.cfg.WriteTimeout)
					_ = q.publishFigures(ctx) // figures only: the next tick tries again
					cancel()
				}
			}
		}
	}()
}

// stopStuckWatch stops the stuck watcher, if Start started it.
func (q *Queue) stopStuckWatch() {
	w := &q.stuckWatch
	if w.stop == nil {
		return
	}
	close(w.stop)
	<-w.done
}

// abandonStuck abandons the runs whose handlers have run StuckGrace past
// HandlerTimeout.
func (q *Queue) abandonStuck() {
	limit := q.cfg.HandlerTimeout + StuckGrace(q.cfg.HandlerTimeout)
	for i := range q.current {
		r := q.current[i].Load()
		if r == nil || q.runningFor(r) < limit || !r.state.CompareAndSwap(runRunning, runAbandoned) {
			continue
		}
		q.running.Add(-1)
		q.stuck.Add(1)
		q.log.Warn("wheelq: handler ignores its context: running past HandlerTimeout; its run is abandoned and its job settled as failed (it may run again while this handler goes on, holding its worker)",
			"topic", r.job.Topic, "id", r.job.ID, "attempt", r.attempt, "running_for", q.runningFor(r).Round(time.Millisecond),
			"handler_timeout", q.cfg.HandlerTimeout)
		if obs := q.cfg.Observer; obs != nil {
			observeRun(obs, r.job.Topic, time.Now().Add(-q.runningFor(r)), ErrHandlerStuck)
		}
		q.settle.settle(r.t, r.attempt, ErrHandlerStuck)
		q.freeTask(r.t)
	}
}

// runningFor returns how long r's handler has run, from its context's
// deadline (HandlerTimeout after its start, kept as nanoseconds after the
// run contexts' base: internal/runctx), so that a run costs no clock reading
// for it.
func (q *Queue) runningFor(r *jobRun) time.Duration {
	return r.ctx.RunningFor()
}

// stuckRuns lists the runs whose handlers have not returned.
func (q *Queue) stuckRuns() []StuckRun {
	var out []StuckRun
	for i := range q.current {
		if r := q.current[i].Load(); r != nil {
			out = append(out, StuckRun{Topic: r.job.Topic, ID: r.job.ID, Attempt: r.attempt, Running: q.runningFor(r)})
		}
	}
	return out
}
