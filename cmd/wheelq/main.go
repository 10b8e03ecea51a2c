// Command wheelq inspects and steers a wheelq namespace from outside the
// program that runs it: its figures, its jobs (list, show, cancel,
// requeue, run now) and pauses of a topic. (The web dashboard is served by
// wheelq-server, module github.com/wheelq/wheelq/server.)
//
//	wheelq [connection flags] COMMAND [flags] [args]
//	wheelq help [COMMAND]
//
// "wheelq help" lists the commands, "wheelq help COMMAND" (or "wheelq
// COMMAND -h") gives one's usage and flags. The connection flags may come
// before the command or after it, among its own flags: -url
// redis://host:port/db (or rediss://), or -addrs host:port,... with
// -sentinel-master NAME for a Sentinel set, or -cluster for a Redis
// Cluster; -namespace as the queue's Config has it (its number of
// partitions is read from Redis). wheelq has no default server: without
// -url or -addrs it takes the URL in $WHEELQ_URL, and without that it
// refuses to run, since it must never act on a server the user did not
// name. A namespace that does not exist is an error: wheelq never creates
// one.
//
// It uses only the queue's public API, as a producer that is never
// started: it runs no job and takes no lease.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
)

func main() {
	// The command owns its output: it says itself when Redis cannot be
	// reached (watch rides an outage out and says so), so the
	// client library's own log lines (a "failed to dial" per pool
	// connection) would only repeat it, out of turn.
	redis.SetLogger(silentClient{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// silentClient drops go-redis's log lines (see main).
type silentClient struct{}

func (silentClient) Printf(context.Context, string, ...any) {}

// envURL names the environment variable that gives the Redis URL when
// neither -url nor -addrs is given.
const envURL = "WHEELQ_URL"

// maxDelay is the furthest ahead wheelq's queue takes a due time
// (requeue -at): Config.MaxDelay's default.
const maxDelay = 365 * 24 * time.Hour

// A command is one of wheelq's commands. The table of them (commands)
// gives both the dispatch and the help, and a command line is parsed and
// checked against it before anything connects to Redis.
type command struct {
	// name is what the user types.
	name string
	// forms are the synopses of the command's uses, after its name.
	forms []string
	// summary is its line in the command list.
	summary string
	// doc, if not empty, is said below the usage in the command's help.
	doc string
	// setup defines the command's own flags on fs and returns prepare,
	// which is called once fs is parsed with the arguments left: it
	// checks them and the flags' values (a usage error, before any
	// connection) and returns the action that does the work.
	setup func(fs *flag.FlagSet) (prepare func(args []string) (action, error))
	// attaches says the action opens the namespace itself (cli.attach),
	// riding out a Redis that does not answer yet: it is given a cli
	// that is not attached. Every other action is given an attached
	// one, and the command fails if Redis does not answer.
	attaches bool
}

// An action does a command's work with a connected cli and returns the
// exit code.
type action func(ctx context.Context, c *cli) int

// usageError is a bad command line: the command's usage follows it, and
// the exit code is 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// whenDoc explains the WHEN of the commands that take times.
const whenDoc = "WHEN is a time in RFC 3339 (2026-11-24T09:00:00Z) or a duration from now (-1h, 30m)."

// commands returns the table of wheelq's commands, in the order the help
// lists them.
func commands() []command {
	return []command{
		{name: "stats", summary: "pending, overdue and dead jobs of the namespace, how late the oldest overdue one is, and the worker processes' running jobs and lateness",
			forms: []string{"[-json]"}, setup: statsCmd},
		{name: "watch", summary: "stats again every -interval (until interrupted or -count times)",
			forms: []string{"[-interval 1s] [-count N]"},
			doc: "If Redis does not answer, at the start or later, watch says so once and tries\n" +
				"again every -interval (each try is a reading of -count) until it answers, and\n" +
				"says when it is back. It exits 1 if the last reading failed; a namespace that\n" +
				"does not exist ends it at once.",
			setup: watchCmd, attaches: true},
		{name: "show", summary: "a job: its state, due time, attempts, last error, payload",
			forms: []string{"[-json] TOPIC ID"}, setup: showCmd},
		{name: "dead", summary: "dead-lettered jobs, oldest death first",
			forms: []string{"[-limit 100] [-json]"}, setup: deadCmd},
		{name: "ls", summary: "jobs by -topic, -state, -after, -before; paged (-limit, -cursor)",
			forms: []string{"[-topic T] [-state pending|overdue|running|dead] [-after WHEN] [-before WHEN] [-limit N] [-cursor C] [-json]"},
			doc:   whenDoc, setup: lsCmd},
		{name: "counts", summary: "pending, overdue, running and dead jobs per topic, and which are paused",
			forms: []string{"[-json]"}, setup: countsCmd},
		{name: "cancel", summary: "delete a job, pending or dead, or every job the filter flags select",
			forms: []string{"TOPIC ID", "[-topic T] [-state S] [-after WHEN] [-before WHEN] [-all]"},
			doc:   "A bulk cancel needs a filter flag, or -all to delete every pending job. " + whenDoc,
			setup: changeCmd("cancel")},
		{name: "requeue", summary: "move a dead job, or every one the filter flags select, back to pending",
			forms: []string{"[-at WHEN] TOPIC ID", "[-at WHEN] [-topic T] [-after WHEN] [-before WHEN] [-all]"},
			doc:   "A bulk requeue needs a filter flag, or -all to requeue every dead job. " + whenDoc,
			setup: changeCmd("requeue")},
		{name: "run", summary: "make a pending job due now",
			forms: []string{"TOPIC ID"}, setup: changeCmd("run")},
		{name: "recurring", summary: "the recurring schedules: their spec, next slots, latest slot stored and last run",
			forms: []string{"[-json]"}, setup: recurringCmd},
		{name: "unrecur", summary: "remove a recurring schedule, and its stored slots still to come",
			forms: []string{"NAME"}, setup: unrecurCmd},
		{name: "pause", summary: "stop starting the topic's jobs in every process (they stay pending)",
			forms: []string{"TOPIC"}, setup: pauseCmd("pause")},
		{name: "resume", summary: "start a paused topic's jobs again, oldest first",
			forms: []string{"TOPIC"}, setup: pauseCmd("resume")},
	}
}

// moved says where a command that left wheelq went.
func moved(name string) (string, bool) {
	switch name {
	case "serve":
		return "wheelq serve is now wheelq-server, the one way to run a server: it serves the dashboard under /ui/,\n" +
			"with tokens, TLS and a read-only mode. For the dashboard alone, running no job:\n" +
			"  go install github.com/wheelq/wheelq/server/cmd/wheelq-server@latest\n" +
			"  wheelq-server -redis-url redis://host:6379/0 -namespace NS -addr 127.0.0.1:8080 -set queue.start=false [-set http.ui_read_only=true]\n" +
			"and open http://127.0.0.1:8080/ui/ (see docs/server.md)", true
	}
	return "", false
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// run runs the command line args, writing to stdout and stderr, and
// returns the exit code: 0 done, 1 the command failed, 2 bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runEnv(ctx, args, os.Getenv, stdout, stderr)
}

// runEnv is run with getenv for the environment.
func runEnv(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	conn := newConnFlags()
	top := flag.NewFlagSet("wheelq", flag.ContinueOnError)
	top.SetOutput(stderr)
	top.Usage = func() {}
	conn.define(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			mainHelp(stdout)
			return 0
		}
		fmt.Fprintln(stderr, "run 'wheelq help' for usage")
		return 2
	}
	if top.NArg() == 0 {
		mainHelp(stderr)
		return 2
	}
	name, rest := top.Arg(0), top.Args()[1:]
	if name == "help" {
		return help(rest, stdout, stderr)
	}
	cmd, ok := lookup(name)
	if !ok {
		if where, ok := moved(name); ok {
			fmt.Fprintf(stderr, "wheelq: %s\n", where)
			return 2
		}
		fmt.Fprintf(stderr, "wheelq: unknown command %q\nrun 'wheelq help' for the list of commands\n", name)
		return 2
	}
	fs := flag.NewFlagSet("wheelq "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	prepare := cmd.setup(fs)
	conn.define(fs) // its defaults are the values given before the command
	args, err := parseInterspersed(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			commandHelp(stdout, cmd)
			return 0
		}
		shortUsage(stderr, cmd) // the flag package said what was wrong
		return 2
	}
	act, err := prepare(args)
	if err == nil {
		err = conn.check(getenv)
	}
	if err != nil {
		fmt.Fprintf(stderr, "wheelq %s: %v\n", name, err)
		shortUsage(stderr, cmd)
		return 2
	}
	c, code := conn.dial(stdout, stderr)
	if c == nil {
		return code
	}
	defer c.close()
	if !cmd.attaches {
		if code := c.open(ctx); code != 0 {
			return code
		}
	}
	return act(ctx, c)
}

// parseInterspersed parses fs's flags wherever they stand among args
// (before, between or after the command's arguments) and returns the
// arguments; after "--" everything is an argument (an id that starts
// with '-').
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var out []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if n := len(args) - len(fs.Args()); n > 0 && args[n-1] == "--" {
			return append(out, fs.Args()...), nil // the flag package took the "--"
		}
		args = fs.Args()
		i := 0
		for i < len(args) && (len(args[i]) < 2 || args[i][0] != '-') {
			i++
		}
		out = append(out, args[:i]...)
		if i == len(args) {
			return out, nil
		}
		args = args[i:]
	}
}

