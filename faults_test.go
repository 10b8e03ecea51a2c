package wheelq

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/breaker"
	"github.com/wheelq/wheelq/internal/faultproxy"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/wheel"
)

// The tests of this file inject gray failures: a reply lost
// after its command applied, a client that sends a command again, Redis
// down around a due time, a stepped wall clock. Each names the scenario
// it reproduces.

// scriptFault is a go-redis hook that acts on the first pipeline holding a
// script call that match accepts: it runs the pipeline (the commands apply
// in Redis) and then either runs it again, as go-redis does when it
// retries after a lost reply (replay), or reports an error as if the reply
// had been lost (lose).
type scriptFault struct {
	match  func(args []any) bool
	replay bool
	fired  atomic.Bool
}

func (h *scriptFault) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptFault) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	pipe := h.ProcessPipelineHook(func(ctx context.Context, cmds []redis.Cmder) error {
		return next(ctx, cmds[0])
	})
	return func(ctx context.Context, cmd redis.Cmder) error { return pipe(ctx, []redis.Cmder{cmd}) }
}
func (h *scriptFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		hit := false
		for _, c := range cmds {
			if a := c.Args(); len(a) > 3 && a[0] == "evalsha" && h.match(a) {
				hit = true
			}
		}
		if !hit || !h.fired.CompareAndSwap(false, true) {
			return next(ctx, cmds)
		}
		err := next(ctx, cmds)
		if h.replay {
			return next(ctx, cmds) // the client's retry: the same commands again
		}
		if err == nil {
			err = errors.New("i/o timeout (injected: the reply was lost)")
			for _, c := range cmds {
				c.SetErr(err)
			}
		}
		return err
	}
}

// keyAt reports whether script call args have a key at position i (of
// KEYS) with the suffix.
func keyAt(args []any, i int, suffix string) bool {
	if len(args) <= 3+i {
		return false
	}
	s, ok := args[3+i].(string)
	return ok && strings.HasSuffix(s, suffix)
}

// TestReplayedScheduleIsNotDuplicate: the reply
// of Schedule's write was lost and the client sent it again (go-redis
// retries by default). It returned ErrDuplicate for the job it had just
// created; a replay is now recognised by its record.
func TestReplayedScheduleIsNotDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	h := &scriptFault{replay: true, match: func(a []any) bool { return keyAt(a, 4, ":loaded") && keyAt(a, 5, ":inbox") }}
	b.rdb.AddHook(h)
	r := newRuns()
	require.NoError(t, b.q.Handle("s", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
	id, err := b.q.Schedule(b.ctx, "s", []byte("x"), ID("order-1"), After(20*time.Millisecond))
	require.True(t, h.fired.Load(), "the write was sent twice")
	require.NoError(t, err, "a replay of one's own write is no duplicate")
	require.Equal(t, "order-1", id)
	require.Equal(t, "order-1", r.next(t).ID)
	r.none(t, 100*time.Millisecond)
	// Due later: a job due now may have run and been acked before the
	// second write, which would then rightly find no job.
	_, err = b.q.Schedule(b.ctx, "s", []byte("y"), ID("order-2"), After(time.Hour))
	require.NoError(t, err)
	_, err = b.q.Schedule(b.ctx, "s", []byte("y"), ID("order-2"), After(time.Hour))
	require.ErrorIs(t, err, ErrDuplicate, "another write of the same id still is")
}

// TestReplayedCancelIsNotNotFound is TestReplayedScheduleIsNotDuplicate
// for cancels: the reply of a cancel was lost and the client sent it
// again; the replay found nothing to delete and Cancel returned ErrNotFound
// for the job it had just deleted. A cancel leaves a short-lived tombstone
// of its own call that a replay finds.
func TestReplayedCancelIsNotNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	h := &scriptFault{replay: true, match: func(a []any) bool { return keyAt(a, 2, ":dead") && keyAt(a, 3, ":running") }}
	b.rdb.AddHook(h)
	_, err := b.q.Schedule(b.ctx, "c", nil, ID("paid"), After(time.Hour))
	require.NoError(t, err)
	require.NoError(t, b.q.Cancel(b.ctx, "c", "paid"), "a replay of one's own cancel is no ErrNotFound")
	require.True(t, h.fired.Load(), "the cancel was sent twice")
	require.ErrorIs(t, b.q.Cancel(b.ctx, "c", "paid"), ErrNotFound, "another cancel of it still is")
	require.ErrorIs(t, b.q.Cancel(b.ctx, "c", "never"), ErrNotFound)
}

