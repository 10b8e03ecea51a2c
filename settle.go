package wheelq

// Settling: the settler queues outcomes of runs (ack, retry, dead-letter,
// unclaim) without waiting and stores them by a batch.Retrier in shared
// round trips, retried while Redis is down; the in-flight set keeps a job
// from running again here until its outcome is stored.

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/wheelq/wheelq/internal/batch"
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

// preciseSettle is about the most outcomes one settle call (and one
// resolve call of the consumers' acks) carries while claimed jobs wait in
// the start gate for their time (see partitionCalls). Redis runs a call
// whole, and on a machine of two cores shared by Redis, the queue and
// other work, the jobs coming due meanwhile wait for a core about as
// long: at 10,000 jobs a second a settle carried about 77 acks and held
// Redis 1-2 ms, and quiet precision64's p99 went from 472 µs to 271 µs
// with calls of 8. Calls of 4 were quicker still on a quiet machine (p99
// 243 against 288 µs in the same runs) but slower beside a CPU hog
// (docs/benchmarks-history.md).
const preciseSettle = 8

// corruptJob is a job to dead-letter for a record that cannot be decoded:
// raw is the record as read, rec the dead record to store instead.
type corruptJob struct {
	key      string
	raw, rec []byte
}

// settleDeps is what the settler stores outcomes with, and whom it
// tells.
type settleDeps struct {
	stageDeps
	leases  interface{ Holds(p int) bool }             // outcomes of partitions held only
	backoff func(attempt int, err error) time.Duration // Config.Backoff
	obs     Observer                                   // nil: none
	// arm arms a retry once it is stored (if this process owns its
	// partition and it is due within the loaded window).
	arm func(key string, dueUs int64)
	// precise reports whether claimed jobs wait for their time in the
	// start gate (Queue.jobsWaiting): then outcomes go in calls of about
	// preciseSettle.
	precise func() bool
}

// settler stores the outcomes of runs (ack, retry, dead-letter, unclaim)
// in shared round trips, and dead-letters corrupt records, each through a
// batch.Retrier that retries while Redis is down.
type settler struct {
	settleDeps
	outcomes *batch.Retrier[persist.Outcome]
	corrupts *batch.Retrier[corruptJob]
	// byPart is storeOutcomes' buffer, reused: the outcomes' retrier
	// runs one call at a time.
	byPart []persist.Outcome
}

// newSettler returns a settler whose outcome batches wait settleLinger
// for others; outcomeCall and corruptCall give each retrier's round trips
// their context (batch.Config.CallContext).
func newSettler(d settleDeps, bc batch.Config, outcomeCall, corruptCall func() (context.Context, func())) *settler {
	s := &settler{settleDeps: d}
	sc := bc
	sc.Linger, sc.CallContext = settleLinger, outcomeCall
	s.outcomes = batch.NewRetrier(sc, s.exec, func(err error, pending int) {
		s.log.Warn("wheelq: outcomes not yet stored, retrying", "err", err, "pending", pending)
	})
	cc := bc
	cc.CallContext = corruptCall
	s.corrupts = batch.NewRetrier(cc, s.execCorrupt, func(err error, pending int) {
		s.log.Warn("wheelq: corrupt records not yet dead-lettered, retrying", "err", err, "pending", pending)
	})
	return s
}

