package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/redistest"
)

// nowhere is a Redis address nothing listens on: a command that reaches
// for it fails with "cannot reach Redis".
const nowhere = "redis://127.0.0.1:1"

// runArgs runs the command line as given, with no environment, and
// returns its exit code, stdout and stderr.
func runArgs(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runEnv(context.Background(), args, func(string) string { return "" }, &out, &errb)
	return code, out.String(), errb.String()
}

// newNamespace makes the namespace "cli" exist on srv, so that commands
// get past the connection to their own work.
func newNamespace(t *testing.T, srv *redistest.Server) *wheelq.Queue {
	t.Helper()
	ctx := context.Background()
	q, err := wheelq.New(srv.Client(t), wheelq.Config{Namespace: "cli", Partitions: 4})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(ctx) })
	_, err = q.Schedule(ctx, "orders", []byte("x"), wheelq.ID("o-1"), wheelq.After(time.Hour))
	require.NoError(t, err)
	return q
}

// TestFlagsAfterCommand: connection flags work after
// the command as well as before it, and the command's own value wins; a
// command never falls back to a server the user did not name.
func TestFlagsAfterCommand(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	newNamespace(t, srv)
	url := "redis://" + srv.Addr

	code, out, errs := runArgs(t, "stats", "-url", url, "-namespace", "cli")
	require.Zero(t, code, errs)
	require.Contains(t, out, "pending 1")

	// Before the command: an unreachable one; after it: the real one.
	code, out, errs = runArgs(t, "-url", nowhere, "stats", "-url", url, "-namespace", "cli")
	require.Zero(t, code, errs)
	require.Contains(t, out, "pending 1")

	code, out, errs = runArgs(t, "-url", url, "ls", "-namespace", "cli", "-topic", "orders")
	require.Zero(t, code, errs)
	require.Contains(t, out, "o-1")

	// After the command's arguments too, as the README's usage line
	// (wheelq COMMAND -url ... -namespace NS) reads (a newcomer found
	// "want TOPIC ID, got 6 argument(s)"); after "--", arguments only.
	code, out, errs = runArgs(t, "show", "orders", "o-1", "-url", url, "-namespace", "cli")
	require.Zero(t, code, errs)
	require.Contains(t, out, "o-1")
	code, _, errs = runArgs(t, "show", "-url", url, "-namespace", "cli", "--", "orders", "-url")
	require.Equal(t, 1, code, errs)
	require.Contains(t, errs, "not found", "-url after -- is an id")

	// No server named: refused before connecting, saying how to name one.
	code, _, errs = runArgs(t, "stats", "-namespace", "cli")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "-url")
	require.Contains(t, errs, "WHEELQ_URL")
	require.NotContains(t, errs, "cannot reach", "nothing was dialled")

	// WHEELQ_URL names it; a flag overrides it.
	env := func(k string) string {
		if k == "WHEELQ_URL" {
			return url
		}
		return ""
	}
	var o, e bytes.Buffer
	code = runEnv(context.Background(), []string{"stats", "-namespace", "cli"}, env, &o, &e)
	require.Zero(t, code, e.String())
	require.Contains(t, o.String(), "pending 1")
	e.Reset()
	// The server's examples set WHEELQ_URL to its HTTP address: say so,
	// not "bad -url" of a flag never given (a newcomer met that).
	httpEnv := func(string) string { return "http://127.0.0.1:8780" }
	code = runEnv(context.Background(), []string{"stats", "-namespace", "cli"}, httpEnv, &o, &e)
	require.Equal(t, 2, code)
	require.Contains(t, e.String(), "$WHEELQ_URL is \"http://127.0.0.1:8780\", not a Redis URL")
	e.Reset()
	code = runEnv(context.Background(), []string{"stats", "-url", nowhere, "-namespace", "cli"}, env, &o, &e)
	require.Equal(t, 1, code)
	require.Contains(t, e.String(), "cannot reach Redis at 127.0.0.1:1")
}

