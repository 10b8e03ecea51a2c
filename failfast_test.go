package wheelq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/breaker"
	"github.com/wheelq/wheelq/internal/faultproxy"
	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/wheel"
)

func TestReachStates(t *testing.T) {
	t.Parallel()
	var r reach
	t0 := time.Unix(1000, 0)
	clk := wheel.NewFakeClock(t0)
	at := func(tm time.Time) wheel.Clock { clk.Advance(tm.Sub(clk.Now())); return clk }
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}

	probe, err := r.admit(at(t0))
	require.NoError(t, err)
	require.False(t, probe)
	r.note(context.Background(), errors.New("ERR some reply"), false, at(t0)) // Redis answered: still reachable
	_, err = r.admit(at(t0))
	require.NoError(t, err)
	r.note(context.Background(), context.Canceled, false, at(t0)) // the caller gave up: says nothing of Redis
	_, err = r.admit(at(t0))
	require.NoError(t, err)
	ended, cancel := context.WithDeadline(context.Background(), t0)
	defer cancel()
	<-ended.Done()
	r.note(ended, ended.Err(), false, at(t0)) // the caller's deadline ended the call: says nothing of Redis
	_, err = r.admit(at(t0))
	require.NoError(t, err)
	var silent reach
	silent.note(context.Background(), fmt.Errorf("wrapped: %w", context.DeadlineExceeded), false, at(t0))
	_, err = silent.admit(at(t0.Add(time.Millisecond)))
	require.ErrorIs(t, err, ErrUnavailable, "the queue's own deadline ended it: Redis left it unanswered")
	require.ErrorIs(t, err, breaker.ErrNoAnswer)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "a fail-fast error is not the caller's deadline")

	// A network timeout (go-redis's "i/o timeout", bare or in a
	// *net.OpError) once the caller's deadline has passed is the caller's
	// deadline: go-redis with ContextTimeoutEnabled sets the connection's
	// from it, and ctx.Err can still be nil when the read returns.
	readTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	r.note(ended, readTimeout, false, at(t0))
	r.note(passed{}, os.ErrDeadlineExceeded, false, at(t0))
	_, err = r.admit(at(t0))
	require.NoError(t, err, "the caller's deadline ended the read: says nothing of Redis")
	var timedOut reach
	timedOut.note(context.Background(), fmt.Errorf("wheelq: %w", os.ErrDeadlineExceeded), false, at(t0))
	_, err = timedOut.admit(at(t0.Add(time.Millisecond)))
	require.ErrorIs(t, err, ErrUnavailable, "the client's ReadTimeout ended it: Redis left it unanswered")

	r.note(context.Background(), refused, false, at(t0))
	_, err = r.admit(at(t0.Add(time.Millisecond)))
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, refused, "the failure seen is wrapped")

	probe, err = r.admit(at(t0.Add(breaker.ProbeEvery)))
	require.NoError(t, err)
	require.True(t, probe, "one call goes through")
	_, err = r.admit(at(t0.Add(breaker.ProbeEvery)))
	require.ErrorIs(t, err, ErrUnavailable, "only one probe at a time")
	r.note(context.Background(), refused, true, at(t0.Add(breaker.ProbeEvery+time.Second))) // a slow probe
	_, err = r.admit(at(t0.Add(breaker.ProbeEvery + time.Second + breaker.ProbeEvery/2)))
	require.ErrorIs(t, err, ErrUnavailable, "the next probe is counted from the last one's end")

	probe, err = r.admit(at(t0.Add(breaker.ProbeEvery + time.Second + breaker.ProbeEvery)))
	require.NoError(t, err)
	require.True(t, probe)
	r.note(context.Background(), nil, true, at(t0.Add(3*time.Second)))
	probe, err = r.admit(at(t0.Add(3 * time.Second)))
	require.NoError(t, err)
	require.False(t, probe, "reachable again")
}

// passed is a context whose deadline has passed but whose Err is not yet
// set: as a context.WithTimeout's is between its deadline and its timer.
type passed struct{ context.Context }

func (passed) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }
func (passed) Err() error                  { return nil }
func (passed) Done() <-chan struct{}       { return nil }
func (passed) Value(any) any               { return nil }