// settle queues the outcome of a run; the Retrier stores it, retrying
// while Redis is down.
func (s *settler) settle(t *task, attempt int, err error) {
	o := persist.Outcome{Key: t.key, Rev: t.rec.Rev}
	if err == nil { // the common case, before errors.As's targets escape
		o.Op = persist.Ack
		s.cache.Remove(t.key)
		s.stats.succeeded.Add(1)
		s.store1(o)
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
		s.cache.Remove(t.key)
		s.stats.dead.Add(1)
		if s.obs != nil {
			s.obs.JobDead(t.rec.Topic)
		}
		s.log.Warn("wheelq: job dead-lettered", "topic", t.rec.Topic, "id", t.rec.ID, "attempt", attempt,
			"max_attempts", t.rec.MaxAttempts, "err", err)
	default:
		delay := s.backoff(attempt, err)
		if errors.As(err, &retryErr) {
			delay = retryErr.Delay
		}
		o.Op = persist.Retry
		rec := *t.rec
		rec.Rev, rec.Attempt, rec.LastError = rand.Uint32(), attempt, truncate(err.Error(), 2048)
		o.Record = rec.Encode()
		_, wall := wheel.Readings(s.clock)
		o.Due = ceilMicro(wall.Add(delay))
		rec.Due = time.UnixMicro(o.Due)
		s.cache.Add(t.key, &rec)
		s.stats.retried.Add(1)
		if s.obs != nil {
			s.obs.JobRetried(t.rec.Topic, delay)
		}
		s.log.Warn("wheelq: job failed; retrying", "topic", t.rec.Topic, "id", t.rec.ID, "attempt", attempt,
			"max_attempts", t.rec.MaxAttempts, "retry_in", delay, "err", err)
	}
	s.store1(o)
}

// store1 queues o for the retrier that stores outcomes.
func (s *settler) store1(o persist.Outcome) {
	if aerr := s.outcomes.Add(o); aerr != nil {
		// Only after a hard shutdown: the job stays pending and runs again.
		s.log.Warn("wheelq: outcome dropped after shutdown; the job will run again", "key", o.Key)
	}
}

// unclaimAll queues the unclaims of jobs claimed but not to be run (not
// due after all: armed again at their stored time).
func (s *settler) unclaimAll(os []persist.Outcome) { _ = s.outcomes.Add(os...) }

// exec stores a batch of outcomes; retries are armed once stored.
func (s *settler) exec(ctx context.Context, os []persist.Outcome) error {
	// Outcomes of partitions lost to another owner are dropped: that owner
	// runs those jobs again (at-least-once). Shutdown stores the outcomes
	// before it releases the leases, and a partition handed over keeps its
	// lease until they are stored (Holds).
	kept := os
	for i, o := range os {
		if !s.leases.Holds(s.store.PartitionOf(o.Key)) {
			kept = slices.Clip(os[:i:i]) // copy on the first drop
			for _, o := range os[i+1:] {
				if s.leases.Holds(s.store.PartitionOf(o.Key)) {
					kept = append(kept, o)
				}
			}
			break
		}
	}
	var applied []bool
	if len(kept) > 0 {
		var err error
		if applied, err = s.storeOutcomes(ctx, kept); err != nil {
			s.stats.redisErrors.Add(1)
			return err
		}
	}
	s.inflight.settled(os)
	for i, o := range kept {
		if applied[i] && o.Op == persist.Retry {
			s.arm(o.Key, o.Due)
		}
	}
	return nil
}

// storeOutcomes stores os and reports which applied: in one call, or,
// while jobs wait in the start gate for their time (precise) and os is
// longer than preciseSettle, in calls of whole partitions
// (partitionCalls). An error stops the calls: the retrier sends os again
// whole, and a call that applied finds its outcomes stored (settle.lua).
func (s *settler) storeOutcomes(ctx context.Context, os []persist.Outcome) ([]bool, error) {
	_, wall := wheel.Readings(s.clock)
	now := wall.UnixMicro()
	settle := func(part []persist.Outcome) ([]bool, error) { return s.store.Settle(ctx, s.fence, now, part) }
	if s.precise == nil || !s.precise() {
		return settle(os)
	}
	return partitionCalls(os, len(s.fence), func(o persist.Outcome) int { return s.store.PartitionOf(o.Key) }, &s.byPart, settle)
}

