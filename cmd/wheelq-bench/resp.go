package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
)

func init() {
	workloads = append(workloads,
		workload{"resp-schedule", "jobs/s scheduled through wheelq-server's RESP front end (WQ.SCHEDULE) from 32 connections, pipelined 64 deep and one at a time, vs the library's Schedule from 32 goroutines in the same run", runRESPSchedule},
		workload{"resp-reserve", "2,000 then 20,000 jobs due over [1s, 3s], 8 go-redis clients blocked in WQ.RESERVE (lateness: the reply's arrival minus due), vs the in-process pull workload in the same run", runRESPReserve},
	)
}

func runRESPSchedule(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(64_000, 6_400)
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	payload := bytes.Repeat([]byte("x"), 64)
	const conns = 32
	s, err := startWheelqServer(ctx, cfg, br.addr(), "-namespace", namespace("resp"), "-pull", "t", "-set", "resp.addr=127.0.0.1:0")
	if err != nil {
		return err
	}
	defer s.stop()
	rdb := redis.NewClient(&redis.Options{Addr: s.resp, PoolSize: conns})
	defer rdb.Close()
	return withLibraryBaseline(ctx, br, "resp-schedule", n, conns, payload, emit, func() ([]rateRun, error) {
		var runs []rateRun
		var next, failed atomic.Int64
		var wg sync.WaitGroup
		for _, depth := range []int{64, 1} {
			next.Store(0)
			failed.Store(0)
			batches := n / depth
			cpu0 := s.cpu()
			t0 := time.Now()
			for range conns {
				wg.Go(func() {
					for k := next.Add(1) - 1; k < int64(batches); k = next.Add(1) - 1 {
						pipe := rdb.Pipeline()
						for i := range depth {
							pipe.Do(ctx, "WQ.SCHEDULE", "t", payload, "ID", fmt.Sprint("d", depth, "-", k, "-", i), "DELAY", 3600000)
						}
						cmds, _ := pipe.Exec(ctx)
						for _, c := range cmds {
							if c.Err() != nil {
								failed.Add(1)
							}
						}
					}
				})
			}
			wg.Wait()
			took, cpu := time.Since(t0), s.cpu()-cpu0
			runs = append(runs, rateRun{result{"workload": "resp-schedule", "system": "wheelq-server RESP", "connections": conns, "pipeline": depth},
				batches * depth, took, cpu, failed.Load()})
		}
		return runs, nil
	})
}

func runRESPReserve(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(20_000, 2_000)
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	ns := namespace("resppull")
	s, err := startWheelqServer(ctx, cfg, br.addr(), "-namespace", ns, "-pull", "p", "-set", "resp.addr=127.0.0.1:0")
	if err != nil {
		return err
	}
	defer s.stop()
	q, err := wheelq.New(br.rdb, wheelq.Config{Namespace: ns})
	if err != nil {
		return err
	}
	// Two passes on the same clients: 1,000 jobs/s (a tenth of n over the
	// window), then n (10,000/s: the 8 clients' round trips are then what
	// bounds delivery).
	type pass struct {
		prefix string
		lat    *lateness
		wanted []time.Time
	}
	var cur atomic.Pointer[pass]
	cctx, stop := context.WithCancel(ctx)
	var cw sync.WaitGroup
	var ackFailed atomic.Int64
	for range 8 {
		rc := redis.NewClient(&redis.Options{Addr: s.resp, PoolSize: 1, ReadTimeout: 5 * time.Second})
		ac := redis.NewClient(&redis.Options{Addr: s.resp, PoolSize: 1})
		cw.Go(func() {
			defer rc.Close()
			defer ac.Close()
			// Acks pipelined on a connection of their own, in batches
			// (batchAcker), while the client is back in WQ.RESERVE.
			ack, acked := batchAcker(func(batch []receipt) {
				pipe := ac.Pipeline()
				for _, r := range batch {
					pipe.Do(ctx, "WQ.ACK", r.Topic, r.ID, r.Token)
				}
				cmds, _ := pipe.Exec(context.WithoutCancel(cctx))
				for _, c := range cmds {
					if c.Err() != nil {
						ackFailed.Add(1)
					}
				}
			})
			defer acked()
			for cctx.Err() == nil {
				res, err := rc.Do(cctx, "WQ.RESERVE", "COUNT", 100, "BLOCK", 2000, "TOPICS", "p").Slice()
				at := time.Now()
				if err != nil {
					continue
				}
				ps := cur.Load()
				for _, j := range res {
					f, _ := j.([]any)
					if len(f) < 3 {
						continue
					}
					id, _ := f[1].(string)
					var i int
					if rest, ok := strings.CutPrefix(id, ps.prefix); ok {
						if _, err := fmt.Sscanf(rest, "%d", &i); err == nil && i >= 0 && i < len(ps.wanted) {
							ps.lat.record(i, ps.wanted[i], at)
						}
					}
					topic, _ := f[0].(string)
					token, _ := f[2].(string)
					ack(receipt{Topic: topic, ID: id, Token: token})
				}
			}
		})
	}
	for _, k := range []int{n / 10, n} {
		ps := &pass{prefix: fmt.Sprintf("r%d-", k), lat: newLateness(k)}
		t0 := time.Now()
		ps.wanted = dues(t0, k, time.Second, 3*time.Second)
		cur.Store(ps)
		failed := scheduleDue(ctx, q, "p", ps.prefix, ps.wanted)
		cpu0 := s.cpu() // after the scheduling: what the deliveries cost
		waitAll(ctx, ps.lat, t0.Add(10*time.Second))
		r := ps.lat.result("resp-reserve", "wheelq-server RESP WQ.RESERVE", k)
		r["server_cpu_us_per_job"] = round((s.cpu() - cpu0) * 1e6 / float64(k))
		r["jobs_per_s"] = k / 2
		r["schedule_errors"] = failed
		r["ack_errors"] = ackFailed.Load()
		emit(r)
	}
	stop()
	cw.Wait()
	return runPull(ctx, cfg, emit)
}
