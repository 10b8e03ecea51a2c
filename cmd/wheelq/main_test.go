package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/redistest"
)

// wq runs the command line against srv and returns its exit code, stdout
// and stderr.
func wq(t *testing.T, srv *redistest.Server, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	all := append([]string{"-url", "redis://" + srv.Addr, "-namespace", "cli"}, args...)
	code := run(context.Background(), all, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	q, err := wheelq.New(srv.Client(t), wheelq.Config{Namespace: "cli", Partitions: 4,
		Backoff: func(int, error) time.Duration { return time.Millisecond }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(ctx) })
	failed := make(chan struct{}, 1)
	require.NoError(t, q.Handle("mail", wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error {
		defer func() {
			select {
			case failed <- struct{}{}:
			default:
			}
		}()
		return wheelq.Permanent(errors.New("smtp: 550 no such user"))
	})))
	_, err = q.Schedule(ctx, "orders", []byte(`{"order":123}`), wheelq.ID("o-123"), wheelq.After(time.Hour))
	require.NoError(t, err)
	_, err = q.Schedule(ctx, "mail", []byte("hi"), wheelq.ID("m-1"))
	require.NoError(t, err)
	require.NoError(t, q.Start(ctx))
	<-failed
	require.Eventually(t, func() bool {
		j, err := q.Lookup(ctx, "mail", "m-1")
		return err == nil && j.State == wheelq.StateDead
	}, 10*time.Second, 10*time.Millisecond)

	code, out, errs := wq(t, srv, "stats")
	require.Zero(t, code, errs)
	require.Contains(t, out, "pending 1")
	require.Contains(t, out, "dead 1")

	code, out, _ = wq(t, srv, "show", "orders", "o-123")
	require.Zero(t, code)
	require.Contains(t, out, "pending")
	require.Contains(t, out, `{"order":123}`, "the payload, decoded")

	code, out, _ = wq(t, srv, "show", "-json", "mail", "m-1")
	require.Zero(t, code)
	var j map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	require.Equal(t, "dead", j["state"])
	require.Contains(t, j["last_error"], "550 no such user")

	code, out, _ = wq(t, srv, "dead")
	require.Zero(t, code)
	require.Contains(t, out, "m-1")
	require.Contains(t, out, "550 no such user")

	code, _, errs = wq(t, srv, "run", "mail", "m-1")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "for a dead one use requeue", "the error says what to do")

	code, out, errs = wq(t, srv, "requeue", "-at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "mail", "m-1")
	require.Zero(t, code, errs)
	require.Contains(t, out, "requeue mail/m-1: done")
	info, err := q.Lookup(ctx, "mail", "m-1")
	require.NoError(t, err)
	require.Equal(t, wheelq.StatePending, info.State)

	code, _, errs = wq(t, srv, "cancel", "orders", "o-123")
	require.Zero(t, code, errs)
	info, err = q.Lookup(ctx, "orders", "o-123")
	require.NoError(t, err)
	require.Equal(t, wheelq.StateCancelled, info.State, "kept in the run history")
	code, out, _ = wq(t, srv, "show", "orders", "o-123")
	require.Zero(t, code)
	require.Regexp(t, `state +cancelled`, out)
	require.Regexp(t, `finished +20`, out, "when it was cancelled")
	require.Contains(t, out, "not kept after the job finished")
	code, _, errs = wq(t, srv, "cancel", "orders", "o-123")
	require.Equal(t, 1, code)
	require.Contains(t, errs, "not found")

	code, out, _ = wq(t, srv, "watch", "-interval", "10ms", "-count", "3")
	require.Zero(t, code)
	require.Equal(t, 3, strings.Count(out, "pending "))
}

func TestErrorsSayWhatToDo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"-url", "redis://127.0.0.1:1", "stats"}, &out, &errb)
	require.Equal(t, 1, code)
	require.Contains(t, errb.String(), "cannot reach Redis at 127.0.0.1:1")
	require.Contains(t, errb.String(), "-url")

	code, _, errs := wq(t, srv, "stats")
	require.Equal(t, 1, code)
	require.Contains(t, errs, `no namespace "cli"`, "a namespace never used is not created")
	n, err := srv.NewClient().Exists(context.Background(), "wq:{cli}:meta").Result()
	require.NoError(t, err)
	require.Zero(t, n)

	code, _, errs = wq(t, srv, "frobnicate")
	require.Equal(t, 2, code, "the command is checked before the namespace")
	require.Contains(t, errs, `unknown command "frobnicate"`)
	errb.Reset()
	code = run(context.Background(), []string{"-url", "redis://x", "-cluster", "stats"}, &out, &errb)
	require.Equal(t, 2, code)
	require.Contains(t, errb.String(), "either -url or -addrs")
	errb.Reset()
	code = run(context.Background(), nil, &out, &errb)
	require.Equal(t, 2, code)
	require.Contains(t, errb.String(), "usage: wheelq")
}

