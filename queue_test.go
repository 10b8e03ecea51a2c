package wheelq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/leakcheck"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/wheel"
)

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the outage tests cause many.
	redis.SetLogger(discardLogger{})
	code := m.Run()
	closeShared()
	if code == 0 {
		if err := leakcheck.Check("github.com/wheelq/wheelq"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// wait bounds how long a test waits for something asynchronous. It is a
// safety net against hangs, not a timing assertion.
const wait = 20 * time.Second

type bundle struct {
	srv *redistest.Server // nil on a shared deployment (eachDeployment)
	rdb redis.UniversalClient
	q   *Queue
	ctx context.Context
	ns  string // the namespace of queues whose Config names none ("": the default)
	// acks is the ReplicaAcks of queues whose Config sets none.
	acks int
}

// setup starts a redis-server and a started queue on it. cfg's zero fields
// get test-friendly values (short backoff).
func setup(t *testing.T, cfg Config) *bundle {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	b.q = b.newQueue(t, cfg)
	require.NoError(t, b.q.Start(b.ctx))
	<-b.q.Ready()
	return b
}

func (b *bundle) newQueue(t *testing.T, cfg Config) *Queue {
	t.Helper()
	if cfg.Backoff == nil {
		cfg.Backoff = func(int, error) time.Duration { return 5 * time.Millisecond }
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 4
	}
	if cfg.Namespace == "" {
		cfg.Namespace = b.ns
	}
	if cfg.ReplicaAcks == 0 {
		cfg.ReplicaAcks = b.acks
	}
	q, err := New(b.rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = q.Shutdown(ctx)
	})
	return q
}

// runs records handler calls.
type runs struct {
	mu   sync.Mutex
	jobs []Job
	at   []time.Time
	ch   chan Job
}

func newRuns() *runs { return &runs{ch: make(chan Job, 1<<16)} }

func (r *runs) add(j *Job) {
	r.mu.Lock()
	r.jobs = append(r.jobs, *j)
	r.at = append(r.at, time.Now())
	r.mu.Unlock()
	r.ch <- *j
}

func (r *runs) next(t *testing.T) Job {
	t.Helper()
	select {
	case j := <-r.ch:
		return j
	case <-time.After(wait):
		t.Fatal("no job ran")
		return Job{}
	}
}

func (r *runs) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case j := <-r.ch:
		t.Fatalf("unexpected run of %s/%s", j.Topic, j.ID)
	case <-time.After(d):
	}
}

func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, wait, 5*time.Millisecond, msg)
}

// quiesced waits until q has dealt with every job due so far: nothing armed
// or held in its memory, no handler running, no outcome waiting for Redis,
// and pending jobs left in Redis (the namespace's, every process's). A
// negative check that follows ("nothing else ran") then looks at an engine
// that has processed the jobs it is about, so it cannot pass merely
// because the machine was too slow to get to them within its window.
func quiesced(t *testing.T, q *Queue, pending int64) {
	t.Helper()
	var st Stats
	var err error
	if !assert.Eventually(t, func() bool {
		st, err = q.Stats(context.Background())
		return err == nil && st.InMemory == 0 && st.Running == 0 && st.UnstoredOutcomes == 0 && st.Pending == pending
	}, wait, 5*time.Millisecond) {
		t.Fatalf("not quiesced at %d pending: %+v %v", pending, st, err)
	}
}

// wqKeys returns the Redis keys the queue left, but for the namespace's
// meta key and roster, the partitions' leases and loaded markers, and the
// tombstones of recent cancels (which expire two minutes after the last
// cancel), the run history (bounded by Config.History), and the topics'
// modes (pull.go).
func wqKeys(t *testing.T, b *bundle) []string {
	keys := b.keys(t, "")
	var out []string
	for _, k := range keys {
		if !strings.HasSuffix(k, ":meta") && !strings.HasSuffix(k, ":lease") && !strings.HasSuffix(k, ":loaded") && !strings.Contains(k, ":cancelled") &&
			!strings.HasSuffix(k, ":members") && !strings.HasSuffix(k, ":members-version") && !strings.Contains(k, ":history") &&
			!strings.HasSuffix(k, ":topics") && !strings.HasSuffix(k, ":figures") {
			out = append(out, k)
		}
	}
	return out
}

