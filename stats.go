package wheelq

import (
	"context"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wheelq/wheelq/internal/errs"
	"github.com/wheelq/wheelq/wheel"
)

// Stats is a snapshot of a queue's state and counters. Counters count since
// New, in this process.
type Stats struct {
	// Scheduled counts jobs stored by Schedule.
	Scheduled uint64
	// Fired counts runs started.
	Fired uint64
	// Succeeded, Retried and DeadLettered count run outcomes.
	Succeeded, Retried, DeadLettered uint64
	// Cancelled counts successful Cancel calls.
	Cancelled uint64
	// Skipped counts fired jobs that were gone when claimed (cancelled or
	// done elsewhere).
	Skipped uint64
	// RedisErrors counts failed round trips of the fire and ack paths.
	RedisErrors uint64
	// Throttled counts the times a job was held back by a topic's Limit
	// (a job may be held back more than once).
	Throttled uint64
	// ThrottledNow is, per limited topic, the jobs held back by its Limit
	// in this process now (waiting for a permit, or for the start the
	// rate gave them); nil when none is.
	ThrottledNow map[string]int
	// Dropped counts claimed jobs that did not start here because the
	// partition's lease was lost (or could not be confirmed) before their
	// time: the partition's next owner runs them.
	Dropped uint64

	// InMemory is the number of jobs in memory: armed, or claimed and
	// waiting for their time.
	InMemory int
	// Running is the number of runs whose handlers are running or
	// returned with the outcome not yet queued for Redis; with
	// UnstoredOutcomes it counts every run whose outcome is not stored.
	Running int
	// Stuck is the number of handlers that ignored their context past
	// HandlerTimeout and its grace (StuckGrace) and have not returned:
	// their runs were abandoned (each logged at Warn, its job settled as
	// failed); each holds its worker until it returns.
	Stuck int
	// UnstoredOutcomes is the number of acks, retries and dead-letterings
	// waiting for Redis (non-zero while Redis is unreachable).
	UnstoredOutcomes int
	// OwnedPartitions is the number of partitions this process runs.
	OwnedPartitions int
	// Members is the number of live started processes of the namespace,
	// by the roster in Redis as this process last read it (0 before
	// Start): they share the partitions out evenly.
	Members int
	// Armed counts jobs brought into memory by reloads, polls and inboxes
	// (not by this process's own Schedule).
	Armed int64
	// Swept counts overdue jobs re-armed by the poller's sweep; it stays
	// near 0 unless armings are lost (replies lost when Redis died).
	Swept int64
	// Repaired counts inconsistencies in Redis that the sweep's repair
	// steps fixed in the partitions this process owns: pending entries
	// without a record (removed), records in neither set (dead-lettered),
	// stale claim marks (cleared). Each is logged at Warn with its keys.
	// It stays 0 unless something other than wheelq wrote the keys.
	Repaired int64

	// Pending and Dead are the numbers of pending and dead-lettered jobs
	// in Redis, over all partitions of the namespace.
	Pending, Dead int64
	// Overdue is the number of pending jobs more than OverdueAfter past
	// their due time, over all partitions of the namespace (read from
	// Redis: it counts jobs no process runs too), and OldestOverdue how
	// far past its due time the oldest of them is (0 when none is).
	Overdue       int64
	OldestOverdue time.Duration

	// Lateness summarizes how late runs started after their due time.
	Lateness Lateness
}

// Lateness summarizes run lateness (start of the handler minus due time).
// Percentiles are accurate to about 3%.
type Lateness struct {
	Count         uint64
	P50, P99, Max time.Duration
}

// Stats returns a snapshot. It reads the pending and dead counts from
// Redis; on a Redis error it returns the in-process figures and the error,
// and once Shutdown has begun the in-process figures and ErrClosed.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	if err := checkCtx(ctx, "Stats"); err != nil {
		return Stats{}, err
	}
	s := Stats{
		Scheduled:        q.stats.scheduled.Load(),
		Fired:            q.stats.fired.Load(),
		Succeeded:        q.stats.succeeded.Load(),
		Retried:          q.stats.retried.Load(),
		DeadLettered:     q.stats.dead.Load(),
		Cancelled:        q.stats.cancelled.Load(),
		Skipped:          q.stats.skipped.Load(),
		Dropped:          q.stats.dropped.Load(),
		RedisErrors:      q.stats.redisErrors.Load(),
		InMemory:         q.sched.Len() + q.gate.len(),
		Running:          int(q.running.Load()),
		Stuck:            int(q.stuck.Load()),
		UnstoredOutcomes: q.settle.pending(),
		OwnedPartitions:  q.recov.Owned(),
		Members:          q.recov.Members(),
		Armed:            q.recov.Armed(),
		Swept:            q.recov.Swept(),
		Repaired:         q.recov.Repaired(),
		Lateness:         q.late.summary(),
		Throttled:        q.limits.throttledTotal(),
		ThrottledNow:     q.throttledNow(),
	}
	if q.closing() {
		return s, ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return s, errs.Errorf("wheelq: stats: %w", unreachable(err))
	}
	_, wall := wheel.Readings(q.clock)
	c, err := q.store.Census(ctx, wall.Add(-OverdueAfter).UnixMicro())
	if err != nil {
		return s, err
	}
	s.Pending, s.Dead = c.Pending, c.Dead
	for p, n := range c.Overdue {
		s.Overdue += n
		if n > 0 {
			s.OldestOverdue = max(s.OldestOverdue, wall.Sub(time.UnixMicro(c.Oldest[p])))
		}
	}
	return s, nil
}

// OverdueAfter is how far past its due time a pending job counts as
// overdue in Stats: a job normally starts within a millisecond of it, and
// one claimed already is still pending until its run is settled.
const OverdueAfter = time.Second

type counters struct {
	scheduled, fired, succeeded, retried, dead, cancelled, skipped, dropped, redisErrors atomic.Uint64
}

// latency is a log-linear histogram of durations: 32 sub-buckets per power
// of two of microseconds.
type latency struct {
	mu      sync.Mutex
	buckets [64 * 32]uint64
	count   uint64
	max     time.Duration
}

const subBits = 5

func bucketOf(us uint64) int {
	if us < 1<<subBits {
		return int(us)
	}
	e := bits.Len64(us) - subBits - 1
	return (e+1)<<subBits | int(us>>e)&(1<<subBits-1)
}

func bucketLow(b int) uint64 {
	e := b >> subBits
	if e == 0 {
		return uint64(b)
	}
	return (1<<subBits | uint64(b&(1<<subBits-1))) << (e - 1)
}

func (l *latency) record(d time.Duration) {
	us := uint64(max(d, 0) / time.Microsecond)
	l.mu.Lock()
	l.buckets[bucketOf(us)]++
	l.count++
	l.max = max(l.max, d)
	l.mu.Unlock()
}

func (l *latency) summary() Lateness {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := Lateness{Count: l.count, Max: l.max}
	q := func(p float64) time.Duration {
		target := uint64(p * float64(l.count))
		var seen uint64
		for b, n := range l.buckets {
			seen += n
			if n > 0 && seen > target {
				return time.Duration(bucketLow(b)) * time.Microsecond
			}
		}
		return l.max
	}
	if l.count > 0 {
		out.P50, out.P99 = q(0.50), q(0.99)
	}
	return out
}
