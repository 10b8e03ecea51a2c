package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/wheelq/wheelq"
)

func init() {
	workloads = append(workloads,
		workload{"restart", "a worker process with the default Config killed with -9 and restarted at once: lateness of the jobs due after the kill, with the lock file (the default) vs without (LockDir \"-\"), interleaved", runRestart},
	)
}

// envBenchLockDir passes Config.LockDir to a worker process (team.go).
const envBenchLockDir = "WHEELQ_BENCH_LOCKDIR"

// runRestart: an orders app killed with -9 and
// restarted ran its jobs p50 6.2 s late with the default Config. One
// worker process runs n jobs due over [1s, 4s]; it is killed at 1.5 s and
// a new one started at once. The lateness of the jobs due after the kill
// is reported, for the default Config (a lock file proves the killed
// process gone) and for LockDir "-" (its leases lapse first), 3 times
// each, interleaved.
func runRestart(ctx context.Context, cfg *config, emit func(result)) error {
	br, err := freshRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer br.close()
	dir, err := os.MkdirTemp("", "wheelq-bench-restart")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	n := cfg.size(5_000, 1_000)
	reps := 3
	if cfg.quick {
		reps = 1
	}
	for rep := range reps {
		for _, lockDir := range []string{"", "-"} {
			r, err := restartRun(ctx, br, dir, fmt.Sprintf("%d%s", rep, lockDir), lockDir, n)
			if err != nil {
				return err
			}
			emit(r)
		}
	}
	return nil
}

func restartRun(ctx context.Context, br *benchRedis, dir, tag, lockDir string, n int) (result, error) {
	ns := namespace("restart")
	addr := br.rdb.Options().Addr
	if lockDir == "" {
		lockDir = filepath.Join(dir, "locks") // the default's behaviour, in a directory of the run's own
	}
	if err := os.Setenv(envBenchLockDir, lockDir); err != nil {
		return nil, err
	}
	defer os.Unsetenv(envBenchLockDir)
	logs := []string{filepath.Join(dir, "first"+tag+".log"), filepath.Join(dir, "second"+tag+".log")}
	first, err := startTeamProc(addr, ns, logs[0])
	if err != nil {
		return nil, err
	}
	defer first.stop(syscall.SIGKILL)
	if _, err := until(ctx, 60*time.Second, "the worker owns every partition", func() (bool, error) {
		h, err := leaseHolders(ctx, br.rdb, ns)
		return err == nil && evenly(values(h), 1), err
	}); err != nil {
		return nil, err
	}
	producer, err := wheelq.New(br.rdb, wheelq.Config{Namespace: ns})
	if err != nil {
		return nil, err
	}
	defer producer.Shutdown(ctx)
	t0 := time.Now()
	for _, d := range dues(t0, n, time.Second, 4*time.Second) {
		if _, err := producer.Schedule(ctx, "t", nil, wheelq.At(d)); err != nil {
			return nil, err
		}
	}
	time.Sleep(time.Until(t0.Add(1500 * time.Millisecond)))
	first.stop(syscall.SIGKILL)
	killed := time.Now()
	second, err := startTeamProc(addr, ns, logs[1])
	if err != nil {
		return nil, err
	}
	defer second.stop(syscall.SIGKILL)
	if _, err := until(ctx, 60*time.Second, "the jobs ran", func() (bool, error) {
		pending, _, err := producerCounts(ctx, producer)
		return pending == 0, err
	}); err != nil {
		return nil, err
	}
	second.stop(syscall.SIGTERM) // flushes its log
	var lat []time.Duration
	if err := readRuns(logs, func(d, s int64) {
		if d >= killed.UnixMicro() {
			lat = append(lat, time.Duration(s-d)*time.Microsecond)
		}
	}); err != nil {
		return nil, err
	}
	system := "restart, default Config (lock file)"
	if lockDir == "-" {
		system = "restart, LockDir \"-\" (leases lapse)"
	}
	r := summarize(lat).into(result{"workload": "restart", "system": system, "n": len(lat)})
	return r, nil
}