// keys returns the keys of b's namespace (every namespace's on a
// standalone server with the default one) that end with suffix, read from
// every primary on a cluster.
func (b *bundle) keys(t *testing.T, suffix string) []string {
	t.Helper()
	pattern := "wq:*" + suffix
	if b.ns != "" {
		pattern = "wq:{" + b.ns + ":*" + suffix
	}
	cc, ok := b.rdb.(*redis.ClusterClient)
	if !ok {
		keys, err := b.rdb.Keys(b.ctx, pattern).Result()
		require.NoError(t, err)
		return keys
	}
	var mu sync.Mutex
	var keys []string
	require.NoError(t, cc.ForEachMaster(b.ctx, func(ctx context.Context, c *redis.Client) error {
		ks, err := c.Keys(ctx, pattern).Result()
		mu.Lock()
		keys = append(keys, ks...)
		mu.Unlock()
		return err
	}))
	return keys
}

func TestScheduleFireAckRemovesEverything(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		r := newRuns()
		require.NoError(t, b.q.Handle("mail", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
		start := time.Now()
		var ids []string
		for i := range 20 {
			id, err := b.q.Schedule(b.ctx, "mail", []byte(fmt.Sprint(i)), After(time.Duration(i)*5*time.Millisecond))
			require.NoError(t, err)
			require.Regexp(t, `^[A-Za-z0-9_-]{12}$`, id, "a random id: 72 bits, URL-safe")
			ids = append(ids, id)
		}
		seen := map[string]bool{}
		for range 20 {
			j := r.next(t)
			require.Equal(t, 1, j.Attempt)
			require.False(t, seen[j.ID], "ran twice")
			require.Contains(t, ids, j.ID, "the handler sees the id Schedule returned")
			seen[j.ID] = true
		}
		r.mu.Lock()
		for i, j := range r.jobs {
			require.False(t, r.at[i].Before(j.Due), "ran before due")
			require.False(t, j.Due.Before(start))
		}
		r.mu.Unlock()
		eventually(t, func() bool { return len(wqKeys(t, b)) == 0 }, "acks remove every job key")
		st, err := b.q.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(20), st.Succeeded)
		require.Equal(t, uint64(20), st.Fired)
		require.Zero(t, st.Pending)
		require.Equal(t, 4, st.OwnedPartitions)
		require.Equal(t, uint64(20), st.Lateness.Count)
		require.Len(t, ids, 20)
	})
}

// TestBacklogRunsEachJobOnce: more jobs due at once than workers (some
// due in the past, claimed after their time, which start without the
// wheel; some at one instant, which queue for the workers) all run once,
// none early, and leave nothing behind.
func TestBacklogRunsEachJobOnce(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{Concurrency: 2})
		r := newRuns()
		require.NoError(t, b.q.Handle("b", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
		const n = 300
		at := time.Now().Add(300 * time.Millisecond)
		for i := range 2 * n {
			opt := At(at)
			if i%2 == 0 {
				opt = At(time.Now().Add(-time.Second))
			}
			_, err := b.q.Schedule(b.ctx, "b", nil, opt, ID(fmt.Sprint(i)))
			require.NoError(t, err)
		}
		seen := map[string]bool{}
		for range 2 * n {
			j := r.next(t)
			require.False(t, seen[j.ID], "job %s ran twice", j.ID)
			seen[j.ID] = true
		}
		r.mu.Lock()
		for i, j := range r.jobs {
			require.False(t, r.at[i].Before(j.Due), "job %s ran before due", j.ID)
		}
		r.mu.Unlock()
		var left []string
		if !assert.Eventually(t, func() bool { left = wqKeys(t, b); return len(left) == 0 }, wait, 10*time.Millisecond) {
			for _, k := range left {
				typ, _ := b.rdb.Type(b.ctx, k).Result()
				t.Logf("left: %s (%s)", k, typ)
			}
			st, _ := b.q.Stats(b.ctx)
			t.Fatalf("acks did not remove every job key; stats %+v", st)
		}
		st, err := b.q.Stats(b.ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(2*n), st.Succeeded)
	})
}