// TestInspectorCommands: ls lists by filter in pages (table and JSON),
// counts shows each topic, pause and resume hold and release a topic in
// a running worker, and bulk cancel and requeue act on what their filter
// flags select, refusing to act on everything without -all.
func TestInspectorCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	q, err := wheelq.New(srv.Client(t), wheelq.Config{Namespace: "cli", Partitions: 4, MaxAttempts: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(ctx) })
	ran := make(chan string, 100)
	require.NoError(t, q.Handle("mail", wheelq.HandlerFunc(func(_ context.Context, j *wheelq.Job) error {
		ran <- j.ID
		return nil
	})))
	require.NoError(t, q.Handle("hook", wheelq.HandlerFunc(func(context.Context, *wheelq.Job) error {
		return errors.New("502 from the receiver")
	})))
	require.NoError(t, q.Start(ctx))
	for i := range 5 {
		_, err = q.Schedule(ctx, "orders", nil, wheelq.ID(fmt.Sprint("o", i)), wheelq.After(time.Hour+time.Duration(i)*time.Minute))
		require.NoError(t, err)
		_, err = q.Schedule(ctx, "hook", nil, wheelq.ID(fmt.Sprint("h", i)))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		d, err := q.DeadJobs(ctx, 10)
		return err == nil && len(d) == 5
	}, 10*time.Second, 10*time.Millisecond)

	code, out, errs := wq(t, srv, "ls", "-topic", "orders", "-limit", "2")
	require.Zero(t, code, errs)
	require.Contains(t, out, "o0")
	require.Contains(t, out, "o1")
	require.NotContains(t, out, "o2")
	require.Contains(t, errs, "more: add -cursor ")
	cursor := strings.TrimSpace(strings.TrimPrefix(errs, "more: add -cursor "))
	code, out, errs = wq(t, srv, "ls", "-topic", "orders", "-limit", "10", "-cursor", cursor, "-json")
	require.Zero(t, code, errs)
	require.Equal(t, 3, strings.Count(out, "\n"), "o2, o3, o4")
	var j map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.Split(out, "\n")[0]), &j))
	require.Equal(t, "o2", j["id"])
	require.Equal(t, "pending", j["state"])
	code, out, _ = wq(t, srv, "ls", "-state", "dead")
	require.Zero(t, code)
	require.Equal(t, 5, strings.Count(out, "502 from the receiver"))
	code, _, errs = wq(t, srv, "ls", "-cursor", "nonsense")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "leave it out to start")
	code, _, errs = wq(t, srv, "ls", "-state", "sleeping")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "want pending, overdue, running or dead")
	code, _, errs = wq(t, srv, "ls", "-after", "yesterday")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "RFC 3339")

	code, out, errs = wq(t, srv, "counts")
	require.Zero(t, code, errs)
	require.Regexp(t, `hook\s+0\s+0\s+0\s+5`, out)
	require.Regexp(t, `orders\s+5\s+0\s+0\s+0`, out)

	code, out, errs = wq(t, srv, "pause", "mail")
	require.Zero(t, code, errs)
	require.Contains(t, out, "pause mail: done")
	_, err = q.Schedule(ctx, "mail", nil, wheelq.ID("m1"))
	require.NoError(t, err)
	select {
	case id := <-ran:
		t.Fatalf("%s ran while its topic was paused", id)
	case <-time.After(300 * time.Millisecond):
	}
	code, out, _ = wq(t, srv, "counts", "-json")
	require.Zero(t, code)
	require.Contains(t, out, `{"dead":0,"overdue":0,"paused":true,"pending":1,"running":0,"topic":"mail"}`)
	code, _, errs = wq(t, srv, "resume", "mail")
	require.Zero(t, code, errs)
	select {
	case id := <-ran:
		require.Equal(t, "m1", id)
	case <-time.After(10 * time.Second):
		t.Fatal("not run after resume")
	}

	code, _, errs = wq(t, srv, "cancel")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "-all for every job")
	code, _, errs = wq(t, srv, "cancel", "-topic", "orders", "orders", "o1")
	require.Equal(t, 2, code)
	require.Contains(t, errs, "not both")
	code, out, errs = wq(t, srv, "cancel", "-topic", "orders", "-before", "1h2m30s")
	require.Zero(t, code, errs)
	require.Contains(t, out, "cancel: 3 jobs", "o0, o1, o2")
	code, out, errs = wq(t, srv, "requeue", "-at", "2h", "-all")
	require.Zero(t, code, errs)
	require.Contains(t, out, "requeue: 5 jobs")
	code, out, errs = wq(t, srv, "cancel", "-all")
	require.Zero(t, code, errs)
	require.Contains(t, out, "cancel: 7 jobs", "o3, o4 and the five requeued")
	cs, err := q.Counts(ctx)
	require.NoError(t, err)
	require.Empty(t, cs)
}

