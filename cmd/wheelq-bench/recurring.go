package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/wheelq/wheelq"
)

func init() {
	workloads = append(workloads,
		workload{"recurring", "a schedule @every 1s declared by 5 worker processes for 60 s (-n seconds), one killed with -9 and restarted at 1/3 and another at 2/3: runs per slot, early runs, slot lateness; beside one-off jobs due at each slot + 500 ms run by the same processes", runRecurring},
	)
}

// envRecurChild makes wheelq-bench a worker process of the recurring
// workload: "addr|namespace|log path". It declares the schedule, runs
// its jobs and the one-off jobs with the default Config until killed,
// and appends "topic id due_us start_us pid" to the log per run, one
// write each (a SIGKILL loses none).
const envRecurChild = "WHEELQ_BENCH_RECUR_CHILD"

var benchBeat = wheelq.Recurring{Name: "beat", Topic: "beat", Cron: "@every 1s"}

func recurChild(spec string) {
	serveChild(envRecurChild, spec, func(ctx context.Context, q *wheelq.Queue, log *os.File) error {
		h := wheelq.HandlerFunc(func(_ context.Context, j *wheelq.Job) error {
			_, err := fmt.Fprintf(log, "%s %s %d %d %d\n", j.Topic, j.ID, j.Due.UnixMicro(), time.Now().UnixMicro(), os.Getpid())
			return err
		})
		_ = q.Handle("beat", h)
		_ = q.Handle("plain", h)
		if err := q.Start(ctx); err != nil {
			return err
		}
		return q.DeclareRecurring(ctx, benchBeat)
	})
}

func runRecurring(ctx context.Context, cfg *config, emit func(result)) error {
	secs := cfg.size(60, 12)
	tm, err := startChildTeam(ctx, cfg, envRecurChild, "recur", 5)
	if err != nil {
		return err
	}
	defer tm.close(ctx)
	producer, logPath := tm.producer, tm.log
	// The baseline: one-off jobs due at each slot + 500 ms, through the
	// same processes.
	t0 := time.Now().Truncate(time.Second).Add(2 * time.Second)
	for i := range secs + 2 {
		due := t0.Add(time.Duration(i)*time.Second + 500*time.Millisecond)
		if _, err := producer.Schedule(ctx, "plain", nil, wheelq.ID(strconv.Itoa(i)), wheelq.At(due)); err != nil {
			return err
		}
	}
	killed := map[int]bool{}
	for i, at := range []time.Duration{time.Duration(secs) * time.Second / 3, 2 * time.Duration(secs) * time.Second / 3} {
		time.Sleep(time.Until(t0.Add(at).Add(-250 * time.Millisecond))) // between slots
		pid, err := tm.restart(i)
		if err != nil {
			return err
		}
		killed[pid] = true
	}
	time.Sleep(time.Until(t0.Add(time.Duration(secs)*time.Second - 250*time.Millisecond)))
	if err := producer.RemoveRecurring(ctx, "beat"); err != nil {
		return err
	}
	time.Sleep(1500 * time.Millisecond)
	tm.kill()

	f, err := os.Open(logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	runs := map[string]int{}
	firstPid := map[string]int{}
	var beatLate, plainLate []time.Duration
	var first, last int64
	early, dupsOutside := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 5 {
			continue
		}
		due, _ := strconv.ParseInt(fs[2], 10, 64)
		start, _ := strconv.ParseInt(fs[3], 10, 64)
		pid, _ := strconv.Atoi(fs[4])
		if start < due {
			early++
		}
		if fs[0] != "beat" {
			plainLate = append(plainLate, time.Duration(start-due)*time.Microsecond)
			continue
		}
		key := fs[1]
		runs[key]++
		if runs[key] > 1 {
			if !killed[firstPid[key]] {
				dupsOutside++
			}
			continue
		}
		firstPid[key] = pid
		beatLate = append(beatLate, time.Duration(start-due)*time.Microsecond)
		if first == 0 || due < first {
			first = due
		}
		last = max(last, due)
	}
	slots := 0
	if first > 0 {
		slots = int((last-first)/1_000_000) + 1
	}
	dups := 0
	for _, n := range runs {
		dups += n - 1
	}
	r := result{"workload": "recurring", "system": "wheelq @every 1s, 5 processes, 2 kill -9 and restarts", "seconds": secs,
		"slots_in_span": slots, "slots_run": len(runs), "duplicate_runs": dups, "duplicates_not_in_flight_at_a_kill": dupsOutside, "early": early}
	emit(summarize(beatLate).into(r))
	emit(summarize(plainLate).into(result{"workload": "recurring", "system": "one-off jobs at slot + 500 ms, same processes", "n": len(plainLate)}))
	return nil
}
