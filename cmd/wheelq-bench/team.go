package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
)

func init() {
	workloads = append(workloads,
		workload{"team", "1-5 processes on a namespace: balance, take-over after a graceful shutdown and after kill -9, lateness and jobs/s of 3 worker processes vs 1", runTeam},
		workload{"handover", "lateness of 20,000 jobs due over [1s, 5s] while a worker joins and one leaves, vs no change, interleaved", runHandOver},
	)
}

// envTeamChild makes wheelq-bench a worker process of the team workload:
// "addr|namespace|log path". It runs a queue with the default Config
// until SIGTERM (a graceful Shutdown) or SIGKILL, and appends
// "due_us start_us" to the log per run.
const envTeamChild = "WHEELQ_BENCH_TEAM_CHILD"

const teamParts = 16 // the default Config.Partitions

// teamChild is main for a worker process (see envTeamChild).
func teamChild(spec string) {
	parts := strings.SplitN(spec, "|", 3)
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "wheelq-bench: bad %s %q\n", envTeamChild, spec)
		os.Exit(2)
	}
	f, err := os.OpenFile(parts[2], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wheelq-bench:", err)
		os.Exit(1)
	}
	w := bufio.NewWriterSize(f, 1<<16)
	rdb := redis.NewClient(&redis.Options{Addr: parts[0], PoolSize: 64})
	// WHEELQ_BENCH_LOCKDIR sets Config.LockDir ("-": no lock file, so no
	// take-over of a dead process's leases before they lapse; the restart
	// workload's baseline).
	q, err := wheelq.New(rdb, wheelq.Config{Namespace: parts[1], LockDir: os.Getenv(envBenchLockDir)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "wheelq-bench:", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	q.Handle("t", wheelq.HandlerFunc(func(_ context.Context, j *wheelq.Job) error {
		now := time.Now().UnixMicro()
		mu.Lock()
		fmt.Fprintf(w, "%d %d\n", j.Due.UnixMicro(), now)
		mu.Unlock()
		return nil
	}))
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	if err := q.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "wheelq-bench:", err)
		os.Exit(1)
	}
	// Flush the log now and then: the parent reads it once the jobs ran.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			mu.Lock()
			_ = w.Flush()
			mu.Unlock()
		case <-term:
			_ = q.Shutdown(context.Background())
			mu.Lock()
			_ = w.Flush()
			mu.Unlock()
			os.Exit(0)
		}
	}
}

// readRuns reads the "due_us start_us" lines of worker logs (teamChild)
// and calls run for each.
func readRuns(logs []string, run func(dueUs, startUs int64)) error {
	for _, l := range logs {
		f, err := os.Open(l)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) != 2 {
				continue
			}
			d, _ := strconv.ParseInt(fs[0], 10, 64)
			s, _ := strconv.ParseInt(fs[1], 10, 64)
			run(d, s)
		}
		f.Close()
	}
	return nil
}

type teamProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startTeamProc(addr, ns, logPath string) (*teamProc, error) {
	return startChildProc(envTeamChild, addr, ns, logPath)
}

