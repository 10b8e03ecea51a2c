package main

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/persist"
)

func init() {
	workloads = append(workloads,
		workload{"pull", "W1 pulled: 20,000 jobs with 64 payload bytes due over [1s, 3s], 8 consumers blocked in Reserve (lateness: Reserve's return minus due); then precision64's handlers in the same run", runPull},
		workload{"pulldrain", "100,000 jobs already due, drained by 8 consumers reserving up to 100 and acking each, then again acking each batch with AckAll; then the same backlog run by handlers", runPullDrain},
	)
}

// sampleHeapPeak reads the Go heap (HeapAlloc, garbage included) every
// every until the returned function is called, which stops it and
// returns the most it saw.
func sampleHeapPeak(every time.Duration) func() uint64 {
	stop, done := make(chan struct{}), make(chan struct{})
	var peak uint64
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapAlloc)
			}
		}
	}()
	return func() uint64 {
		close(stop)
		<-done
		return peak
	}
}

// startPulling starts a queue on namespace ns that pulls topic "p".
func startPulling(ctx context.Context, br *benchRedis, ns string) (*wheelq.Queue, error) {
	q, err := wheelq.New(br.rdb, wheelq.Config{Namespace: ns})
	if err != nil {
		return nil, err
	}
	if err := q.Pull("p"); err != nil {
		return nil, err
	}
	if err := q.Start(ctx); err != nil {
		return nil, err
	}
	return q, nil
}

// consume runs consumers goroutines that reserve up to max jobs of topic
// "p" from q and ack each, calling got with each reservation and the time
// Reserve returned, until ctx ends. A consumer acks in the background and
// is back in Reserve at once, as a consumer that works on its jobs
// concurrently is (the acks share round trips). wait returns the
// failures once every ack is done.
func consume(ctx context.Context, q *wheelq.Queue, consumers, max int, got func(r *wheelq.Reservation, at time.Time)) (wait func() int64) {
	return consumeAcking(ctx, q, consumers, max, false, got)
}

// consumeAcking is consume; with ackAll, a consumer acks each batch it
// reserved with one AckAll (in a goroutine, as consume acks each job)
// instead of an Ack per job.
func consumeAcking(ctx context.Context, q *wheelq.Queue, consumers, max int, ackAll bool, got func(r *wheelq.Reservation, at time.Time)) (wait func() int64) {
	var wg, acks sync.WaitGroup
	var failed atomic.Int64
	for range consumers {
		wg.Go(func() {
			for ctx.Err() == nil {
				rs, err := q.Reserve(ctx, wheelq.ReserveOptions{Topics: []string{"p"}, Max: max})
				at := time.Now()
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, wheelq.ErrClosed) {
						failed.Add(1)
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				if ackAll {
					rcs := make([]wheelq.Receipt, len(rs))
					for i, r := range rs {
						got(r, at)
						rcs[i] = r.Receipt
					}
					acks.Go(func() {
						for _, err := range q.AckAll(context.WithoutCancel(ctx), rcs...) {
							if err != nil {
								failed.Add(1)
							}
						}
					})
					continue
				}
				for _, r := range rs {
					got(r, at)
					acks.Go(func() {
						if err := q.Ack(context.WithoutCancel(ctx), r.Receipt); err != nil {
							failed.Add(1)
						}
					})
				}
			}
		})
	}
	return func() int64 { wg.Wait(); acks.Wait(); return failed.Load() }
}

