package wheelq

import (
	"context"
	"time"
)

// Job is one run of a scheduled job, as a handler sees it.
type Job struct {
	// Topic and ID address the job.
	Topic string
	ID    string
	// Payload is the data given to Schedule. The handler may keep it.
	Payload []byte
	// Attempt is this run's number, from 1. Delivery is at-least-once: a
	// run that was in progress when its process died is run again with the
	// same Attempt (and Rerun set), so handlers must be idempotent.
	Attempt int
	// Rerun is true when an earlier run of this attempt was claimed by a
	// process that stopped (a crash, kill -9, a hard Shutdown, a lease
	// lost) before its outcome was stored: that run may have done some or
	// all of the job's work, and this one may repeat it. Check what was
	// done before doing it again. False when no such run is known (a run
	// claimed only, and never started, before its process died counts as
	// one: Rerun errs towards true).
	Rerun bool
	// MaxAttempts is the number of runs allowed before the job is
	// dead-lettered.
	MaxAttempts int
	// Due is when the job was due; the handler runs at or after it.
	Due time.Time
	// Created is when the job was first scheduled (second precision).
	Created time.Time
	// LastError is the error of the previous run, if it failed.
	LastError string
	// Headers are the pairs given to Schedule with the Headers option
	// (nil if none): trace context, say. The map is shared with the
	// queue's copy of the job: read it, never write to it.
	Headers map[string]string
}

// Handler runs jobs of a topic. Its outcome decides what happens next:
//
//   - nil: the job is done and removed from Redis;
//   - an error (or a panic): the job runs again after the configured
//     backoff, or is dead-lettered once MaxAttempts runs failed;
//   - RetryAfter(d, err): as an error, but after d;
//   - Permanent(err): dead-lettered at once.
//
// The context is cancelled when the job's timeout (Config.HandlerTimeout)
// passes or the queue is shut down hard; a handler should return then.
type Handler interface {
	HandleJob(ctx context.Context, job *Job) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *Job) error

// HandleJob calls f(ctx, job).
func (f HandlerFunc) HandleJob(ctx context.Context, job *Job) error { return f(ctx, job) }