// TestReplayedRequeue: a requeue sent again after its reply was lost found
// the job no longer dead and answered ErrNotFound for the job it had just
// requeued; it is recognised by the record it stored.
func TestReplayedRequeue(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	r := newRuns()
	require.NoError(t, b.q.Handle("d", HandlerFunc(func(_ context.Context, j *Job) error {
		r.add(j)
		if j.Attempt == 1 {
			return Permanent(errors.New("dead at once"))
		}
		return nil
	})))
	_, err := b.q.Schedule(b.ctx, "d", nil, ID("x"))
	require.NoError(t, err)
	r.next(t)
	eventually(t, func() bool {
		info, err := b.q.Lookup(b.ctx, "d", "x")
		return err == nil && info.State == StateDead
	}, "dead-lettered")
	h := &scriptFault{replay: true, match: func(a []any) bool {
		// requeue.lua: 6 keys, then ARGV token, job key, ... (schedule.lua,
		// with the same keys, has a mode where requeue has the key)
		return keyAt(a, 4, ":loaded") && len(a) > 10 && a[10] == "d/x"
	}}
	b.rdb.AddHook(h)
	require.NoError(t, b.q.Requeue(b.ctx, "d", "x", time.Now()), "a replay of one's own requeue is no ErrNotFound")
	require.True(t, h.fired.Load())
	require.Equal(t, 1, r.next(t).Attempt, "requeued: runs again, attempts reset")
}

// TestRetrySettleReplyLost: the settle that
// stores a retry applied, but its reply was lost; sent again, it answered
// "not applied", so the retry was never armed (the sweep found it seconds
// later). On a fake clock no sweep comes: the retry must be armed by the
// settle itself.
func TestRetrySettleReplyLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	h := &scriptFault{match: func(a []any) bool {
		if !keyAt(a, 2, ":dead") || !keyAt(a, 3, ":lease") || !keyAt(a, 4, ":running") { // settle.lua's keys
			return false
		}
		for _, v := range a {
			if isRetryOps(v) {
				return true
			}
		}
		return false
	}}
	b.rdb.AddHook(h)
	clk, r := failingOnceOnFakeClock(t, b, "r", 30*time.Minute)
	_, err := b.q.Schedule(b.ctx, "r", nil, ID("j"), After(time.Minute))
	require.NoError(t, err)
	clk.BlockUntilSleeping()
	clk.Advance(time.Minute)
	require.Equal(t, 1, r.next(t).Attempt)
	awaitRetryArmed(t, b, "r", "j")
	require.True(t, h.fired.Load(), "the retry's settle had its reply lost")
	clk.BlockUntilSleeping()
	clk.Advance(30 * time.Minute)
	require.Equal(t, 2, r.next(t).Attempt)
}

// TestRedisDownAroundDueTime: before an outage,
// another process (a producer) cancelled one job and moved another an hour
// ahead, both nil; the owner, holding both in memory with their payloads,
// ran both from its cache when they came due while Redis was down — the
// cancelled one, and the moved one an hour early. No job may start without
// a claim that Redis confirmed.
func TestRedisDownAroundDueTime(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	srv.RequireReal(t)
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	b.q = b.newQueue(t, Config{WriteTimeout: 300 * time.Millisecond, LeaseTTL: time.Minute})
	require.NoError(t, b.q.Start(b.ctx))
	<-b.q.Ready()
	r := newRuns()
	require.NoError(t, b.q.Handle("o", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
	producer := b.newQueue(t, Config{})
	for _, id := range []string{"cancelled", "moved"} {
		_, err := b.q.Schedule(b.ctx, "o", []byte(id), ID(id), After(time.Second))
		require.NoError(t, err)
	}
	require.NoError(t, producer.Cancel(b.ctx, "o", "cancelled"))
	require.NoError(t, producer.Reschedule(b.ctx, "o", "moved", time.Now().Add(time.Hour)))
	srv.Kill()
	r.none(t, 2*time.Second) // both come due meanwhile
	require.NoError(t, srv.Restart())
	r.none(t, time.Second)
	info, err := b.q.Lookup(b.ctx, "o", "moved")
	require.NoError(t, err)
	require.Equal(t, 0, info.Attempts)
}

// TestWallClockSteps: the wheel converted due
// times against the wall clock but advanced on the monotonic clock, so a
// step back made a job start before its due time by the process's own
// clock, and a step forward made every job armed before it late by the
// step, for the life of the process.
func TestWallClockSteps(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	clk := wheel.NewFakeClock(time.Now().Truncate(time.Millisecond))
	b.q = b.newQueue(t, Config{Clock: clk, Horizon: time.Hour})
	require.NoError(t, b.q.Start(b.ctx))
	<-b.q.Ready()
	r := newRuns()
	var mu sync.Mutex
	startedAt := map[string]time.Time{} // by the process's wall clock
	require.NoError(t, b.q.Handle("w", HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		startedAt[j.ID] = clk.Wall()
		mu.Unlock()
		r.add(j)
		return nil
	})))
	advance := func(d time.Duration) {
		for step := 50 * time.Millisecond; d > 0; d -= step {
			clk.BlockUntilSleeping()
			clk.Advance(min(step, d))
		}
	}

	// Back: due in 1 s, then the wall clock steps back 2 s.
	_, err := b.q.Schedule(b.ctx, "w", nil, ID("back"), After(time.Second))
	require.NoError(t, err)
	clk.StepWall(-2 * time.Second)
	advance(1500 * time.Millisecond)
	r.none(t, 100*time.Millisecond)
	advance(1600 * time.Millisecond)
	j := r.next(t)
	require.Equal(t, "back", j.ID)
	mu.Lock()
	require.False(t, startedAt["back"].Before(j.Due), "started %v before its due time by the wall clock", j.Due.Sub(startedAt["back"]))
	mu.Unlock()

	// Forward: due in 3 s, then the wall clock steps 2 s ahead. The job is
	// due 1 s later by the clock as it now stands.
	_, err = b.q.Schedule(b.ctx, "w", nil, ID("fwd"), After(3*time.Second))
	require.NoError(t, err)
	clk.StepWall(2 * time.Second)
	advance(1200 * time.Millisecond)
	j = r.next(t)
	require.Equal(t, "fwd", j.ID)
	mu.Lock()
	late := startedAt["fwd"].Sub(j.Due)
	mu.Unlock()
	require.GreaterOrEqual(t, late, time.Duration(0))
	require.Less(t, late, time.Second, "not late by the step")
}