// startChildProc starts wheelq-bench again as a worker process of a
// workload: env (envTeamChild, envRecurChild, envLimitChild) set to
// "addr|namespace|log path". It is killed if this process dies.
func startChildProc(env, addr, ns, logPath string) (*teamProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env+"="+addr+"|"+ns+"|"+logPath)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &teamProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *teamProc) stop(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// leaseHolders counts the namespace's partition leases per holder.
func leaseHolders(ctx context.Context, rdb *redis.Client, ns string) (map[string]int, error) {
	out := map[string]int{}
	for p := range teamParts {
		tok, err := rdb.Get(ctx, fmt.Sprintf("wq:{%s:%d}:lease", ns, p)).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[tok]++
	}
	return out, nil
}

// evenly says whether n holders hold every partition, their loads
// differing by one at most.
func evenly(loads []int, n int) bool {
	if len(loads) != n {
		return false
	}
	sum := 0
	for _, l := range loads {
		sum += l
	}
	return sum == teamParts && slices.Max(loads)-slices.Min(loads) <= 1
}

func values(m map[string]int) []int {
	var out []int
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// until polls cond every millisecond until it holds (or the limit or
// ctx ends) and returns how long that took.
func until(ctx context.Context, limit time.Duration, what string, cond func() (bool, error)) (time.Duration, error) {
	start := time.Now()
	for time.Since(start) < limit && ctx.Err() == nil {
		ok, err := cond()
		if err != nil {
			return 0, err
		}
		if ok {
			return time.Since(start), nil
		}
		time.Sleep(time.Millisecond)
	}
	return 0, fmt.Errorf("%s: not within %v", what, limit)
}

func ms(d time.Duration) float64 { return round(float64(d) / 1e6) }

func durSummary(ds []time.Duration) (p50, most float64) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return ms(s[len(s)/2]), ms(s[len(s)-1])
}

func runTeam(ctx context.Context, cfg *config, emit func(result)) error {
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	addr := br.rdb.Options().Addr
	reps := 3
	if cfg.quick {
		reps = 1
	}
	// Balance, and take-over after a graceful shutdown: queues in this
	// process (the protocol is the same across processes).
	var graceful []time.Duration
	for rep := range reps {
		for n := 1; n <= 5; n++ {
			ns := namespace(fmt.Sprintf("team%d", n))
			var qs []*wheelq.Queue
			for range n {
				q, err := wheelq.New(br.rdb, wheelq.Config{Namespace: ns})
				if err != nil {
					return err
				}
				if err := q.Start(ctx); err != nil {
					return err
				}
				qs = append(qs, q)
			}
			owned := func(qs []*wheelq.Queue) []int {
				var out []int
				for _, q := range qs {
					out = append(out, len(q.Owned()))
				}
				return out
			}
			took, err := until(ctx, 30*time.Second, "balance", func() (bool, error) { return evenly(owned(qs), n), nil })
			if err != nil {
				return err
			}
			loads := owned(qs)
			if rep == 0 {
				emit(result{"workload": "team", "system": "balance", "n": n, "processes": n,
					"most": slices.Max(loads), "fewest": slices.Min(loads), "balanced_after_last_start_ms": ms(took)})
			}
			if n > 1 {
				_ = qs[0].Shutdown(ctx)
				took, err := until(ctx, 30*time.Second, "take-over", func() (bool, error) { return evenly(owned(qs[1:]), n-1), nil })
				if err != nil {
					return err
				}
				graceful = append(graceful, took)
			}
			for _, q := range qs[1:] {
				_ = q.Shutdown(ctx)
			}
			if n == 1 {
				_ = qs[0].Shutdown(ctx)
			}
		}
	}
	p50, most := durSummary(graceful)
	emit(result{"workload": "team", "system": "take-over after a graceful shutdown (2-5 processes)", "n": len(graceful),
		"p50_ms": p50, "max_ms": most})

	dir, err := os.MkdirTemp("", "wheelq-bench-team")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// Take-over after kill -9 of one of three processes (default
	// LeaseTTL, 10 s): the killed one's leases must lapse first.
	var killed []time.Duration
	for rep := range reps {
		ns := namespace("kill")
		var ps []*teamProc
		for i := range 3 {
			p, err := startTeamProc(addr, ns, filepath.Join(dir, fmt.Sprintf("kill%d-%d.log", rep, i)))
			if err != nil {
				return err
			}
			defer p.stop(syscall.SIGKILL)
			ps = append(ps, p)
		}
		if _, err := until(ctx, 60*time.Second, "three processes balanced", func() (bool, error) {
			h, err := leaseHolders(ctx, br.rdb, ns)
			return err == nil && evenly(values(h), 3), err
		}); err != nil {
			return err
		}
		ps[0].stop(syscall.SIGKILL)
		took, err := until(ctx, 60*time.Second, "take-over after kill -9", func() (bool, error) {
			h, err := leaseHolders(ctx, br.rdb, ns)
			return err == nil && evenly(values(h), 2), err
		})
		if err != nil {
			return err
		}
		killed = append(killed, took)
		for _, p := range ps[1:] {
			p.stop(syscall.SIGTERM)
		}
	}
	p50, most = durSummary(killed)
	emit(result{"workload": "team", "system": "take-over after kill -9 of 1 of 3 (LeaseTTL 10s)", "n": len(killed),
		"p50_ms": p50, "max_ms": most})

	// Three worker processes against one: lateness of n jobs due over
	// [1s, 3s] (as qprecision), and the rate of a burst due at once.
	n := cfg.size(20_000, 2_000)
	burst := cfg.size(100_000, 10_000)
	for rep := range reps {
		for _, procs := range []int{1, 3} {
			r, err := teamRun(ctx, br, dir, fmt.Sprintf("%d-%d", rep, procs), procs, n, burst)
			if err != nil {
				return err
			}
			emit(r)
		}
	}
	return nil
}

// teamRun starts procs worker processes, schedules n jobs due over
// [1s, 3s] and then burst jobs due at one instant, and reports the
// lateness of the first and the rate of the second.
func teamRun(ctx context.Context, br *benchRedis, dir, tag string, procs, n, burst int) (result, error) {
	ns := namespace("team-run")
	addr := br.rdb.Options().Addr
	var logs []string
	var ps []*teamProc
	for i := range procs {
		l := filepath.Join(dir, fmt.Sprintf("run%s-%d.log", tag, i))
		p, err := startTeamProc(addr, ns, l)
		if err != nil {
			return nil, err
		}
		defer p.stop(syscall.SIGKILL)
		ps, logs = append(ps, p), append(logs, l)
	}
	if _, err := until(ctx, 60*time.Second, "workers balanced", func() (bool, error) {
		h, err := leaseHolders(ctx, br.rdb, ns)
		return err == nil && evenly(values(h), procs), err
	}); err != nil {
		return nil, err
	}
	producer, err := wheelq.New(br.rdb, wheelq.Config{Namespace: ns})
	if err != nil {
		return nil, err
	}
	defer producer.Shutdown(ctx)
	schedule := func(count int, due func(i int) time.Time) int64 {
		var wg sync.WaitGroup
		var next, failed atomic.Int64
		for range 32 {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(count); i = next.Add(1) - 1 {
					if _, err := producer.Schedule(ctx, "t", nil, wheelq.At(due(int(i)))); err != nil {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return failed.Load()
	}
	t0 := time.Now()
	ds := dues(t0, n, time.Second, 3*time.Second)
	failed := schedule(n, func(i int) time.Time { return ds[i] })
	drained := func() (bool, error) {
		pending, _, err := producerCounts(ctx, producer)
		return pending == 0, err
	}
	if _, err := until(ctx, 60*time.Second, "the jobs ran", drained); err != nil {
		return nil, err
	}
	due := time.Now().Add(5 * time.Second)
	failed += schedule(burst, func(int) time.Time { return due })
	if time.Now().After(due) {
		return nil, fmt.Errorf("scheduling %d jobs took past the due instant", burst)
	}
	time.Sleep(time.Until(due))
	if _, err := until(ctx, 60*time.Second, "the burst ran", drained); err != nil {
		return nil, err
	}
	for _, p := range ps {
		p.stop(syscall.SIGTERM) // flushes its log
	}
	var lat []time.Duration
	var last int64
	runs := 0
	if err := readRuns(logs, func(d, s int64) {
		runs++
		if d >= due.UnixMicro() { // a job of the burst (the others were due before it)
			last = max(last, s)
			return
		}
		lat = append(lat, time.Duration(s-d)*time.Microsecond)
	}); err != nil {
		return nil, err
	}
	r := summarize(lat).into(result{"workload": "team", "system": fmt.Sprintf("%d worker process(es)", procs), "n": n, "processes": procs})
	r["runs"] = runs
	r["schedule_errors"] = failed
	r["burst"] = burst
	window := time.UnixMicro(last).Sub(due)
	r["burst_last_run_after_due_ms"] = ms(window)
	r["burst_jobs_per_s"] = int(float64(burst) / window.Seconds())
	return r, nil
}

// producerCounts reads the namespace's pending and dead counts.
func producerCounts(ctx context.Context, q *wheelq.Queue) (pending, dead int64, err error) {
	st, err := q.Stats(ctx)
	return st.Pending, st.Dead, err
}

func runHandOver(ctx context.Context, cfg *config, emit func(result)) error {
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	reps := 3
	if cfg.quick {
		reps = 1
	}
	for rep := range reps {
		for _, churn := range []bool{false, true} {
			r, err := handOverRun(ctx, br, cfg.size(20_000, 2_000), churn)
			if err != nil {
				return err
			}
			r["rep"] = rep
			emit(r)
		}
	}
	return nil
}

// handOverRun runs n jobs due over [1s, 5s] (scheduled before the first
// is due, so none waits for an inbox) on two workers in this process; with
// churn, a third joins at 2 s and the first leaves at 3.5 s, each moving
// about a third of the partitions. It reports the runs' lateness.
func handOverRun(ctx context.Context, br *benchRedis, n int, churn bool) (result, error) {
	ns := namespace("handover")
	lat := newLateness(n)
	wanted := make([]time.Time, n)
	worker := func() (*wheelq.Queue, error) {
		q, err := wheelq.New(br.rdb, wheelq.Config{Namespace: ns})
		if err != nil {
			return nil, err
		}
		q.Handle("h", wheelq.HandlerFunc(func(_ context.Context, j *wheelq.Job) error {
			now := time.Now()
			i, _ := strconv.Atoi(j.ID)
			lat.record(i, wanted[i], now)
			return nil
		}))
		return q, q.Start(ctx)
	}
	var qs []*wheelq.Queue
	defer func() {
		for _, q := range qs {
			_ = q.Shutdown(ctx)
		}
	}()
	for range 2 {
		q, err := worker()
		if err != nil {
			return nil, err
		}
		qs = append(qs, q)
	}
	if _, err := until(ctx, 30*time.Second, "two workers balanced", func() (bool, error) {
		return len(qs[0].Owned()) == teamParts/2 && len(qs[1].Owned()) == teamParts/2, nil
	}); err != nil {
		return nil, err
	}
	t0 := time.Now()
	ds := dues(t0, n, time.Second, 5*time.Second)
	copy(wanted, ds)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for g := range 16 {
		wg.Go(func() {
			for i := g; i < n; i += 16 {
				if _, err := qs[0].Schedule(ctx, "h", nil, wheelq.ID(strconv.Itoa(i)), wheelq.At(ds[i])); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if churn {
		time.Sleep(time.Until(t0.Add(2 * time.Second)))
		q, err := worker()
		if err != nil {
			return nil, err
		}
		qs = append(qs, q)
		time.Sleep(time.Until(t0.Add(3500 * time.Millisecond)))
		if err := qs[0].Shutdown(ctx); err != nil {
			return nil, err
		}
	}
	waitAll(ctx, lat, t0.Add(15*time.Second))
	system := "2 workers, no change"
	if churn {
		system = "2 workers, a 3rd joins at 2 s, the 1st leaves at 3.5 s"
	}
	r := lat.result("team-handover", system, n)
	r["schedule_errors"] = failed.Load()
	return r, nil
}
