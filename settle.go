package wheelq

// Settling: outcomes of runs (ack, retry, dead-letter, unclaim) are
// queued without waiting and stored by a batch.Retrier in shared round
// trips, retried while Redis is down; the inflight set keeps a job from
// running again here until its outcome is stored.

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/wheel"
)

// inflightSet holds the keys this process has claimed (or is claiming)
// and whose outcome is not yet stored: such a job must not run again
// here, whatever Redis says of it.
type inflightSet struct {
	mu   sync.Mutex
	keys map[string]struct{} // guarded by mu
	// left is told of each key remove forgets (the limits' permits go
	// with it: limits.go); set once by New.
	left func(key string)
}

// claim adds the keys of fs that are not in the set, and returns the
// jobs added (in fs's array) and those found in the set (busy: a run of
// theirs has no stored outcome yet).
func (s *inflightSet) claim(fs []firedJob) (added, busy []firedJob) {
	added = fs[:0]
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range fs {
		if _, running := s.keys[f.key]; running {
			busy = append(busy, f)
			continue
		}
		s.keys[f.key] = struct{}{}
		added = append(added, f)
	}
	return added, busy
}

// add adds key to the set.
func (s *inflightSet) add(key string) {
	s.mu.Lock()
	s.keys[key] = struct{}{}
	s.mu.Unlock()
}

// settled forgets the keys of outcomes that were stored (or dropped).
func (s *inflightSet) settled(os []persist.Outcome) {
	s.mu.Lock()
	for _, o := range os {
		delete(s.keys, o.Key)
	}
	s.mu.Unlock()
	if s.left != nil {
		for _, o := range os {
			s.left(o.Key)
		}
	}
}

// remove forgets keys whose outcome is stored (or that will not run).
func (s *inflightSet) remove(keys ...string) {
	s.mu.Lock()
	for _, k := range keys {
		delete(s.keys, k)
	}
	s.mu.Unlock()
	if s.left != nil {
		for _, k := range keys {
			s.left(k)
		}
	}
}

// any reports whether a key for which match is true is in the set.
func (s *inflightSet) any(match func(key string) bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.keys {
		if match(k) {
			return true
		}
	}
	return false
}

// settleLinger is how long outcomes (acks, retries) wait to be sent with
// others. Nothing waits on them, and at low rates batches of one or two
// cost a round trip and a kilobyte of garbage each, whose collections
// delay the jobs that are starting.
const settleLinger = 5 * time.Millisecond

// corruptJob is a job to dead-letter for a record that cannot be decoded:
// raw is the record as read, rec the dead record to store instead.
type corruptJob struct {
	key      string
	raw, rec []byte
}

// settle queues the outcome of a run; the Retrier stores it, retrying
// while Redis is down.
func (q *Queue) settle(t *task, attempt int, err error) {
	o := persist.Outcome{Key: t.key, Rev: t.rec.Rev}
	if err == nil { // the common case, before errors.As's targets escape
		o.Op = persist.Ack
		q.cache.Remove(t.key)
		q.stats.succeeded.Add(1)
		q.storeOutcome(o)
		return
	}
	var perm *PermanentError
	var retryErr *RetryError
	switch {
	case errors.As(err, &perm) || attempt >= t.rec.MaxAttempts:
		o.Op = persist.Dead
		rec := *t.rec
		rec.Rev, rec.Attempt, rec.LastError = rand.Uint32(), attempt, truncate(err.Error(), 2048)
		o.Record = rec.Encode()
		q.cache.Remove(t.key)
		q.stats.dead.Add(1)
		q.observeDead(t.rec.Topic)
		q.log.Warn("wheelq: job dead-lettered", "topic", t.rec.Topic, "id", t.rec.ID, "attempt", attempt,
			"max_attempts", t.rec.MaxAttempts, "err", err)
	default:
		delay := q.cfg.Backoff(attempt, err)
		if errors.As(err, &retryErr) {
			delay = retryErr.Delay
		}
		o.Op = persist.Retry
		rec := *t.rec
		rec.Rev, rec.Attempt, rec.LastError = rand.Uint32(), attempt, truncate(err.Error(), 2048)
		o.Record = rec.Encode()
		_, wall := wheel.Readings(q.clock)
		o.Due = ceilMicro(wall.Add(delay))
		rec.Due = time.UnixMicro(o.Due)
		q.cache.Add(t.key, &rec)
		q.stats.retried.Add(1)
		q.observeRetried(t.rec.Topic, delay)
		q.log.Warn("wheelq: job failed; retrying", "topic", t.rec.Topic, "id", t.rec.ID, "attempt", attempt,
			"max_attempts", t.rec.MaxAttempts, "retry_in", delay, "err", err)
	}
	q.storeOutcome(o)
}