// TestHelpWithoutRedis: help, a mistyped
// command and bad usage are answered without connecting to Redis.
func TestHelpWithoutRedis(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-url", nowhere, "ls", "-h"},
		{"-url", nowhere, "help", "ls"},
		{"ls", "-h"},
	} {
		code, out, errs := runArgs(t, args...)
		require.Zero(t, code, "%q: %s", args, errs)
		require.Contains(t, out, "usage: wheelq ls", args)
		require.Contains(t, out, "-state", args)
		require.Contains(t, out, "-url", "%q: the connection flags too", args)
		require.NotContains(t, out+errs, "cannot reach", args)
	}

	code, out, errs := runArgs(t, "help")
	require.Zero(t, code, errs)
	for _, c := range commands() {
		require.Contains(t, out, "\n  "+c.name+" ", "the command list has %s", c.name)
	}
	code, out, _ = runArgs(t, "-h")
	require.Zero(t, code)
	require.Contains(t, out, "usage: wheelq")

	code, _, errs = runArgs(t, "-url", nowhere, "frobnicate")
	require.Equal(t, 2, code)
	require.Contains(t, errs, `unknown command "frobnicate"`)
	require.Contains(t, errs, "wheelq help")
	require.NotContains(t, errs, "cannot reach")

	code, _, errs = runArgs(t, "help", "frobnicate")
	require.Equal(t, 2, code)
	require.Contains(t, errs, `unknown command "frobnicate"`)

	code, _, errs = runArgs(t)
	require.Equal(t, 2, code)
	require.Contains(t, errs, "usage: wheelq")
}

// TestBadUsageSaysSo: every bad usage exits 2 with a
// message naming the command's usage, before connecting to Redis.
func TestBadUsageSaysSo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	newNamespace(t, srv)
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"stats", "foo"}, "usage: wheelq stats"},
		{[]string{"counts", "x"}, "usage: wheelq counts"},
		{[]string{"dead", "x"}, "usage: wheelq dead"},
		{[]string{"dead", "-limit", "-1"}, "-limit"},
		{[]string{"dead", "-limit", "0"}, "bad -limit 0"},
		{[]string{"ls", "x"}, "usage: wheelq ls"},
		{[]string{"ls", "-limit", "0"}, "bad -limit 0"},
		{[]string{"ls", "-state", "sleeping"}, "want pending, overdue, running or dead"},
		{[]string{"watch", "-interval", "0"}, "-interval"},
		{[]string{"watch", "-count", "-1"}, "-count"},
		{[]string{"watch", "x"}, "usage: wheelq watch"},
		{[]string{"show", "orders"}, "usage: wheelq show"},
		{[]string{"pause"}, "usage: wheelq pause"},
		{[]string{"run", "orders"}, "usage: wheelq run"},
		{[]string{"requeue", "-at", "someday", "orders", "o-1"}, "bad -at"},
		{[]string{"stats", "-frob"}, "flag provided but not defined: -frob"},
		{[]string{"stats", "-timeout", "0"}, "bad -timeout 0s"},
		{[]string{"watch", "-timeout", "-1s"}, "bad -timeout -1s"},
		{[]string{"stats", "-partitions", "-1"}, "bad -partitions -1"},
	} {
		for _, url := range []string{"redis://" + srv.Addr, nowhere} {
			code, out, errs := runArgs(t, append([]string{"-url", url, "-namespace", "cli"}, c.args...)...)
			require.Equal(t, 2, code, "%q at %s: %s", c.args, url, errs)
			require.Contains(t, errs, c.msg, "%q at %s", c.args, url)
			require.NotContains(t, errs, "cannot reach", "%q: refused before connecting", c.args)
			require.Empty(t, out, c.args)
			require.True(t, strings.HasSuffix(errs, "\n"), c.args)
		}
	}
}

