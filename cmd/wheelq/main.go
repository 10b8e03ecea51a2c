// Command wheelq inspects and steers a wheelq namespace from outside the
// program that runs it:
//
//	wheelq [connection flags] stats
//	wheelq [connection flags] watch [-interval 1s] [-count N]
//	wheelq [connection flags] show TOPIC ID
//	wheelq [connection flags] dead [-limit 100] [-json]
//	wheelq [connection flags] ls [-topic T] [-state pending|overdue|running|dead] [-after WHEN] [-before WHEN] [-limit 100] [-cursor C] [-json]
//	wheelq [connection flags] counts [-json]
//	wheelq [connection flags] cancel TOPIC ID
//	wheelq [connection flags] cancel [-topic T] [-state S] [-after WHEN] [-before WHEN] [-all]
//	wheelq [connection flags] requeue [-at WHEN] TOPIC ID
//	wheelq [connection flags] requeue [-at WHEN] [-topic T] [-after WHEN] [-before WHEN] [-all]
//	wheelq [connection flags] run TOPIC ID
//	wheelq [connection flags] pause TOPIC
//	wheelq [connection flags] resume TOPIC
//	wheelq [connection flags] serve [-addr 127.0.0.1:8080] [-read-only]
//
// WHEN is a time in RFC 3339 (2026-11-24T09:00:00Z) or a duration from
// now (-1h, 30m). A bulk cancel or requeue needs a filter flag, or -all
// to act on every job of the state (pending for cancel, dead for requeue).
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
	"maps"
	"os"
	"os/signal"
	"slices"
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
  ls                     jobs by -topic, -state (pending, overdue, running, dead), -after, -before; paged (-limit, -cursor)
  counts                 pending, overdue, running and dead jobs per topic, and which are paused
  cancel TOPIC ID        delete a job, pending or dead
  cancel FILTER          delete every job the filter flags select (-topic, -state, -after, -before; -all for no filter)
  requeue TOPIC ID       move a dead job back to pending (-at, default now)
  requeue FILTER         move every dead job the filter flags select back to pending (-all for no filter)
  run TOPIC ID           make a pending job due now
  pause TOPIC            stop starting the topic's jobs in every process (they stay pending)
  resume TOPIC           start them again, oldest first
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
	case "ls":
		code = c.ls(ctx, rest)
	case "counts":
		code = c.counts(ctx, rest)
	case "pause", "resume":
		code = c.pause(ctx, cmd, rest)
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
	if !j.Due.IsZero() { // a finished job's history keeps no due time
		fmt.Fprintf(tw, "due\t%s\n", j.Due.Format(time.RFC3339Nano))
	}
	if !j.Finished.IsZero() {
		fmt.Fprintf(tw, "finished\t%s\n", j.Finished.Format(time.RFC3339Nano))
	}
	fmt.Fprintf(tw, "created\t%s\n", j.Created.Format(time.RFC3339))
	fmt.Fprintf(tw, "attempts\t%d of %d\n", j.Attempts, j.MaxAttempts)
	if j.LastError != "" {
		fmt.Fprintf(tw, "last error\t%s\n", j.LastError)
	}
	for _, k := range slices.Sorted(maps.Keys(j.Headers)) {
		fmt.Fprintf(tw, "header\t%s: %s\n", printable(k), printable(j.Headers[k]))
	}
	if j.State == wheelq.StateDone || j.State == wheelq.StateCancelled {
		fmt.Fprintf(tw, "payload\t(not kept after the job finished)\n")
	} else {
		fmt.Fprintf(tw, "payload\t%d bytes: %s\n", len(j.Payload), printable(truncate(j.Payload, 200)))
	}
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
	at := fs.String("at", "", "requeue: the new due time, WHEN (default now)")
	var ff *filterFlags
	if cmd != "run" {
		ff = addFilterFlags(fs, cmd == "cancel")
		fs.BoolVar(&ff.all, "all", false, "with no filter flag: act on every job ("+map[bool]string{true: "pending", false: "dead"}[cmd == "cancel"]+")")
	}
	if fs.Parse(args) != nil {
		return 2
	}
	due := time.Now()
	if *at != "" {
		t, err := parseWhen(*at)
		if err != nil {
			fmt.Fprintf(c.err, "wheelq: bad -at: %v\n", err)
			return 2
		}
		due = t
	}
	if ff != nil && (ff.given(fs) || ff.all) {
		if fs.NArg() != 0 {
			fmt.Fprintf(c.err, "wheelq: %s takes either TOPIC ID or filter flags, not both\n", cmd)
			return 2
		}
		return c.bulk(ctx, cmd, fs, ff, due)
	}
	if fs.NArg() != 2 {
		if ff != nil {
			fmt.Fprintf(c.err, "usage: wheelq %s TOPIC ID, or wheelq %s with filter flags (-topic, -state, -after, -before; -all for every job)\n", cmd, cmd)
		} else {
			fmt.Fprintf(c.err, "usage: wheelq %s TOPIC ID\n", cmd)
		}
		return 2
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
		err = c.q.RunNow(cctx, topic, id)
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

// bulk cancels or requeues every job the filter flags select.
func (c *cli) bulk(ctx context.Context, cmd string, fs *flag.FlagSet, ff *filterFlags, due time.Time) int {
	f, err := ff.filter()
	if err != nil {
		fmt.Fprintf(c.err, "wheelq: %v\n", err)
		return 2
	}
	if !ff.given(fs) && !ff.all {
		fmt.Fprintf(c.err, "wheelq: %s with no filter would act on every job: give -topic, -state, -after or -before, or -all\n", cmd)
		return 2
	}
	// A bulk change runs as long as it takes, page by page (each call is
	// bounded by -timeout); an interrupt stops it between calls.
	var n int
	if cmd == "cancel" {
		n, err = c.q.CancelWhere(ctx, f)
	} else {
		n, err = c.q.RequeueWhere(ctx, f, due)
	}
	if err != nil {
		fmt.Fprintf(c.err, "wheelq: %s: %d done before: %v\n(run it again to carry on)\n", cmd, n, err)
		return 1
	}
	fmt.Fprintf(c.out, "%s: %d jobs\n", cmd, n)
	return 0
}

// filterFlags are the flags of a JobFilter.
type filterFlags struct {
	topic, state, after, before string
	all                         bool
}

func addFilterFlags(fs *flag.FlagSet, withState bool) *filterFlags {
	ff := &filterFlags{}
	fs.StringVar(&ff.topic, "topic", "", "only jobs of this topic")
	if withState {
		fs.StringVar(&ff.state, "state", "", "pending (default; includes overdue and running), overdue, running or dead")
	}
	fs.StringVar(&ff.after, "after", "", "only jobs due (dead: dead-lettered) at or after WHEN")
	fs.StringVar(&ff.before, "before", "", "only jobs due (dead: dead-lettered) before WHEN")
	return ff
}

// given says whether a filter flag was set.
func (ff *filterFlags) given(fs *flag.FlagSet) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "topic", "state", "after", "before":
			set = true
		}
	})
	return set
}

