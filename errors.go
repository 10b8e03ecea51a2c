package wheelq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq/internal/batch"
	"github.com/wheelq/wheelq/internal/persist"
)

// Errors of Schedule.
var (
	// ErrDuplicate is returned by Schedule when a job with the same topic
	// and id exists (pending or dead) and Replace was not given.
	ErrDuplicate = errors.New("wheelq: job already exists")
	// ErrInvalidTopic is returned for an empty topic, one longer than 256
	// bytes, or one containing '/', a control character or bytes that
	// are not UTF-8.
	ErrInvalidTopic = errors.New("wheelq: invalid topic")
	// ErrInvalidID is returned for an empty id (ID("")), one longer than
	// 512 bytes, or one with a control character or bytes that are not
	// UTF-8, by Schedule and by the calls that name a job by id.
	ErrInvalidID = errors.New("wheelq: invalid job id")
	// ErrPayloadTooLarge is returned for a payload over Config.MaxPayload.
	ErrPayloadTooLarge = errors.New("wheelq: payload too large")
	// ErrTooFar is returned for a due time more than Config.MaxDelay away
	// (by Schedule, Reschedule and Requeue).
	ErrTooFar = errors.New("wheelq: due time beyond the maximum delay")
	// ErrInvalidOption is returned for an option out of its range or in
	// conflict with another: MaxAttempts below 1 or above 2^31-1, At
	// together with After, a nil Option, an unknown DuplicatePolicy; and
	// by DeadJobs for a negative limit.
	ErrInvalidOption = errors.New("wheelq: invalid option")
	// ErrInvalidConfig is returned by New for a Config field out of its
	// range (the message names it), and for a nil client.
	ErrInvalidConfig = errors.New("wheelq: invalid config")
)

// Errors of Cancel, Reschedule and Requeue.
var (
	// ErrNotFound is returned when no such job exists (for Reschedule: no
	// such pending job; for Requeue: no such dead job).
	ErrNotFound = errors.New("wheelq: job not found")
	// ErrRunning is returned by Cancel and Reschedule when the change was
	// made but a run of the job had already been claimed (here or in
	// another process): that run goes on, and its outcome is ignored, so a
	// cancelled job is not retried and a rescheduled one runs again at its
	// new time. Treat it as success plus a warning.
	ErrRunning = errors.New("wheelq: job is running")
	// ErrPaused is returned by RunNow when the job was made due now but its
	// topic is paused: it runs on Resume, not now. Like ErrRunning, the
	// change was made.
	ErrPaused = errors.New("wheelq: topic is paused")
)

// ErrContended is returned by DeclareRecurring, DeclareRecurringIf,
// RemoveRecurring and RemoveRecurringIf when the schedule changed between
// each of their reads of it and their change, five times in a row (other
// callers declaring or removing it, or the queues storing its slots, at
// that moment). The call changed nothing: the caller may retry it, after
// a short pause.
var ErrContended = errors.New("wheelq: recurring schedule contended (changed meanwhile at each try)")

// ErrUnavailable is returned by Schedule, Cancel, Reschedule and Requeue,
// without sending anything, while Redis is known to be unreachable: a call
// shortly before found no connection to it, or got no answer within
// Config.WriteTimeout. One call in a while still
// goes through to find out whether Redis is back (see Queue.Schedule). The
// call that finds Redis unreachable returns it too when no connection
// could be made (a refused dial: nothing was sent). It is also the error
// of a call that changed nothing because Redis could not be reached or
// heard from (the reads: Lookup, List, Counts, DeadJobs, Recurrings,
// Paused, Workers; and the reads before Pause, DeclareRecurring and
// RemoveRecurring), of a write Redis refused for now (out of memory,
// READONLY, LOADING and the like: nothing was written), and of Ping
// (with ErrNotReplicated when too few replicas acknowledge). The error
// wraps the failure that was seen.
var ErrUnavailable = errors.New("wheelq: redis unreachable")

// ErrOutcomeUnknown wraps the error of a Schedule, Cancel, Reschedule or
// Requeue whose request may or may not have been carried out: it failed
// after it may have reached Redis (a timeout, a lost connection, ctx ending
// while the request was in flight or queued to be sent). Check with Lookup,
// or call again: a Schedule with the same ID and a Cancel are safe to
// repeat. An error without it (a refusal by Redis, such as out of memory;
// ErrClosed; a bad argument) means nothing was changed.
var ErrOutcomeUnknown = errors.New("wheelq: outcome unknown (the request may have been applied)")

// uncertain marks err, the failure of a request that changes jobs, with
// ErrOutcomeUnknown unless it is known that nothing was applied: Redis
// answered with an error (a script refuses as a whole: the write path's
// commands run in one script or one MULTI), the request was refused
// before it was sent, or no connection could be made to send it on (a dial
// error: go-redis sends a command only on a connection it has; marked
// ErrUnavailable).
func uncertain(err error) error {
	if refusedForNow(err) && !errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err) // not done: Redis said so
	}
	var rerr redis.Error
	var nerr *net.OpError
	if errors.As(err, &nerr) && nerr.Op == "dial" && !errors.Is(err, ErrUnavailable) {
		// Never sent: Redis could not be reached.
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if errors.As(err, &rerr) || errors.Is(err, ErrClosed) || errors.Is(err, batch.ErrClosed) ||
		errors.Is(err, ErrFenced) || errors.Is(err, ErrLayout) || errors.As(err, &nerr) && nerr.Op == "dial" {
		return err
	}
	return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
}