// runLog records which process ran which job, and when by the wall clock.
type runLog struct {
	mu   sync.Mutex
	runs map[string][]string // job id -> process names, in run order
	ch   chan struct{}
}

func newRunLog() *runLog { return &runLog{runs: map[string][]string{}, ch: make(chan struct{}, 1<<12)} }

func (l *runLog) handler(t *testing.T, proc string) Handler {
	return HandlerFunc(func(_ context.Context, j *Job) error {
		if now := time.Now(); now.Before(j.Due) {
			t.Errorf("%s ran %s %v early", proc, j.ID, j.Due.Sub(now))
		}
		l.mu.Lock()
		l.runs[j.ID] = append(l.runs[j.ID], proc)
		l.mu.Unlock()
		select {
		case l.ch <- struct{}{}: // for tests that wait for runs
		default: // a test that only counts runs does not drain it
		}
		return nil
	})
}

func (l *runLog) snapshot() map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]string{}
	for k, v := range l.runs {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// TestOneSidedPartition: the owner's packets to
// Redis are dropped while the other process still reaches it. The cut-off
// owner kept believing it owned its partitions (the lease was checked only
// between poller passes, and a poll had no deadline) and kept starting jobs
// from its cache: most jobs ran in both processes, and a job cancelled
// (nil) through the other process ran. Now the cut-off owner stops starting
// jobs when its lease validity ends, and the other process takes over.
func TestOneSidedPartition(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	proxy := faultproxy.Start(t, srv.Addr)
	// No client-side read timeout, and contexts honoured: a call ends only
	// by its own context's deadline, which every call of the queue must set.
	cutRdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ReadTimeout: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cutRdb.Close() })
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	cfg := Config{LeaseTTL: 2 * time.Second, WriteTimeout: 300 * time.Millisecond, Partitions: 4}
	log := newRunLog()
	owner := (&bundle{srv: srv, rdb: cutRdb, ctx: b.ctx}).newQueue(t, cfg)
	require.NoError(t, owner.Handle("p", log.handler(t, "owner")))
	require.NoError(t, owner.Start(b.ctx))
	<-owner.Ready()
	other := b.newQueue(t, cfg)
	require.NoError(t, other.Handle("p", log.handler(t, "other")))
	require.NoError(t, other.Start(b.ctx))
	// The two share the partitions; the owner's half is what
	// the partition is about.
	eventually(t, func() bool { return owner.recov.Owned() == 2 && other.recov.Owned() == 2 }, "the two share the partitions")

	const n = 40
	t0 := time.Now()
	for i := range n {
		// Scheduled by the owner: it holds every payload in its cache.
		_, err := owner.Schedule(b.ctx, "p", []byte("x"), ID(fmt.Sprint(i)), At(t0.Add(1500*time.Millisecond+time.Duration(i)*100*time.Millisecond)))
		require.NoError(t, err)
	}
	time.Sleep(time.Until(t0.Add(time.Second))) // the fault's time: half a second before the first job is due
	proxy.Blackhole(true)
	// Once the other process owns a partition, cancel one of its jobs
	// there: it must never run.
	var cancelled string
	eventually(t, func() bool { return other.recov.Owned() == 4 }, "the other process took every partition over")
	for i := n - 1; i >= 0 && cancelled == ""; i-- {
		if err := other.Cancel(b.ctx, "p", fmt.Sprint(i)); err == nil {
			cancelled = fmt.Sprint(i)
		}
	}
	require.NotEmpty(t, cancelled, "a job still pending to cancel")
	for range n - 1 {
		select {
		case <-log.ch:
		case <-time.After(wait):
			t.Fatalf("only %d runs: %v", len(log.snapshot()), log.snapshot())
		}
	}
	proxy.Blackhole(false)
	// The owner reaches Redis again and takes its share back: its loops
	// have run since, and its claims get through again: fenced. A run they
	// wrongly started would come now.
	eventually(t, func() bool { return owner.recov.Owned() == 2 && other.recov.Owned() == 2 }, "the owner is back with its share")
	time.Sleep(500 * time.Millisecond)
	for id, procs := range log.snapshot() {
		require.NotEqual(t, cancelled, id, "cancelled (nil) and ran in %v", procs)
		require.Len(t, procs, 1, "job %s ran in %v", id, procs)
	}
	require.Len(t, log.snapshot(), n-1)
}

