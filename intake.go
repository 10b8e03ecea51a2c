package wheelq

// The intake: Schedule, Cancel and Reschedule store a change durably, in
// round trips shared by concurrent callers (batch.Batcher), and only then
// arm, disarm or re-arm the job in memory.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"time"

	"github.com/wheelq/wheelq/internal/batch"
	"github.com/wheelq/wheelq/internal/errs"

	"github.com/wheelq/wheelq/internal/crashpoint"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/wheel"
)

// idRunLength is how many consecutive random ids share a partition.
const idRunLength = 64

// Schedule stores a job and returns its id once Redis has acknowledged the
// write; only then is the job armed in memory. It runs at its due time
// (given by At or After; default now) on the process that owns its
// partition. With ID it is idempotent: an existing id is an ErrDuplicate,
// or replaced with OnDuplicate(Replace).
//
// A nil error means the job is durable (as durable as the Redis
// persistence settings make an acknowledged write; see docs/operations.md).
// An error means it may or may not be stored (for instance when ctx ended
// while the write was in flight); scheduling again with the same ID is
// safe.
func (q *Queue) Schedule(ctx context.Context, topic string, payload []byte, opts ...Option) (string, error) {
	if err := checkCtx(ctx, "Schedule"); err != nil {
		return "", err
	}
	_, now := wheel.Readings(q.clock) // due times are wall-clock readings
	j, err := q.prepare(topic, payload, opts, now)
	if err != nil {
		return "", err
	}
	if q.closing() {
		return "", ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return "", errs.Errorf("wheelq: schedule: %w", err)
	}
	// The round trip is bounded by WriteTimeout in the batcher; ctx bounds
	// the wait. A random id is new (66 random bits): it takes the plain write.
	probe, err := q.reach.admit(q.clock)
	if err != nil {
		return "", errs.Errorf("wheelq: schedule %s: %w", j.w.Key, err)
	}
	res, err := q.writes.Do(ctx, j.write())
	q.reach.note(ctx, err, probe, q.clock)
	if errors.Is(err, batch.ErrClosed) {
		return "", ErrClosed
	}
	return q.stored(j, res, err)
}

// prepared is a job checked and encoded by prepare, ready to be written.
type prepared struct {
	id  string
	rec persist.Record // Payload is the caller's: the cache copies it when armed
	w   persist.Write  // without Record, which write encodes
}

// write returns the job's write, its record encoded.
func (j *prepared) write() persist.Write {
	w := j.w
	w.Record = j.rec.Encode()
	return w
}

// prepare checks one job of Schedule or ScheduleBatch and makes its write.
// runsTopic checks topic for a new job or schedule: a valid name, and,
// with Config.RefuseUnhandled, one this queue handles or pulls.
func (q *Queue) runsTopic(topic string) error {
	if err := validTopic(topic); err != nil {
		return err
	}
	if q.cfg.RefuseUnhandled && (*q.handlers.Load())[topic] == nil && !q.pull.isDeclared(topic) {
		return &TopicModeError{Topic: topic, Reason: TopicNotRun}
	}
	return nil
}

func (q *Queue) prepare(topic string, payload []byte, opts []Option, now time.Time) (prepared, error) {
	if err := q.runsTopic(topic); err != nil {
		return prepared{}, err
	}
	var o scheduleOpts
	for _, opt := range opts {
		if opt == nil {
			return prepared{}, fmt.Errorf("%w: nil Option", ErrInvalidOption)
		}
		opt.apply(&o)
	}
	switch {
	case o.hasAt && o.hasAfter:
		return prepared{}, fmt.Errorf("%w: At and After together", ErrInvalidOption)
	case o.hasAt && o.at.IsZero():
		return prepared{}, fmt.Errorf("%w: %v", ErrInvalidOption, errZeroTime)
	case o.dup != Reject && o.dup != Replace:
		return prepared{}, fmt.Errorf("%w: OnDuplicate(%d)", ErrInvalidOption, int(o.dup))
	}
	due := now.Add(o.after)
	if o.hasAt {
		due = o.at
	}
	if d := due.Sub(now); d > q.cfg.MaxDelay {
		return prepared{}, fmt.Errorf("%w: %v ahead, at most %v", ErrTooFar, d.Round(time.Second), q.cfg.MaxDelay)
	}
	if len(payload) > q.cfg.MaxPayload {
		return prepared{}, fmt.Errorf("%w: %d bytes, at most %d", ErrPayloadTooLarge, len(payload), q.cfg.MaxPayload)
	}
	id, key := o.id, ""
	if !o.hasID {
		// New ids of consecutive calls share a partition, in runs about
		// as long as a batch: a batch then writes a few partitions with
		// one HSET and one ZADD each, instead of most of them.
		part := int(q.idRun.Add(1)/idRunLength) % q.cfg.Partitions
		key = persist.RandomKey(topic, part, q.cfg.Partitions, rand.Uint64) // the id is its tail: one allocation for both
		id = key[len(topic)+len(persist.KeySep):]
	} else if err := validID(id); err != nil {
		return prepared{}, err
	}
	maxAttempts := q.cfg.MaxAttempts
	if o.hasMax {
		if o.maxAttempts < 1 || o.maxAttempts > maxAttemptsLimit {
			return prepared{}, fmt.Errorf("%w: MaxAttempts(%d), want 1 to 2^31-1", ErrInvalidOption, o.maxAttempts)
		}
		maxAttempts = o.maxAttempts
	}
	var headers map[string]string
	if len(o.headers) > 0 {
		if err := checkHeaders(o.headers); err != nil {
			return prepared{}, err
		}
		headers = maps.Clone(o.headers) // the record (and the cache) keeps its own
	}
	if key == "" {
		key = persist.JobKey(topic, id)
	}
	return prepared{
		id: id,
		// The record keeps the caller's payload only until it is
		// encoded; the cache gets a copy, and only when the job is armed.
		rec: persist.Record{
			Topic: topic, ID: id, Rev: rand.Uint32(), MaxAttempts: maxAttempts,
			Created: now, Payload: payload, Headers: headers,
		},
		w: persist.Write{Key: key, Due: ceilMicro(due), Replace: o.dup == Replace || !o.hasID, Fresh: !o.hasID},
	}, nil
}