// help answers "wheelq help [COMMAND]".
func help(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		mainHelp(stdout)
		return 0
	case len(args) > 1:
		fmt.Fprintln(stderr, "usage: wheelq help [COMMAND]")
		return 2
	}
	cmd, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "wheelq: unknown command %q\nrun 'wheelq help' for the list of commands\n", args[0])
		return 2
	}
	commandHelp(stdout, cmd)
	return 0
}

// mainHelp writes the usage of wheelq and the list of its commands.
func mainHelp(w io.Writer) {
	fmt.Fprint(w, "usage: wheelq [connection flags] COMMAND [flags] [args]\n\ncommands:\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s \t%s\n", c.name, c.summary)
	}
	fmt.Fprintf(tw, "  help \t%s\n", "this list; help COMMAND: a command's usage and flags")
	_ = tw.Flush()
	fmt.Fprintf(w, "\nconnection flags (before the command or among its flags):\n")
	connHelp(w)
}

// commandHelp writes a command's usage, its flags and the connection
// flags.
func commandHelp(w io.Writer, cmd command) {
	for i, f := range cmd.forms {
		lead := "usage:"
		if i > 0 {
			lead = "   or:"
		}
		fmt.Fprintf(w, "%s wheelq %s %s\n", lead, cmd.name, f)
	}
	fmt.Fprintf(w, "\n%s.\n", upperFirst(cmd.summary))
	if cmd.doc != "" {
		fmt.Fprintf(w, "%s\n", cmd.doc)
	}
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fs.SetOutput(w)
	cmd.setup(fs)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, "\nflags:\n")
		fs.PrintDefaults()
	}
	fmt.Fprint(w, "\nconnection flags:\n")
	connHelp(w)
}