// TestConnectSentinelAndCluster: the command line reaches a namespace
// through a real Sentinel set (-addrs of the Sentinels and
// -sentinel-master) and a real Redis Cluster (-addrs of some nodes and
// -cluster), and sees and changes its jobs there.
func TestConnectSentinelAndCluster(t *testing.T) {
	t.Parallel()
	redistest.Start(t, redistest.Options{}).RequireReal(t)
	deployments := []struct {
		name  string
		start func(t *testing.T) (redis.UniversalClient, []string)
	}{
		{"sentinel", func(t *testing.T) (redis.UniversalClient, []string) {
			set := redistest.StartSentinelSet(t, 1)
			return set.Client(t, redis.FailoverOptions{}),
				[]string{"-addrs", strings.Join(set.SentinelAddrs(), ","), "-sentinel-master", redistest.SentinelMaster}
		}},
		{"cluster", func(t *testing.T) (redis.UniversalClient, []string) {
			c := redistest.StartCluster(t)
			return c.Client(t, redis.ClusterOptions{}), []string{"-addrs", c.Addrs()[0], "-cluster"}
		}},
	}
	for _, d := range deployments {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			rdb, flags := d.start(t)
			ctx := context.Background()
			q, err := wheelq.New(rdb, wheelq.Config{Namespace: "cli", Partitions: 4})
			require.NoError(t, err)
			t.Cleanup(func() { _ = q.Shutdown(ctx) })
			_, err = q.Schedule(ctx, "orders", []byte("o-1"), wheelq.ID("o-1"), wheelq.After(time.Hour))
			require.NoError(t, err)
			cli := func(args ...string) (int, string, string) {
				var out, errb bytes.Buffer
				code := run(ctx, append(append(slices.Clone(flags), "-namespace", "cli"), args...), &out, &errb)
				return code, out.String(), errb.String()
			}
			code, out, errs := cli("show", "orders", "o-1")
			require.Zero(t, code, errs)
			require.Regexp(t, `state +pending`, out)
			code, out, errs = cli("ls", "-topic", "orders")
			require.Zero(t, code, errs)
			require.Contains(t, out, "o-1")
			code, _, errs = cli("cancel", "orders", "o-1")
			require.Zero(t, code, errs)
			info, err := q.Lookup(ctx, "orders", "o-1")
			require.NoError(t, err)
			require.Equal(t, wheelq.StateCancelled, info.State)
		})
	}
}

// TestRecurringCommands: recurring lists a declared schedule with its
// next slot; unrecur removes it, and a second unrecur says it is gone.
func TestRecurringCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	q, err := wheelq.New(srv.Client(t), wheelq.Config{Namespace: "cli", Partitions: 4})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(ctx) })
	require.NoError(t, q.DeclareRecurring(ctx, wheelq.Recurring{Name: "nightly", Topic: "reports", Cron: "0 3 * * *", TimeZone: "Europe/Paris"}))

	code, out, errs := wq(t, srv, "recurring")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "NAME")
	require.Regexp(t, `nightly\s+reports\s+0 3 \* \* \* \(Europe/Paris\)\s+\d{4}-\d\d-\d\dT0[12]:00:00Z\s+-`, out)
	code, out, errs = wq(t, srv, "recurring", "-json")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, `"name":"nightly"`)
	require.Contains(t, out, `"missed":"latest"`)

	code, out, errs = wq(t, srv, "unrecur", "nightly")
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "unrecur nightly: done")
	code, _, errs = wq(t, srv, "unrecur", "nightly")
	require.Equal(t, 1, code)
	require.Equal(t, "wheelq: no recurring schedule \"nightly\" (wheelq recurring lists them)\n", errs,
		"the schedule, not a job, is not found")
	code, _, errs = wq(t, srv, "unrecur")
	require.Equal(t, 2, code, errs)
}

