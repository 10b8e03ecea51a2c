package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/errs"
)

// noArgs refuses arguments to a command that takes none.
func noArgs(args []string) error {
	if len(args) != 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

// nArgs wants exactly n arguments, named by what.
func nArgs(args []string, n int, what string) error {
	if len(args) != n {
		return usagef("want %s, got %d argument(s)", what, len(args))
	}
	return nil
}

// jsonOnlyCmd is the setup of a command that takes no arguments and only
// -json (described by help), and runs run.
func jsonOnlyCmd(help string, run func(*cli, context.Context, bool) int) func(*flag.FlagSet) func([]string) (action, error) {
	return func(fs *flag.FlagSet) func([]string) (action, error) {
		asJSON := fs.Bool("json", false, help)
		return func(args []string) (action, error) {
			if err := noArgs(args); err != nil {
				return nil, err
			}
			return func(ctx context.Context, c *cli) int { return run(c, ctx, *asJSON) }, nil
		}
	}
}

func statsCmd(fs *flag.FlagSet) func([]string) (action, error) {
	return jsonOnlyCmd("print JSON", (*cli).stats)(fs)
}

func (c *cli) stats(ctx context.Context, asJSON bool) int {
	s, err := c.readStats(ctx)
	if err != nil {
		return c.fail(err)
	}
	wctx, cancel := context.WithTimeout(ctx, c.timeout)
	ws, err := c.q.Workers(wctx)
	cancel()
	if err != nil {
		return c.fail(err)
	}
	all := wheelq.SumWorkers(ws)
	if asJSON {
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		return c.json(map[string]any{"pending": s.Pending, "dead": s.Dead, "overdue": s.Overdue,
			"oldest_overdue_seconds": s.OldestOverdue.Seconds(), "workers": len(ws),
			"running": all.Running, "stuck": all.Stuck, "runs": all.Fired,
			"lateness": map[string]any{"count": all.Lateness.Count, "p50_ms": ms(all.Lateness.P50),
				"p99_ms": ms(all.Lateness.P99), "max_ms": ms(all.Lateness.Max)}})
	}
	fmt.Fprintln(c.out, statsLine(s))
	fmt.Fprintln(c.out, workersLine(len(ws), all))
	return 0
}

// workersLine is stats's line of the worker processes' figures.
func workersLine(n int, all wheelq.WorkerStats) string {
	if n == 0 {
		return "workers 0 (no worker process is started on the namespace)"
	}
	l := all.Lateness
	return fmt.Sprintf("workers %d  running %d (stuck %d)  runs %d  lateness p50 %v  p99 %v  max %v",
		n, all.Running, all.Stuck, all.Fired, l.P50, l.P99, l.Max)
}

func (c *cli) readStats(ctx context.Context) (wheelq.Stats, error) {
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return c.q.Stats(cctx)
}

// statsLine is stats's line of figures, without its newline.
func statsLine(s wheelq.Stats) string {
	return fmt.Sprintf("pending %d  overdue %d (oldest %v)  dead %d", s.Pending, s.Overdue, s.OldestOverdue.Round(time.Millisecond), s.Dead)
}

func watchCmd(fs *flag.FlagSet) func([]string) (action, error) {
	every := fs.Duration("interval", time.Second, "time between two readings")
	count := fs.Int("count", 0, "stop after this many readings, failed ones included (0: until interrupted)")
	return func(args []string) (action, error) {
		switch {
		case len(args) != 0:
			return nil, noArgs(args)
		case *every <= 0:
			return nil, usagef("bad -interval %v: want > 0", *every)
		case *count < 0:
			return nil, usagef("bad -count %d: want >= 0 (0: until interrupted)", *count)
		}
		return func(ctx context.Context, c *cli) int { return c.watch(ctx, *every, *count) }, nil
	}
}

// watch prints a line of stats every interval, count times (0: until ctx
// ends). It rides out an outage, also one under way when it starts (c is
// not attached yet: each reading tries to attach it first): the first
// failed reading prints a line saying so, the next ones nothing, and the
// first good one after them a line saying Redis is back. Each line is
// printed whole. The exit code is 1 if the last reading failed; if Redis
// answers but the namespace cannot be opened (there is none of that
// name), or answers an error no retry clears (a wrong password, a
// namespace of the wrong type or corrupt: see passing), watch says so and
// ends at once with 1, as the other commands do.
func (c *cli) watch(ctx context.Context, every time.Duration, count int) int {
	t := time.NewTicker(every)
	defer t.Stop()
	var downSince time.Time // zero while readings succeed
	for i := 0; count == 0 || i < count; i++ {
		if i > 0 {
			select {
			case <-t.C:
			case <-ctx.Done():
				return 0
			}
		}
		var s wheelq.Stats
		var err error
		if c.q == nil {
			var code int
			if code, err = c.attach(ctx); err == nil && code != 0 {
				return code // attach said why
			}
		}
		if err == nil {
			s, err = c.readStats(ctx)
		}
		now := time.Now()
		stamp := now.Format(time.TimeOnly)
		switch {
		case ctx.Err() != nil:
			return 0 // interrupted during a reading
		case err != nil && !passing(err):
			// Redis answered, and no retry clears it (a wrong password, a
			// namespace of the wrong type or corrupt, flags that do not
			// fit it): say so and end, as the other commands do.
			fmt.Fprintf(c.err, "wheelq: watch: namespace %q at %s: %s\n", c.namespace, c.where, cleanErr(err))
			return 1
		case err != nil && downSince.IsZero():
			downSince = now
			fmt.Fprintf(c.out, "%s  Redis at %s unreachable: %v; trying again every %v\n", stamp, c.where, cleanErr(err), every)
		case err == nil && !downSince.IsZero():
			fmt.Fprintf(c.out, "%s  Redis at %s back after %v\n", stamp, c.where, now.Sub(downSince).Round(time.Millisecond))
			downSince = time.Time{}
		}
		if err == nil {
			fmt.Fprintf(c.out, "%s  %s\n", stamp, statsLine(s))
		}
	}
	if !downSince.IsZero() {
		fmt.Fprintf(c.err, "wheelq: watch: the last reading failed (Redis at %s unreachable since %s)\n", c.where, downSince.Format(time.TimeOnly))
		return 1
	}
	return 0
}

// passing reports whether err is one watch rides out: Redis did not
// answer (a connection refused, reset or closed, a timeout), or answered
// that it cannot serve for now (LOADING, MASTERDOWN, CLUSTERDOWN,
// TRYAGAIN, BUSY, READONLY during a failover), or the queue found it
// unreachable. Any other reply of Redis, and a namespace found corrupt or
// of another layout, is lasting.
func passing(err error) bool {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, wheelq.ErrUnavailable),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout),
		errors.As(err, &ne):
		return true
	case errors.Is(err, wheelq.ErrCorrupt), errors.Is(err, wheelq.ErrLayout):
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		for _, p := range []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "READONLY"} {
			if strings.HasPrefix(re.Error(), p) {
				return true
			}
		}
		return false
	}
	return true // not an answer of Redis's: a failure to reach it
}