// TestLargeRecordsOnSlowLink: jobs with large
// payloads that another process scheduled, due together, on a slow link. A claim had no byte bound
// (up to 1,024 jobs): its reply outlasted the timeout and the same batch was
// claimed again forever; no job ran. Claims are now bounded in bytes.
func TestLargeRecordsOnSlowLink(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	const n = 40
	payload := make([]byte, 1<<20)
	producer := b.newQueue(t, Config{Partitions: 1, MaxPayload: 2 << 20})
	due := time.Now().Add(2 * time.Second) // fired together: one claim batch
	for i := range n {
		_, err := producer.Schedule(b.ctx, "big", payload, ID(fmt.Sprint(i)), At(due))
		require.NoError(t, err)
	}
	proxy := faultproxy.Start(t, srv.Addr)
	proxy.SetBandwidth(16 << 20) // 40 MiB take 2.5 s; a claim may take 2 s
	slow := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = slow.Close() })
	// A bounded claim (4 MiB) takes 0.25 s on the wire; the 2 s timeout
	// leaves room for a busy machine under -race (1 s did not, while other
	// builds ran), and is still shorter than the 40 MiB of an unbounded one.
	q := (&bundle{srv: srv, rdb: slow, ctx: b.ctx}).newQueue(t, Config{Partitions: 1, MaxPayload: 2 << 20, WriteTimeout: 2 * time.Second})
	var ran atomic.Int32
	require.NoError(t, q.Handle("big", HandlerFunc(func(_ context.Context, j *Job) error {
		if len(j.Payload) != len(payload) {
			return Permanent(fmt.Errorf("payload of %d bytes", len(j.Payload)))
		}
		ran.Add(1)
		return nil
	})))
	require.NoError(t, q.Start(b.ctx))
	eventually(t, func() bool { return ran.Load() == n }, "every large job ran")
}

// TestOutcomeUnknown: a write whose reply was lost may or may not have
// applied; the caller is told so with ErrOutcomeUnknown, while a refusal by
// Redis (here out of memory) is a known outcome: nothing was applied.
func TestOutcomeUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	lostWrite := &scriptFault{match: func(a []any) bool { return keyAt(a, 4, ":loaded") && keyAt(a, 5, ":inbox") }}
	b.rdb.AddHook(lostWrite)
	_, err := b.q.Schedule(b.ctx, "u", nil, ID("a"), After(time.Hour))
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	_, err = b.q.Lookup(b.ctx, "u", "a")
	require.NoError(t, err, "it did apply")
	lostCancel := &scriptFault{match: func(a []any) bool { return keyAt(a, 2, ":dead") && keyAt(a, 3, ":running") }}
	b.rdb.AddHook(lostCancel)
	require.ErrorIs(t, b.q.Cancel(b.ctx, "u", "a"), ErrOutcomeUnknown)
	info, err := b.q.Lookup(b.ctx, "u", "a")
	require.NoError(t, err)
	require.Equal(t, StateCancelled, info.State, "it did apply")

	require.NoError(t, b.rdb.ConfigSet(b.ctx, "maxmemory", "1").Err())
	t.Cleanup(func() { _ = b.rdb.ConfigSet(context.Background(), "maxmemory", "0").Err() })
	_, err = b.q.Schedule(b.ctx, "u", nil, ID("b"), After(time.Hour))
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrOutcomeUnknown, "refused by Redis: %v", err)
	var rerr redis.Error
	require.ErrorAs(t, err, &rerr)
	_, err = b.q.Schedule(b.ctx, "u", nil, After(time.Hour)) // a random id: the plain write
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrOutcomeUnknown, "refused by Redis: %v", err)
}

const (
	envPausedRedis = "WHEELQ_PAUSED_CHILD_REDIS"
	envPausedLog   = "WHEELQ_PAUSED_CHILD_LOG"
)

// pausedConfig is the configuration of TestPausedOwner's processes: short
// leases, and claims made a second ahead, so that the owner holds claimed
// tasks for a while before their due time.
func pausedConfig() Config {
	return Config{Namespace: "pause", Partitions: 4, LeaseTTL: 2 * time.Second, ClaimLead: time.Second,
		Horizon: 4 * time.Second, PollInterval: 20 * time.Millisecond}
}