func TestRetryDeadLetterRequeue(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		var mu sync.Mutex
		fail := true
		r := newRuns()
		require.NoError(t, b.q.Handle("flaky", HandlerFunc(func(_ context.Context, j *Job) error {
			r.add(j)
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return fmt.Errorf("downstream said no to %s", j.ID)
			}
			return nil
		})))
		_, err := b.q.Schedule(b.ctx, "flaky", []byte("x"), ID("j1"), MaxAttempts(3))
		require.NoError(t, err)
		for want := 1; want <= 3; want++ {
			j := r.next(t)
			require.Equal(t, want, j.Attempt)
			if want > 1 {
				require.Equal(t, "downstream said no to j1", j.LastError)
			}
		}
		quiesced(t, b.q, 0) // dead-lettered: nothing armed, running or pending
		r.none(t, 100*time.Millisecond)
		var dead []JobInfo
		eventually(t, func() bool {
			dead, err = b.q.DeadJobs(b.ctx, 10)
			require.NoError(t, err)
			return len(dead) == 1
		}, "dead-lettered after the last attempt")
		require.Equal(t, "j1", dead[0].ID)
		require.Equal(t, 3, dead[0].Attempts)
		require.Contains(t, dead[0].LastError, "downstream said no")
		info, err := b.q.Lookup(b.ctx, "flaky", "j1")
		require.NoError(t, err)
		require.Equal(t, StateDead, info.State)

		mu.Lock()
		fail = false
		mu.Unlock()
		require.NoError(t, b.q.Requeue(b.ctx, "flaky", "j1", time.Now()))
		j := r.next(t)
		require.Equal(t, 1, j.Attempt, "requeue resets the attempts")
		eventually(t, func() bool { return len(wqKeys(t, b)) == 0 }, "gone after success")
		require.ErrorIs(t, b.q.Requeue(b.ctx, "flaky", "j1", time.Now()), ErrNotFound)
	})
}

func TestHandlerChoosesRetryAndGiveUp(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{Backoff: func(int, error) time.Duration { return time.Hour }})
		r := newRuns()
		require.NoError(t, b.q.Handle("choose", HandlerFunc(func(_ context.Context, j *Job) error {
			r.add(j)
			switch {
			case j.ID == "perm":
				return Permanent(errors.New("bad input"))
			case j.Attempt == 1:
				return RetryAfter(20*time.Millisecond, errors.New("later"))
			}
			return nil
		})))
		_, err := b.q.Schedule(b.ctx, "choose", nil, ID("perm"))
		require.NoError(t, err)
		_, err = b.q.Schedule(b.ctx, "choose", nil, ID("soon"))
		require.NoError(t, err)
		got := map[string][]int{}
		for range 3 {
			j := r.next(t)
			got[j.ID] = append(got[j.ID], j.Attempt)
		}
		require.Equal(t, []int{1}, got["perm"], "permanent: no retry")
		require.Equal(t, []int{1, 2}, got["soon"], "RetryAfter overrides the hour of backoff")
		eventually(t, func() bool {
			info, err := b.q.Lookup(b.ctx, "choose", "perm")
			return err == nil && info.State == StateDead && strings.Contains(info.LastError, "bad input")
		}, "permanent failure is dead-lettered")
	})
}

func TestHandlerPanicIsRetried(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		r := newRuns()
		require.NoError(t, b.q.Handle("boom", HandlerFunc(func(_ context.Context, j *Job) error {
			r.add(j)
			if j.Attempt == 1 {
				panic("kaboom")
			}
			return nil
		})))
		_, err := b.q.Schedule(b.ctx, "boom", nil)
		require.NoError(t, err)
		require.Equal(t, 1, r.next(t).Attempt)
		j := r.next(t)
		require.Equal(t, 2, j.Attempt)
		require.Contains(t, j.LastError, "kaboom")
	})
}

func TestNoHandlerIsRetriedNotDropped(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		_, err := b.q.Schedule(b.ctx, "later", nil, ID("x"), MaxAttempts(2))
		require.NoError(t, err)
		eventually(t, func() bool {
			info, err := b.q.Lookup(b.ctx, "later", "x")
			return err == nil && info.State == StateDead && strings.Contains(info.LastError, ErrNoHandler.Error())
		}, "a topic without handler fails the run and is dead-lettered with the reason")
	})
}

