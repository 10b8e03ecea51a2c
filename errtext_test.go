package wheelq

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

// TestErrorText: an error a caller prints starts "wheelq: " once, names
// neither an internal package nor its prefix twice, and still matches its
// sentinel with errors.Is (not "wheelq: wheelq: job not found", nor
// "persist: ..." from New).
func TestErrorText(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	q := b.newQueue(t, Config{Partitions: 4})
	check := func(err error, want error) {
		t.Helper()
		require.ErrorIs(t, err, want)
		msg := err.Error()
		require.True(t, strings.HasPrefix(msg, "wheelq: "), msg)
		require.NotContains(t, msg, "wheelq: wheelq:")
		require.Equal(t, 1, strings.Count(msg, "wheelq: "), msg)
		require.NotContains(t, msg, "persist")
	}
	check(q.Cancel(b.ctx, "t", "nope"), ErrNotFound)
	check(q.Reschedule(b.ctx, "t", "nope", time.Now().Add(time.Hour)), ErrNotFound)
	check(q.Requeue(b.ctx, "t", "nope", time.Now()), ErrNotFound)
	_, err := q.Lookup(b.ctx, "t", "nope")
	check(err, ErrNotFound)
	_, err = q.Schedule(b.ctx, "t", nil, ID("a"), At(time.Time{}))
	check(err, ErrInvalidOption)

	// Another layout for the namespace; a namespace Redis keys cannot hold.
	other := b.newQueue(t, Config{Partitions: 8})
	_, err = other.Schedule(b.ctx, "t", nil)
	check(err, ErrLayout)
	_, err = New(b.rdb, Config{Namespace: "a:b"})
	check(err, ErrInvalidConfig)
	_, err = New(redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}}), Config{})
	check(err, ErrUnsupportedClient)
}

// TestNamesRefused: names that would break keys, command lines or the
// rows of a listing are refused with their sentinel:
// namespaces with spaces, tabs, '*', '/', ':' or 300 bytes; topics and ids
// with newlines or bytes that are not UTF-8.
func TestNamesRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	for _, ns := range []string{"a b", "a\tb", "a*", "a/b", "a:b", "{a}", strings.Repeat("n", 300), "é"} {
		_, err := New(b.rdb, Config{Namespace: ns})
		require.ErrorIs(t, err, ErrInvalidConfig, "namespace %q", ns)
		_, err = Partitions(b.ctx, b.rdb, ns)
		require.ErrorIs(t, err, ErrInvalidConfig, "namespace %q", ns)
	}
	for _, ns := range []string{"shop", "shop-eu_1.v2", strings.Repeat("n", 64)} {
		_, err := New(b.rdb, Config{Namespace: ns})
		require.NoError(t, err, "namespace %q", ns)
	}
	q := b.newQueue(t, Config{Partitions: 2})
	for _, topic := range []string{"a\nb", "a\x00", "bad\xff", "a/b", "del\x7f"} {
		_, err := q.Schedule(b.ctx, topic, nil)
		require.ErrorIs(t, err, ErrInvalidTopic, "topic %q", topic)
		require.ErrorIs(t, q.Handle(topic, HandlerFunc(func(context.Context, *Job) error { return nil })), ErrInvalidTopic, "topic %q", topic)
	}
	for _, id := range []string{"a\nb", "tab\there", "bad\xff", "\u0085"} {
		_, err := q.Schedule(b.ctx, "t", nil, ID(id))
		require.ErrorIs(t, err, ErrInvalidID, "id %q", id)
		require.ErrorIs(t, q.Cancel(b.ctx, "t", id), ErrInvalidID, "id %q", id)
		_, err = q.Lookup(b.ctx, "t", id)
		require.ErrorIs(t, err, ErrInvalidID, "id %q", id)
	}
	for _, name := range []string{"émoji-✓", "order:42", "a b"} {
		_, err := q.Schedule(b.ctx, name, nil, ID(name))
		require.NoError(t, err, "%q is a fine topic and id", name)
	}
}

// TestHugeConfigRefused: a count past what a process can hold is an
// ErrInvalidConfig naming it, not a panic or an allocation of gigabytes.
// (Found by a red team: queue.concurrency 99999999999999 panicked with
// "makechan: size out of range" in wheelq-server, -check-config too.)
func TestHugeConfigRefused(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for name, c := range map[string]Config{
		"concurrency": {Concurrency: 99999999999999},
		"partitions":  {Partitions: 1 << 40},
		"max batch":   {MaxBatch: 1 << 40},
	} {
		var err error
		require.NotPanics(t, func() { _, err = New(rdb, c) }, name)
		require.ErrorIs(t, err, ErrInvalidConfig, name)
		require.ErrorContains(t, err, name)
	}
}