// TestPausedOwnerChild is the child process of TestPausedOwner; it does
// nothing unless the parent set its environment. It appends "id pid" to
// the log for each handler start.
func TestPausedOwnerChild(t *testing.T) {
	addr := os.Getenv(envPausedRedis)
	if addr == "" {
		t.Skip("child process of TestPausedOwner")
	}
	f, err := os.OpenFile(os.Getenv(envPausedLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	require.NoError(t, err)
	q, err := New(redis.NewClient(&redis.Options{Addr: addr}), pausedConfig())
	require.NoError(t, err)
	h := HandlerFunc(func(_ context.Context, j *Job) error {
		_, err := fmt.Fprintf(f, "%s/%s %d\n", j.Topic, j.ID, os.Getpid()) // one write(2)
		return err
	})
	require.NoError(t, q.Handle("p", h))
	require.NoError(t, q.Handle("c", h))
	require.NoError(t, q.Start(context.Background()))
	select {} // until killed
}

// TestPausedOwner: the owner is paused (SIGSTOP)
// past its lease while holding claimed tasks; another process takes the
// partitions over, runs the jobs, and a Cancel through it returns nil; then
// the owner resumes (SIGCONT). Its held tasks started without any ownership
// check: the cancelled job ran, and the others ran twice. Now a task
// starts only while its lease is valid by the owner's own clock, in the
// lease it was claimed under: the resumed owner starts nothing.
func TestPausedOwner(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	logPath := filepath.Join(t.TempDir(), "runs")
	c := startTestChild(t, "TestPausedOwnerChild", envPausedRedis+"="+srv.Addr, envPausedLog+"="+logPath)
	cmd := c.cmd
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		c.kill()
	})
	keys := make([]string, 4)
	for p := range keys {
		keys[p] = fmt.Sprintf("wq:{pause:%d}:lease", p)
	}
	eventually(t, func() bool {
		n, err := b.rdb.Exists(b.ctx, keys...).Result()
		return err == nil && n == 4
	}, "the child owns every partition")

	producer := b.newQueue(t, pausedConfig())
	const n = 20
	due := time.Now().Add(2500 * time.Millisecond)
	for i := range n {
		_, err := producer.Schedule(b.ctx, "p", nil, ID(fmt.Sprint(i)), At(due))
		require.NoError(t, err)
	}
	_, err := producer.Schedule(b.ctx, "c", nil, ID("x"), At(due))
	require.NoError(t, err)
	// The child claims them a second ahead and holds them; pause it then.
	time.Sleep(time.Until(due.Add(-400 * time.Millisecond)))
	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))

	// The other process has no handler for "c": its run of c/x fails and
	// waits an hour for a retry, pending and unclaimed, so that a Cancel
	// through the new owner returns nil.
	log := newRunLog()
	cfg := pausedConfig()
	cfg.Backoff = func(int, error) time.Duration { return time.Hour }
	other := b.newQueue(t, cfg)
	require.NoError(t, other.Handle("p", log.handler(t, "other")))
	require.NoError(t, other.Start(b.ctx))
	eventually(t, func() bool { return other.recov.Owned() == 4 }, "the other process took the partitions over")
	eventually(t, func() bool {
		info, err := other.Lookup(b.ctx, "c", "x")
		return err == nil && info.Attempts == 1 && info.State == StatePending
	}, "c/x failed once in the new owner (no handler) and waits")
	require.NoError(t, other.Cancel(b.ctx, "c", "x"), "pending, unclaimed: cancelled (nil)")
	for range n {
		select {
		case <-log.ch:
		case <-time.After(wait):
			t.Fatalf("only %d runs", len(log.snapshot()))
		}
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	// The resumed owner's held tasks come due at once; once it has taken
	// its share of the partitions back, it has surely run since SIGCONT. A
	// run it wrongly started would be logged by now or soon after.
	eventually(t, func() bool { return other.recov.Owned() == 2 }, "the resumed owner takes its share back")
	time.Sleep(1500 * time.Millisecond)
	data, err := os.ReadFile(logPath)
	require.NoError(t, err)
	require.Empty(t, strings.TrimSpace(string(data)), "the paused owner started jobs after it resumed")
	for id, procs := range log.snapshot() {
		require.Len(t, procs, 1, "job %s ran in %v", id, procs)
	}
	require.Len(t, log.snapshot(), n)
}

