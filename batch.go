package wheelq

// Batches: one caller's list of jobs to schedule or cancel, written in
// one round trip per chunk of batchChunk jobs, with the promises of
// Schedule and Cancel for each job.

import (
	"context"
	"fmt"

	"github.com/wheelq/wheelq/internal/errs"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/wheel"
)

// MaxBatchJobs is the most jobs one ScheduleBatch or CancelBatch call
// takes. A larger list is refused whole (ErrInvalidOption); split it.
const MaxBatchJobs = 10_000

// batchChunk is the most jobs written in one round trip of a batch: a
// MULTI of a thousand jobs holds Redis for about a millisecond, which the
// other clients' commands wait behind.
const batchChunk = 1_000

// BatchJob is one job of ScheduleBatch: what Schedule takes.
type BatchJob struct {
	Topic   string
	Payload []byte
	Options []Option
}

// BatchResult is one job's result in ScheduleBatch, in the order of the
// jobs given: its id, or the error Schedule would have given for it
// (ErrDuplicate, ErrInvalidOption, ErrTooFar, ErrOutcomeUnknown, ...).
type BatchResult struct {
	ID  string
	Err error
}

// JobRef names a job: its topic and id.
type JobRef struct {
	Topic string
	ID    string
}

// ScheduleBatch schedules many jobs in one call, with a result per job: it
// is Schedule for each, with Schedule's promises for each (a nil Err means
// that job is durable; each job is written atomically and on its own, so
// one job's error, a duplicate say, leaves the others stored), but in one
// round trip for up to a thousand jobs (one MULTI, or one script call per
// partition touched) instead of one each.
//
// The error is for the call as a whole, and then no job was written: an
// empty list or one longer than MaxBatchJobs (ErrInvalidOption), a nil
// ctx, ErrClosed, or Redis out of reach before anything was sent
// (ErrUnavailable). The same id twice in one list is an ErrInvalidOption
// for the second; a job that is invalid gets its error and the others are
// written. If ctx ends or a round trip fails, the jobs of that round trip
// get an error wrapping ErrOutcomeUnknown (or ctx's error): each may or
// may not be stored, and scheduling the same list again is safe for jobs
// with IDs. The round trips after it are still tried; once Redis is known
// out of reach their jobs get ErrUnavailable (not stored).
func (q *Queue) ScheduleBatch(ctx context.Context, jobs []BatchJob) ([]BatchResult, error) {
	if err := checkCtx(ctx, "ScheduleBatch"); err != nil {
		return nil, err
	}
	if err := checkBatch(len(jobs)); err != nil {
		return nil, err
	}
	_, now := wheel.Readings(q.clock)
	out := make([]BatchResult, len(jobs))
	ready := make([]prepared, 0, len(jobs))
	at := make([]int, 0, len(jobs)) // index in jobs of each in ready
	seen := make(map[string]int, len(jobs))
	for i, bj := range jobs {
		j, err := q.prepare(bj.Topic, bj.Payload, bj.Options, now)
		if err == nil {
			if first, dup := seen[j.w.Key]; dup {
				err = fmt.Errorf("%w: jobs[%d]: id %s is also jobs[%d]'s", ErrInvalidOption, i, j.w.Key, first)
			}
			seen[j.w.Key] = i
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		ready = append(ready, j)
		at = append(at, i)
	}
	if q.closing() {
		return nil, ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return nil, errs.Errorf("wheelq: schedule batch: %w", err)
	}
	ws := make([]persist.Write, 0, min(len(ready), batchChunk))
	for lo := 0; lo < len(ready); lo += batchChunk {
		chunk := ready[lo:min(lo+batchChunk, len(ready))]
		probe, err := q.reach.admit(q.clock)
		if err != nil {
			if lo == 0 {
				return nil, errs.Errorf("wheelq: schedule batch: %w", err)
			}
			for k := range ready[lo:] {
				out[at[lo+k]].Err = errs.Errorf("wheelq: schedule %s: %w", ready[lo+k].w.Key, err)
			}
			break
		}
		ws = ws[:0]
		for k := range chunk {
			ws = append(ws, chunk[k].write())
		}
		res, err := q.writeBatch(ctx, ws)
		q.reach.note(ctx, err, probe, q.clock)
		for k := range chunk {
			var r persist.WriteResult
			if err == nil {
				r = res[k]
			}
			out[at[lo+k]].ID, out[at[lo+k]].Err = q.stored(chunk[k], r, err)
		}
	}
	return out, nil
}

// writeBatch writes one chunk of a batch, bounded by ctx and WriteTimeout.
func (q *Queue) writeBatch(ctx context.Context, ws []persist.Write) ([]persist.WriteResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, q.cfg.WriteTimeout)
	defer cancel()
	res, err := q.store.Write(ctx, q.recov.Tokens(), ws)
	if err == nil && len(res) != len(ws) {
		err = fmt.Errorf("%w: %d results for %d writes", persist.ErrCorrupt, len(res), len(ws))
	}
	return res, err
}