// TestWatchRidesOutAnOutage: watch says when Redis
// becomes unreachable, keeps trying at its interval, says when it is
// back and goes on; it never leaves a half-printed line.
func TestWatchRidesOutAnOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	srv.RequireReal(t)
	newNamespace(t, srv)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var out, errb lockedBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- runEnv(ctx, []string{"-url", "redis://" + srv.Addr, "-namespace", "cli", "-timeout", "500ms",
			"watch", "-interval", "50ms"}, func(string) string { return "" }, &out, &errb)
	}()
	waitFor := func(what string, n int) {
		t.Helper()
		require.Eventually(t, func() bool { return strings.Count(out.String(), what) >= n },
			20*time.Second, 10*time.Millisecond, "%q %d times; stdout:\n%s\nstderr:\n%s", what, n, out.String(), errb.String())
	}
	waitFor("pending 1", 2)
	srv.Stop()
	waitFor("unreachable", 1)
	before := strings.Count(out.String(), "pending 1")
	time.Sleep(300 * time.Millisecond) // several readings fail meanwhile
	select {
	case code := <-exited:
		t.Fatalf("watch exited (%d) while Redis was down; stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	default:
	}
	require.NoError(t, srv.Restart())
	waitFor("back", 1)
	waitFor("pending 1", before+2)
	stop()
	require.Zero(t, <-exited, errb.String())

	s := out.String()
	t.Logf("watch printed:\n%s", s)
	require.Equal(t, 1, strings.Count(s, "unreachable"), "said once per outage:\n%s", s)
	require.NotContains(t, s, "persist", "no internal package's name (item 7)")
	require.True(t, strings.HasSuffix(s, "\n"), "no half-printed line:\n%s", s)
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		require.Regexp(t, `^\d\d:\d\d:\d\d  (pending \d+ |Redis at .* unreachable|Redis at .* back)`, line, "in:\n%s", s)
	}
}

// TestWatchWaitsForRedisAtLaunch: watch launched while Redis is down
// rides the outage out as it does one that begins later: it says once
// that Redis is unreachable and that it tries again, keeps trying at its
// interval (each try a reading of -count), says when Redis is back and
// goes on. Before, it exited 1 at once with "cannot reach Redis".
func TestWatchWaitsForRedisAtLaunch(t *testing.T) {
	t.Parallel()
	// Down for good: -count readings, all failed, exit 1 saying so.
	code, out, errs := runArgs(t, "-url", nowhere, "-namespace", "cli", "-timeout", "500ms",
		"watch", "-interval", "10ms", "-count", "3")
	require.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", out, errs)
	require.Equal(t, 1, strings.Count(out, "unreachable"), out)
	require.Regexp(t, `^\d\d:\d\d:\d\d  Redis at 127\.0\.0\.1:1 unreachable: .*; trying again every 10ms\n$`, out)
	require.Contains(t, errs, "the last reading failed")
	require.NotContains(t, errs, "cannot reach", "not the one-shot commands' message")

	// Down for good, no -count: it tries until interrupted, then exits 0
	// (as when interrupted during a later outage).
	{
		ctx, stop := context.WithCancel(context.Background())
		var outb, errb lockedBuffer
		exited := make(chan int, 1)
		go func() {
			exited <- runEnv(ctx, []string{"-url", nowhere, "-namespace", "cli", "-timeout", "200ms",
				"watch", "-interval", "10ms"}, func(string) string { return "" }, &outb, &errb)
		}()
		require.Eventually(t, func() bool { return strings.Contains(outb.String(), "trying again") },
			20*time.Second, 10*time.Millisecond)
		stop()
		select {
		case code := <-exited:
			require.Zero(t, code, errb.String())
		case <-time.After(10 * time.Second):
			t.Fatal("watch did not end when interrupted")
		}
		require.Equal(t, 1, strings.Count(outb.String(), "unreachable"), outb.String())
	}

	// Down at launch, back later: watch waits for it, then reads.
	srv := redistest.Start(t, redistest.Options{AOF: true})
	srv.RequireReal(t)
	newNamespace(t, srv)
	srv.Stop()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var outb, errb lockedBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- runEnv(ctx, []string{"-url", "redis://" + srv.Addr, "-namespace", "cli", "-timeout", "500ms",
			"watch", "-interval", "50ms"}, func(string) string { return "" }, &outb, &errb)
	}()
	waitFor := func(what string, n int) {
		t.Helper()
		require.Eventually(t, func() bool { return strings.Count(outb.String(), what) >= n },
			20*time.Second, 10*time.Millisecond, "%q %d times; stdout:\n%s\nstderr:\n%s", what, n, outb.String(), errb.String())
	}
	waitFor("unreachable", 1)
	time.Sleep(300 * time.Millisecond) // several tries fail meanwhile
	select {
	case code := <-exited:
		t.Fatalf("watch exited (%d) while Redis was down; stdout:\n%s\nstderr:\n%s", code, outb.String(), errb.String())
	default:
	}
	require.NoError(t, srv.Restart())
	waitFor("back", 1)
	waitFor("pending 1", 2)
	stop()
	require.Zero(t, <-exited, errb.String())
	s := outb.String()
	t.Logf("watch printed:\n%s", s)
	require.Equal(t, 1, strings.Count(s, "unreachable"), "said once per outage:\n%s", s)
	require.Contains(t, strings.SplitN(s, "\n", 2)[0], "unreachable", "the first line:\n%s", s)
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		require.Regexp(t, `^\d\d:\d\d:\d\d  (pending \d+ |Redis at .* unreachable|Redis at .* back)`, line, "in:\n%s", s)
	}

	// Reachable, but no such namespace: not an outage; refused at once.
	code, _, errs = runArgs(t, "-url", "redis://"+srv.Addr, "-namespace", "nope", "watch", "-interval", "10ms")
	require.Equal(t, 1, code, errs)
	require.Contains(t, errs, `no namespace "nope"`)
}