func (ff *filterFlags) filter() (wheelq.JobFilter, error) {
	f := wheelq.JobFilter{Topic: ff.topic}
	switch ff.state {
	case "", "pending":
	case "overdue":
		f.Overdue = true
	case "running":
		f.State = wheelq.StateRunning
	case "dead":
		f.State = wheelq.StateDead
	default:
		return f, fmt.Errorf("bad -state %q: want pending, overdue, running or dead", ff.state)
	}
	var err error
	if ff.after != "" {
		if f.DueAfter, err = parseWhen(ff.after); err != nil {
			return f, fmt.Errorf("bad -after: %w", err)
		}
	}
	if ff.before != "" {
		if f.DueBefore, err = parseWhen(ff.before); err != nil {
			return f, fmt.Errorf("bad -before: %w", err)
		}
	}
	return f, nil
}

// parseWhen reads a time: RFC 3339, or a duration from now.
func parseWhen(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return time.Now().Add(d), nil
	}
	return time.Time{}, fmt.Errorf("%q: want RFC 3339, like 2026-11-24T09:00:00Z, or a duration from now, like -1h or 30m", s)
}

func (c *cli) ls(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("ls", flag.ContinueOnError)
	fs.SetOutput(c.err)
	ff := addFilterFlags(fs, true)
	limit := fs.Int("limit", wheelq.DefaultListLimit, fmt.Sprintf("the most jobs listed (at most %d)", wheelq.MaxListLimit))
	cursor := fs.String("cursor", "", "continue where a listing ended (it prints the cursor)")
	asJSON := fs.Bool("json", false, "print JSON, one object per job")
	if fs.Parse(args) != nil || fs.NArg() != 0 {
		return 2
	}
	f, err := ff.filter()
	if err != nil {
		fmt.Fprintf(c.err, "wheelq: %v\n", err)
		return 2
	}
	if *limit < 1 || *limit > wheelq.MaxListLimit {
		fmt.Fprintf(c.err, "wheelq: bad -limit %d: want 1 to %d (page on with -cursor)\n", *limit, wheelq.MaxListLimit)
		return 2
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	js, next, err := c.q.List(cctx, f, *cursor, *limit)
	if errors.Is(err, wheelq.ErrInvalidCursor) {
		fmt.Fprintf(c.err, "wheelq: %v\n(give -cursor as a listing printed it, or leave it out to start)\n", err)
		return 2
	}
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		for _, j := range js {
			if code := c.json(jobJSON(j)); code != 0 {
				return code
			}
		}
	} else {
		tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tID\tSTATE\tDUE\tATTEMPTS\tLAST ERROR")
		for _, j := range js {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", j.Topic, j.ID, j.State, j.Due.Format(time.RFC3339), j.Attempts, truncate([]byte(j.LastError), 60))
		}
		_ = tw.Flush()
	}
	if next != "" {
		fmt.Fprintf(c.err, "more: add -cursor %s\n", next)
	}
	return 0
}

