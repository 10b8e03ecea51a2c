package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/faultproxy"
	"github.com/wheelq/wheelq/internal/redistest"
)

func init() {
	workloads = append(workloads,
		workload{"backlog", "400 overdue jobs of 1 MiB (-payload, -n): time until one fresh worker ran them all; Redis's memory peak meanwhile; -bandwidth caps the worker's link", runBacklog},
	)
}

// runBacklog: a producer that never started wrote
// n jobs of cfg.payload bytes, all already due; one worker with the
// default Config (4 partitions) starts and runs them. The drain is timed
// from Start to the last handler call. With cfg.bandwidth the worker
// reaches Redis through a proxy that caps the server-to-client link at
// that many bytes a second, and the raw transfer time of the payloads at
// that rate is reported beside the drain's.
func runBacklog(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(400, 40)
	size := cfg.payload
	if size <= 0 {
		size = 1 << 20
	}
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	ns := fmt.Sprintf("bench-backlog-%d", time.Now().UnixNano())
	qcfg := wheelq.Config{Namespace: ns, Partitions: 4, MaxPayload: max(size, 1<<20)}
	producer, err := wheelq.New(br.rdb, qcfg)
	if err != nil {
		return err
	}
	payload := []byte(strings.Repeat("p", size))
	for i := range n {
		if _, err := producer.Schedule(ctx, "big", payload, wheelq.ID(fmt.Sprint(i)), wheelq.At(time.Now().Add(-time.Minute))); err != nil {
			return err
		}
	}
	if err := br.rdb.Do(ctx, "MEMORY", "PURGE").Err(); err != nil {
		return err
	}
	before, err := redistest.UsedMemory(ctx, br.rdb)
	if err != nil {
		return err
	}

	rdb := br.rdb
	if cfg.bandwidth > 0 {
		px, err := faultproxy.New(br.rdb.Options().Addr)
		if err != nil {
			return err
		}
		defer px.Close()
		px.SetBandwidth(cfg.bandwidth)
		rdb = redis.NewClient(&redis.Options{Addr: px.Addr()})
		defer rdb.Close()
	}

	// Redis's used_memory, sampled while the jobs drain.
	stopSampling := redistest.PeakMemory(br.rdb, before, 20*time.Millisecond)
	var peak int64
	defer func() {
		if peak == 0 {
			stopSampling() // an early return
		}
	}()

	q, err := wheelq.New(rdb, qcfg)
	if err != nil {
		return err
	}
	defer func() { _ = q.Shutdown(context.Background()) }()
	var ran, bad atomic.Int64
	done := make(chan struct{})
	if err := q.Handle("big", wheelq.HandlerFunc(func(_ context.Context, j *wheelq.Job) error {
		if len(j.Payload) != size {
			bad.Add(1)
		}
		if ran.Add(1) == int64(n) {
			close(done)
		}
		return nil
	})); err != nil {
		return err
	}
	start := time.Now()
	if err := q.Start(ctx); err != nil {
		return err
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("%d of %d ran in 5 minutes", ran.Load(), n)
	case <-ctx.Done():
		return ctx.Err()
	}
	took := time.Since(start)
	peak = stopSampling()
	if bad.Load() > 0 {
		return errors.New("a payload arrived cut")
	}
	st, err := q.Stats(ctx)
	if err != nil {
		return err
	}
	r := result{
		"workload": "backlog", "system": "wheelq", "n": n, "payload_bytes": size,
		"drain_s":       round(took.Seconds()*1000) / 1000,
		"mem_before_mb": before >> 20, "mem_peak_mb": peak >> 20,
		"mem_peak_ratio": round(float64(peak)/float64(before)*100) / 100,
		"redis_errors":   st.RedisErrors,
	}
	if cfg.bandwidth > 0 {
		transfer := float64(n) * float64(size) / float64(cfg.bandwidth)
		r["bandwidth_bytes_per_s"] = cfg.bandwidth
		r["transfer_s"] = round(transfer*1000) / 1000
		r["drain_per_transfer"] = round(took.Seconds()/transfer*100) / 100
	}
	emit(r)
	return nil
}