// TestReadsUnavailable: with Redis gone, the reads and the steering
// calls say ErrUnavailable (a caller retries; the server answers 503),
// not a bare dial error. (Found by a red team: wheelq-server answered
// 500 internal for each.)
func TestReadsUnavailable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	q := b.newQueue(t, Config{LockDir: "-", WriteTimeout: time.Second})
	require.NoError(t, q.Pull("p"))
	require.NoError(t, q.Start(b.ctx))
	<-q.Ready()
	require.NoError(t, q.DeclareRecurring(b.ctx, Recurring{Name: "r", Topic: "p", Every: time.Hour}))
	_, err := q.Lookup(b.ctx, "p", "x")
	require.ErrorIs(t, err, ErrNotFound, "the layout is checked and known before Redis goes")
	srv.Kill()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute) // a bound on a hang only: each call fails on its own
	defer cancel()
	for name, call := range map[string]func() error{
		"Lookup":           func() error { _, err := q.Lookup(ctx, "p", "x"); return err },
		"List":             func() error { _, _, err := q.List(ctx, JobFilter{}, "", 10); return err },
		"Counts":           func() error { _, err := q.Counts(ctx); return err },
		"Recurrings":       func() error { _, err := q.Recurrings(ctx); return err },
		"Paused":           func() error { _, err := q.Paused(ctx); return err },
		"Pause":            func() error { return q.Pause(ctx, "p") },
		"Workers":          func() error { _, err := q.Workers(ctx); return err },
		"DeadJobs":         func() error { _, err := q.DeadJobs(ctx, 10); return err },
		"DeclareRecurring": func() error { return q.DeclareRecurring(ctx, Recurring{Name: "r2", Topic: "p", Every: time.Hour}) },
		"RemoveRecurring":  func() error { return q.RemoveRecurring(ctx, "r") },
	} {
		assert.ErrorIs(t, call(), ErrUnavailable, name)
	}
}

// TestRefusedForNowIsUnavailable: Redis answering that it cannot take a
// write now (out of memory, a replica) is ErrUnavailable: nothing was
// written, and the call may succeed later (the server answers 503 with
// Retry-After, not 500 "a bug"). Found by a red team.
func TestRefusedForNowIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	q := b.newQueue(t, Config{LockDir: "-"})
	_, err := q.Schedule(b.ctx, "t", nil, ID("before"), After(time.Hour))
	require.NoError(t, err)
	require.NoError(t, b.rdb.ConfigSet(b.ctx, "maxmemory", "1").Err())
	_, err = q.Schedule(b.ctx, "t", []byte("x"), ID("full"), After(time.Hour))
	require.ErrorIs(t, err, ErrUnavailable, "out of memory")
	require.ErrorContains(t, err, "OOM")
	require.ErrorIs(t, q.Pause(b.ctx, "t"), ErrUnavailable, "out of memory")
	require.NoError(t, b.rdb.ConfigSet(b.ctx, "maxmemory", "0").Err())
	require.Eventually(t, func() bool {
		_, err := q.Schedule(b.ctx, "t", []byte("x"), ID("after"), After(time.Hour))
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "writes go through once Redis has room")
}

// TestPingCallerDeadline: a Ping cut short by the caller's own deadline
// says so (ctx's error), not ErrUnavailable: Redis was answering, only
// slower than the caller would wait, and the queue keeps taking writes.
// (Left by a review: the breaker no longer counted such a failure, but
// Ping still called it unavailable.)
func TestPingCallerDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	proxy := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	b := &bundle{srv: srv, rdb: rdb, ctx: context.Background()}
	q := b.newQueue(t, Config{LockDir: "-", WriteTimeout: 5 * time.Second})
	require.NoError(t, q.Ping(b.ctx))
	proxy.SetReplyDelay(time.Second)
	ctx, cancel := context.WithTimeout(b.ctx, 50*time.Millisecond)
	defer cancel()
	err := q.Ping(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the caller's deadline ended it")
	require.NotErrorIs(t, err, ErrUnavailable, "Redis answers, slowly: not unavailable")
	proxy.SetReplyDelay(0)
	require.NoError(t, q.Ping(b.ctx), "and the queue took nothing from it")
	_, err = q.Schedule(b.ctx, "p", nil, After(time.Hour))
	require.NoError(t, err)
}