func TestDuplicateBothWays(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		r := newRuns()
		require.NoError(t, b.q.Handle("dup", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
		_, err := b.q.Schedule(b.ctx, "dup", []byte("first"), ID("a"), After(time.Hour))
		require.NoError(t, err)
		_, err = b.q.Schedule(b.ctx, "dup", []byte("second"), ID("a"), After(time.Hour))
		require.ErrorIs(t, err, ErrDuplicate)
		info, err := b.q.Lookup(b.ctx, "dup", "a")
		require.NoError(t, err)
		require.Equal(t, "first", string(info.Payload))

		_, err = b.q.Schedule(b.ctx, "dup", []byte("third"), ID("a"), OnDuplicate(Replace))
		require.NoError(t, err)
		j := r.next(t)
		require.Equal(t, "third", string(j.Payload), "replace moved it to now with the new payload")
		quiesced(t, b.q, 0)
		r.none(t, 100*time.Millisecond)
	})
}

func TestCancelAndReschedule(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		r := newRuns()
		require.NoError(t, b.q.Handle("c", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
		for _, id := range []string{"keep", "drop", "far", "near"} {
			_, err := b.q.Schedule(b.ctx, "c", nil, ID(id), After(300*time.Millisecond))
			require.NoError(t, err)
		}
		require.NoError(t, b.q.Cancel(b.ctx, "c", "drop"))
		require.ErrorIs(t, b.q.Cancel(b.ctx, "c", "drop"), ErrNotFound)
		require.NoError(t, b.q.Reschedule(b.ctx, "c", "far", time.Now().Add(2*time.Hour)))
		require.NoError(t, b.q.Reschedule(b.ctx, "c", "near", time.Now()))
		require.ErrorIs(t, b.q.Reschedule(b.ctx, "c", "nope", time.Now()), ErrNotFound)
		require.Equal(t, "near", r.next(t).ID)
		require.Equal(t, "keep", r.next(t).ID)
		quiesced(t, b.q, 1) // "drop" came due and was passed over; "far" alone pending
		r.none(t, 200*time.Millisecond)
		info, err := b.q.Lookup(b.ctx, "c", "far")
		require.NoError(t, err)
		require.Equal(t, StatePending, info.State)
		require.WithinDuration(t, time.Now().Add(2*time.Hour), info.Due, time.Minute)
		info, err = b.q.Lookup(b.ctx, "c", "drop")
		require.NoError(t, err)
		require.Equal(t, StateCancelled, info.State)
	})
}

// scriptTrips counts the round trips that carry a script call while on.
type scriptTrips struct {
	on    atomic.Bool
	trips atomic.Int64
}

func (h *scriptTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (h *scriptTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds)
		return next(ctx, cmds)
	}
}
func (h *scriptTrips) count(cmds []redis.Cmder) {
	if !h.on.Load() {
		return
	}
	for _, c := range cmds {
		if name := c.Name(); name == "evalsha" || name == "eval" {
			h.trips.Add(1)
			return
		}
	}
}

// setupCounted is setup with a client that counts script round trips.
func setupCounted(t *testing.T) (*bundle, *scriptTrips) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	hook := &scriptTrips{}
	rdb := srv.Client(t)
	rdb.AddHook(hook) // before any use of the client
	b := &bundle{srv: srv, rdb: rdb, ctx: context.Background()}
	b.q = b.newQueue(t, Config{})
	require.NoError(t, b.q.Start(b.ctx))
	<-b.q.Ready()
	return b, hook
}

// changeConcurrently schedules concurrentJobs jobs of topic, due after
// after, then changes them (and one missing job per caller) from 50
// goroutines at once with change, counting the script round trips: every
// change of a job succeeds, every one of a missing job is ErrNotFound, and
// the changes share round trips (fewer than a quarter of them).
func changeConcurrently(t *testing.T, b *bundle, hook *scriptTrips, topic string, after time.Duration, change func(id string) error) {
	t.Helper()
	const n, callers = concurrentJobs, 50
	for i := range n {
		_, err := b.q.Schedule(b.ctx, topic, nil, ID(fmt.Sprint(i)), After(after))
		require.NoError(t, err)
	}
	hook.on.Store(true)
	var wg sync.WaitGroup
	errs := make([]error, n+callers)
	for g := range callers {
		wg.Go(func() {
			for i := g; i < n; i += callers {
				errs[i] = change(fmt.Sprint(i))
			}
			errs[n+g] = change(fmt.Sprint("missing-", g))
		})
	}
	wg.Wait()
	hook.on.Store(false)
	for i, err := range errs {
		if i < n {
			require.NoError(t, err, "change %d", i)
		} else {
			require.ErrorIs(t, err, ErrNotFound, "change of a missing job")
		}
	}
	trips := hook.trips.Load()
	t.Logf("%d changes in %d script round trips", n+callers, trips)
	require.Less(t, trips, int64((n+callers)/4), "changes share round trips")
}