// TestLateRepliesAroundDueTime: Redis replies 2 s
// late around the due time (every command applies). The owner's claims
// timed out and it ran its jobs from the payload cache "unverified": a job
// another process had cancelled (nil) ran, and a job moved an hour ahead
// ran an hour early. A job starts only on a claim Redis confirmed.
func TestLateRepliesAroundDueTime(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	proxy := faultproxy.Start(t, srv.Addr)
	slow := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = slow.Close() })
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	owner := (&bundle{srv: srv, rdb: slow, ctx: b.ctx}).newQueue(t, Config{WriteTimeout: 300 * time.Millisecond, LeaseTTL: time.Minute})
	log := newRunLog()
	require.NoError(t, owner.Handle("o", log.handler(t, "owner")))
	require.NoError(t, owner.Start(b.ctx))
	<-owner.Ready()
	for _, id := range []string{"cancelled", "moved", "kept"} {
		_, err := owner.Schedule(b.ctx, "o", []byte(id), ID(id), After(time.Second))
		require.NoError(t, err)
	}
	producer := b.newQueue(t, Config{})
	require.NoError(t, producer.Cancel(b.ctx, "o", "cancelled"))
	require.NoError(t, producer.Reschedule(b.ctx, "o", "moved", time.Now().Add(time.Hour)))
	proxy.SetReplyDelay(2 * time.Second)
	time.Sleep(2 * time.Second) // all come due meanwhile
	proxy.SetReplyDelay(0)
	select {
	case <-log.ch:
	case <-time.After(wait):
		t.Fatal("the kept job never ran")
	}
	// Nothing left in the owner's memory or running, "moved" alone
	// pending: the owner is past the other two jobs' due time.
	quiesced(t, owner, 1)
	time.Sleep(500 * time.Millisecond) // a wrong run of one would come now
	runs := log.snapshot()
	require.Equal(t, map[string][]string{"kept": {"owner"}}, runs, "only the job neither cancelled nor moved ran, once")
}

// TestRedisDownLongerThanLease: Redis down longer
// than the lease while jobs come due. Every job that fired during the
// outage ran (from the cache) and then ran again: its ack was refused once
// the lease had lapsed. Now nothing starts during the outage, and each job
// runs once after it.
func TestRedisDownLongerThanLease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	srv.RequireReal(t)
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	q := b.newQueue(t, Config{WriteTimeout: 300 * time.Millisecond, LeaseTTL: 2 * time.Second})
	log := newRunLog()
	require.NoError(t, q.Handle("o", log.handler(t, "q")))
	require.NoError(t, q.Start(b.ctx))
	<-q.Ready()
	const n = 10
	for i := range n {
		_, err := q.Schedule(b.ctx, "o", []byte("x"), ID(fmt.Sprint(i)), After(500*time.Millisecond+time.Duration(i)*100*time.Millisecond))
		require.NoError(t, err)
	}
	srv.Kill()
	down := time.Now()
	// All come due and leave the wheel, and claims fail: the engine has
	// tried to run them while Redis is down.
	eventually(t, func() bool {
		st, _ := q.Stats(b.ctx) // the in-process figures, with an error
		return st.InMemory == 0 && st.RedisErrors > 0
	}, "the jobs fired and their claims failed")
	time.Sleep(time.Until(down.Add(3 * time.Second))) // an outage longer than the lease
	require.Empty(t, log.snapshot(), "nothing starts while Redis is down")
	require.NoError(t, srv.Restart())
	for range n {
		select {
		case <-log.ch:
		case <-time.After(wait):
			t.Fatalf("only %d ran", len(log.snapshot()))
		}
	}
	quiesced(t, q, 0)
	time.Sleep(time.Second) // a second run, after an ack refused, would come now
	for id, procs := range log.snapshot() {
		require.Len(t, procs, 1, "job %s ran %d times", id, len(procs))
	}
}

// pipelines counts the pipelines a client sends.
type pipelines struct{ n atomic.Int64 }

func (h *pipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestFailFastWhileRedisDown: with Redis down, every Schedule spent the
// client's whole dial-retry budget (about 0.8 s each with go-redis's
// defaults) before it failed. Once a call has found Redis unreachable,
// the next ones fail at once with ErrUnavailable, not sent (so not
// ErrOutcomeUnknown), while one call in a while goes through to see
// whether Redis is back. The first one's error wraps ErrUnavailable too
// when its dial was refused (a server's client got a bare dial error).
func TestFailFastWhileRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	b.q = b.newQueue(t, Config{})
	require.NoError(t, b.q.Start(b.ctx))
	sent := &pipelines{}
	b.rdb.AddHook(sent)
	srv.Kill()
	_, err := b.q.Schedule(b.ctx, "f", nil)
	require.Error(t, err, "Redis is down")
	// The first call too says which it was: not sent (a refused dial) or
	// sent and unanswered.
	require.True(t, errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOutcomeUnknown), "a sentinel: %v", err)
	before := sent.n.Load()
	fast := 0
	check := func(err error) {
		require.Error(t, err)
		if errors.Is(err, ErrUnavailable) {
			require.NotErrorIs(t, err, ErrOutcomeUnknown, "not sent: %v", err)
			fast++
		}
	}
	for range 20 {
		_, err := b.q.Schedule(b.ctx, "f", nil)
		check(err)
		check(b.q.Cancel(b.ctx, "f", "x"))
	}
	require.GreaterOrEqual(t, fast, 30, "most of 40 calls fail at once")
	require.Less(t, sent.n.Load()-before, int64(10), "and are not sent")
	require.NoError(t, srv.Restart())
	eventually(t, func() bool {
		_, err := b.q.Schedule(b.ctx, "f", nil)
		return err == nil
	}, "Schedule works again once Redis is back")
}