// storeOutcome queues o for the retrier that stores outcomes.
func (q *Queue) storeOutcome(o persist.Outcome) {
	if aerr := q.settles.Add(o); aerr != nil {
		// Only after a hard shutdown: the job stays pending and runs again.
		q.log.Warn("wheelq: outcome dropped after shutdown; the job will run again", "key", o.Key)
	}
}

// execSettle stores a batch of outcomes; retries are armed once stored.
func (q *Queue) execSettle(ctx context.Context, os []persist.Outcome) error {
	// Outcomes of partitions lost to another owner are dropped: that owner
	// runs those jobs again (at-least-once). Shutdown stores the outcomes
	// before it releases the leases, and a partition handed over keeps its
	// lease until they are stored (Holds).
	kept := os
	for i, o := range os {
		if !q.recov.Holds(q.store.PartitionOf(o.Key)) {
			kept = slices.Clip(os[:i:i]) // copy on the first drop
			for _, o := range os[i+1:] {
				if q.recov.Holds(q.store.PartitionOf(o.Key)) {
					kept = append(kept, o)
				}
			}
			break
		}
	}
	var applied []bool
	if len(kept) > 0 {
		var err error
		_, wall := wheel.Readings(q.clock)
		applied, err = q.store.Settle(ctx, q.fence, wall.UnixMicro(), kept)
		if err != nil {
			q.stats.redisErrors.Add(1)
			return err
		}
	}
	q.inflight.settled(os)
	for i, o := range kept {
		if applied[i] && o.Op == persist.Retry {
			q.arm(o.Key, o.Due, nil)
		}
	}
	return nil
}

// unclaim gives back the claim of a task that will not run here.
func (q *Queue) unclaim(t *task) {
	if !t.verified {
		q.inflight.remove(t.key)
		return
	}
	_ = q.settles.Add(persist.Outcome{Op: persist.Unclaim, Key: t.key})
}

// dropTask forgets a claimed task that will not start here because its
// partition is no longer (surely) this process's. Nothing is sent to
// Redis: the partition's next owner clears the claim marks when it takes
// the partition over.
func (q *Queue) dropTask(t *task) {
	q.stats.dropped.Add(1)
	q.inflight.remove(t.key)
}

// deadLetterCorrupt moves a job whose record cannot be decoded to the
// dead-letter set, keeping the raw bytes as its payload and the cause as
// its last error. The move is guarded by the whole raw record (which may be
// too short to hold a revision), and leaves inflight once stored.
func (q *Queue) deadLetterCorrupt(key string, raw []byte, cause error) {
	q.log.Error("wheelq: corrupt job record, dead-lettering it", "key", key, "err", cause)
	rec := persist.Record{Rev: rand.Uint32(), LastError: cause.Error(), Payload: raw}
	_ = q.corrupts.Add(corruptJob{key: key, raw: raw, rec: rec.Encode()})
	q.stats.dead.Add(1)
	q.observeDeadKey(key)
}

// execCorrupt stores a batch of deadLetterCorrupt's jobs, one script call
// each (corrupt records are rare). A job of a partition lost to another
// owner is left to that owner, whose claim finds it corrupt too.
func (q *Queue) execCorrupt(ctx context.Context, cs []corruptJob) error {
	_, wall := wheel.Readings(q.clock) // the dead set's score: a wall reading
	now := wall.UnixMicro()
	for _, c := range cs {
		p := q.store.PartitionOf(c.key)
		if q.recov.Holds(p) {
			_, err := q.store.DeadLetterCorrupt(ctx, q.fence[p], c.key, c.raw, c.rec, now)
			if err != nil && !errors.Is(err, persist.ErrFenced) {
				// The batch is retried whole; the ones done already find
				// their record changed and are left alone.
				q.stats.redisErrors.Add(1)
				return err
			}
		}
		q.inflight.remove(c.key)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