const concurrentJobs = 400

// TestConcurrentReschedulesShareRoundTrips: reschedules from many
// goroutines at once share round trips; every moved job runs once, at
// its new time, none early.
func TestConcurrentReschedulesShareRoundTrips(t *testing.T) {
	t.Parallel()
	b, hook := setupCounted(t)
	r := newRuns()
	require.NoError(t, b.q.Handle("m", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
	due := time.Now().Add(time.Second)
	changeConcurrently(t, b, hook, "m", time.Hour, func(id string) error {
		return b.q.Reschedule(b.ctx, "m", id, due)
	})
	ran := map[string]bool{}
	for range concurrentJobs {
		j := r.next(t)
		require.False(t, ran[j.ID], "job %s ran twice", j.ID)
		ran[j.ID] = true
	}
	quiesced(t, b.q, 0)
	r.none(t, 200*time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, at := range r.at {
		require.False(t, at.Before(due), "job %s ran %v early", r.jobs[i].ID, due.Sub(at))
	}
}

// TestConcurrentCancelsShareRoundTrips: cancels from many goroutines at
// once are group-committed like Schedule calls, and each caller gets its
// own result; no cancelled job runs.
func TestConcurrentCancelsShareRoundTrips(t *testing.T) {
	t.Parallel()
	b, hook := setupCounted(t)
	r := newRuns()
	require.NoError(t, b.q.Handle("c", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
	changeConcurrently(t, b, hook, "c", time.Second, func(id string) error {
		return b.q.Cancel(b.ctx, "c", id)
	})
	st, err := b.q.Stats(b.ctx)
	require.NoError(t, err)
	require.Zero(t, st.Pending)
	quiesced(t, b.q, 0)              // the engine is past their due time
	r.none(t, 1500*time.Millisecond) // past their due time: none runs
}

func TestCancelWhileRunning(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		started, release := make(chan struct{}), make(chan struct{})
		r := newRuns()
		require.NoError(t, b.q.Handle("slow", HandlerFunc(func(_ context.Context, j *Job) error {
			r.add(j)
			close(started)
			<-release
			return errors.New("fails, but was cancelled: no retry")
		})))
		_, err := b.q.Schedule(b.ctx, "slow", nil, ID("s"))
		require.NoError(t, err)
		<-started
		require.ErrorIs(t, b.q.Cancel(b.ctx, "slow", "s"), ErrRunning)
		close(release)
		r.next(t)
		quiesced(t, b.q, 0)
		r.none(t, 200*time.Millisecond)
		eventually(t, func() bool { return len(wqKeys(t, b)) == 0 }, "nothing left, not even the claim mark")
	})
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{MaxPayload: 10, MaxDelay: time.Hour})
		_, err := b.q.Schedule(b.ctx, "", nil)
		require.ErrorIs(t, err, ErrInvalidTopic)
		_, err = b.q.Schedule(b.ctx, "a/b", nil)
		require.ErrorIs(t, err, ErrInvalidTopic)
		_, err = b.q.Schedule(b.ctx, "t", make([]byte, 11))
		require.ErrorIs(t, err, ErrPayloadTooLarge)
		_, err = b.q.Schedule(b.ctx, "t", nil, After(2*time.Hour))
		require.ErrorIs(t, err, ErrTooFar)
		_, err = b.q.Schedule(b.ctx, "t", nil, ID(strings.Repeat("x", 513)))
		require.ErrorIs(t, err, ErrInvalidID)
		require.Error(t, b.q.Handle("t", nil))
		_, err = New(b.rdb, Config{Concurrency: -1})
		require.Error(t, err)
		_, err = New(b.rdb, Config{Horizon: time.Second, PollInterval: time.Second})
		require.Error(t, err)
		_, err = New(nil, Config{})
		require.Error(t, err)
	})
}