func showCmd(fs *flag.FlagSet) func([]string) (action, error) {
	asJSON := fs.Bool("json", false, "print JSON")
	return func(args []string) (action, error) {
		if err := nArgs(args, 2, "TOPIC ID"); err != nil {
			return nil, err
		}
		return func(ctx context.Context, c *cli) int { return c.show(ctx, args[0], args[1], *asJSON) }, nil
	}
}

func (c *cli) show(ctx context.Context, topic, id string, asJSON bool) int {
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	j, err := c.q.Lookup(cctx, topic, id)
	if err != nil {
		return c.fail(err)
	}
	if asJSON {
		return c.json(j)
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	state, now := j.State.String(), time.Now()
	if stateOf(j, now) == "overdue" {
		state += ", overdue by " + now.Sub(j.Due).Round(time.Second).String()
	}
	fmt.Fprintf(tw, "topic\t%s\nid\t%s\nstate\t%s\n", printable(j.Topic), printable(j.ID), state)
	if !j.Due.IsZero() { // a finished job's history keeps no due time
		fmt.Fprintf(tw, "due\t%s\n", j.Due.Format(time.RFC3339Nano))
	}
	if !j.Finished.IsZero() {
		fmt.Fprintf(tw, "finished\t%s\n", j.Finished.Format(time.RFC3339Nano))
	}
	fmt.Fprintf(tw, "created\t%s\n", j.Created.Format(time.RFC3339))
	fmt.Fprintf(tw, "attempts\t%d of %d\n", j.Attempts, j.MaxAttempts)
	if j.LastError != "" {
		fmt.Fprintf(tw, "last error\t%s\n", printable(j.LastError))
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

func deadCmd(fs *flag.FlagSet) func([]string) (action, error) {
	limit := fs.Int("limit", 100, "the most jobs listed")
	asJSON := fs.Bool("json", false, "print JSON, one object per job")
	return func(args []string) (action, error) {
		if err := noArgs(args); err != nil {
			return nil, err
		}
		if *limit < 1 {
			return nil, usagef("bad -limit %d: want >= 1", *limit)
		}
		return func(ctx context.Context, c *cli) int { return c.dead(ctx, *limit, *asJSON) }, nil
	}
}

func (c *cli) dead(ctx context.Context, limit int, asJSON bool) int {
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	js, err := c.q.DeadJobs(cctx, limit)
	if err != nil {
		return c.fail(err)
	}
	if asJSON {
		return c.jsonJobs(js)
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tID\tDIED\tATTEMPTS\tLAST ERROR")
	for _, j := range js {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", printable(j.Topic), printable(j.ID), j.Due.Format(time.RFC3339), j.Attempts, printable(truncate([]byte(j.LastError), 60)))
	}
	_ = tw.Flush()
	return 0
}

// changeCmd is cancel, requeue or run: of one job (TOPIC ID), or for
// cancel and requeue of every job that filter flags select.
func changeCmd(cmd string) func(fs *flag.FlagSet) func([]string) (action, error) {
	return func(fs *flag.FlagSet) func([]string) (action, error) {
		var at *string
		if cmd == "requeue" {
			at = fs.String("at", "", "the new due time, WHEN (default now; at most 365 days ahead)")
		}
		var ff *filterFlags
		if cmd != "run" {
			ff = addFilterFlags(fs, cmd == "cancel")
			fs.BoolVar(&ff.all, "all", false, "with no filter flag: act on every job ("+map[bool]string{true: "pending", false: "dead"}[cmd == "cancel"]+")")
		}
		return func(args []string) (action, error) {
			due := time.Now()
			if at != nil && *at != "" {
				t, err := parseWhen(*at)
				if err != nil {
					return nil, usagef("bad -at: %v", err)
				}
				due = t
				if ahead := time.Until(due); ahead > maxDelay {
					return nil, usagef("bad -at: %s is %v ahead; at most %d days ahead (the queue's default MaxDelay)",
						*at, ahead.Round(time.Hour), maxDelay/(24*time.Hour))
				}
			}
			if ff != nil && (ff.given(fs) || ff.all) {
				if len(args) != 0 {
					return nil, usagef("give either TOPIC ID or filter flags, not both")
				}
				f, err := ff.filter(fs)
				if err != nil {
					return nil, usageError{err.Error()}
				}
				return func(ctx context.Context, c *cli) int { return c.bulk(ctx, cmd, f, due) }, nil
			}
			if len(args) != 2 {
				if ff != nil {
					return nil, usagef("want TOPIC ID, or filter flags (-topic, -state, -after, -before; -all for every job)")
				}
				return nil, nArgs(args, 2, "TOPIC ID")
			}
			return func(ctx context.Context, c *cli) int { return c.change(ctx, cmd, args[0], args[1], due) }, nil
		}
	}
}

func (c *cli) change(ctx context.Context, cmd, topic, id string, due time.Time) int {
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
		fmt.Fprintf(c.out, "%s %s/%s: done; a run of it was in progress and goes on\n", cmd, printable(topic), printable(id))
		return 0
	case errors.Is(err, wheelq.ErrPaused):
		fmt.Fprintf(c.err, "wheelq: %s (wheelq resume %s)\n", cleanErr(err), printable(topic))
		return 1
	case errors.Is(err, wheelq.ErrNotFound) && cmd == "run":
		return c.fail(fmt.Errorf("%w (run moves a pending job; for a dead one use requeue)", err))
	case errors.Is(err, wheelq.ErrNotFound) && cmd == "requeue":
		return c.fail(fmt.Errorf("%w (requeue moves a dead job; see wheelq show)", err))
	case err != nil:
		return c.fail(err)
	}
	fmt.Fprintf(c.out, "%s %s/%s: done\n", cmd, printable(topic), printable(id))
	return 0
}

// bulk cancels or requeues every job f selects.
func (c *cli) bulk(ctx context.Context, cmd string, f wheelq.JobFilter, due time.Time) int {
	// A bulk change runs as long as it takes, page by page (each call is
	// bounded by -timeout); an interrupt stops it between calls.
	var n int
	var err error
	if cmd == "cancel" {
		n, err = c.q.CancelWhere(ctx, f)
	} else {
		n, err = c.q.RequeueWhere(ctx, f, due)
	}
	if err != nil {
		c.fail(errs.Errorf("wheelq: %s: %d jobs done, then: %w", cmd, n, err))
		if transient(err) {
			fmt.Fprintf(c.err, "(run it again to carry on: the jobs done are not selected again)\n")
		}
		return 1
	}
	fmt.Fprintf(c.out, "%s: %d jobs\n", cmd, n)
	return 0
}

// transient says whether err may pass if the call is made again: it is
// not a refusal of the call's arguments or of the namespace's layout.
func transient(err error) bool {
	for _, e := range []error{wheelq.ErrTooFar, wheelq.ErrInvalidOption, wheelq.ErrInvalidTopic,
		wheelq.ErrInvalidID, wheelq.ErrLayout, wheelq.ErrClosed} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
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

// filter reads the filter flags set on fs. A flag given an empty value
// is an error, not "no filter": `-topic "$T"` with T unset must not
// select every job.
func (ff *filterFlags) filter(fs *flag.FlagSet) (wheelq.JobFilter, error) {
	f := wheelq.JobFilter{Topic: ff.topic}
	var empty []string
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "topic", "state", "after", "before":
			if strings.TrimSpace(fl.Value.String()) == "" {
				empty = append(empty, "-"+fl.Name)
			}
		}
	})
	if len(empty) > 0 {
		return f, fmt.Errorf("%s given empty: leave a flag out rather than give it no value (with no filter flag, -all acts on every job)", strings.Join(empty, ", "))
	}
	if ff.topic != "" {
		if err := wheelq.CheckTopic(ff.topic); err != nil {
			return f, fmt.Errorf("bad -topic: %s", cleanErr(err))
		}
	}
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

func lsCmd(fs *flag.FlagSet) func([]string) (action, error) {
	ff := addFilterFlags(fs, true)
	limit := fs.Int("limit", wheelq.DefaultListLimit, fmt.Sprintf("the most jobs listed (at most %d)", wheelq.MaxListLimit))
	cursor := fs.String("cursor", "", "continue where a listing ended (it prints the cursor)")
	asJSON := fs.Bool("json", false, "print JSON, one object per job")
	return func(args []string) (action, error) {
		if err := noArgs(args); err != nil {
			return nil, err
		}
		f, err := ff.filter(fs)
		if err != nil {
			return nil, usageError{err.Error()}
		}
		if *limit < 1 || *limit > wheelq.MaxListLimit {
			return nil, usagef("bad -limit %d: want 1 to %d (page on with -cursor)", *limit, wheelq.MaxListLimit)
		}
		return func(ctx context.Context, c *cli) int { return c.ls(ctx, f, *cursor, *limit, *asJSON) }, nil
	}
}

func (c *cli) ls(ctx context.Context, f wheelq.JobFilter, cursor string, limit int, asJSON bool) int {
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	js, next, err := c.q.List(cctx, f, cursor, limit)
	if errors.Is(err, wheelq.ErrInvalidCursor) {
		fmt.Fprintf(c.err, "wheelq: %s\n(give -cursor as a listing printed it, or leave it out to start)\n", cleanErr(err))
		return 2
	}
	if err != nil {
		return c.fail(err)
	}
	if asJSON {
		if code := c.jsonJobs(js); code != 0 {
			return code
		}
	} else {
		now := time.Now()
		tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tID\tSTATE\tDUE\tATTEMPTS\tLAST ERROR")
		for _, j := range js {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", printable(j.Topic), printable(j.ID), stateOf(j, now), j.Due.Format(time.RFC3339), j.Attempts, printable(truncate([]byte(j.LastError), 60)))
		}
		_ = tw.Flush()
	}
	if next != "" {
		fmt.Fprintf(c.err, "more: add -cursor %s\n", next)
	}
	return 0
}

// stateOf is a job's state as ls shows it: a pending job more than
// wheelq.OverdueAfter past its due time (as Stats and Counts count them)
// is "overdue".
func stateOf(j wheelq.JobInfo, now time.Time) string {
	if j.State == wheelq.StatePending && now.Sub(j.Due) > wheelq.OverdueAfter {
		return "overdue"
	}
	return j.State.String()
}

func countsCmd(fs *flag.FlagSet) func([]string) (action, error) {
	return jsonOnlyCmd("print JSON, one object per topic", (*cli).counts)(fs)
}

func (c *cli) counts(ctx context.Context, asJSON bool) int {
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cs, err := c.q.Counts(cctx)
	if err != nil {
		return c.fail(err)
	}
	if asJSON {
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
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", printable(t.Topic), t.Pending, t.Overdue, t.Running, t.Dead, paused)
	}
	_ = tw.Flush()
	return 0
}

// pauseCmd is pause or resume.
func pauseCmd(cmd string) func(fs *flag.FlagSet) func([]string) (action, error) {
	return func(fs *flag.FlagSet) func([]string) (action, error) {
		return func(args []string) (action, error) {
			if err := nArgs(args, 1, "TOPIC"); err != nil {
				return nil, err
			}
			return func(ctx context.Context, c *cli) int { return c.pause(ctx, cmd, args[0]) }, nil
		}
	}
}

func (c *cli) pause(ctx context.Context, cmd, topic string) int {
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var err error
	if cmd == "pause" {
		err = c.q.Pause(cctx, topic)
	} else {
		err = c.q.Resume(cctx, topic)
	}
	if err != nil && transient(err) {
		return c.fail(fmt.Errorf("%w (nothing is lost by running it again)", err))
	} else if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.out, "%s %s: done\n", cmd, printable(topic))
	return 0
}

// jsonJobs prints one JSON object a job (JobInfo's shape), a line each.
func (c *cli) jsonJobs(js []wheelq.JobInfo) int {
	for _, j := range js {
		if code := c.json(j); code != 0 {
			return code
		}
	}
	return 0
}

func (c *cli) json(v any) int {
	enc := json.NewEncoder(c.out)
	if err := enc.Encode(v); err != nil {
		return c.fail(err)
	}
	return 0
}

// printable returns s as it is when it is plain text (valid UTF-8 without
// control characters, as JSON is, and not starting with a quote), and
// quoted with Go's escapes otherwise, so that any byte a topic, id, header
// or error may hold shows safely and stays on its row.
func printable(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl) || strings.HasPrefix(s, `"`) {
		return strconv.Quote(s)
	}
	return s
}