// stored finishes a job's write, given its result or error: it arms the
// job and counts it, and returns its id or the error Schedule gives.
func (q *Queue) stored(j prepared, res persist.WriteResult, err error) (string, error) {
	key := j.w.Key
	if err != nil {
		// The write may have reached Redis with its reply lost. Arm it
		// anyway, uncached: the claim runs it only if Redis has it.
		q.arm(key, j.w.Due, nil)
		return "", errs.Errorf("wheelq: schedule %s: %w", key, uncertain(err))
	}
	if res == persist.Duplicate {
		return "", fmt.Errorf("%w: %s", ErrDuplicate, key)
	}
	if q.crashAt(crashpoint.AfterWrite, key) {
		return "", errs.Errorf("wheelq: schedule %s: %w", key, crashpoint.ErrCrashed)
	}
	q.stats.scheduled.Add(1)
	q.observeScheduled(j.rec.Topic)
	if j.w.Replace && !j.w.Fresh {
		q.dropStart(key) // a job it replaced may have waited for a start
	}
	// Announce, then scan: read LoadedUntil only now, after the write.
	q.arm(key, j.w.Due, &j.rec)
	return j.id, nil
}

// Cancel deletes a job, pending or dead-lettered. After Cancel returns nil
// the job never starts. If a run of it had already been claimed (it is
// starting or running, here or in another process), Cancel still deletes
// it, so it will not be retried, and returns ErrRunning: that run goes on.
// A job that does not exist gives ErrNotFound. Concurrent cancels share
// Redis round trips; if ctx ends first, Cancel returns its error and the
// cancel may still be carried out. Once Shutdown has begun, Cancel returns
// ErrClosed and changes nothing.
func (q *Queue) Cancel(ctx context.Context, topic, id string) error {
	if err := checkCtx(ctx, "Cancel"); err != nil {
		return err
	}
	if err := validTopic(topic); err != nil {
		return err
	}
	if err := validID(id); err != nil {
		return err
	}
	if q.closing() {
		return ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return errs.Errorf("wheelq: cancel: %w", err)
	}
	key := persist.JobKey(topic, id)
	// Concurrent cancels share a round trip, as Schedule calls do.
	probe, err := q.reach.admit(q.clock)
	if err != nil {
		return errs.Errorf("wheelq: cancel %s: %w", key, err)
	}
	ch, err := q.cancels.Do(ctx, key)
	q.reach.note(ctx, err, probe, q.clock)
	if errors.Is(err, batch.ErrClosed) {
		return ErrClosed
	}
	if err != nil {
		return errs.Errorf("wheelq: cancel %s: %w", key, uncertain(err))
	}
	return q.cancelled(topic, key, ch)
}

// cancelled finishes a cancel that Redis carried out with the result ch:
// the job leaves the wheel, the cache and the start gate here, and the
// error Cancel gives is returned.
func (q *Queue) cancelled(topic, key string, ch persist.Change) error {
	q.sched.Cancel(key)
	q.cache.Remove(key)
	q.dropStart(key)
	if t, ok := q.gate.unhold(key); ok {
		// Claimed here but not started: it never will.
		q.unheldAhead(t)
		q.settle.unclaim(t)
		if ch == persist.ChangedWhileRunning {
			ch = persist.Changed
		}
	}
	if q.pull.dropSpare(key) && ch == persist.ChangedWhileRunning {
		ch = persist.Changed // reserved here for no consumer yet: no run goes on
	}
	switch ch {
	case persist.NotFound:
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	case persist.ChangedWhileRunning:
		q.stats.cancelled.Add(1)
		q.observeCancelled(topic)
		return fmt.Errorf("%w: %s", ErrRunning, key)
	}
	q.stats.cancelled.Add(1)
	q.observeCancelled(topic)
	return nil
}