// TestNothingUnnamed: an empty value never widens what a command acts on
// or where: an empty filter flag, an empty -namespace, a Redis URL or
// -addrs entry naming no host (go-redis would take localhost:6379) are
// usage errors, and nothing is cancelled; a password in a refused URL is
// not printed. (Found by a red-team helper: `cancel -topic "$T"` with T
// unset cancelled every pending job; `WHEELQ_URL=redis://` went to
// localhost:6379.)
func TestNothingUnnamed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	q, err := wheelq.New(srv.Client(t), wheelq.Config{Namespace: "cli", Partitions: 4})
	require.NoError(t, err)
	for _, id := range []string{"a", "b"} {
		_, err = q.Schedule(ctx, "orders", nil, wheelq.ID(id), wheelq.After(time.Hour))
		require.NoError(t, err)
	}
	for _, args := range [][]string{
		{"cancel", "-topic", ""}, {"cancel", "-after", ""}, {"cancel", "-topic", " "}, {"cancel", "-state", ""},
		{"requeue", "-topic", ""}, {"ls", "-topic", ""},
	} {
		code, _, errs := wq(t, srv, args...)
		require.Equal(t, 2, code, "%v: %s", args, errs)
		require.Contains(t, errs, "empty", "%v", args)
	}
	counts, err := q.Counts(ctx)
	require.NoError(t, err)
	require.Len(t, counts, 1)
	require.EqualValues(t, 2, counts[0].Pending, "nothing cancelled")

	for _, args := range [][]string{
		{"-url", "redis://", "stats"}, {"-url", "redis:///0", "stats"}, {"-url", "redis://:6379", "stats"},
		{"-url", "redis://user:s3cretpw@/2", "stats"}, {"-url", "rediss://", "stats"},
		{"-addrs", ":6379", "stats"}, {"-url", "redis://" + srv.Addr, "-namespace", "", "stats"},
	} {
		var out, errb bytes.Buffer
		code := run(ctx, args, &out, &errb)
		require.Equal(t, 2, code, "%v: %s", args, errb.String())
		require.NotContains(t, errb.String(), "localhost:6379", "%v", args)
		require.NotContains(t, errb.String(), "s3cretpw", "%v", args)
	}
	var out, errb bytes.Buffer
	code := runEnv(ctx, []string{"stats"}, func(k string) string {
		return map[string]string{envURL: "redis://admin:s3cretpw@"}[k]
	}, &out, &errb)
	require.Equal(t, 2, code, errb.String())
	require.NotContains(t, errb.String(), "s3cretpw")
	for _, args := range [][]string{{"-sentinel-master", "m", "stats"}, {"-cluster", "stats"}} {
		errb.Reset()
		code = runEnv(ctx, args, func(k string) string { return map[string]string{envURL: "redis://127.0.0.1:1"}[k] }, &out, &errb)
		require.Equal(t, 2, code, errb.String())
		require.Contains(t, errb.String(), "needs -addrs", "with $%s set, what is missing is -addrs", envURL)
	}
	errb.Reset()
	code = run(ctx, []string{"-url", "redis://admin:s3cretpw@127.0.0.1:1", "-timeout", "300ms", "stats"}, &out, &errb)
	require.Equal(t, 1, code)
	require.NotContains(t, errb.String(), "s3cretpw")
}

// TestTimeoutBounds: -timeout bounds each Redis call, also when Redis
// holds the call (CLIENT PAUSE): before, go-redis's own 3 s read timeout
// applied, and a 300 ms -timeout waited out a 6 s pause. (Found by a
// red-team helper.)
func TestTimeoutBounds(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	ctx := context.Background()
	q, err := wheelq.New(srv.Client(t), wheelq.Config{Namespace: "cli", Partitions: 4})
	require.NoError(t, err)
	_, err = q.Schedule(ctx, "orders", nil, wheelq.After(time.Hour))
	require.NoError(t, err)
	code, _, errs := wq(t, srv, "-timeout", "300ms", "stats")
	require.Equal(t, 0, code, errs)
	require.NoError(t, srv.NewClient().Do(ctx, "CLIENT", "PAUSE", 6000, "ALL").Err())
	t.Cleanup(func() { _ = srv.NewClient().Do(ctx, "CLIENT", "UNPAUSE").Err() })
	start := time.Now()
	code, _, errs = wq(t, srv, "-timeout", "300ms", "stats")
	took := time.Since(start)
	require.Equal(t, 1, code, errs)
	require.Less(t, took, 4*time.Second, "a 300 ms -timeout waited %v", took)
}