// shortUsage writes a command's synopses after a usage error.
func shortUsage(w io.Writer, cmd command) {
	for _, f := range cmd.forms {
		fmt.Fprintf(w, "usage: wheelq %s %s\n", cmd.name, f)
	}
	fmt.Fprintf(w, "run 'wheelq help %s' for its flags\n", cmd.name)
}

func connHelp(w io.Writer) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.SetOutput(w)
	newConnFlags().define(fs)
	fs.PrintDefaults()
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// connFlags are the flags that say which Redis and namespace to use.
type connFlags struct {
	url, addrs, master string
	cluster            bool
	namespace          string
	partitions         int
	timeout            time.Duration
}

// newConnFlags returns the connection flags' defaults.
func newConnFlags() *connFlags {
	return &connFlags{namespace: "default", timeout: 5 * time.Second}
}

// define defines the connection flags on fs, each with its current value
// as its default (so flags after the command override those before it).
func (cf *connFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&cf.url, "url", cf.url, "Redis URL: redis://[user:pass@]host:port[/db] or rediss://... (default $"+envURL+")")
	fs.StringVar(&cf.addrs, "addrs", cf.addrs, "comma-separated host:port list: Sentinels (with -sentinel-master) or Cluster nodes (with -cluster)")
	fs.StringVar(&cf.master, "sentinel-master", cf.master, "the Sentinel master name")
	fs.BoolVar(&cf.cluster, "cluster", cf.cluster, "connect to a Redis Cluster at -addrs")
	fs.StringVar(&cf.namespace, "namespace", cf.namespace, "the queue's Config.Namespace")
	fs.IntVar(&cf.partitions, "partitions", cf.partitions, "the queue's Config.Partitions (default: as the namespace records it)")
	fs.DurationVar(&cf.timeout, "timeout", cf.timeout, "bound of each Redis call")
}

