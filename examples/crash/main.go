// Command crash schedules jobs in a child process, kills it with SIGKILL
// before any is due, starts a new child, and watches every job still fire:
// the jobs were in Redis before Schedule returned.
//
//	go run ./examples/crash
//
// Without REDIS_ADDR the parent runs an embedded Redis that outlives the
// children (a real deployment would use a Redis with AOF on; see
// docs/operations.md).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/examples/internal/exredis"
)

const jobs = 5

func main() {
	role := flag.String("role", "parent", "parent, scheduler or runner (the children)")
	ns := flag.String("ns", fmt.Sprintf("crash-%d", time.Now().UnixNano()), "namespace")
	flag.Parse()
	var err error
	switch *role {
	case "parent":
		var rdb redis.UniversalClient
		var closeRedis func()
		rdb, closeRedis, err = exredis.Connect(os.Stdout)
		if err == nil {
			defer closeRedis()
			err = parent(os.Args[0], rdb.(*redis.Client).Options().Addr, *ns, os.Stdout)
		}
	default:
		err = child(*role, *ns)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash:", err)
		os.Exit(1)
	}
}

func config(ns string) wheelq.Config {
	// A short lease: the runner takes over the killed scheduler's
	// partitions after one second instead of ten.
	return wheelq.Config{Namespace: ns, LeaseTTL: time.Second}
}

// child runs one role against REDIS_ADDR and reports on stdout.
func child(role, ns string) error {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	q, err := wheelq.New(rdb, config(ns))
	if err != nil {
		return err
	}
	fired := make(chan string, jobs)
	q.Handle("job", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		fired <- j.ID
		return nil
	}))
	if err := q.Start(ctx); err != nil {
		return err
	}
	if role == "scheduler" {
		for i := range jobs {
			id := fmt.Sprintf("job-%d", i)
			if _, err := q.Schedule(ctx, "job", nil, wheelq.ID(id), wheelq.After(2*time.Second+time.Duration(i)*100*time.Millisecond)); err != nil {
				return err
			}
		}
		fmt.Println("scheduled", jobs)
		select {} // until killed
	}
	for range jobs {
		fmt.Println("fired", <-fired)
	}
	return q.Shutdown(ctx)
}

func parent(self, addr, ns string, out io.Writer) error {
	start := func(role string) (*exec.Cmd, *bufio.Scanner, error) {
		cmd := exec.Command(self, "-role", role, "-ns", ns)
		cmd.Env = append(os.Environ(), "REDIS_ADDR="+addr)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, nil, err
		}
		return cmd, bufio.NewScanner(stdout), cmd.Start()
	}
	sched, lines, err := start("scheduler")
	if err != nil {
		return err
	}
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "scheduled") {
		return fmt.Errorf("scheduler: %q", lines.Text())
	}
	fmt.Fprintf(out, "child %d %s, due in 2s\n", sched.Process.Pid, lines.Text())
	_ = sched.Process.Signal(syscall.SIGKILL)
	_ = sched.Wait()
	fmt.Fprintf(out, "killed child %d with SIGKILL before any job was due\n", sched.Process.Pid)

	runner, lines, err := start("runner")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "started child %d\n", runner.Process.Pid)
	for lines.Scan() {
		fmt.Fprintln(out, lines.Text())
	}
	return runner.Wait()
}