// truncate returns b as a string of at most n bytes and a "…", cut at a
// character's start when b is UTF-8.
func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	for i := n; i > n-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(b[i]) {
			n = i
			break
		}
	}
	return string(b[:n]) + "…"
}

func recurringCmd(fs *flag.FlagSet) func([]string) (action, error) {
	return jsonOnlyCmd("print JSON, one object per schedule", (*cli).recurring)(fs)
}

func (c *cli) recurring(ctx context.Context, asJSON bool) int {
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	rs, err := c.q.Recurrings(cctx)
	if err != nil {
		return c.fail(err)
	}
	if asJSON {
		for _, r := range rs {
			v := map[string]any{"name": r.Name, "topic": r.Topic, "cron": r.Cron, "every_ms": r.Every.Milliseconds(),
				"time_zone": r.TimeZone, "missed": r.Missed.String(), "next": r.Next}
			if !r.Stored.IsZero() {
				v["stored"] = r.Stored
			}
			if r.Last != nil {
				v["last"] = r.Last
			}
			if code := c.json(v); code != 0 {
				return code
			}
		}
		return 0
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTOPIC\tWHEN\tNEXT\tLAST RUN")
	for _, r := range rs {
		when := r.Cron
		if r.Every > 0 {
			when = "every " + r.Every.String()
		}
		if r.TimeZone != "" {
			when += " (" + r.TimeZone + ")"
		}
		next := "-"
		if len(r.Next) > 0 {
			next = r.Next[0].UTC().Format(time.RFC3339)
		}
		last := "-"
		if r.Last != nil {
			last = r.Last.Due.UTC().Format(time.RFC3339) + " " + r.Last.State.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", printable(r.Name), printable(r.Topic), printable(when), next, last)
	}
	_ = tw.Flush()
	return 0
}

func unrecurCmd(fs *flag.FlagSet) func([]string) (action, error) {
	return func(args []string) (action, error) {
		if err := nArgs(args, 1, "NAME"); err != nil {
			return nil, err
		}
		return func(ctx context.Context, c *cli) int {
			cctx, cancel := context.WithTimeout(ctx, c.timeout)
			defer cancel()
			err := c.q.RemoveRecurring(cctx, args[0])
			switch {
			case errors.Is(err, wheelq.ErrNotFound): // the sentinel's text says "job not found"
				fmt.Fprintf(c.err, "wheelq: no recurring schedule %q (wheelq recurring lists them)\n", args[0])
				return 1
			case err != nil:
				return c.fail(err)
			}
			fmt.Fprintf(c.out, "unrecur %s: done\n", printable(args[0]))
			return 0
		}, nil
	}
}