func TestCorruptRecordIsDeadLettered(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		r := newRuns()
		require.NoError(t, b.q.Handle("c", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
		_, err := b.q.Schedule(b.ctx, "c", []byte("ok"), ID("x"), After(200*time.Millisecond))
		require.NoError(t, err)
		// Corrupt the stored record behind the queue's back (keeping the
		// revision bytes), and drop the cached copy so the claim reads it.
		key := "c/x"
		k := b.q.store.Keys(b.q.store.PartitionOf(key))
		raw, err := b.rdb.HGet(b.ctx, k.Jobs, key).Bytes()
		require.NoError(t, err)
		raw[0] = 0x7f
		require.NoError(t, b.rdb.HSet(b.ctx, k.Jobs, key, raw).Err())
		b.q.cache.Remove(key)
		eventually(t, func() bool {
			dead, err := b.q.DeadJobs(b.ctx, 10)
			require.NoError(t, err)
			return len(dead) == 1 && strings.Contains(dead[0].LastError, "corrupt")
		}, "corrupt record dead-lettered with the reason")
		quiesced(t, b.q, 0)
		r.none(t, 50*time.Millisecond)
	})
}

func TestShutdownWaitsForRunningHandlers(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		started := make(chan struct{}, 1)
		var finished sync.WaitGroup
		finished.Add(1)
		require.NoError(t, b.q.Handle("s", HandlerFunc(func(ctx context.Context, j *Job) error {
			started <- struct{}{}
			time.Sleep(100 * time.Millisecond) // a handler at work
			finished.Done()
			return nil
		})))
		_, err := b.q.Schedule(b.ctx, "s", nil, ID("run"))
		require.NoError(t, err)
		_, err = b.q.Schedule(b.ctx, "s", nil, ID("later"), After(time.Hour))
		require.NoError(t, err)
		<-started
		require.NoError(t, b.q.Shutdown(b.ctx))
		finished.Wait()
		_, err = b.q.Schedule(b.ctx, "s", nil)
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorIs(t, b.q.Start(b.ctx), ErrClosed)
		require.NoError(t, b.q.Shutdown(b.ctx), "idempotent")
		// The finished run was acked during shutdown; the later job waits.
		_, err = b.q.Lookup(b.ctx, "s", "run")
		require.ErrorIs(t, err, ErrClosed)
		other := b.newQueue(t, Config{}) // looks, never started
		info, err := other.Lookup(b.ctx, "s", "run")
		require.NoError(t, err)
		require.Equal(t, StateDone, info.State)
		info, err = other.Lookup(b.ctx, "s", "later")
		require.NoError(t, err)
		require.Equal(t, StatePending, info.State)
		leases := b.keys(t, ":lease")
		require.Empty(t, leases, "leases are released for a successor")
	})
}

func TestShutdownDeadlineCancelsHandlers(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		started := make(chan struct{})
		require.NoError(t, b.q.Handle("stuck", HandlerFunc(func(ctx context.Context, j *Job) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})))
		_, err := b.q.Schedule(b.ctx, "stuck", nil, ID("x"))
		require.NoError(t, err)
		<-started
		ctx, cancel := context.WithTimeout(b.ctx, 50*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, b.q.Shutdown(ctx), context.DeadlineExceeded)
		info, err := b.newQueue(t, Config{}).Lookup(b.ctx, "stuck", "x")
		require.NoError(t, err, "an interrupted job stays in Redis")
		// Its handler, which ignores its context, still runs in the
		// stopped process: its claim mark stays until a take-over.
		require.Contains(t, []JobState{StatePending, StateRunning}, info.State)
	})
}

// TestRedisDownAndBack: with Redis stopped, Schedule fails fast with the
// cause, loaded jobs still fire, and their acks reach Redis once it is back.
func TestRedisDownAndBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	srv.RequireReal(t)
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	// The availability mode: jobs this process holds in memory run while
	// Redis is down (off by default; see RunWhileRedisDown).
	b.q = b.newQueue(t, Config{WriteTimeout: 300 * time.Millisecond, LeaseTTL: time.Minute, RunWhileRedisDown: true})
	require.NoError(t, b.q.Start(b.ctx))
	<-b.q.Ready() // the window is announced: Schedule arms what it writes
	r := newRuns()
	require.NoError(t, b.q.Handle("d", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
	for i := range 5 {
		_, err := b.q.Schedule(b.ctx, "d", nil, ID(fmt.Sprint(i)), After(300*time.Millisecond))
		require.NoError(t, err)
	}
	srv.Kill()
	_, err := b.q.Schedule(b.ctx, "d", nil)
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrDuplicate)
	for range 5 {
		r.next(t) // fired from memory while Redis is down
	}
	eventually(t, func() bool {
		st, _ := b.q.Stats(b.ctx)
		return st.UnstoredOutcomes == 5 // the handler signals before it returns
	}, "acks wait for Redis")
	require.NoError(t, srv.Restart())
	eventually(t, func() bool {
		st, err := b.q.Stats(b.ctx)
		return err == nil && st.UnstoredOutcomes == 0 && st.Pending == 0
	}, "acks stored once Redis is back")
	_, err = b.q.Schedule(b.ctx, "d", nil)
	require.NoError(t, err, "Schedule works again")
	r.next(t)
}