// Reschedule moves a pending job to a new due time, durably first. A job
// that is not pending (unknown, done or dead-lettered) gives ErrNotFound;
// one with a run in progress is moved, and ErrRunning says that run goes
// on (it will run again at the new time). Concurrent reschedules share
// Redis round trips; if ctx ends first, Reschedule returns its error and
// the move may still be carried out (the job is armed at the new time
// either way; a claim finds where it really is). Once Shutdown has begun,
// Reschedule returns ErrClosed and changes nothing.
func (q *Queue) Reschedule(ctx context.Context, topic, id string, due time.Time) error {
	if err := checkCtx(ctx, "Reschedule"); err != nil {
		return err
	}
	key, err := q.moveTo(ctx, "reschedule", topic, id, due)
	if err != nil {
		return err
	}
	p := q.store.PartitionOf(key)
	rev := rand.Uint32()
	dueUs := ceilMicro(due)
	// Concurrent reschedules share a round trip, as cancels do.
	probe, err := q.reach.admit(q.clock)
	if err != nil {
		return errs.Errorf("wheelq: reschedule %s: %w", key, err)
	}
	ch, err := q.moves.Do(ctx, persist.Move{Key: key, Due: dueUs, Rev: rev})
	q.reach.note(ctx, err, probe, q.clock)
	if errors.Is(err, batch.ErrClosed) {
		return ErrClosed
	}
	if err != nil {
		// It may have moved: be armed at the new time too; the claim
		// re-arms it at its stored time if it did not.
		q.arm(key, dueUs, nil)
		return errs.Errorf("wheelq: reschedule %s: %w", key, uncertain(err))
	}
	if ch == persist.NotFound {
		q.sched.Cancel(key)
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if old, ok := q.cache.Peek(key); ok {
		r := *old
		r.Rev, r.Due = rev, time.UnixMicro(dueUs) // the claimers read a pulled job's due time here
		q.cache.Add(key, &r)
	}
	q.dropStart(key) // admitted again at its new time
	if t, ok := q.gate.unhold(key); ok {
		q.unheldAhead(t)
		q.settle.unclaim(t) // claimed here but not started: it runs at the new time
		if ch == persist.ChangedWhileRunning {
			ch = persist.Changed
		}
	}
	if q.pull.dropSpare(key) && ch == persist.ChangedWhileRunning {
		ch = persist.Changed // reserved here for no consumer yet
	}
	if dueUs <= q.recov.LoadedUntil(p) {
		q.arm(key, dueUs, nil)
	} else {
		q.sched.Cancel(key)
	}
	if ch == persist.ChangedWhileRunning {
		return fmt.Errorf("%w: %s", ErrRunning, key)
	}
	return nil
}

// moveTo checks a call (op) that moves an existing job to a due time
// (Reschedule, Requeue): a valid topic and id, a due time within MaxDelay
// by the wall clock, a queue not shutting down, the namespace's layout. It
// returns the job's key.
func (q *Queue) moveTo(ctx context.Context, op, topic, id string, due time.Time) (string, error) {
	if err := validTopic(topic); err != nil {
		return "", err
	}
	if err := validID(id); err != nil {
		return "", err
	}
	if due.IsZero() {
		return "", fmt.Errorf("%w: %s: %v", ErrInvalidOption, op, errZeroTime)
	}
	if _, wall := wheel.Readings(q.clock); due.Sub(wall) > q.cfg.MaxDelay {
		return "", fmt.Errorf("%w: %v ahead, at most %v", ErrTooFar, due.Sub(wall).Round(time.Second), q.cfg.MaxDelay)
	}
	if q.closing() {
		return "", ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return "", errs.Errorf("wheelq: %s: %w", op, err)
	}
	return persist.JobKey(topic, id), nil
}

// errZeroTime says why a zero time.Time is refused as a due time.
var errZeroTime = errors.New("the zero time.Time as a due time (an uninitialised time would run the job at once; pass time.Now() to run it now)")

// checkCtx refuses a nil context with ErrInvalidOption, where using it
// would panic.
func checkCtx(ctx context.Context, method string) error {
	if ctx == nil {
		return fmt.Errorf("%w: %s with a nil context.Context (use context.Background())", ErrInvalidOption, method)
	}
	return nil
}

// ceilMicro returns t in unix microseconds, rounded up, so that a stored
// due time is never before the requested one. A time before the Unix
// epoch (the zero time.Time, say) gives 0: it is past, and runs at once
// all the same, while the wheel's time of every stored due time stays
// within a time.Duration of the clock.
func ceilMicro(t time.Time) int64 {
	us := t.UnixMicro()
	if t.Nanosecond()%1000 != 0 {
		us++
	}
	return max(us, 0)
}
