package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wheelq/wheelq"
)

func init() {
	workloads = append(workloads,
		workload{"limits", "per-topic limits over 3 worker processes: a global cap of 3 runs at once with 50 ms handlers (most at once from the handlers' own times; jobs/s vs 3/50ms), and a global rate of 200/s (starts in every 1-second window); -n jobs per part", runLimits},
	)
}

// envLimitChild makes wheelq-bench a worker process of the limits
// workload: "addr|namespace|log path". Its queue limits topic "cap" to 3
// runs at once and topic "rate" to 200 starts a second, across processes;
// a run of "cap" takes 50 ms. It appends "topic start_us end_us" to the
// log per run, one write each.
const envLimitChild = "WHEELQ_BENCH_LIMIT_CHILD"

func limitChild(spec string) {
	serveChild(envLimitChild, spec, func(ctx context.Context, q *wheelq.Queue, log *os.File) error {
		h := func(hold time.Duration) wheelq.Handler {
			return wheelq.HandlerFunc(func(_ context.Context, j *wheelq.Job) error {
				start := time.Now()
				time.Sleep(hold)
				_, err := fmt.Fprintf(log, "%s %d %d\n", j.Topic, start.UnixMicro(), time.Now().UnixMicro())
				return err
			})
		}
		_ = q.Handle("cap", h(50*time.Millisecond))
		_ = q.Handle("rate", h(0))
		_ = q.Limit("cap", wheelq.Limit{GlobalConcurrency: 3})
		_ = q.Limit("rate", wheelq.Limit{Rate: 200})
		return q.Start(ctx)
	})
}

type span struct{ start, end int64 }

func runLimits(ctx context.Context, cfg *config, emit func(result)) error {
	nCap, nRate := cfg.size(300, 60), cfg.size(2000, 400)
	tm, err := startChildTeam(ctx, cfg, envLimitChild, "limits", 3)
	if err != nil {
		return err
	}
	defer tm.close(ctx)
	q, logPath := tm.producer, tm.log
	// Let the processes share the partitions out first.
	time.Sleep(2 * time.Second)
	schedule := func(topic string, n int) error {
		jobs := make([]wheelq.BatchJob, n)
		for i := range jobs {
			jobs[i] = wheelq.BatchJob{Topic: topic, Options: []wheelq.Option{wheelq.After(500 * time.Millisecond)}}
		}
		for lo := 0; lo < n; lo += wheelq.MaxBatchJobs {
			res, err := q.ScheduleBatch(ctx, jobs[lo:min(lo+wheelq.MaxBatchJobs, n)])
			if err != nil {
				return err
			}
			for _, r := range res {
				if r.Err != nil {
					return r.Err
				}
			}
		}
		return nil
	}
	read := func(topic string) ([]span, error) {
		f, err := os.Open(logPath)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		var out []span
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) != 3 || fs[0] != topic {
				continue
			}
			s, _ := strconv.ParseInt(fs[1], 10, 64)
			e, _ := strconv.ParseInt(fs[2], 10, 64)
			out = append(out, span{s, e})
		}
		return out, nil
	}
	wait := func(topic string, n int, limit time.Duration) ([]span, error) {
		deadline := time.Now().Add(limit)
		for {
			runs, err := read(topic)
			if err != nil || len(runs) >= n {
				return runs, err
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("limits: %d of %d %s jobs ran within %v", len(runs), n, topic, limit)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// The global cap.
	if err := schedule("cap", nCap); err != nil {
		return err
	}
	runs, err := wait("cap", nCap, time.Duration(nCap)*50*time.Millisecond+30*time.Second)
	if err != nil {
		return err
	}
	type edge struct {
		at int64
		d  int
	}
	var edges []edge
	first, last := runs[0].start, runs[0].end
	for _, r := range runs {
		edges = append(edges, edge{r.start, 1}, edge{r.end, -1})
		first, last = min(first, r.start), max(last, r.end)
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.d - b.d // an end before a start at the same µs
	})
	most, now := 0, 0
	for _, e := range edges {
		now += e.d
		most = max(most, now)
	}
	rate := float64(len(runs)) / (float64(last-first) / 1e6)
	emit(result{"workload": "limits", "system": "GlobalConcurrency 3, 3 processes, 50 ms handlers", "n": len(runs),
		"most_at_once": most, "jobs_per_s": round(rate), "ratio_vs_3_per_50ms": round(rate/60*100) / 100})

	// The global rate.
	if err := schedule("rate", nRate); err != nil {
		return err
	}
	runs, err = wait("rate", nRate, time.Duration(nRate)*5*time.Millisecond+30*time.Second)
	if err != nil {
		return err
	}
	starts := make([]int64, len(runs))
	for i, r := range runs {
		starts[i] = r.start
	}
	slices.Sort(starts)
	lo, hi, windows := 1<<30, 0, 0
	for i := range starts {
		if starts[i]+1_000_000 > starts[len(starts)-1] {
			break // the last second is not a whole window of the backlog
		}
		j, _ := slices.BinarySearch(starts, starts[i]+1_000_000)
		lo, hi, windows = min(lo, j-i), max(hi, j-i), windows+1
	}
	emit(result{"workload": "limits", "system": "Rate 200/s, 3 processes", "n": len(starts), "windows": windows,
		"fewest_in_a_second": lo, "most_in_a_second": hi,
		"jobs_per_s": round(float64(len(starts)-1) / (float64(starts[len(starts)-1]-starts[0]) / 1e6))})
	return nil
}
