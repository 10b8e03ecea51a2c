package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

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

	code, _, _ = wq(t, srv, "frobnicate")
	require.Equal(t, 1, code, "no namespace is checked first")
	errb.Reset()
	code = run(context.Background(), []string{"-url", "redis://x", "-cluster", "stats"}, &out, &errb)
	require.Equal(t, 2, code)
	require.Contains(t, errb.String(), "either -url or -addrs")
	errb.Reset()
	code = run(context.Background(), nil, &out, &errb)
	require.Equal(t, 2, code)
	require.Contains(t, errb.String(), "usage: wheelq")
}