// runPull is W1 with consumers instead of a handler: lateness is the
// return of the Reserve that got the job minus its due time.
func runPull(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(20_000, 2_000)
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	q, err := startPulling(ctx, br, namespace("pull"))
	if err != nil {
		return err
	}
	<-q.Ready()
	lat := newLateness(n)
	wanted := make([]time.Time, n)
	cctx, stop := context.WithCancel(ctx)
	wait := consume(cctx, q, 8, 100, func(r *wheelq.Reservation, at time.Time) {
		if i, err := strconv.Atoi(strings.TrimPrefix(r.ID, "job-")); err == nil && i >= 0 && i < n {
			lat.record(i, wanted[i], at)
		}
	})
	order := rand.Perm(n)
	runtime.GC()
	time.Sleep(cfg.warm)
	t0 := time.Now()
	ds := dues(t0, n, time.Second, 3*time.Second)
	copy(wanted, ds)
	var wg sync.WaitGroup
	var failed, next atomic.Int64
	for range 32 {
		wg.Go(func() {
			for k := next.Add(1) - 1; k < int64(n); k = next.Add(1) - 1 {
				i := order[k]
				payload := make([]byte, 64)
				_, _ = crand.Read(payload)
				if _, err := q.Schedule(ctx, "p", payload, wheelq.ID(fmt.Sprintf("job-%08d", i)), wheelq.At(ds[i])); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	redis0, _ := br.usedCPU(ctx)
	own0 := processCPU()
	waitAll(ctx, lat, t0.Add(8*time.Second))
	redis1, _ := br.usedCPU(ctx)
	own1 := processCPU()
	stop()
	ackFailed := wait()
	_ = q.Shutdown(ctx)
	r := lat.result("pull", "wheelq", n)
	r["schedule_errors"] = failed.Load()
	r["ack_errors"] = ackFailed
	r["firing_redis_cpu_us_per_job"] = round((redis1 - redis0) * 1e6 / float64(n))
	r["firing_go_cpu_us_per_job"] = round((own1 - own0) * 1e6 / float64(n))
	emit(r)

	// precision64's handlers in the same run, the baseline.
	return runPrecision64(ctx, cfg, emit)
}

// runPullDrain: a backlog of n due jobs, queued to the ready sets while
// no consumer waits; then 8 consumers drain it. The baseline: the same
// backlog written by a producer, then run by a started queue's handlers.
func runPullDrain(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(100_000, 10_000)
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	payload := make([]byte, 64)
	schedule := func(q *wheelq.Queue) error {
		past := time.Now().Add(-time.Minute)
		var wg sync.WaitGroup
		var next atomic.Int64
		var first error
		var mu sync.Mutex
		for range 32 {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
					if _, err := q.Schedule(ctx, "p", payload, wheelq.ID(fmt.Sprintf("job-%08d", i)), wheelq.At(past.Add(time.Duration(i)*time.Microsecond))); err != nil {
						mu.Lock()
						first = errors.Join(first, err)
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		return first
	}

	// Pulled: acking each job, then each batch with AckAll.
	for _, ackAll := range []bool{false, true} {
		if err := drainPulled(ctx, br, n, schedule, ackAll, emit); err != nil {
			return err
		}
	}

	// Handlers on the same backlog.
	ns := namespace("drainh")
	prod, err := wheelq.New(br.rdb, wheelq.Config{Namespace: ns})
	if err != nil {
		return err
	}
	if err := schedule(prod); err != nil {
		return err
	}
	_ = prod.Shutdown(ctx)
	hq, err := wheelq.New(br.rdb, wheelq.Config{Namespace: ns})
	if err != nil {
		return err
	}
	var ran atomic.Int64
	hdone := make(chan struct{})
	_ = hq.Handle("p", wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error {
		if ran.Add(1) == int64(n) {
			close(hdone)
		}
		return nil
	}))
	redis0, _ := br.usedCPU(ctx)
	own0 := processCPU()
	t1 := time.Now()
	if err := hq.Start(ctx); err != nil {
		return err
	}
	select {
	case <-hdone:
	case <-time.After(120 * time.Second):
	}
	el := time.Since(t1)
	redis1, _ := br.usedCPU(ctx)
	own1 := processCPU()
	_ = hq.Shutdown(ctx)
	emit(result{"workload": "pulldrain", "system": "wheelq handlers", "n": n, "ran": ran.Load(),
		"seconds": round(el.Seconds()), "jobs_per_second": round(float64(ran.Load()) / el.Seconds()),
		"redis_cpu_us_per_job": round((redis1 - redis0) * 1e6 / float64(n)), "go_cpu_us_per_job": round((own1 - own0) * 1e6 / float64(n))})
	return ctx.Err()
}

// drainPulled schedules n due jobs of a pulled topic (schedule), waits
// until the owner queued them all to the ready sets, then drains them
// with 8 consumers reserving up to 100 (ackAll: see consumeAcking).
func drainPulled(ctx context.Context, br *benchRedis, n int, schedule func(*wheelq.Queue) error, ackAll bool, emit func(result)) error {
	dns := namespace("drain")
	q, err := startPulling(ctx, br, dns)
	if err != nil {
		return err
	}
	<-q.Ready()
	if err := schedule(q); err != nil {
		return err
	}
	// Wait until the owner queued them all to the ready sets.
	st, err := persist.New(br.rdb, persist.Options{Namespace: dns})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var ready int64
		for p := range st.Partitions() {
			c, _ := br.rdb.ZCard(ctx, st.Keys(p).Ready+"p").Result()
			ready += c
		}
		if ready >= int64(n) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var acked atomic.Int64 // reserved; wait() waits for their acks
	done := make(chan struct{})
	cctx, stop := context.WithCancel(ctx)
	redis0, _ := br.usedCPU(ctx)
	own0 := processCPU()
	t0 := time.Now()
	wait := consumeAcking(cctx, q, 8, 100, ackAll, func(*wheelq.Reservation, time.Time) {
		if acked.Add(1) == int64(n) {
			close(done)
		}
	})
	select {
	case <-done:
	case <-time.After(120 * time.Second):
	}
	stop()
	failed := wait() // every ack stored
	el := time.Since(t0)
	redis1, _ := br.usedCPU(ctx)
	own1 := processCPU()
	_ = q.Shutdown(ctx)
	system := "wheelq pull (reserved and acked)"
	if ackAll {
		system = "wheelq pull (reserved, each batch acked with AckAll)"
	}
	emit(result{"workload": "pulldrain", "system": system, "n": n, "reserved": acked.Load(), "ack_errors": failed,
		"seconds": round(el.Seconds()), "jobs_per_second": round(float64(acked.Load()) / el.Seconds()),
		"redis_cpu_us_per_job": round((redis1 - redis0) * 1e6 / float64(n)), "go_cpu_us_per_job": round((own1 - own0) * 1e6 / float64(n))})
	return nil
}

func init() {
	workloads = append(workloads,
		workload{"pullbacklog", "1,000,000 jobs of a pulled topic come due with no consumer: Go heap of the owner, then the first Reserve's wait and the drain", runPullBacklog},
		workload{"pullteam", "W1 pulled over three queues (team members) on one namespace, consumers on one of them only: lateness of jobs owned by the others", runPullTeam},
	)
}

// runPullBacklog: n jobs due at once with nobody reserving; the owner
// queues them to the ready sets. Reported: the owner's Go heap after a GC
// (bounded: queued jobs cost no memory), and how long the first Reserve
// of a consumer that comes then takes.
func runPullBacklog(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(1_000_000, 100_000)
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	ns := namespace("pbacklog")
	q, err := startPulling(ctx, br, ns)
	if err != nil {
		return err
	}
	<-q.Ready()
	payload := make([]byte, 64)
	due := time.Now().Add(2 * time.Second)
	t0 := time.Now()
	var wg sync.WaitGroup
	var next, failed atomic.Int64
	peak := sampleHeapPeak(100 * time.Millisecond) // while they are written and queued
	for range 32 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if _, err := q.Schedule(ctx, "p", payload, wheelq.ID(fmt.Sprintf("job-%08d", i)), wheelq.At(due.Add(time.Duration(i%1000)*time.Microsecond))); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	written := time.Since(t0)
	st, err := persist.New(br.rdb, persist.Options{Namespace: ns})
	if err != nil {
		return err
	}
	var ready int64
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		ready = 0
		for p := range st.Partitions() {
			c, _ := br.rdb.ZCard(ctx, st.Keys(p).Ready+"p").Result()
			ready += c
		}
		if ready >= int64(n)-failed.Load() {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	queuedAfter := time.Since(t0)
	peak1 := peak()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t1 := time.Now()
	rs, err := q.Reserve(ctx, wheelq.ReserveOptions{Topics: []string{"p"}, Max: 100})
	first := time.Since(t1)
	if err != nil {
		return err
	}
	oldest := rs[0].ID
	emit(result{"workload": "pullbacklog", "system": "wheelq", "n": n, "schedule_errors": failed.Load(),
		"written_s": round(written.Seconds()), "queued_s": round(queuedAfter.Seconds()), "ready": ready,
		"heap_peak_mb": round(float64(peak1) / 1e6), "heap_after_gc_mb": round(float64(ms.HeapAlloc) / 1e6),
		"first_reserve_ms": round(float64(first.Microseconds()) / 1000), "first_reserved": len(rs), "first_id": oldest})

	// A restart: the new owner reloads the pending set, the backlog
	// included (overdue: it queues those jobs again). Its heap's peak
	// while it does, and how long until its first Reserve answers.
	_ = q.Shutdown(ctx)
	runtime.GC()
	peak = sampleHeapPeak(50 * time.Millisecond)
	t2 := time.Now()
	q2, err := startPulling(ctx, br, ns)
	if err != nil {
		return err
	}
	defer q2.Shutdown(context.WithoutCancel(ctx))
	rs, err = q2.Reserve(ctx, wheelq.ReserveOptions{Topics: []string{"p"}, Max: 100})
	if err != nil {
		return err
	}
	firstAfter := time.Since(t2) // from Start: the ready sets need no reload
	<-q2.Ready()
	ready2 := time.Since(t2)
	time.Sleep(10 * time.Second) // the reload's queueing goes on
	peak2 := peak()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	emit(result{"workload": "pullbacklog", "system": "wheelq, restarted", "n": n, "ready_ms": ready2.Milliseconds(),
		"first_reserve_after_start_ms": round(float64(firstAfter.Microseconds()) / 1000), "first_id": rs[0].ID,
		"heap_peak_mb_10s": round(float64(peak2) / 1e6), "heap_after_gc_mb": round(float64(ms.HeapAlloc) / 1e6)})
	return ctx.Err()
}

// runPullTeam: three queues on one namespace share its partitions; only
// the first has consumers. A job of a partition another owns is queued
// to the ready set at its time and announced; the consumers' process
// takes it.
func runPullTeam(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(20_000, 2_000)
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	ns := namespace("pteam")
	var qs []*wheelq.Queue
	for range 3 {
		q, err := startPulling(ctx, br, ns)
		if err != nil {
			return err
		}
		qs = append(qs, q)
	}
	defer func() {
		for _, q := range qs {
			_ = q.Shutdown(context.WithoutCancel(ctx))
		}
	}()
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
		if len(qs[0].Owned()) > 0 && len(qs[1].Owned()) > 0 && len(qs[2].Owned()) > 0 && len(qs[0].Owned())+len(qs[1].Owned())+len(qs[2].Owned()) == 16 {
			break
		}
	}
	owned := map[int]bool{}
	for _, p := range qs[0].Owned() {
		owned[p] = true
	}
	st, err := persist.New(br.rdb, persist.Options{Namespace: ns})
	if err != nil {
		return err
	}
	local, remote := newLateness(n), newLateness(n)
	wanted := make([]time.Time, n)
	isLocal := make([]bool, n)
	cctx, stop := context.WithCancel(ctx)
	wait := consume(cctx, qs[0], 8, 100, func(r *wheelq.Reservation, at time.Time) {
		if i, err := strconv.Atoi(strings.TrimPrefix(r.ID, "job-")); err == nil && i >= 0 && i < n {
			if isLocal[i] {
				local.record(i, wanted[i], at)
			} else {
				remote.record(i, wanted[i], at)
			}
		}
	})
	t0 := time.Now()
	ds := dues(t0, n, time.Second, 3*time.Second)
	nl := 0
	for i := range n {
		id := fmt.Sprintf("job-%08d", i)
		wanted[i] = ds[i]
		isLocal[i] = owned[st.PartitionOf(persist.JobKey("p", id))]
		if isLocal[i] {
			nl++
		}
	}
	var wg sync.WaitGroup
	var next, failed atomic.Int64
	for range 32 {
		wg.Go(func() {
			for k := next.Add(1) - 1; k < int64(n); k = next.Add(1) - 1 {
				if _, err := qs[1].Schedule(ctx, "p", make([]byte, 64), wheelq.ID(fmt.Sprintf("job-%08d", k)), wheelq.At(ds[k])); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	deadline := t0.Add(10 * time.Second)
	for time.Now().Before(deadline) && local.count()+remote.count() < n {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	ackFailed := wait()
	lr := local.result("pullteam", "wheelq: jobs of the consumers' process", nl)
	lr["missing"] = nl - local.count()
	rr := remote.result("pullteam", "wheelq: jobs of the other two", n-nl)
	rr["missing"] = n - nl - remote.count()
	rr["schedule_errors"], rr["ack_errors"] = failed.Load(), ackFailed
	emit(lr)
	emit(rr)
	return ctx.Err()
}

// count returns how many indices fired.
func (l *lateness) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lat)
}
