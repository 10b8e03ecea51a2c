package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
)

func init() {
	workloads = append(workloads,
		workload{"batches", "ScheduleBatch of 1,000 jobs from one goroutine vs raw pipelined HSET+ZADD of 1,000 and vs one-at-a-time Schedule, 3 interleaved passes", runBatches},
	)
}

// batchSize is the jobs per ScheduleBatch call and per raw pipeline.
const batchSize = 1000

// runBatches measures one goroutine scheduling n jobs with 64-byte
// payloads, due in an hour, three ways, in three interleaved passes on a
// flushed server: raw pipelines of 1,000 HSET+ZADD pairs (what Redis can
// take from one client), ScheduleBatch of 1,000 jobs, and Schedule one job
// at a time (n/10 of them: it is the slow one). It reports each pass and
// the medians of the rates and of the per-pass ratios.
func runBatches(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(50_000, 10_000)
	n -= n % batchSize
	br, err := newBenchRedis(cfg)
	if err != nil {
		return err
	}
	defer br.close()
	payload := make([]byte, 64)
	// A warm-up pass of each, not used (cold heaps on both sides).
	if _, err := rawBatches(ctx, br, n/5, payload); err != nil {
		return err
	}
	if _, err := scheduleBatches(ctx, br, n/5, payload, true); err != nil {
		return err
	}
	var raw, batched, single, vsRaw, vsSingle []float64
	for pass := range 3 {
		r, err := rawBatches(ctx, br, n, payload)
		if err != nil {
			return err
		}
		b, err := scheduleBatches(ctx, br, n, payload, true)
		if err != nil {
			return err
		}
		s, err := scheduleBatches(ctx, br, n/10, payload, false)
		if err != nil {
			return err
		}
		raw, batched, single = append(raw, r), append(batched, b), append(single, s)
		vsRaw, vsSingle = append(vsRaw, b/r), append(vsSingle, b/s)
		emit(result{"workload": "batches", "pass": pass + 1, "n": n, "batch": batchSize,
			"raw_jobs_per_s": round(r), "batch_jobs_per_s": round(b), "single_jobs_per_s": round(s)})
	}
	emit(result{"workload": "batches", "system": "medians of 3", "n": n, "batch": batchSize, "payload_bytes": len(payload),
		"raw_jobs_per_s": round(median(raw)), "batch_jobs_per_s": round(median(batched)), "single_jobs_per_s": round(median(single)),
		"batch_vs_raw": round(median(vsRaw)*100) / 100, "batch_vs_single": round(median(vsSingle)*10) / 10})
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// rawBatches writes n HSET+ZADD pairs in pipelines of batchSize from one
// goroutine, on a flushed server, and returns jobs/s.
func rawBatches(ctx context.Context, br *benchRedis, n int, payload []byte) (float64, error) {
	if err := br.reset(ctx); err != nil {
		return 0, err
	}
	ns := namespace("rawbatch")
	due := float64(time.Now().Add(time.Hour).UnixMicro())
	start := time.Now()
	for i := 0; i < n; i += batchSize {
		pipe := br.rdb.Pipeline()
		for j := i; j < min(i+batchSize, n); j++ {
			key := "t/" + strconv.Itoa(j)
			pipe.HSet(ctx, "wq:{"+ns+"}:jobs", key, payload)
			pipe.ZAdd(ctx, "wq:{"+ns+"}:pending", redis.Z{Score: due, Member: key})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// scheduleBatches schedules n jobs (random ids) from one goroutine, on a
// flushed server, with ScheduleBatch calls of batchSize or one Schedule
// call each, and returns jobs/s. The queue is a producer (not started), as
// a web service that schedules is.
func scheduleBatches(ctx context.Context, br *benchRedis, n int, payload []byte, batched bool) (float64, error) {
	if err := br.reset(ctx); err != nil {
		return 0, err
	}
	q, err := wheelq.New(br.rdb, wheelq.Config{Namespace: namespace("batch")})
	if err != nil {
		return 0, err
	}
	defer q.Shutdown(ctx)
	jobs := make([]wheelq.BatchJob, batchSize)
	for i := range jobs {
		jobs[i] = wheelq.BatchJob{Topic: "t", Payload: payload, Options: []wheelq.Option{wheelq.After(time.Hour)}}
	}
	start := time.Now()
	if batched {
		for i := 0; i < n; i += batchSize {
			res, err := q.ScheduleBatch(ctx, jobs)
			if err != nil {
				return 0, err
			}
			for _, r := range res {
				if r.Err != nil {
					return 0, r.Err
				}
			}
		}
	} else {
		for range n {
			if _, err := q.Schedule(ctx, "t", payload, wheelq.After(time.Hour)); err != nil {
				return 0, err
			}
		}
	}
	elapsed := time.Since(start)
	if c, err := q.Counts(ctx); err != nil {
		return 0, err
	} else if len(c) != 1 || c[0].Pending != int64(n) {
		return 0, fmt.Errorf("batches: %d jobs scheduled, counts say %+v", n, c)
	}
	return float64(n) / elapsed.Seconds(), nil
}