// failingOnceOnFakeClock starts b's queue on a fake clock (horizon an
// hour, every retry backoff later) with a handler of topic that fails a
// job's first run and records every run.
func failingOnceOnFakeClock(t *testing.T, b *bundle, topic string, backoff time.Duration) (*wheel.FakeClock, *runs) {
	t.Helper()
	clk := wheel.NewFakeClock(time.Now().Truncate(time.Millisecond)) // due times are stored in whole µs
	b.q = b.newQueue(t, Config{Clock: clk, Horizon: time.Hour, Backoff: func(int, error) time.Duration { return backoff }})
	require.NoError(t, b.q.Start(b.ctx))
	<-b.q.Ready()
	r := newRuns()
	require.NoError(t, b.q.Handle(topic, HandlerFunc(func(_ context.Context, j *Job) error {
		r.add(j)
		if j.Attempt == 1 {
			return errors.New("not yet")
		}
		return nil
	})))
	return clk, r
}

// awaitRetryArmed waits until job (topic, id) of b's queue is stored
// after its first failed run and is the one job armed in the wheel.
func awaitRetryArmed(t *testing.T, b *bundle, topic, id string) {
	t.Helper()
	var last string
	if !assert.Eventually(t, func() bool {
		info, err := b.q.Lookup(b.ctx, topic, id)
		last = fmt.Sprintf("lookup %+v err %v, %d armed", info, err, b.q.sched.Len())
		return err == nil && info.Attempts == 1 && b.q.sched.Len() == 1
	}, wait, 5*time.Millisecond, "retry stored and armed") {
		t.Fatal(last)
	}
}

// TestFakeClockLongDelays runs the queue on a fake clock against real
// Redis: a 30-minute job and its retry an hour later, with no real wait.
func TestFakeClockLongDelays(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.bundle(t)
		clk, r := failingOnceOnFakeClock(t, b, "order", 50*time.Minute)
		t0 := clk.Now()
		_, err := b.q.Schedule(b.ctx, "order", []byte("o-1"), ID("o-1"), After(30*time.Minute))
		require.NoError(t, err)
		_, err = b.q.Schedule(b.ctx, "order", []byte("o-2"), ID("o-2"), After(30*time.Minute))
		require.NoError(t, err)
		require.NoError(t, b.q.Cancel(b.ctx, "order", "o-2")) // paid

		// Advance only once the poller sleeps: a pass still running would read
		// the old time, and the next would wait for the clock to move again.
		clk.BlockUntilSleeping()
		clk.Advance(30*time.Minute - time.Millisecond)
		eventually(t, func() bool { return b.q.sched.Len() == 0 && b.q.gate.len() == 1 }, "claimed ahead and held for its time")
		r.none(t, 50*time.Millisecond)
		clk.Advance(time.Millisecond)
		j := r.next(t)
		require.Equal(t, "o-1", j.ID)
		require.Equal(t, t0.Add(30*time.Minute).UnixMicro(), j.Due.UnixMicro())
		// The retry is stored 50 (fake) minutes later, and armed once stored.
		awaitRetryArmed(t, b, "order", "o-1")
		clk.BlockUntilSleeping()
		clk.Advance(50*time.Minute - time.Millisecond)
		eventually(t, func() bool { return b.q.sched.Len() == 0 && b.q.gate.len() == 1 }, "claimed ahead and held for its time")
		r.none(t, 50*time.Millisecond)
		clk.Advance(time.Millisecond)
		j = r.next(t)
		require.Equal(t, 2, j.Attempt)
		quiesced(t, b.q, 0)
		r.none(t, 50*time.Millisecond)
	})
}

