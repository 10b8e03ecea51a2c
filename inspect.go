package wheelq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wheelq/wheelq/internal/errs"
	"github.com/wheelq/wheelq/internal/persist"
)

// JobState is where a job stands.
type JobState int

// Job states.
const (
	// StatePending: waiting for its due time (or for a retry).
	StatePending JobState = iota + 1
	// StateDead: dead-lettered; see Requeue and Cancel.
	StateDead
	// StateRunning: pending, and claimed by a worker for a run that may be
	// in progress (its outcome is not yet stored).
	StateRunning
	// StateDone: finished, its handler succeeded. Kept in the run history
	// for its retention (Config.History).
	StateDone
	// StateCancelled: cancelled. Kept in the run history for its retention.
	StateCancelled
)

// String returns "pending", "dead", "running", "done", "cancelled" or
// "unknown".
func (s JobState) String() string {
	switch s {
	case StatePending:
		return "pending"
	case StateDead:
		return "dead"
	case StateRunning:
		return "running"
	case StateDone:
		return "done"
	case StateCancelled:
		return "cancelled"
	}
	return "unknown"
}

// JobInfo describes a stored job.
type JobInfo struct {
	Topic, ID string
	State     JobState
	// Due is the due time (pending) or the time it was dead-lettered.
	Due time.Time
	// Attempts counts the runs started so far.
	Attempts    int
	MaxAttempts int
	// LastError is the error of the last failed run: for a dead job, why
	// it died.
	LastError string
	Created   time.Time
	// Payload is the job's payload; nil for a job that finished (done or
	// cancelled: the run history keeps no payload).
	Payload []byte
	// Finished is when the job finished: acked (StateDone), cancelled
	// (StateCancelled) or dead-lettered (StateDead, where it equals Due).
	// Zero for a pending job.
	Finished time.Time
	// Headers are the job's headers (the Headers option), kept in the run
	// history too; nil if none.
	Headers map[string]string
	// Reserved says a consumer holds the job (Reserve, a pulled topic's;
	// State is StateRunning): Due is then when the reservation lapses
	// unless acked, nacked or touched. Lookup and List tell it.
	Reserved bool
}

func infoOf(r persist.Record, st persist.State) JobInfo {
	info := JobInfo{Topic: r.Topic, ID: r.ID, State: StatePending, Due: r.Due, Attempts: r.Attempt,
		MaxAttempts: r.MaxAttempts, LastError: r.LastError, Created: r.Created, Payload: r.Payload, Headers: r.Headers}
	switch st {
	case persist.DeadLettered:
		info.State, info.Finished = StateDead, r.Due
	case persist.Done:
		info.State, info.Finished = StateDone, r.Finished
		info.Attempts++ // the run that succeeded (the record is its start's)
	case persist.Cancelled:
		info.State, info.Finished = StateCancelled, r.Finished
	case persist.Running:
		info.State = StateRunning
		info.Attempts++ // the run in progress (the record is its start's)
	case persist.Reserved:
		info.State, info.Reserved = StateRunning, true
		info.Attempts++ // the reservation's attempt
	}
	return info
}

// Lookup returns a job: a stored one (pending or dead), or one that
// finished (done or cancelled) within the run history's retention
// (Config.History), so that "did order 123's expiry run?" has an answer.
// A job never scheduled, or finished longer ago than the retention, is
// ErrNotFound. A record that cannot be decoded gives an error wrapping
// ErrCorrupt.
func (q *Queue) Lookup(ctx context.Context, topic, id string) (JobInfo, error) {
	if err := checkCtx(ctx, "Lookup"); err != nil {
		return JobInfo{}, err
	}
	if err := validTopic(topic); err != nil {
		return JobInfo{}, err
	}
	if err := validID(id); err != nil {
		return JobInfo{}, err
	}
	if q.closing() {
		return JobInfo{}, ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return JobInfo{}, errs.Errorf("wheelq: lookup: %w", unreachable(err))
	}
	key := persist.JobKey(topic, id)
	r, st, err := q.store.Get(ctx, key)
	if errors.Is(err, persist.ErrNotFound) {
		var ran bool
		r, st, ran, err = q.store.History(ctx, key)
		if err == nil {
			info := infoOf(r, st)
			if ran {
				info.Attempts++ // a run was claimed when it was cancelled
			}
			return info, nil
		}
	}
	if errors.Is(err, persist.ErrNotFound) {
		return JobInfo{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return JobInfo{}, errs.Errorf("wheelq: lookup: %w", unreachable(err))
	}
	return infoOf(r, st), nil
}

// DeadJobs returns up to limit dead-lettered jobs, oldest death first
// (List's pages with JobFilter{State: StateDead}). A dead job whose record
// cannot be decoded is listed with its error as LastError. A negative
// limit is an ErrInvalidOption.
func (q *Queue) DeadJobs(ctx context.Context, limit int) ([]JobInfo, error) {
	if err := checkCtx(ctx, "DeadJobs"); err != nil {
		return nil, err
	}
	if limit < 0 {
		return nil, fmt.Errorf("%w: DeadJobs limit %d < 0", ErrInvalidOption, limit)
	}
	var out []JobInfo
	for cursor := ""; len(out) < limit; {
		jobs, next, err := q.List(ctx, JobFilter{State: StateDead}, cursor, min(limit-len(out), MaxListLimit))
		if err != nil {
			return nil, errs.Errorf("wheelq: dead jobs: %w", unreachable(err))
		}
		out = append(out, jobs...)
		if next == "" {
			break
		}
		cursor = next
	}
	return out, nil
}
