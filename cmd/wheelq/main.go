// Command wheelq inspects and steers a wheelq namespace from outside the
// program that runs it:
//
//	wheelq [connection flags] stats
//	wheelq [connection flags] watch [-interval 1s] [-count N]
//	wheelq [connection flags] show TOPIC ID
//	wheelq [connection flags] dead [-limit 100] [-json]
//	wheelq [connection flags] cancel TOPIC ID
//	wheelq [connection flags] requeue [-at RFC3339] TOPIC ID
//	wheelq [connection flags] run TOPIC ID
//	wheelq [connection flags] serve [-addr 127.0.0.1:8080] [-read-only]
//
// Connection flags (before the command): -url redis://host:port/db (or
// rediss://), or -addrs host:port,... with -sentinel-master NAME for a
// Sentinel set, or -cluster for a Redis Cluster; -namespace as the queue's
// Config has it (its number of partitions is read from Redis). A namespace
// that does not exist is an error: wheelq never creates one.
//
// It uses only the queue's public API, as a producer that is never
// started: it runs no job and takes no lease.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: wheelq [connection flags] COMMAND [flags] [args]

commands:
  stats                  counts, lateness and process figures of the namespace
  watch                  stats again every -interval (until interrupted or -count times)
  show TOPIC ID          a job: its state, due time, attempts, last error, payload
  dead                   dead-lettered jobs, oldest death first
  cancel TOPIC ID        delete a job, pending or dead
  requeue TOPIC ID       move a dead job back to pending (-at, default now)
  run TOPIC ID           make a pending job due now
  serve                  the web dashboard (-addr 127.0.0.1:8080, -read-only)