// TestPingReopensWrites: once a write found Redis unreachable, writes
// fail at once until one of them, let through every breaker.ProbeEvery,
// finds it back; a server's readiness check pinged Redis on its own and
// said ready while the writes sent to it were refused (seen under load:
// TestServerCutOffFromRedis's first schedule after /readyz said 200 got
// 503). The queue's Ping now reopens them at once. The clock stands still
// here, so no write is let through to probe.
func TestPingReopensWrites(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	clk := wheel.NewFakeClock(time.Now())
	q := b.newQueue(t, Config{Clock: clk})
	srv.Kill()
	_, err := q.Schedule(b.ctx, "f", nil)
	require.Error(t, err, "Redis is down")
	require.ErrorIs(t, q.Ping(b.ctx), ErrUnavailable)
	require.NoError(t, srv.Restart())
	_, err = q.Schedule(b.ctx, "f", nil)
	require.ErrorIs(t, err, ErrUnavailable, "no probe is due yet: the writes still fail at once")
	require.NoError(t, q.Ping(b.ctx))
	_, err = q.Schedule(b.ctx, "f", nil)
	require.NoError(t, err, "open again after the Ping")
}

// TestFailFastWhenRedisIsSilent: Redis cut off (bytes dropped, the
// connection left open), a write that got no answer within WriteTimeout
// failed with ErrOutcomeUnknown and said nothing to the breaker, so every
// next write waited its whole WriteTimeout too (seen in CI:
// TestServerCutOffFromRedis's second write through the cut-off server got
// 504 after 5 s instead of 503 at once). A write that Redis left
// unanswered for WriteTimeout now counts as Redis unreachable: the next
// writes fail at once with ErrUnavailable until a probe finds it back. A
// caller's own context ending still says nothing of Redis.
func TestFailFastWhenRedisIsSilent(t *testing.T) {
	t.Parallel()
	b, proxy := silenceable(t)
	q := b.newQueue(t, Config{WriteTimeout: 300 * time.Millisecond})
	_, err := q.Schedule(b.ctx, "f", nil)
	require.NoError(t, err)

	proxy.Blackhole(true)
	t.Cleanup(func() { proxy.Blackhole(false) }) // before the queue's Shutdown
	short, cancel := context.WithTimeout(b.ctx, 50*time.Millisecond)
	defer cancel()
	_, err = q.Schedule(short, "f", nil)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the caller gave up")
	start := time.Now()
	_, err = q.Schedule(b.ctx, "f", nil)
	require.ErrorIs(t, err, ErrOutcomeUnknown, "a caller giving up says nothing of Redis: this one is sent")
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	start = time.Now()
	_, err = q.Schedule(b.ctx, "f", nil)
	require.ErrorIs(t, err, ErrUnavailable, "Redis left the last write unanswered: this one fails at once")
	require.NotErrorIs(t, err, ErrOutcomeUnknown)
	require.Less(t, time.Since(start), 300*time.Millisecond)

	proxy.Blackhole(false)
	eventually(t, func() bool {
		_, err := q.Schedule(b.ctx, "f", nil)
		return err == nil
	}, "Schedule works again once Redis answers")
}

// TestFailFastWhenReadTimesOut: with a go-redis ReadTimeout shorter than
// WriteTimeout, a call to a silent Redis ends by the client's read
// deadline, and go-redis returned, on a fresh connection, a bare
// "i/o timeout" (os.ErrDeadlineExceeded, no *net.OpError around it) that
// the breaker did not count: with MaxRetries -1 a failed probe marked
// Redis reachable again, and with the default retries the breaker never
// opened (each write spent its whole time on a silent Redis).
func TestFailFastWhenReadTimesOut(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{-1, 0} {
		t.Run(fmt.Sprintf("MaxRetries=%d", retries), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, redistest.Options{})
			srv.RequireReal(t)
			proxy := faultproxy.Start(t, srv.Addr)
			cut := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: retries, ReadTimeout: 300 * time.Millisecond})
			t.Cleanup(func() { _ = cut.Close() })
			b := &bundle{srv: srv, rdb: cut, ctx: context.Background()}
			q := b.newQueue(t, Config{WriteTimeout: 3 * time.Second})
			_, err := q.Schedule(b.ctx, "f", nil)
			require.NoError(t, err)

			proxy.Blackhole(true)
			t.Cleanup(func() { proxy.Blackhole(false); proxy.CloseAll() }) // before the queue's Shutdown
			_, err = q.Schedule(b.ctx, "f", nil)
			require.Error(t, err)
			require.False(t, q.reach.b.Up(), "Redis left the write unanswered: taken unreachable (%v)", err)
			probes := 0
			for deadline := time.Now().Add(wait); probes < 3; {
				require.True(t, time.Now().Before(deadline), "no probes went through")
				time.Sleep(breaker.ProbeEvery)
				start := time.Now()
				_, err = q.Schedule(b.ctx, "f", nil)
				require.Error(t, err)
				require.False(t, q.reach.b.Up(), "a probe left unanswered marked Redis reachable (%v)", err)
				if time.Since(start) >= 200*time.Millisecond {
					probes++ // sent, not failed at once
				}
			}

			proxy.Blackhole(false)
			proxy.CloseAll()
			eventually(t, func() bool {
				_, err := q.Schedule(b.ctx, "f", nil)
				return err == nil
			}, "Schedule works again once Redis answers")
		})
	}
}