// unreachable wraps in ErrUnavailable a failure to reach Redis or to hear
// from it (a refused dial, a lost connection, no answer in time) of a call
// that changed nothing in Redis (a read, or the reads before a write): the
// caller may simply try again. Redis's own error replies, the queue's
// errors and the caller's context ending are returned as they are.
func unreachable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOutcomeUnknown) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var nerr net.Error
	if refusedForNow(err) || errors.As(err, &nerr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// refusedForNow reports whether err is Redis's reply that it cannot take
// the command now: out of memory (maxmemory with noeviction), a replica
// (READONLY: a failover under way), loading its data, its primary down,
// a script running, a cluster slot moving or down. Nothing was done, and
// the same call may go through later.
func refusedForNow(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	for _, p := range [...]string{"OOM ", "READONLY ", "LOADING ", "MASTERDOWN ", "BUSY ", "TRYAGAIN ", "CLUSTERDOWN ", "NOREPLICAS "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// Errors of the queue's life cycle.
var (
	// ErrClosed is returned by calls on a queue that is shutting down or
	// has shut down: Start, Schedule, Cancel, Reschedule, Requeue,
	// Lookup, DeadJobs and Stats (which returns its in-process figures
	// with it). Such a call changes nothing in Redis.
	ErrClosed = errors.New("wheelq: queue closed")
	// ErrNoHandler is the failure recorded for a job whose topic has no
	// handler in the process that fired it. The job is retried like any
	// failure, so a rolling deploy does not lose it.
	ErrNoHandler = errors.New("wheelq: no handler for topic")
	// ErrCorrupt marks a record in Redis that cannot be decoded; such a job
	// is dead-lettered with this reason, never run and never dropped.
	ErrCorrupt = persist.ErrCorrupt
	// ErrFenced is returned when this process has lost a partition's lease
	// to another owner; it no longer runs or settles that partition's jobs.
	ErrFenced = persist.ErrFenced
	// ErrLayout is returned when the namespace in Redis has another
	// number of partitions than Config.Partitions: by Start, and by a
	// queue's first call that reads or writes jobs.
	ErrLayout = persist.ErrLayout
	// ErrNotReplicated is wrapped, with ErrOutcomeUnknown, by the error of
	// a write that the primary applied but fewer replicas than
	// Config.ReplicaAcks acknowledged within ReplicaTimeout (it may not
	// survive a failover); and, with ErrUnavailable, by Ping's when fewer
	// replicas than that acknowledge at all (every write would fail so).
	ErrNotReplicated = persist.ErrNotReplicated
	// ErrUnsupportedClient is returned by New for a Redis client that
	// may send a script's keys to different servers (a *redis.Ring).
	ErrUnsupportedClient = persist.ErrUnsupportedClient
)

// RetryError is returned by a handler (through RetryAfter) to ask for the
// next attempt after a given delay instead of the configured backoff.
type RetryError struct {
	Delay time.Duration
	Err   error
}

// Error describes the requested retry.
func (e *RetryError) Error() string {
	return fmt.Sprintf("wheelq: retry after %v: %v", e.Delay, e.Err)
}

// Unwrap returns the handler's error.
func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter returns an error that makes the job run again after d (if it
// has attempts left; otherwise it is dead-lettered).
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &RetryError{Delay: d, Err: err}
}

// PermanentError is returned by a handler (through Permanent) to give up
// at once: the job goes to the dead-letter set whatever attempts are left.
type PermanentError struct {
	Err error
}

// Error describes the permanent failure.
func (e *PermanentError) Error() string { return "wheelq: permanent failure: " + e.Err.Error() }

// Unwrap returns the handler's error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the job is dead-lettered without retrying.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("gave up")
	}
	return &PermanentError{Err: err}
}

// PanicError is the failure recorded when a handler panics.
type PanicError struct {
	Value any
	Stack []byte
}

// Error describes the panic.
func (e *PanicError) Error() string { return fmt.Sprintf("wheelq: handler panic: %v", e.Value) }

// TopicModeError is the error of a call refused because of how this queue
// runs a topic (see ErrTopicMode, which it matches with errors.Is);
// errors.As gives the topic and the reason, so that a caller can word it
// in its own terms rather than match the message.
type TopicModeError struct {
	Topic  string
	Reason TopicModeReason
}

// TopicModeReason says why a TopicModeError refused a call.
type TopicModeReason int

const (
	// TopicNotRun: with Config.RefuseUnhandled, a job, schedule or
	// requeue of a topic this queue neither handles nor pulls.
	TopicNotRun TopicModeReason = iota + 1
	// TopicPulled: Handle or SetLimit for a topic this queue pulls.
	TopicPulled
	// TopicHandled: Pull of a topic with a handler.
	TopicHandled
	// TopicLimited: Pull of a topic with a Limit.
	TopicLimited
)

// Error describes the refusal: ErrTopicMode's text and the reason.
func (e *TopicModeError) Error() string {
	var why string
	switch e.Reason {
	case TopicNotRun:
		why = "is neither handled nor pulled here (Config.RefuseUnhandled)"
	case TopicPulled:
		why = "is pulled (Pull)"
	case TopicHandled:
		why = "has a handler"
	case TopicLimited:
		why = "has a Limit (its consumers decide how many jobs they take)"
	default:
		why = fmt.Sprintf("is refused (reason %d)", int(e.Reason))
	}
	return fmt.Sprintf("%v: topic %q %s", ErrTopicMode, e.Topic, why)
}

// Unwrap returns ErrTopicMode.
func (e *TopicModeError) Unwrap() error { return ErrTopicMode }