// CancelBatch cancels many jobs in one call, with an error per job in the
// order given: nil, ErrNotFound, ErrRunning or any error Cancel gives,
// with Cancel's promises for each, in one round trip for up to a thousand
// jobs. The error is for the call as a whole, as in ScheduleBatch. The
// same job twice in one list is an ErrInvalidOption for the second.
func (q *Queue) CancelBatch(ctx context.Context, jobs []JobRef) ([]error, error) {
	if err := checkCtx(ctx, "CancelBatch"); err != nil {
		return nil, err
	}
	if err := checkBatch(len(jobs)); err != nil {
		return nil, err
	}
	out := make([]error, len(jobs))
	keys := make([]string, 0, len(jobs))
	at := make([]int, 0, len(jobs))
	seen := make(map[string]int, len(jobs))
	for i, r := range jobs {
		err := validTopic(r.Topic)
		if err == nil {
			err = validID(r.ID)
		}
		key := persist.JobKey(r.Topic, r.ID)
		if err == nil {
			if first, dup := seen[key]; dup {
				err = fmt.Errorf("%w: jobs[%d]: %s is also jobs[%d]", ErrInvalidOption, i, key, first)
			}
			seen[key] = i
		}
		if err != nil {
			out[i] = err
			continue
		}
		keys = append(keys, key)
		at = append(at, i)
	}
	if q.closing() {
		return nil, ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return nil, errs.Errorf("wheelq: cancel batch: %w", err)
	}
	for lo := 0; lo < len(keys); lo += batchChunk {
		chunk := keys[lo:min(lo+batchChunk, len(keys))]
		probe, err := q.reach.admit(q.clock)
		if err != nil {
			if lo == 0 {
				return nil, errs.Errorf("wheelq: cancel batch: %w", err)
			}
			for k, key := range keys[lo:] {
				out[at[lo+k]] = errs.Errorf("wheelq: cancel %s: %w", key, err)
			}
			break
		}
		chs, err := q.cancelBatch(ctx, chunk)
		q.reach.note(ctx, err, probe, q.clock)
		for k, key := range chunk {
			if err != nil {
				out[at[lo+k]] = errs.Errorf("wheelq: cancel %s: %w", key, uncertain(err))
				continue
			}
			out[at[lo+k]] = q.cancelled(jobs[at[lo+k]].Topic, key, chs[k])
		}
	}
	return out, nil
}

// cancelBatch cancels one chunk of a batch, bounded by ctx and
// WriteTimeout.
func (q *Queue) cancelBatch(ctx context.Context, keys []string) ([]persist.Change, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, q.cfg.WriteTimeout)
	defer cancel()
	chs, err := q.store.CancelMany(ctx, keys)
	if err == nil && len(chs) != len(keys) {
		err = fmt.Errorf("%w: %d results for %d cancels", persist.ErrCorrupt, len(chs), len(keys))
	}
	return chs, err
}

// checkBatch checks the length of a batch.
func checkBatch(n int) error {
	switch {
	case n == 0:
		return fmt.Errorf("%w: an empty batch", ErrInvalidOption)
	case n > MaxBatchJobs:
		return fmt.Errorf("%w: a batch of %d jobs, at most %d (MaxBatchJobs)", ErrInvalidOption, n, MaxBatchJobs)
	}
	return nil
}