// partitionCalls runs call on items: at once when they are preciseSettle
// or fewer, else in calls of whole partitions in turn (partOf gives an
// item's, of nparts), each closed once it carries preciseSettle items or
// more. It returns the results in the order of items. A call's Redis
// time is mostly per item and per partition touched, so the calls
// together touch each partition once, as one call would have, and cost
// Redis about what it would; an item's partition keeps its items' order.
// buf is the caller's buffer for the items sorted by partition, reused
// (emptied after). The first error stops the calls.
func partitionCalls[T, R any](items []T, nparts int, partOf func(T) int, buf *[]T, call func([]T) ([]R, error)) ([]R, error) {
	if len(items) <= preciseSettle {
		return call(items)
	}
	// Counting sort by partition: ends[p+1] ends as where p's items end;
	// where[i] is first item i's partition, then its place.
	ends := make([]int, nparts+1)
	where := make([]int, len(items))
	for i, it := range items {
		where[i] = partOf(it)
		ends[where[i]+1]++
	}
	for p := 1; p < len(ends); p++ {
		ends[p] += ends[p-1]
	}
	at := slices.Clone(ends[:nparts])
	sorted := slices.Grow((*buf)[:0], len(items))[:len(items)]
	*buf = sorted
	defer clear(sorted) // the items go with the call
	for i, it := range items {
		p := where[i]
		where[i] = at[p]
		sorted[at[p]] = it
		at[p]++
	}
	res := make([]R, len(items))
	from := 0
	for p := 1; p < len(ends); p++ {
		if ends[p] == from || (ends[p]-from < preciseSettle && p < nparts) {
			continue
		}
		got, err := call(sorted[from:ends[p]])
		if err != nil {
			return nil, err
		}
		copy(res[from:], got)
		from = ends[p]
	}
	out := make([]R, len(items))
	for i := range items {
		out[i] = res[where[i]]
	}
	return out, nil
}

// unclaim gives back the claim of a task that will not run here.
func (s *settler) unclaim(t *task) {
	if !t.verified {
		s.inflight.remove(t.key)
		return
	}
	_ = s.outcomes.Add(persist.Outcome{Op: persist.Unclaim, Key: t.key})
}

// drop forgets a claimed task that will not start here because its
// partition is no longer (surely) this process's. Nothing is sent to
// Redis: the partition's next owner clears the claim marks when it takes
// the partition over.
func (s *settler) drop(t *task) {
	s.stats.dropped.Add(1)
	s.inflight.remove(t.key)
}

// deadLetterCorrupt moves a job whose record cannot be decoded to the
// dead-letter set, keeping the raw bytes as its payload and the cause as
// its last error. The move is guarded by the whole raw record (which may be
// too short to hold a revision), and leaves inflight once stored.
func (s *settler) deadLetterCorrupt(key string, raw []byte, cause error) {
	s.log.Error("wheelq: corrupt job record, dead-lettering it", "key", key, "err", cause)
	rec := persist.Record{Rev: rand.Uint32(), LastError: cause.Error(), Payload: raw}
	_ = s.corrupts.Add(corruptJob{key: key, raw: raw, rec: rec.Encode()})
	s.stats.dead.Add(1)
	if s.obs != nil {
		topic, _, _ := persist.SplitJobKey(key)
		s.obs.JobDead(topic)
	}
}

// execCorrupt stores a batch of deadLetterCorrupt's jobs, one script call
// each (corrupt records are rare). A job of a partition lost to another
// owner is left to that owner, whose claim finds it corrupt too.
func (s *settler) execCorrupt(ctx context.Context, cs []corruptJob) error {
	_, wall := wheel.Readings(s.clock) // the dead set's score: a wall reading
	now := wall.UnixMicro()
	for _, c := range cs {
		p := s.store.PartitionOf(c.key)
		if s.leases.Holds(p) {
			_, err := s.store.DeadLetterCorrupt(ctx, s.fence[p], c.key, c.raw, c.rec, now)
			if err != nil && !errors.Is(err, persist.ErrFenced) {
				// The batch is retried whole; the ones done already find
				// their record changed and are left alone.
				s.stats.redisErrors.Add(1)
				return err
			}
		}
		s.inflight.remove(c.key)
	}
	return nil
}

// pending is the number of outcomes and corrupt records not yet stored.
func (s *settler) pending() int { return s.outcomes.Pending() + s.corrupts.Pending() }

// stop stores what is queued (corrupt records, then outcomes), retrying
// until ctx ends, and stops both retriers; it returns the first error.
func (s *settler) stop(ctx context.Context) error {
	cerr := s.corrupts.Stop(ctx)
	oerr := s.outcomes.Stop(ctx)
	if cerr != nil {
		return cerr
	}
	return oerr
}

// truncate cuts s to at most n bytes, at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// At a rune boundary: the stored text stays valid UTF-8.
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