connection flags:
`

// run runs the command line args, writing to stdout and stderr, and
// returns the exit code: 0 done, 1 the command failed, 2 bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("wheelq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "", "Redis URL: redis://[user:pass@]host:port[/db] or rediss://... (default redis://127.0.0.1:6379)")
	addrs := fs.String("addrs", "", "comma-separated host:port list: Sentinels (with -sentinel-master) or Cluster nodes (with -cluster)")
	master := fs.String("sentinel-master", "", "the Sentinel master name")
	cluster := fs.Bool("cluster", false, "connect to a Redis Cluster at -addrs")
	ns := fs.String("namespace", "default", "the queue's Config.Namespace")
	parts := fs.Int("partitions", 0, "the queue's Config.Partitions (default: as the namespace records it)")
	timeout := fs.Duration("timeout", 5*time.Second, "bound of each Redis call")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	rdb, where, err := connect(*url, *addrs, *master, *cluster)
	if err != nil {
		fmt.Fprintf(stderr, "wheelq: %v\n", err)
		return 2
	}
	defer rdb.Close()
	pctx, cancel := context.WithTimeout(ctx, *timeout)
	err = rdb.Ping(pctx).Err()
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "wheelq: cannot reach Redis at %s: %v\n(is it running? give its address with -url, or -addrs with -sentinel-master or -cluster)\n", where, err)
		return 1
	}
	lctx, cancel := context.WithTimeout(ctx, *timeout)
	n, err := wheelq.Partitions(lctx, rdb, *ns)
	cancel()
	switch {
	case errors.Is(err, wheelq.ErrNotFound):
		fmt.Fprintf(stderr, "wheelq: no namespace %q at %s (give the queue's namespace with -namespace)\n", *ns, where)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "wheelq: reading namespace %q at %s: %v\n", *ns, where, err)
		return 1
	case *parts == 0:
		*parts = n
	}
	q, err := wheelq.New(rdb, wheelq.Config{Namespace: *ns, Partitions: *parts, WriteTimeout: *timeout})
	if err != nil {
		fmt.Fprintf(stderr, "wheelq: %v\n", err)
		return 2
	}
	defer func() { _ = q.Shutdown(context.Background()) }()
	c := &cli{q: q, out: stdout, err: stderr, timeout: *timeout}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	var code int
	switch cmd {
	case "stats":
		code = c.stats(ctx, rest)
	case "watch":
		code = c.watch(ctx, rest)
	case "show":
		code = c.show(ctx, rest)
	case "dead":
		code = c.dead(ctx, rest)
	case "cancel", "requeue", "run":
		code = c.change(ctx, cmd, rest)
	case "serve":
		code = c.serve(ctx, rest)
	default:
		fmt.Fprintf(stderr, "wheelq: unknown command %q\n\n", cmd)
		fs.Usage()
		return 2
	}
	return code
}

// connect makes the client the flags name, and says where it points.
func connect(url, addrs, master string, cluster bool) (redis.UniversalClient, string, error) {
	list := splitAddrs(addrs)
	switch {
	case url != "" && (addrs != "" || master != "" || cluster):
		return nil, "", errors.New("give either -url or -addrs (with -sentinel-master or -cluster), not both")
	case master != "" && cluster:
		return nil, "", errors.New("-sentinel-master and -cluster exclude each other")
	case master != "":
		if len(list) == 0 {
			return nil, "", errors.New("-sentinel-master needs -addrs, the Sentinels' host:port list")
		}
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: list}),
			fmt.Sprintf("Sentinel master %q via %s", master, addrs), nil
	case cluster:
		if len(list) == 0 {
			return nil, "", errors.New("-cluster needs -addrs, some of the Cluster's host:port")
		}
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: list}), "Cluster " + addrs, nil
	case addrs != "":
		if len(list) != 1 {
			return nil, "", errors.New("several -addrs need -sentinel-master or -cluster")
		}
		return redis.NewClient(&redis.Options{Addr: list[0]}), list[0], nil
	}
	if url == "" {
		url = "redis://127.0.0.1:6379"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, "", fmt.Errorf("bad -url %q: %v (want redis://host:port/db)", url, err)
	}
	return redis.NewClient(opt), opt.Addr, nil
}

func splitAddrs(s string) []string {
	var out []string
	for a := range strings.SplitSeq(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

type cli struct {
	q        *wheelq.Queue
	out, err io.Writer
	timeout  time.Duration
}

func (c *cli) fail(err error) int {
	fmt.Fprintf(c.err, "wheelq: %v\n", err)
	if errors.Is(err, wheelq.ErrLayout) {
		fmt.Fprintln(c.err, "(give the queue's number of partitions with -partitions)")
	}
	return 1
}

func (c *cli) stats(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	fs.SetOutput(c.err)
	asJSON := fs.Bool("json", false, "print JSON")
	if fs.Parse(args) != nil || fs.NArg() != 0 {
		return 2
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	s, err := c.q.Stats(cctx)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		return c.json(map[string]any{"pending": s.Pending, "dead": s.Dead, "overdue": s.Overdue,
			"oldest_overdue_seconds": s.OldestOverdue.Seconds()})
	}
	fmt.Fprintf(c.out, "pending %d  overdue %d (oldest %v)  dead %d\n", s.Pending, s.Overdue, s.OldestOverdue.Round(time.Millisecond), s.Dead)
	return 0
}

func (c *cli) watch(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	fs.SetOutput(c.err)
	every := fs.Duration("interval", time.Second, "time between two readings")
	count := fs.Int("count", 0, "stop after this many readings (0: until interrupted)")
	if fs.Parse(args) != nil || fs.NArg() != 0 || *every <= 0 || *count < 0 {
		return 2
	}
	t := time.NewTicker(*every)
	defer t.Stop()
	for i := 0; *count == 0 || i < *count; i++ {
		if i > 0 {
			select {
			case <-t.C:
			case <-ctx.Done():
				return 0
			}
		}
		fmt.Fprintf(c.out, "%s  ", time.Now().Format(time.TimeOnly))
		if code := c.stats(ctx, nil); code != 0 {
			return code
		}
	}
	return 0
}

func (c *cli) show(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("show", flag.ContinueOnError)
	fs.SetOutput(c.err)
	asJSON := fs.Bool("json", false, "print JSON")
	if fs.Parse(args) != nil || fs.NArg() != 2 {
		fmt.Fprintln(c.err, "usage: wheelq show [-json] TOPIC ID")
		return 2
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	j, err := c.q.Lookup(cctx, fs.Arg(0), fs.Arg(1))
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		return c.json(jobJSON(j))
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "topic\t%s\nid\t%s\nstate\t%s\n", j.Topic, j.ID, j.State)
	fmt.Fprintf(tw, "due\t%s\ncreated\t%s\n", j.Due.Format(time.RFC3339Nano), j.Created.Format(time.RFC3339))
	fmt.Fprintf(tw, "attempts\t%d of %d\n", j.Attempts, j.MaxAttempts)
	if j.LastError != "" {
		fmt.Fprintf(tw, "last error\t%s\n", j.LastError)
	}
	fmt.Fprintf(tw, "payload\t%d bytes: %s\n", len(j.Payload), printable(truncate(j.Payload, 200)))
	_ = tw.Flush()
	return 0
}

func (c *cli) dead(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("dead", flag.ContinueOnError)
	fs.SetOutput(c.err)
	limit := fs.Int("limit", 100, "the most jobs listed")
	asJSON := fs.Bool("json", false, "print JSON, one object per job")
	if fs.Parse(args) != nil || fs.NArg() != 0 || *limit < 0 {
		return 2
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	js, err := c.q.DeadJobs(cctx, *limit)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		for _, j := range js {
			if code := c.json(jobJSON(j)); code != 0 {
				return code
			}
		}
		return 0
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tID\tDIED\tATTEMPTS\tLAST ERROR")
	for _, j := range js {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", j.Topic, j.ID, j.Due.Format(time.RFC3339), j.Attempts, truncate([]byte(j.LastError), 60))
	}
	_ = tw.Flush()
	return 0
}

func (c *cli) change(ctx context.Context, cmd string, args []string) int {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(c.err)
	at := fs.String("at", "", "requeue: the new due time, RFC 3339 (default now)")
	if fs.Parse(args) != nil || fs.NArg() != 2 {
		fmt.Fprintf(c.err, "usage: wheelq %s TOPIC ID\n", cmd)
		return 2
	}
	due := time.Now()
	if *at != "" {
		t, err := time.Parse(time.RFC3339, *at)
		if err != nil {
			fmt.Fprintf(c.err, "wheelq: bad -at %q: want RFC 3339, like 2026-11-24T09:00:00Z\n", *at)
			return 2
		}
		due = t
	}
	topic, id := fs.Arg(0), fs.Arg(1)
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var err error
	switch cmd {
	case "cancel":
		err = c.q.Cancel(cctx, topic, id)
	case "requeue":
		err = c.q.Requeue(cctx, topic, id, due)
	case "run":
		err = c.q.Reschedule(cctx, topic, id, due)
	}
	switch {
	case errors.Is(err, wheelq.ErrRunning):
		fmt.Fprintf(c.out, "%s %s/%s: done; a run of it was in progress and goes on\n", cmd, topic, id)
		return 0
	case errors.Is(err, wheelq.ErrNotFound) && cmd == "run":
		return c.fail(fmt.Errorf("%w (run moves a pending job; for a dead one use requeue)", err))
	case errors.Is(err, wheelq.ErrNotFound) && cmd == "requeue":
		return c.fail(fmt.Errorf("%w (requeue moves a dead job; see wheelq show)", err))
	case err != nil:
		return c.fail(err)
	}
	fmt.Fprintf(c.out, "%s %s/%s: done\n", cmd, topic, id)
	return 0
}

func (c *cli) json(v any) int {
	enc := json.NewEncoder(c.out)
	if err := enc.Encode(v); err != nil {
		return c.fail(err)
	}
	return 0
}

func jobJSON(j wheelq.JobInfo) map[string]any {
	m := map[string]any{"topic": j.Topic, "id": j.ID, "state": j.State.String(),
		"due": j.Due.Format(time.RFC3339Nano), "attempts": j.Attempts, "max_attempts": j.MaxAttempts,
		"created": j.Created.Format(time.RFC3339), "payload": j.Payload}
	if j.LastError != "" {
		m["last_error"] = j.LastError
	}
	return m
}

// printable returns s as it is when it is text (valid UTF-8 without
// control characters, as JSON is), and quoted with escapes otherwise.
func printable(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl) {
		return strconv.Quote(s)
	}
	return s
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
