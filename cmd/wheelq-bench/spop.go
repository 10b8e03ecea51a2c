package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/persist"
)

func init() {
	workloads = append(workloads,
		workload{"resp-spop", "100,000 jobs already due, drained by one client asking for 1,000 at a time with SPOP (delayedqueue mode: taken and finished in one Redis call before the reply); each call's time; vs the same drain in-process, by Reserve of 1,000 without waiting then AckAll, and by Pop of 1,000, in the same run", runRESPSPop},
	)
}

// drainCalls drains n jobs by calls of take (which returns how many it
// got), and returns each call's duration (the empty ones included).
func drainCalls(ctx context.Context, n int, take func() (int, error)) ([]time.Duration, int, error) {
	var calls []time.Duration
	got := 0
	deadline := time.Now().Add(120 * time.Second)
	for got < n && time.Now().Before(deadline) && ctx.Err() == nil {
		t := time.Now()
		k, err := take()
		calls = append(calls, time.Since(t))
		if err != nil {
			return calls, got, err
		}
		got += k
		if k == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return calls, got, nil
}

// callFigures sums up drain calls.
func callFigures(r result, calls []time.Duration, got int, el time.Duration) result {
	s := slices.Clone(calls)
	slices.Sort(s)
	q := func(p float64) float64 {
		if len(s) == 0 {
			return 0
		}
		return round(float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000)
	}
	r["got"], r["calls"], r["seconds"] = got, len(calls), round(el.Seconds())
	r["jobs_per_second"] = round(float64(got) / el.Seconds())
	r["call_p50_ms"], r["call_p99_ms"], r["call_worst_ms"] = q(0.5), q(0.99), q(1)
	return r
}

// readyAll waits until the n jobs of topic "p" of ns are in the ready sets.
func readyAll(ctx context.Context, br *benchRedis, ns string, n int) error {
	st, err := persist.New(br.rdb, persist.Options{Namespace: ns})
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		var ready int64
		for p := range st.Partitions() {
			c, _ := br.rdb.ZCard(ctx, st.Keys(p).Ready+"p").Result()
			ready += c
		}
		if ready >= int64(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the jobs were not all queued within 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func runRESPSPop(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(100_000, 10_000)
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	past := func() []time.Time {
		ds := make([]time.Time, n)
		t := time.Now().Add(-time.Minute)
		for i := range ds {
			ds[i] = t.Add(time.Duration(i) * time.Microsecond)
		}
		return ds
	}

	// In-process, the same drain two ways: Reserve 1,000 without waiting
	// then ack them at once (at least once), and Pop (at most once: taken
	// and finished in one call, as SPOP does).
	inProcess := []struct {
		system string
		take   func(q *wheelq.Queue) (int, error)
	}{
		{"wheelq in-process (Reserve 1,000 + AckAll)", func(q *wheelq.Queue) (int, error) {
			rs, err := q.Reserve(ctx, wheelq.ReserveOptions{Topics: []string{"p"}, Max: 1000, NoWait: true})
			receipts := make([]wheelq.Receipt, len(rs))
			for i, r := range rs {
				receipts[i] = r.Receipt
			}
			q.AckAll(ctx, receipts...)
			return len(rs), err
		}},
		{"wheelq in-process (Pop 1,000)", func(q *wheelq.Queue) (int, error) {
			js, err := q.Pop(ctx, []string{"p"}, 1000)
			return len(js), err
		}},
	}
	var failed int64
	for i, ip := range inProcess {
		ns := namespace(fmt.Sprint("spopq", i))
		q, err := startPulling(ctx, br, ns)
		if err != nil {
			return err
		}
		<-q.Ready()
		failed = scheduleDue(ctx, q, "p", "j-", past())
		if err := readyAll(ctx, br, ns, n); err != nil {
			return err
		}
		t0 := time.Now()
		calls, got, err := drainCalls(ctx, n, func() (int, error) { return ip.take(q) })
		el := time.Since(t0)
		_ = q.Shutdown(ctx)
		if err != nil {
			return err
		}
		emit(callFigures(result{"workload": "resp-spop", "system": ip.system, "n": n, "schedule_errors": failed}, calls, got, el))
	}

	// Over RESP, SPOP queue 1000, one client.
	ns := namespace("spop")
	s, err := startWheelqServer(ctx, cfg, br.addr(), "-namespace", ns, "-pull", "p", "-set", "resp.addr=127.0.0.1:0", "-set", "resp.delayedqueue=true")
	if err != nil {
		return err
	}
	defer s.stop()
	pq, err := wheelq.New(br.rdb, wheelq.Config{Namespace: ns})
	if err != nil {
		return err
	}
	failed = scheduleDue(ctx, pq, "p", "j-", past())
	if err := readyAll(ctx, br, ns, n); err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.resp, PoolSize: 1})
	defer rdb.Close()
	cpu0 := s.cpu()
	t0 := time.Now()
	calls, got, err := drainCalls(ctx, n, func() (int, error) {
		v, err := rdb.SPopN(ctx, "p", 1000).Result()
		return len(v), err
	})
	el := time.Since(t0)
	if err != nil {
		return err
	}
	r := callFigures(result{"workload": "resp-spop", "system": "wheelq-server RESP SPOP", "n": n, "schedule_errors": failed}, calls, got, el)
	r["server_cpu_us_per_job"] = round((s.cpu() - cpu0) * 1e6 / float64(max(got, 1)))
	emit(r)
	return nil
}