func (c *cli) counts(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("counts", flag.ContinueOnError)
	fs.SetOutput(c.err)
	asJSON := fs.Bool("json", false, "print JSON, one object per topic")
	if fs.Parse(args) != nil || fs.NArg() != 0 {
		return 2
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cs, err := c.q.Counts(cctx)
	if err != nil {
		return c.fail(err)
	}
	if *asJSON {
		for _, t := range cs {
			if code := c.json(map[string]any{"topic": t.Topic, "pending": t.Pending, "overdue": t.Overdue,
				"running": t.Running, "dead": t.Dead, "paused": t.Paused}); code != 0 {
				return code
			}
		}
		return 0
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPENDING\tOVERDUE\tRUNNING\tDEAD\tPAUSED")
	for _, t := range cs {
		paused := ""
		if t.Paused {
			paused = "paused"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", t.Topic, t.Pending, t.Overdue, t.Running, t.Dead, paused)
	}
	_ = tw.Flush()
	return 0
}

func (c *cli) pause(ctx context.Context, cmd string, args []string) int {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(c.err)
	if fs.Parse(args) != nil || fs.NArg() != 1 {
		fmt.Fprintf(c.err, "usage: wheelq %s TOPIC\n", cmd)
		return 2
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var err error
	if cmd == "pause" {
		err = c.q.Pause(cctx, fs.Arg(0))
	} else {
		err = c.q.Resume(cctx, fs.Arg(0))
	}
	if err != nil {
		return c.fail(fmt.Errorf("%w (nothing is lost by running it again)", err))
	}
	fmt.Fprintf(c.out, "%s %s: done\n", cmd, fs.Arg(0))
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
		"attempts": j.Attempts, "max_attempts": j.MaxAttempts,
		"created": j.Created.Format(time.RFC3339), "payload": j.Payload}
	if !j.Due.IsZero() {
		m["due"] = j.Due.Format(time.RFC3339Nano)
	}
	if !j.Finished.IsZero() {
		m["finished"] = j.Finished.Format(time.RFC3339Nano)
	}
	if j.LastError != "" {
		m["last_error"] = j.LastError
	}
	if len(j.Headers) > 0 {
		m["headers"] = j.Headers
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
