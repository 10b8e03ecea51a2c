package wheelq

// Figures of every worker: each started queue publishes its run figures
// (running, stuck, outcomes, its lateness histogram) to Redis every
// figuresEvery, beside its place in the roster, so that a process that
// runs no job (the dashboard under `wheelq-server -set queue.start=false`, `wheelq stats`) shows
// the namespace's running jobs and lateness.

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/wheelq/wheelq/internal/errs"
	"github.com/wheelq/wheelq/wheel"
)

// figureStore is the store of the workers' figures (persist.Store).
type figureStore interface {
	PublishFigures(ctx context.Context, member string, blob []byte) error
	DropFigures(ctx context.Context, member string) error
	Figures(ctx context.Context) (map[string][]byte, error)
}

// figuresEvery is how often a started queue publishes its figures.
const figuresEvery = 2 * time.Second

// WorkerStats are a started process's figures, as it last published them
// (every 2 s while it runs).
type WorkerStats struct {
	// Member is the process's id in the roster: its InstanceID, or a
	// random token.
	Member string
	// At is when the figures were taken.
	At time.Time
	// Running, Stuck, InMemory and OwnedPartitions are Stats's.
	Running, Stuck, InMemory, OwnedPartitions int
	// Fired, Succeeded, Retried and DeadLettered count since the process
	// started, as Stats's.
	Fired, Succeeded, Retried, DeadLettered uint64
	// Lateness summarizes the process's runs since it started.
	Lateness Lateness
	// Throttled is Stats.ThrottledNow: per limited topic, the jobs its
	// Limit holds back in the process (nil: none).
	Throttled map[string]int

	buckets map[int]uint64 // the lateness histogram (latency's), for SumWorkers
}

// figuresJSON is what a queue publishes.
type figuresJSON struct {
	At        int64             `json:"at_ms"`
	Running   int               `json:"running"`
	Stuck     int               `json:"stuck"`
	InMemory  int               `json:"in_memory"`
	Owned     int               `json:"owned"`
	Fired     uint64            `json:"fired"`
	Succeeded uint64            `json:"succeeded"`
	Retried   uint64            `json:"retried"`
	Dead      uint64            `json:"dead"`
	LateCount uint64            `json:"late_count"`
	LateMaxUs int64             `json:"late_max_us"`
	Buckets   map[string]uint64 `json:"late_buckets"`
	Throttled map[string]int    `json:"throttled,omitempty"`
}

// publishFigures stores this process's figures in Redis.
func (q *Queue) publishFigures(ctx context.Context) error {
	_, wall := wheel.Readings(q.clock)
	f := figuresJSON{At: wall.UnixMilli(), Running: int(q.running.Load()), Stuck: int(q.stuck.Load()),
		InMemory: q.sched.Len() + q.gate.len(), Owned: q.recov.Owned(),
		Fired: q.stats.fired.Load(), Succeeded: q.stats.succeeded.Load(), Retried: q.stats.retried.Load(),
		Dead: q.stats.dead.Load(), Buckets: map[string]uint64{}, Throttled: q.throttledNow()}
	q.late.mu.Lock()
	f.LateCount, f.LateMaxUs = q.late.count, q.late.max.Microseconds()
	for b, n := range q.late.buckets {
		if n > 0 {
			f.Buckets[strconv.Itoa(b)] = n
		}
	}
	q.late.mu.Unlock()
	blob, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return q.pstore.PublishFigures(ctx, q.member, blob)
}

// Workers returns the figures of the namespace's started processes (this
// one's included when started), as each last published them, sorted by
// Member. Any queue may call it, started or not. SumWorkers adds them up.
func (q *Queue) Workers(ctx context.Context) ([]WorkerStats, error) {
	if err := checkCtx(ctx, "Workers"); err != nil {
		return nil, err
	}
	if q.closing() {
		return nil, ErrClosed
	}
	all, err := q.pstore.Figures(ctx)
	if err != nil {
		return nil, errs.Errorf("wheelq: workers: %w", unreachable(err))
	}
	out := make([]WorkerStats, 0, len(all))
	for m, blob := range all {
		var f figuresJSON
		if json.Unmarshal(blob, &f) != nil {
			continue // not a worker's figures (a foreign write): left out
		}
		w := WorkerStats{Member: m, At: time.UnixMilli(f.At), Running: f.Running, Stuck: f.Stuck,
			InMemory: f.InMemory, OwnedPartitions: f.Owned, Fired: f.Fired, Succeeded: f.Succeeded,
			Retried: f.Retried, DeadLettered: f.Dead, Throttled: f.Throttled, buckets: map[int]uint64{}}
		for k, n := range f.Buckets {
			if b, err := strconv.Atoi(k); err == nil && b >= 0 && b < len(latency{}.buckets) {
				w.buckets[b] = n
			}
		}
		w.Lateness = lateFrom(w.buckets, f.LateCount, time.Duration(f.LateMaxUs)*time.Microsecond)
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b WorkerStats) int {
		switch {
		case a.Member < b.Member:
			return -1
		case a.Member > b.Member:
			return 1
		}
		return 0
	})
	return out, nil
}

// SumWorkers adds workers' figures up: counts summed, At the oldest, and
// Lateness over all their runs (their histograms merged, so its
// percentiles are the namespace's, not an average of the workers').
// Member is empty.
func SumWorkers(ws []WorkerStats) WorkerStats {
	var s WorkerStats
	s.buckets = map[int]uint64{}
	var most time.Duration
	for i, w := range ws {
		if i == 0 || w.At.Before(s.At) {
			s.At = w.At
		}
		s.Running += w.Running
		s.Stuck += w.Stuck
		s.InMemory += w.InMemory
		s.OwnedPartitions += w.OwnedPartitions
		s.Fired += w.Fired
		s.Succeeded += w.Succeeded
		s.Retried += w.Retried
		s.DeadLettered += w.DeadLettered
		s.Lateness.Count += w.Lateness.Count
		for t, n := range w.Throttled {
			if s.Throttled == nil {
				s.Throttled = map[string]int{}
			}
			s.Throttled[t] += n
		}
		most = max(most, w.Lateness.Max)
		for b, n := range w.buckets {
			s.buckets[b] += n
		}
	}
	s.Lateness = lateFrom(s.buckets, s.Lateness.Count, most)
	return s
}

// lateFrom summarizes a sparse latency histogram.
func lateFrom(buckets map[int]uint64, count uint64, most time.Duration) Lateness {
	var l latency
	for b, n := range buckets {
		l.buckets[b] = n
	}
	l.count, l.max = count, most
	return l.summary()
}
