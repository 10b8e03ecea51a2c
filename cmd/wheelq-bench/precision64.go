package main

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wheelq/wheelq"
)

func init() {
	workloads = append(workloads,
		workload{"precision64", "W1: 20,000 jobs with 64 random payload bytes and an ID, due over [1s, 3s], scheduled shuffled by 32 goroutines on a default queue; and time.AfterFunc on the same offsets", runPrecision64},
	)
}

// runPrecision64 is workload W1: every job carries 64 fresh
// random payload bytes and a caller id "job-%08d", due uniformly over
// [t0+1s, t0+3s], scheduled in a shuffled order by 32 goroutines before
// the first is due, on a running queue with the default Config. The
// handler records time.Now() and returns nil; lateness is handler start
// minus due. Then time.AfterFunc on the same offsets from a new t0, in the
// same process, as the baseline of the same run.
func runPrecision64(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(20_000, 2_000)
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	q, lat, wanted, err := precisionQueue(ctx, br, "p64", n, "job-")
	if err != nil {
		return err
	}
	order := rand.Perm(n)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%08d", i)
	}
	runtime.GC() // the set-up's garbage is not the workload's
	time.Sleep(cfg.warm)
	t0 := time.Now()
	ds := dues(t0, n, time.Second, 3*time.Second)
	copy(wanted, ds)
	stored := make([]time.Time, n) // when each job's Schedule returned
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	var wg sync.WaitGroup
	var failed atomic.Int64
	var next atomic.Int64
	for range 32 {
		wg.Go(func() {
			for k := next.Add(1) - 1; k < int64(n); k = next.Add(1) - 1 {
				i := order[k]
				payload := make([]byte, 64)
				_, _ = crand.Read(payload)
				if _, err := q.Schedule(ctx, "p", payload, wheelq.ID(ids[i]), wheelq.At(ds[i])); err != nil {
					failed.Add(1)
				}
				stored[i] = time.Now()
			}
		})
	}
	wg.Wait()
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	// The CPU the firing takes, Redis's and this process's, per job: on a
	// busy machine it is what competes with the other work.
	redis0, _ := br.usedCPU(ctx)
	own0 := processCPU()
	r := firingResult(ctx, q, lat, t0, "precision64", "wheelq", failed.Load(), &ms1)
	redis1, _ := br.usedCPU(ctx)
	own1 := processCPU()
	r["firing_redis_cpu_us_per_job"] = round((redis1 - redis0) * 1e6 / float64(n))
	r["firing_go_cpu_us_per_job"] = round((own1 - own0) * 1e6 / float64(n))
	r["warm_ms"] = cfg.warm.Milliseconds()
	r["scheduling_alloc_bytes_per_job"] = (ms1.TotalAlloc - ms0.TotalAlloc) / uint64(n)
	r["scheduling_gc_cycles"] = ms1.NumGC - ms0.NumGC
	// On a busy machine the 32 goroutines may not have scheduled every
	// job before it was due (all_scheduled_after_ms past 1,000): such a
	// job is late by its Schedule's return at least, in any scheduler.
	// The firing path's own lateness is the rest's.
	late := 0
	for i := range stored {
		if stored[i].After(ds[i]) {
			late++
		}
	}
	ahead := lat.subset(func(i int) bool { return !stored[i].After(ds[i]) })
	r["scheduled_after_due"] = late
	sa := summarize(ahead)
	r["scheduled_ahead_p50_us"], r["scheduled_ahead_p99_us"], r["scheduled_ahead_p999_us"] = round(sa.p50), round(sa.p99), round(sa.p999)
	emit(r)

	// time.AfterFunc on the same offsets, in the same run.
	base := newLateness(n)
	t1 := time.Now()
	timers := make([]*time.Timer, n)
	for _, i := range order {
		d := t1.Add(ds[i].Sub(t0))
		timers[i] = time.AfterFunc(time.Until(d), func() { base.record(i, d, time.Now()) })
	}
	waitAll(ctx, base, t1.Add(5*time.Second))
	for _, t := range timers {
		t.Stop()
	}
	emit(base.result("precision64", "time.AfterFunc", n))
	return ctx.Err()
}
