package main

import (
	"context"
	"os"
	"path/filepath"
	"syscall"

	"github.com/wheelq/wheelq"
)

// childTeam is n worker processes of a workload (started with env:
// envRecurChild, envLimitChild) on a fresh redis-server and a namespace of
// their own, all appending to one log, and a queue on the namespace that
// is never started: the workload's producer.
type childTeam struct {
	br       *benchRedis
	env, ns  string
	dir, log string
	procs    []*teamProc
	producer *wheelq.Queue
}

func startChildTeam(ctx context.Context, cfg *config, env, name string, n int) (t *childTeam, err error) {
	t = &childTeam{env: env, ns: namespace(name), procs: make([]*teamProc, n)}
	defer func() {
		if err != nil {
			t.close(ctx)
		}
	}()
	if t.br, err = freshRedis(ctx, cfg); err != nil {
		return t, err
	}
	if t.dir, err = os.MkdirTemp("", "wheelq-bench-"+name); err != nil {
		return t, err
	}
	t.log = filepath.Join(t.dir, "runs")
	for i := range t.procs {
		if t.procs[i], err = startChildProc(env, t.br.rdb.Options().Addr, t.ns, t.log); err != nil {
			return t, err
		}
	}
	t.producer, err = wheelq.New(t.br.rdb, wheelq.Config{Namespace: t.ns})
	return t, err
}

// restart kills process i with SIGKILL and starts another in its place;
// it returns the killed one's pid.
func (t *childTeam) restart(i int) (pid int, err error) {
	pid = t.procs[i].cmd.Process.Pid
	t.procs[i].stop(syscall.SIGKILL)
	t.procs[i], err = startChildProc(t.env, t.br.rdb.Options().Addr, t.ns, t.log)
	return pid, err
}

// kill kills every process with SIGKILL.
func (t *childTeam) kill() {
	for i, p := range t.procs {
		if p != nil {
			p.stop(syscall.SIGKILL)
			t.procs[i] = nil
		}
	}
}

// close kills the processes and removes what the team made.
func (t *childTeam) close(ctx context.Context) {
	t.kill()
	if t.producer != nil {
		_ = t.producer.Shutdown(ctx)
	}
	if t.dir != "" {
		os.RemoveAll(t.dir)
	}
	if t.br != nil {
		t.br.close()
	}
}