// TestLsSaysMoreOnlyWhenMore: ls prints its "more: add -cursor" hint only
// when a job follows the page; a page exactly full that ends the listing
// has none (ls -limit 1 of one job said "more", and the cursor led to an
// empty page).
func TestLsSaysMoreOnlyWhenMore(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	newNamespace(t, srv) // orders/o-1, due in an hour
	code, out, errs := wq(t, srv, "ls", "-limit", "1")
	require.Zero(t, code, errs)
	require.Contains(t, out, "o-1")
	require.NotContains(t, errs, "more", "one job, a page of one")

	q, err := wheelq.New(srv.Client(t), wheelq.Config{Namespace: "cli", Partitions: 4})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	_, err = q.Schedule(context.Background(), "orders", nil, wheelq.ID("o-2"), wheelq.After(2*time.Hour))
	require.NoError(t, err)
	for _, args := range [][]string{{"ls", "-limit", "2"}, {"ls", "-topic", "orders", "-limit", "2"}, {"ls", "-limit", "2", "-json"}} {
		code, out, errs = wq(t, srv, args...)
		require.Zero(t, code, errs)
		require.Contains(t, out, "o-2", args)
		require.NotContains(t, errs, "more", args)
	}
	code, out, errs = wq(t, srv, "ls", "-limit", "1")
	require.Zero(t, code, errs)
	require.Contains(t, out, "o-1")
	require.Contains(t, errs, "more: add -cursor ", "o-2 follows")
	cursor := strings.TrimSpace(strings.TrimPrefix(errs, "more: add -cursor "))
	code, out, errs = wq(t, srv, "ls", "-limit", "1", "-cursor", cursor)
	require.Zero(t, code, errs)
	require.Contains(t, out, "o-2")
	require.NotContains(t, errs, "more", "o-2 is the last")
}

// deadJob makes namespace "cli" on srv hold one dead job, mail/m-1.
func deadJob(t *testing.T, srv *redistest.Server) *wheelq.Queue {
	t.Helper()
	ctx := context.Background()
	q, err := wheelq.New(srv.Client(t), wheelq.Config{Namespace: "cli", Partitions: 4, MaxAttempts: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(ctx) })
	require.NoError(t, q.Handle("mail", wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error {
		return errors.New("smtp: 550 no such user")
	})))
	require.NoError(t, q.Start(ctx))
	_, err = q.Schedule(ctx, "mail", nil, wheelq.ID("m-1"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		j, err := q.Lookup(ctx, "mail", "m-1")
		return err == nil && j.State == wheelq.StateDead
	}, 10*time.Second, 10*time.Millisecond)
	return q
}

