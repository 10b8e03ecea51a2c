package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
)

// serveChild is the body of a worker process of a childTeam workload: spec
// is env's value, "addr|namespace|log path". It makes a queue on the
// namespace with the default Config and hands it, with the log opened
// for appending, to run, which registers what the process does and
// starts the queue; the process then runs until killed. A bad spec or an
// error of run ends it with a message.
func serveChild(env, spec string, run func(ctx context.Context, q *wheelq.Queue, log *os.File) error) {
	parts := strings.SplitN(spec, "|", 3)
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "wheelq-bench: bad %s %q\n", env, spec)
		os.Exit(2)
	}
	f, err := os.OpenFile(parts[2], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err == nil {
		var q *wheelq.Queue
		q, err = wheelq.New(redis.NewClient(&redis.Options{Addr: parts[0]}), wheelq.Config{Namespace: parts[1]})
		if err == nil {
			err = run(context.Background(), q, f)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wheelq-bench:", err)
		os.Exit(1)
	}
	select {} // until killed
}

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
