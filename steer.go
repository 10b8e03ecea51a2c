package wheelq

// Steering jobs from outside their runs: requeue a dead job, run a
// pending one now, cancel or requeue every job a filter selects; from any
// process, started or not.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/wheelq/wheelq/internal/errs"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/wheel"
)

// RunNow makes a pending job due now: Reschedule to the current time. A
// job that is not pending gives ErrNotFound (a dead one: see Requeue);
// one with a run in progress is moved all the same and gives ErrRunning
// (it runs again). A job of a paused topic is moved all the same, waits
// for Resume, and gives ErrPaused.
func (q *Queue) RunNow(ctx context.Context, topic, id string) error {
	if err := checkCtx(ctx, "RunNow"); err != nil {
		return err
	}
	_, wall := wheel.Readings(q.clock)
	err := q.Reschedule(ctx, topic, id, wall)
	if err != nil && !errors.Is(err, ErrRunning) {
		return err
	}
	paused, perr := q.store.PausedTopics(ctx)
	if perr != nil {
		return errs.Errorf("wheelq: run now %s: made due now; reading the paused topics: %w", persist.JobKey(topic, id), perr)
	}
	if slices.Contains(paused, topic) {
		if err != nil {
			return errs.Errorf("wheelq: run now %s: made due now, but %w (it runs on Resume); %w", persist.JobKey(topic, id), ErrPaused, err)
		}
		return errs.Errorf("wheelq: run now %s: made due now, but %w (it runs on Resume)", persist.JobKey(topic, id), ErrPaused)
	}
	return err
}

// bulkPage is the page size of CancelWhere and RequeueWhere, and
// bulkCalls how many of a page's calls are in flight at once (concurrent
// Cancel calls share round trips).
const (
	bulkPage  = 500
	bulkCalls = 64
)

// CancelWhere cancels every job f selects, as Cancel would one by one
// (concurrent cancels share round trips), a page of List at a time, and
// returns how many it cancelled: a job with a run in progress counts
// (that run goes on, as with ErrRunning), one gone meanwhile does not. A
// zero JobFilter selects every pending job of every topic. On an error it
// returns the count so far; calling again carries on with what is left.
func (q *Queue) CancelWhere(ctx context.Context, f JobFilter) (int, error) {
	if err := checkCtx(ctx, "CancelWhere"); err != nil {
		return 0, err
	}
	return q.bulk(ctx, "CancelWhere", f, func(j JobInfo) error {
		err := q.Cancel(ctx, j.Topic, j.ID)
		if errors.Is(err, ErrRunning) {
			return nil
		}
		return err
	})
}

// RequeueWhere moves every dead job f selects (its State must be 0 or
// StateDead) back to pending, due at at, as Requeue would one by one, a
// page of List at a time, and returns how many it moved. A job requeued or
// cancelled meanwhile does not count. On an error it returns the count so
// far; calling again carries on with what is left. With
// Config.RefuseUnhandled, f's Topic (if set) must be one this queue
// handles or pulls (else ErrTopicMode, nothing moved), and without one,
// the dead jobs of the topics it neither handles nor pulls are left dead,
// uncounted, as Requeue would refuse them.
func (q *Queue) RequeueWhere(ctx context.Context, f JobFilter, at time.Time) (int, error) {
	if err := checkCtx(ctx, "RequeueWhere"); err != nil {
		return 0, err
	}
	if at.IsZero() {
		return 0, fmt.Errorf("%w: RequeueWhere: %v", ErrInvalidOption, errZeroTime)
	}
	switch f.State {
	case 0:
		f.State = StateDead
	case StateDead:
	default:
		return 0, fmt.Errorf("%w: RequeueWhere state %v: only dead jobs are requeued", ErrInvalidOption, f.State)
	}
	if f.Topic != "" {
		if err := q.runsTopic(f.Topic); err != nil {
			return 0, errs.Errorf("wheelq: RequeueWhere: %w", err)
		}
	}
	return q.bulk(ctx, "RequeueWhere", f, func(j JobInfo) error {
		if err := q.runsTopic(j.Topic); errors.Is(err, ErrTopicMode) {
			return errPassOver // Config.RefuseUnhandled: not a topic run here
		}
		return q.Requeue(ctx, j.Topic, j.ID, at)
	})
}

// errPassOver is what bulk's do returns for a job it leaves as it is, not
// counted and not an error.
var errPassOver = errors.New("wheelq: passed over")

// bulk applies do to every job f selects, a page at a time, up to
// bulkCalls calls at once, and counts the calls that returned nil
// (ErrNotFound: gone meanwhile, not counted; errPassOver: left, not
// counted).
func (q *Queue) bulk(ctx context.Context, op string, f JobFilter, do func(JobInfo) error) (int, error) {
	if _, err := q.query(op, f); err != nil {
		return 0, err
	}
	done := 0
	for cursor := ""; ; {
		jobs, next, err := q.List(ctx, f, cursor, bulkPage)
		if err != nil {
			return done, errs.Errorf("wheelq: %s: %w", op, err)
		}
		var (
			mu       sync.Mutex
			firstErr error
			wg       sync.WaitGroup
		)
		sem := make(chan struct{}, bulkCalls)
		for _, j := range jobs {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				err := do(j)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					done++
				case errors.Is(err, ErrNotFound), errors.Is(err, errPassOver):
				case firstErr == nil:
					firstErr = err
				}
			})
		}
		wg.Wait()
		if firstErr != nil {
			return done, errs.Errorf("wheelq: %s: %w", op, firstErr)
		}
		if next == "" {
			return done, nil
		}
		cursor = next
	}
}

// Requeue moves a dead-lettered job back to pending, due at at, with its
// attempts reset. A job that is not dead gives ErrNotFound; at more than
// Config.MaxDelay away gives ErrTooFar. With Config.RefuseUnhandled, a job
// of a topic this queue neither handles nor pulls gives ErrTopicMode, as
// Schedule does, and stays dead.
func (q *Queue) Requeue(ctx context.Context, topic, id string, at time.Time) error {
	if err := checkCtx(ctx, "Requeue"); err != nil {
		return err
	}
	if err := q.runsTopic(topic); err != nil {
		return errs.Errorf("wheelq: requeue: %w", err)
	}
	key, err := q.moveTo(ctx, "requeue", topic, id, at)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, q.cfg.WriteTimeout)
	defer cancel()
	probe, err := q.reach.admit(q.clock)
	if err != nil {
		return errs.Errorf("wheelq: requeue %s: %w", key, err)
	}
	r, st, err := q.store.Get(cctx, key)
	q.reach.note(ctx, err, probe, q.clock)
	if errors.Is(err, persist.ErrNotFound) || (err == nil && st != persist.DeadLettered) {
		return fmt.Errorf("%w: no dead job %s", ErrNotFound, key)
	}
	if err != nil {
		return errs.Errorf("wheelq: requeue %s: %w", key, err)
	}
	oldRev := r.Rev
	r.Rev, r.Attempt, r.LastError = rand.Uint32(), 0, ""
	dueUs := ceilMicro(at)
	p := q.store.PartitionOf(key)
	ok, err := q.store.Requeue(cctx, q.recov.Tokens()[p], key, oldRev, dueUs, r.Encode())
	q.reach.note(ctx, err, false, q.clock)
	if err != nil {
		return errs.Errorf("wheelq: requeue %s: %w", key, uncertain(err))
	}
	if !ok {
		return fmt.Errorf("%w: dead job %s changed meanwhile", ErrNotFound, key)
	}
	q.arm(key, dueUs, &r)
	return nil
}