// TestRequeueTooFarSaysWhy: a requeue -at beyond the
// maximum delay failed on every job alike, yet advised running it again.
// It is a usage error, refused before anything is done, that says what
// the limit is; nothing advises a rerun that would fail the same way.
func TestRequeueTooFarSaysWhy(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	q := deadJob(t, srv)
	for _, args := range [][]string{
		{"requeue", "-topic", "mail", "-at", "2030-01-01T00:00:00Z"},
		{"requeue", "-at", "2030-01-01T00:00:00Z", "mail", "m-1"},
		{"requeue", "-all", "-at", "9000h"},
	} {
		for range 2 { // and again: the same answer
			code, out, errs := wq(t, srv, args...)
			require.Equal(t, 2, code, "%q: %s", args, errs)
			require.Empty(t, out)
			require.Contains(t, errs, "bad -at", args)
			require.Contains(t, errs, "at most 365 days ahead", args)
			require.NotContains(t, errs, "run it again", args)
		}
	}
	j, err := q.Lookup(context.Background(), "mail", "m-1")
	require.NoError(t, err)
	require.Equal(t, wheelq.StateDead, j.State, "nothing was done")

	code, out, errs := wq(t, srv, "requeue", "-topic", "mail", "-at", "2h")
	require.Zero(t, code, errs)
	require.Contains(t, out, "requeue: 1 jobs")
}

// TestErrorTextIsClean: the CLI's errors carry one
// "wheelq: " prefix and no internal package's name, and advise a rerun
// only where one may help.
func TestErrorTextIsClean(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	newNamespace(t, srv)
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"cancel", "orders", "nope"}, "job not found"},
		{[]string{"requeue", "orders", "nope"}, "job not found"},
		{[]string{"run", "orders", "nope"}, "job not found"},
		{[]string{"show", "orders", "nope"}, "job not found"},
		{[]string{"pause", "a/b"}, "invalid topic"},
	} {
		code, _, errs := wq(t, srv, c.args...)
		require.Equal(t, 1, code, "%q: %s", c.args, errs)
		require.Contains(t, errs, c.msg, c.args)
		require.True(t, strings.HasPrefix(errs, "wheelq: "), "%q: %s", c.args, errs)
		require.Equal(t, 1, strings.Count(errs, "wheelq: "), "%q: one prefix: %s", c.args, errs)
		require.NotContains(t, errs, "persist", "%q: no internal package: %s", c.args, errs)
		require.NotContains(t, errs, "again", "%q: a rerun would fail the same way: %s", c.args, errs)
	}
	require.Equal(t, "wheelq: job not found: orders/nope",
		func() string { _, _, e := wq(t, srv, "cancel", "orders", "nope"); return strings.TrimSpace(e) }())
}

// TestPartitionsMismatch: a -partitions other than the namespace's is a
// usage error said at once, before the command reads or writes anything,
// whatever the command (it was found at the first reading only, with exit
// 1).
func TestPartitionsMismatch(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	newNamespace(t, srv)
	for _, args := range [][]string{
		{"-partitions", "8", "stats"},
		{"-partitions", "8", "cancel", "orders", "o-1"},
		{"-partitions", "8", "cancel", "-topic", "orders"},
		{"-partitions", "8", "pause", "orders"},
		{"-partitions", "8", "watch", "-count", "1"},
	} {
		code, out, errs := wq(t, srv, args...)
		require.Equal(t, 2, code, "%q: %s", args, errs)
		require.Empty(t, out, args)
		require.Equal(t, `wheelq: -partitions 8: namespace "cli" at `, errs[:len(`wheelq: -partitions 8: namespace "cli" at `)], args)
		require.Contains(t, errs, "has 4 (omit -partitions to use the namespace's own)", args)
	}
	code, out, errs := wq(t, srv, "-partitions", "4", "show", "orders", "o-1")
	require.Zero(t, code, errs)
	require.Contains(t, out, "o-1", "the namespace's own number works")
	code, out, errs = wq(t, srv, "counts")
	require.Zero(t, code, errs)
	require.NotContains(t, out, "paused", "nothing was paused")
}

