package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/persist"
)

func init() {
	workloads = append(workloads,
		workload{"recovery", "1,000,000 jobs within the horizon already in Redis: time to all armed, to the first overdue run, Go heap per job", runRecovery},
		workload{"horizon", "1,000,000 jobs beyond the horizon in Redis: Go heap after start must not grow with them", runHorizon},
	)
}

// fill writes n jobs straight through the store (as earlier processes
// would have), due at due(i), with 64-byte payloads.
func fill(ctx context.Context, br *benchRedis, ns string, n int, due func(i int) time.Time) error {
	store, err := persist.New(br.rdb, persist.Options{Namespace: ns})
	if err != nil {
		return err
	}
	if err := store.Init(ctx); err != nil {
		return err
	}
	rec := (&persist.Record{Rev: 1, MaxAttempts: 10, Created: time.Now(), Payload: make([]byte, 64)}).Encode()
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for range 4 {
		wg.Go(func() {
			for {
				start := int(next.Add(1000) - 1000)
				if start >= n {
					return
				}
				ws := make([]persist.Write, 0, 1000)
				for i := start; i < min(start+1000, n); i++ {
					ws = append(ws, persist.Write{Key: fmt.Sprintf("r/%08d", i), Due: due(i).UnixMicro(), Record: rec, Replace: true, Fresh: true})
				}
				if _, err := store.Write(ctx, nil, ws); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return *e
	}
	return nil
}

func heapNow() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func runRecovery(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(1_000_000, 100_000)
	const overdue = 1000
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	ns := namespace("recovery")
	t0 := time.Now()
	err = fill(ctx, br, ns, n, func(i int) time.Time {
		if i < overdue {
			return t0.Add(-time.Minute + time.Duration(i)*time.Millisecond)
		}
		return t0.Add(30*time.Second + time.Duration(i%30000)*time.Millisecond) // within the 1-minute horizon
	})
	if err != nil {
		return err
	}
	filled := time.Since(t0)

	before := heapNow()
	var firstRun atomic.Int64
	start := time.Now()
	q, err := wheelq.New(br.rdb, wheelq.Config{Namespace: ns})
	if err != nil {
		return err
	}
	q.Handle("r", wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error {
		firstRun.CompareAndSwap(0, time.Now().UnixNano())
		return nil
	}))
	if err := q.Start(ctx); err != nil {
		return err
	}
	<-q.Ready()
	armed := time.Since(start)
	st, _ := q.Stats(ctx)
	after := heapNow()
	inMemory := st.InMemory
	for firstRun.Load() == 0 && time.Since(start) < 10*time.Second {
		time.Sleep(time.Millisecond)
	}
	_ = q.Shutdown(ctx)
	r := result{"workload": "recovery", "system": "wheelq", "n": n, "overdue": overdue,
		"fill_s":             round(filled.Seconds()),
		"all_armed_ms":       armed.Milliseconds(),
		"armed":              st.Armed,
		"in_memory":          inMemory,
		"heap_bytes_per_job": round(float64(after-before) / float64(n)),
	}
	if f := firstRun.Load(); f != 0 {
		r["first_overdue_run_ms"] = round(float64(time.Unix(0, f).Sub(start)) / 1e6)
	}
	emit(r)
	return nil
}

func runHorizon(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(1_000_000, 100_000)
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	ns := namespace("horizon")
	t0 := time.Now()
	if err := fill(ctx, br, ns, n, func(i int) time.Time { return t0.Add(2*time.Hour + time.Duration(i)*time.Millisecond) }); err != nil {
		return err
	}
	before := heapNow()
	q, err := wheelq.New(br.rdb, wheelq.Config{Namespace: ns})
	if err != nil {
		return err
	}
	if err := q.Start(ctx); err != nil {
		return err
	}
	<-q.Ready()
	time.Sleep(500 * time.Millisecond) // a few poller passes
	st, _ := q.Stats(ctx)
	after := heapNow()
	_ = q.Shutdown(ctx)
	emit(result{"workload": "horizon", "system": "wheelq", "n": n, "pending_in_redis": st.Pending,
		"in_memory": st.InMemory, "heap_growth_bytes": after - before,
		"heap_bytes_per_job": round(float64(after-before) / float64(n))})
	return nil
}