// TestSecondProcessTakesOver: two queues on one namespace share the
// partitions and never own the same one; when the first shuts down the
// second takes over and runs what the first left.
func TestSecondProcessTakesOver(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		r := newRuns()
		h := HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })
		require.NoError(t, b.q.Handle("t", h))
		second := b.newQueue(t, Config{})
		require.NoError(t, second.Handle("t", h))
		require.NoError(t, second.Start(b.ctx))
		eventually(t, func() bool { return len(b.q.Owned()) == 2 && len(second.Owned()) == 2 }, "the two share the partitions")
		for _, p := range second.Owned() {
			require.NotContains(t, b.q.Owned(), p, "partition %d owned twice", p)
		}

		// Scheduled through the second: each runs where its partition is.
		for i := range 10 {
			_, err := second.Schedule(b.ctx, "t", nil, ID(fmt.Sprint(i)))
			require.NoError(t, err)
		}
		for range 10 {
			r.next(t)
		}
		for i := range 5 {
			_, err := second.Schedule(b.ctx, "t", nil, ID(fmt.Sprint("late-", i)), After(time.Hour))
			require.NoError(t, err)
		}
		require.NoError(t, b.q.Shutdown(b.ctx))
		eventually(t, func() bool {
			st, err := second.Stats(b.ctx)
			return err == nil && st.OwnedPartitions == 4
		}, "the second takes the released partitions")
		for i := range 5 {
			require.NoError(t, second.Reschedule(b.ctx, "t", fmt.Sprint("late-", i), time.Now()))
		}
		for range 5 {
			require.True(t, strings.HasPrefix(r.next(t).ID, "late-"))
		}
		quiesced(t, second, 0)
		r.none(t, 100*time.Millisecond)
	})
}

// TestRandomIDsRunByPartition: consecutive random ids share a partition in
// runs (so that a batch of them writes few partitions), and over many the
// partitions get equal shares.
func TestRandomIDsRunByPartition(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{Partitions: 16})
		const n = 16 * idRunLength * 2
		counts := make([]int, 16)
		changes, last := 0, -1
		for range n {
			id, err := b.q.Schedule(b.ctx, "r", nil, After(time.Hour))
			require.NoError(t, err)
			p := b.q.store.PartitionOf(persist.JobKey("r", id))
			counts[p]++
			if p != last {
				changes++
				last = p
			}
		}
		require.LessOrEqual(t, changes, n/idRunLength+1, "ids come in runs of a partition")
		for p, c := range counts {
			require.Equal(t, n/16, c, "partition %d's share", p)
		}
	})
}

// TestKeptJobAndContextOutliveTheRun: a handler may keep its *Job and its
// context after it returns (the engine recycles what it does not hand
// out): every kept Job still says which job it was, and every kept
// context is done, with its own deadline, however many runs came after.
func TestKeptJobAndContextOutliveTheRun(t *testing.T) {
	t.Parallel()
	b := deployment{name: "standalone"}.setup(t, Config{Concurrency: 2})
	type kept struct {
		job      *Job
		ctx      context.Context
		deadline time.Time
	}
	var mu sync.Mutex
	var all []kept
	done := make(chan struct{}, 1000)
	require.NoError(t, b.q.Handle("k", HandlerFunc(func(ctx context.Context, j *Job) error {
		dl, _ := ctx.Deadline()
		mu.Lock()
		all = append(all, kept{j, ctx, dl})
		mu.Unlock()
		done <- struct{}{}
		return nil
	})))
	const n = 300
	at := time.Now().Add(200 * time.Millisecond)
	for i := range n {
		_, err := b.q.Schedule(b.ctx, "k", []byte(fmt.Sprint(i)), ID(fmt.Sprint(i)), At(at.Add(time.Duration(i%50)*time.Millisecond)))
		require.NoError(t, err)
	}
	for range n {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the jobs did not all run")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]bool{}
	for _, k := range all {
		require.Equal(t, "k", k.job.Topic)
		require.Equal(t, k.job.ID, string(k.job.Payload), "a kept Job was changed by a later run")
		require.False(t, seen[k.job.ID], "two kept Jobs say %s", k.job.ID)
		seen[k.job.ID] = true
		require.ErrorIs(t, k.ctx.Err(), context.Canceled, "a kept context ends with its run")
		dl, ok := k.ctx.Deadline()
		require.True(t, ok)
		require.Equal(t, k.deadline, dl, "a kept context's deadline moved")
	}
	require.Len(t, seen, n)
}