// TestOddNamesStayOnTheirRow: names with control
// characters are refused by the library (TestNamesRefused there); the
// names it accepts (spaces, any printable UTF-8) and errors with newlines
// or other control characters are shown each job or topic on its own
// row, the errors escaped.
func TestOddNamesStayOnTheirRow(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	q, err := wheelq.New(srv.Client(t), wheelq.Config{Namespace: "cli", Partitions: 4, MaxAttempts: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(ctx) })
	const odd = "news fake 9 9 9 9"
	require.NoError(t, q.Handle(odd, wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error {
		return errors.New("line one\nline two\x1b[2J")
	})))
	require.NoError(t, q.Start(ctx))
	_, err = q.Schedule(ctx, odd, nil, wheelq.ID("dies now"))
	require.NoError(t, err)
	_, err = q.Schedule(ctx, "mail ✓", nil, wheelq.ID("id with space"), wheelq.After(time.Hour))
	require.NoError(t, err)
	_, err = q.Schedule(ctx, "news\nfake", nil)
	require.ErrorIs(t, err, wheelq.ErrInvalidTopic)
	require.Eventually(t, func() bool {
		d, err := q.DeadJobs(ctx, 10)
		return err == nil && len(d) == 1
	}, 10*time.Second, 10*time.Millisecond)

	rows := func(args ...string) string {
		t.Helper()
		code, out, errs := wq(t, srv, args...)
		require.Zero(t, code, errs)
		require.NotContains(t, out, "\x1b", args)
		require.NotContains(t, out, "\r", args)
		return out
	}
	out := rows("counts")
	require.Equal(t, 3, strings.Count(out, "\n"), "a header and two topics:\n%s", out)
	require.Contains(t, out, odd)
	require.Contains(t, out, "mail ✓")
	out = rows("ls")
	require.Equal(t, 2, strings.Count(out, "\n"), "a header and one pending job:\n%s", out)
	require.Contains(t, out, "id with space")
	for _, args := range [][]string{{"ls", "-state", "dead"}, {"dead"}} {
		out = rows(args...)
		require.Equal(t, 2, strings.Count(out, "\n"), "a header and one dead job:\n%s", out)
		require.Contains(t, out, "dies now")
		require.Contains(t, out, `line one\nline two\x1b[2J`)
	}
	out = rows("show", odd, "dies now")
	require.Contains(t, out, odd)
	require.Contains(t, out, `line one\nline two\x1b[2J`)
}

// TestSmallerThings: ls calls an overdue
// job overdue, stats's help promises nothing it does not print, and the
// README's list of commands names every command.
func TestSmallerThings(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	q := newNamespace(t, srv) // o-1, due in an hour
	_, err := q.Schedule(context.Background(), "orders", nil, wheelq.ID("late-1"), wheelq.At(time.Now().Add(-time.Hour)))
	require.NoError(t, err) // no worker runs: it stays overdue

	code, out, errs := wq(t, srv, "ls", "-state", "overdue")
	require.Zero(t, code, errs)
	require.Regexp(t, `(?m)^orders\s+late-1\s+overdue\s`, out)
	code, out, errs = wq(t, srv, "ls")
	require.Zero(t, code, errs)
	require.Regexp(t, `(?m)^orders\s+late-1\s+overdue\s`, out)
	require.Regexp(t, `(?m)^orders\s+o-1\s+pending\s`, out)
	code, out, errs = wq(t, srv, "show", "orders", "late-1")
	require.Zero(t, code, errs)
	require.Regexp(t, `state +pending, overdue by 1h`, out)

	code, out, errs = runArgs(t, "help", "stats")
	require.Zero(t, code, errs)
	require.Contains(t, out, "lateness", "stats's help says what it prints")
	code, out, errs = wq(t, srv, "stats")
	require.Zero(t, code, errs)
	require.Contains(t, out, "workers 0 (no worker process is started on the namespace)")

	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	for _, c := range commands() {
		require.Contains(t, string(readme), "`"+c.name, "the README names %s", c.name)
	}
}