// TestOverdueIsVisible: jobs that should have run but sit
// in a partition no process runs were invisible (the worker's Stats showed
// nothing). Stats now reads, across partitions, how many pending jobs are
// past their due time and how old the oldest is.
func TestOverdueIsVisible(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.bundle(t)
		producer := b.newQueue(t, Config{}) // never started: nothing runs
		for i := range 3 {
			_, err := producer.Schedule(b.ctx, "late", nil, ID(fmt.Sprint(i)), At(time.Now().Add(-time.Duration(i+1)*time.Minute)))
			require.NoError(t, err)
		}
		_, err := producer.Schedule(b.ctx, "late", nil, ID("future"), After(time.Hour))
		require.NoError(t, err)
		st, err := producer.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(4), st.Pending)
		require.Equal(t, int64(3), st.Overdue)
		require.GreaterOrEqual(t, st.OldestOverdue, 3*time.Minute)
		require.Less(t, st.OldestOverdue, 4*time.Minute)
	})
}

// TestRepairPass: the owner's sweep repairs what no path of
// wheelq writes but a foreign tool or a write cut short may leave, and
// counts it: a pending entry without a record (re-armed by every sweep
// before, never run), a record in neither set (never run, never listed),
// a claim mark of a gone owner.
func TestRepairPass(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.bundle(t)
		clk := wheel.NewFakeClock(time.Now().Truncate(time.Millisecond))
		b.q = b.newQueue(t, Config{Clock: clk, Partitions: 1})
		require.NoError(t, b.q.Start(b.ctx))
		<-b.q.Ready()
		k := b.q.store.Keys(0)
		require.NoError(t, b.rdb.ZAdd(b.ctx, k.Pending, redis.Z{Score: float64(clk.Now().Add(-time.Minute).UnixMicro()), Member: "r/ghost"}).Err())
		rec := persist.Record{Rev: 1, MaxAttempts: 3, Created: clk.Now(), Payload: []byte("lost")}
		require.NoError(t, b.rdb.HSet(b.ctx, k.Jobs, "r/orphan", rec.Encode()).Err())
		require.NoError(t, b.rdb.HSet(b.ctx, k.Running, "r/gone", "an-old-owner").Err())
		clk.BlockUntilSleeping()
		clk.Advance(10 * time.Second) // SweepInterval
		eventually(t, func() bool {
			st, err := b.q.Stats(b.ctx)
			return err == nil && st.Repaired == 3
		}, "three inconsistencies repaired")
		info, err := b.q.Lookup(b.ctx, "r", "orphan")
		require.NoError(t, err)
		require.Equal(t, StateDead, info.State, "the orphan record is dead-lettered, not dropped")
		n, err := b.rdb.ZCard(b.ctx, k.Pending).Result()
		require.NoError(t, err)
		require.Zero(t, n)
		require.Zero(t, b.rdb.HLen(b.ctx, k.Running).Val())
	})
}

// isRetryOps reports whether a settle.lua argument is a partition's op
// bytes (packed: one of "a", "r", "d", "u" per outcome) with a retry among
// them.
func isRetryOps(v any) bool {
	m, ok := v.(encoding.BinaryMarshaler)
	if !ok {
		return false
	}
	b, err := m.MarshalBinary()
	if err != nil || len(b) == 0 || strings.Trim(string(b), "ardu") != "" {
		return false
	}
	return strings.Contains(string(b), "r")
}

// silenceable starts a Redis behind a fault proxy, and a bundle whose
// client reaches it through the proxy with contexts' deadlines honoured
// and a read timeout past any WriteTimeout: a call Redis leaves
// unanswered ends by its context's deadline (as a server's did when
// go-redis's retries ran into WriteTimeout), not the client's own.
func silenceable(t *testing.T) (*bundle, *faultproxy.Proxy) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	proxy := faultproxy.Start(t, srv.Addr)
	cut := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: time.Minute, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cut.Close() })
	return &bundle{srv: srv, rdb: cut, ctx: context.Background()}, proxy
}