// check fills -url from the environment when no server is named, and
// refuses a command line that names none.
func (cf *connFlags) check(getenv func(string) string) error {
	fromEnv := false
	named := cf.url != "" || cf.addrs != "" || cf.master != "" || cf.cluster // -sentinel-master or -cluster: -addrs is what is missing
	if !named {
		cf.url, fromEnv = getenv(envURL), true
		if _, err := redis.ParseURL(cf.url); cf.url != "" && err != nil {
			return fmt.Errorf("$%s is %q, not a Redis URL (%v): want redis://host:port/db; this command speaks to Redis, not to wheelq-server's HTTP address", envURL, maskURL(cf.url), cleanURLErr(err, cf.url))
		}
	}
	if cf.url == "" && cf.addrs == "" && cf.master == "" && !cf.cluster {
		return fmt.Errorf("no Redis named: give -url redis://host:port (or -addrs with -sentinel-master or -cluster), or set $%s; wheelq has no default server", envURL)
	}
	// An empty host would be localhost:6379 to go-redis: a server the
	// user did not name (`redis://$HOST:6379` with HOST unset).
	if cf.url != "" {
		what := "-url"
		if fromEnv {
			what = "$" + envURL
		}
		if u, err := url.Parse(cf.url); err == nil && u.Hostname() == "" {
			return fmt.Errorf("%s %q names no host: want redis://host:port/db; wheelq has no default server", what, maskURL(cf.url))
		}
	}
	for _, a := range splitAddrs(cf.addrs) {
		if host, _, err := net.SplitHostPort(a); err != nil || host == "" {
			return fmt.Errorf("bad -addrs entry %q: want host:port; wheelq has no default server", a)
		}
	}
	if strings.TrimSpace(cf.namespace) == "" {
		return errors.New("-namespace is empty: name the queue's namespace (its default is \"default\")")
	}
	if cf.timeout <= 0 {
		return fmt.Errorf("bad -timeout %v: want > 0", cf.timeout)
	}
	if cf.partitions < 0 {
		return fmt.Errorf("bad -partitions %d: want > 0, or 0 for the namespace's own", cf.partitions)
	}
	return nil
}

// dial makes the client of the server the flags name; it does not
// connect yet (see cli.attach). It returns nil and the exit code if the
// flags do not make one.
func (cf *connFlags) dial(stdout, stderr io.Writer) (*cli, int) {
	rdb, where, err := connect(cf.url, cf.addrs, cf.master, cf.cluster)
	if err != nil {
		fmt.Fprintf(stderr, "wheelq: %v\n", err)
		return nil, 2
	}
	return &cli{rdb: rdb, out: stdout, err: stderr, timeout: cf.timeout, where: where,
		namespace: cf.namespace, partitions: cf.partitions}, 0
}

// open attaches c, and says why it cannot: Redis does not answer (exit
// code 1), or what attach said. It returns the exit code, 0 if attached.
func (c *cli) open(ctx context.Context) int {
	code, err := c.attach(ctx)
	var down outage
	if errors.As(err, &down) {
		if down.ping {
			fmt.Fprintf(c.err, "wheelq: cannot reach Redis at %s: %v\n(is it running? give its address with -url, or -addrs with -sentinel-master or -cluster)\n", c.where, down.err)
		} else {
			fmt.Fprintf(c.err, "wheelq: %s at %s: %s\n", down.what, c.where, cleanErr(down.err))
		}
	}
	return code
}

// An outage is why attach could not open the namespace when nothing the
// user gave is wrong: Redis did not answer (ping), or answered an error
// to the reading of the namespace. A later attach may pass.
type outage struct {
	ping bool
	what string // what failed, when not ping
	err  error
}

func (o outage) Error() string {
	if o.ping {
		return o.err.Error()
	}
	return o.what + ": " + cleanErr(o.err)
}

func (o outage) Unwrap() error { return o.err }