// TestBadNamespace: a namespace no queue can have is
// a usage error saying so, not "no namespace".
func TestBadNamespace(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	url := "redis://" + srv.Addr
	for _, ns := range []string{"a:b", "a b", "x*"} {
		code, _, errs := runArgs(t, "stats", "-url", url, "-namespace", ns)
		require.Equal(t, 2, code, errs)
		require.Contains(t, errs, "-namespace")
		require.Contains(t, errs, "only ASCII letters")
		require.NotContains(t, errs, "no namespace")
	}
}

// TestRunOnPausedTopic: run on a paused topic printed
// done while the job stayed pending; it says the topic is paused, how to
// resume it, and exits 1.
func TestRunOnPausedTopic(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	q := newNamespace(t, srv)
	require.NoError(t, q.Pause(context.Background(), "orders"))
	code, out, errs := runArgs(t, "-url", "redis://"+srv.Addr, "-namespace", "cli", "run", "orders", "o-1")
	require.Equal(t, 1, code, out+errs)
	require.NotContains(t, out, "done")
	require.Contains(t, errs, "made due now, but topic is paused")
	require.Contains(t, errs, "wheelq resume orders")
}

// TestStatsShowsWorkers: stats shows the worker
// processes' running jobs and lateness, read from what they publish,
// wherever it runs (its help promised lateness it did not print).
func TestStatsShowsWorkers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	q := newNamespace(t, srv)
	require.NoError(t, q.Handle("tick", wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error { return nil })))
	require.NoError(t, q.Start(ctx))
	for range 20 {
		_, err := q.Schedule(ctx, "tick", nil, wheelq.After(10*time.Millisecond))
		require.NoError(t, err)
	}
	var out string
	require.Eventually(t, func() bool {
		code, o, _ := wq(t, srv, "stats")
		out = o
		return code == 0 && strings.Contains(o, "runs 20 ")
	}, 15*time.Second, 100*time.Millisecond, "the worker's figures: %s", out)
	require.Regexp(t, `workers 1  running 0 \(stuck 0\)  runs 20  lateness p50 \S+  p99 \S+  max \S+`, out)
	code, o, errs := wq(t, srv, "stats", "-json")
	require.Zero(t, code, errs)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(o), &m))
	require.EqualValues(t, 1, m["workers"])
	require.EqualValues(t, 20, m["lateness"].(map[string]any)["count"])
}

// TestWatchEndsOnLastingErrors: watch rides out Redis not answering, not
// errors that no retry clears: a namespace whose record is of the wrong
// type, or corrupt, ends it at once with exit 1 and the error. (Seen
// failing first: it said "unreachable ... trying again" and tried until
// interrupted.)
func TestWatchEndsOnLastingErrors(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, "wq:{wrongtype}:meta", "str", 0).Err())
	require.NoError(t, rdb.HSet(ctx, "wq:{corrupt}:meta", "partitions", "abc").Err())
	for _, ns := range []string{"wrongtype", "corrupt"} {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var outb, errb lockedBuffer
		code := runEnv(wctx, []string{"-url", "redis://" + srv.Addr, "-namespace", ns, "-timeout", "2s",
			"watch", "-interval", "10ms"}, func(string) string { return "" }, &outb, &errb)
		interrupted := wctx.Err() != nil
		cancel()
		require.False(t, interrupted, "%s: watch ran until interrupted; stdout:\n%s", ns, outb.String())
		require.Equal(t, 1, code, "%s: stderr:\n%s", ns, errb.String())
		require.NotContains(t, outb.String(), "trying again", ns)
		require.Contains(t, errb.String(), ns, "the error names the namespace")
	}
}
