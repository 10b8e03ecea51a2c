package wheelq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/wheelq/wheelq/internal/breaker"
	"github.com/wheelq/wheelq/wheel"
)

// reach is the breaker of the calls that change jobs (Schedule, Cancel,
// Reschedule, Requeue and their batches): while Redis is known to be
// unreachable they fail at once with ErrUnavailable instead of each
// spending the client's whole dial-retry budget (3.3 s with go-redis
// v9.23's defaults); see internal/breaker.
type reach struct{ b breaker.Breaker }

// admit says whether a call may go to Redis now (by clock); its error
// wraps ErrUnavailable and the failure seen last.
func (r *reach) admit(clock wheel.Clock) (probe bool, err error) {
	if r.b.Up() {
		return false, nil // no clock read while Redis is reachable
	}
	probe, err = r.b.Admit(clock.Now())
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return probe, nil
}

// down returns, while Redis is known to be unreachable, the error admit
// would (wrapping ErrUnavailable), and nil while it is reachable; unlike
// admit it never takes a probe's turn. It is for a call that will not go
// to Redis now but says why it has nothing.
func (r *reach) down(clock wheel.Clock) error {
	if r.b.Up() {
		return nil // no clock read while Redis is reachable
	}
	if err := r.b.Err(clock.Now()); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// callerDeadline says err is a deadline's (the context's, or a network
// timeout: go-redis with ContextTimeoutEnabled sets the connection's from
// ctx) and ctx has ended or its deadline has passed: the caller's own,
// nothing of Redis.
func callerDeadline(ctx context.Context, err error) bool {
	if err == nil || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)) {
		return false
	}
	dl, ok := ctx.Deadline()
	return ctx.Err() != nil || (ok && !time.Now().Before(dl))
}

// note records the outcome err of a call that admit let through, made
// for a caller whose context is ctx. A call ended by the queue's own
// deadline (WriteTimeout) while ctx goes on got no answer from Redis in
// all that time: it counts as Redis unreachable, as a refused connection
// does. One ended by ctx says nothing of Redis: nor does a network
// timeout once ctx's deadline has passed (go-redis with
// ContextTimeoutEnabled sets the connection's deadline from ctx's, and
// its "i/o timeout" can come before ctx.Err says so).
func (r *reach) note(ctx context.Context, err error, probe bool, clock wheel.Clock) {
	if callerDeadline(ctx, err) {
		err = context.DeadlineExceeded // the caller's deadline: nothing of Redis
	} else if errors.Is(err, context.DeadlineExceeded) {
		err = breaker.ErrNoAnswer
	}
	if !probe && r.b.Up() && (err == nil || !breaker.IsConnErr(err)) {
		return // nothing to record: no clock read
	}
	r.b.Note(err, probe, clock.Now())
}

// Ping checks that Redis answers, through the queue's client: nil, or an
// error wrapping ErrUnavailable when Redis could not be reached (ctx's
// error when it ended first). Its answer also tells the queue: while Redis
// is taken to be unreachable, the calls that change jobs fail at once with
// ErrUnavailable and one of them goes through every 250 ms to find out
// whether it is back; a Ping that got an answer lets them all through at
// once. Made for readiness checks, so that a process reported ready takes
// writes: with ReplicaAcks, it also waits (up to ReplicaTimeout, 500 ms at
// most) for that many replicas to acknowledge, and fails with
// ErrNotReplicated and ErrUnavailable when fewer do (a replica down: every
// write would fail so).
func (q *Queue) Ping(ctx context.Context) error {
	if err := checkCtx(ctx, "Ping"); err != nil {
		return err
	}
	err := q.store.Ping(ctx)
	if errors.Is(err, ErrNotReplicated) {
		// Redis answered: the queue's reach is fine; its writes are not.
		q.reach.note(ctx, nil, false, q.clock)
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	q.reach.note(ctx, err, false, q.clock)
	if callerDeadline(ctx, err) {
		end := ctx.Err()
		if end == nil {
			end = context.DeadlineExceeded // passed; ctx.Err not yet set
		}
		if !errors.Is(err, end) {
			return fmt.Errorf("wheelq: Ping: %w (%w)", end, err)
		}
		return err
	}
	if err != nil && breaker.IsConnErr(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}