// attach checks that Redis answers and opens the namespace as c.q. It
// returns an outage (and exit code 1), having printed nothing, when Redis
// does not answer or the namespace cannot be read: a later attach may
// pass. Otherwise, if it fails, it prints why (there is no such namespace,
// or the flags do not fit it) and returns the exit code.
func (c *cli) attach(ctx context.Context) (int, error) {
	pctx, cancel := context.WithTimeout(ctx, c.timeout)
	err := c.rdb.Ping(pctx).Err()
	cancel()
	if err != nil {
		return 1, outage{ping: true, err: err}
	}
	lctx, cancel := context.WithTimeout(ctx, c.timeout)
	n, err := wheelq.Partitions(lctx, c.rdb, c.namespace)
	cancel()
	switch {
	case errors.Is(err, wheelq.ErrInvalidConfig):
		fmt.Fprintf(c.err, "wheelq: -namespace: %s\n", cleanErr(err))
		return 2, nil
	case errors.Is(err, wheelq.ErrNotFound):
		fmt.Fprintf(c.err, "wheelq: no namespace %q at %s (give the queue's namespace with -namespace)\n", c.namespace, c.where)
		return 1, nil
	case err != nil:
		return 1, outage{what: fmt.Sprintf("reading namespace %q", c.namespace), err: err}
	}
	parts := c.partitions
	switch {
	case parts == 0:
		parts = n
	case parts != n:
		// Known now: said before any command reads or writes.
		fmt.Fprintf(c.err, "wheelq: -partitions %d: namespace %q at %s has %d (omit -partitions to use the namespace's own)\n", parts, c.namespace, c.where, n)
		return 2, nil
	}
	q, err := wheelq.New(c.rdb, wheelq.Config{Namespace: c.namespace, Partitions: parts, WriteTimeout: c.timeout, MaxDelay: maxDelay})
	if err != nil {
		fmt.Fprintf(c.err, "wheelq: %s\n", cleanErr(err))
		return 2, nil
	}
	c.q = q
	return 0, nil
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
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: list, ContextTimeoutEnabled: true}),
			fmt.Sprintf("Sentinel master %q via %s", master, addrs), nil
	case cluster:
		if len(list) == 0 {
			return nil, "", errors.New("-cluster needs -addrs, some of the Cluster's host:port")
		}
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: list, ContextTimeoutEnabled: true}), "Cluster " + addrs, nil
	case addrs != "":
		if len(list) != 1 {
			return nil, "", errors.New("several -addrs need -sentinel-master or -cluster")
		}
		return redis.NewClient(&redis.Options{Addr: list[0], ContextTimeoutEnabled: true}), list[0], nil
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, "", fmt.Errorf("bad -url %q: %v (want redis://host:port/db)", maskURL(url), cleanURLErr(err, url))
	}
	opt.ContextTimeoutEnabled = true
	return redis.NewClient(opt), opt.Addr, nil
}

// maskURL is raw with its password masked, to be printed.
func maskURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	// Unparsable: mask whatever stands between the scheme and an '@'.
	if i := strings.Index(raw, "://"); i >= 0 {
		if j := strings.LastIndex(raw, "@"); j > i {
			return raw[:i+3] + "xxxxx" + raw[j:]
		}
	}
	return raw
}

// cleanURLErr is a URL parser's error with the URL in it masked.
func cleanURLErr(err error, raw string) string {
	return strings.ReplaceAll(err.Error(), raw, maskURL(raw))
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

// cli is a connection to a namespace, which the commands' actions use.
type cli struct {
	// q is the namespace's queue; nil until attach opens it.
	q        *wheelq.Queue
	rdb      redis.UniversalClient
	out, err io.Writer
	timeout  time.Duration
	// where says which server it is connected to.
	where string
	// namespace and partitions are the flags' (partitions 0: the
	// namespace's own).
	namespace  string
	partitions int
}

// close shuts the queue down, if attached, and closes the client.
func (c *cli) close() {
	if c.q != nil {
		_ = c.q.Shutdown(context.Background())
	}
	_ = c.rdb.Close()
}

// fail prints err, with a hint where one helps, and returns exit code 1.
func (c *cli) fail(err error) int {
	fmt.Fprintf(c.err, "wheelq: %s\n", cleanErr(err))
	if errors.Is(err, wheelq.ErrLayout) {
		fmt.Fprintln(c.err, "(give the queue's number of partitions with -partitions)")
	}
	return 1
}

// cleanErr is err's text for the user, who reads it after the CLI's own
// "wheelq: ": the library's errors say "wheelq: " once, at their start.
func cleanErr(err error) string {
	return strings.TrimPrefix(err.Error(), "wheelq: ")
}
