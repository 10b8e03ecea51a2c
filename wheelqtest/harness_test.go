package wheelqtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/leakcheck"
	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/wheelqtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := leakcheck.Check("github.com/wheelq/wheelq"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// backends runs f on the embedded miniredis (the harness's default) and on
// a real redis-server (redistest; CI forbids its miniredis fallback).
func backends(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		f(t, nil)
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, redistest.Options{})
		f(t, srv.Client(t))
	})
}

// ledger counts what handlers did, by job id.
type ledger struct {
	mu   sync.Mutex
	done map[string]int
}

func (l *ledger) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done[id]
}

func (l *ledger) handler() wheelq.Handler {
	return wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		l.mu.Lock()
		l.done[j.ID]++
		l.mu.Unlock()
		return nil
	})
}

func newHarness(t *testing.T, rdb redis.UniversalClient) (*wheelqtest.Harness, *ledger) {
	h := wheelqtest.New(t, wheelqtest.Options{Redis: rdb, Config: wheelq.Config{Namespace: "t"}})
	l := &ledger{done: map[string]int{}}
	require.NoError(t, h.Handle("job", l.handler()))
	return h, l
}

// TestCrashPoints arms each crash point, for one job and for any job, on
// both backends: the queue stops there, Restart brings up the next one,
// every job runs, and the history check passes.
func TestCrashPoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		for _, p := range []wheelqtest.Point{wheelqtest.AfterWrite, wheelqtest.AfterClaim, wheelqtest.DuringRun, wheelqtest.AfterRun, wheelqtest.MidReload} {
			for _, forJob := range []bool{true, false} {
				name := p.String() + "/any"
				if forJob {
					name = p.String() + "/job"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					var h *wheelqtest.Harness
					var l *ledger
					if rdb == nil {
						h, l = newHarness(t, nil)
					} else {
						// One server, a namespace per case.
						h = wheelqtest.New(t, wheelqtest.Options{Redis: rdb, Config: wheelq.Config{Namespace: "t-" + strings.ReplaceAll(name, "/", "-")}})
						l = &ledger{done: map[string]int{}}
						require.NoError(t, h.Handle("job", l.handler()))
					}
					arm := func() {
						if forJob {
							require.NoError(t, h.CrashAtJob(p, "job", "b"))
						} else {
							require.NoError(t, h.CrashAt(p))
						}
					}
					schedule := func(id string) error {
						_, err := h.Queue().Schedule(ctx, "job", []byte(id), wheelq.ID(id), wheelq.After(time.Minute))
						return err
					}
					target := "b" // the job the crash hits
					switch p {
					case wheelqtest.AfterWrite:
						require.NoError(t, schedule("a"))
						arm()
						require.ErrorIs(t, schedule("b"), wheelqtest.ErrCrashed)
						require.True(t, h.Crashed())
						require.NoError(t, h.Restart())
						require.NoError(t, h.Advance(time.Minute))
					case wheelqtest.MidReload:
						require.NoError(t, schedule("a"))
						require.NoError(t, schedule("b"))
						arm()
						require.NoError(t, h.Restart()) // the reload meets the crash
						require.True(t, h.Crashed())
						require.NoError(t, h.Restart())
						require.NoError(t, h.Advance(time.Minute))
					default:
						require.NoError(t, schedule("a"))
						require.NoError(t, schedule("b"))
						arm()
						require.NoError(t, h.Advance(time.Minute))
						require.True(t, h.Crashed())
						if !forJob {
							target = h.Crashes()[0].ID
						}
						switch p {
						case wheelqtest.AfterClaim:
							require.Zero(t, l.count(target), "the handler is never called")
						case wheelqtest.DuringRun:
							require.Equal(t, 1, l.count(target))
							require.True(t, h.Runs("job", target)[0].Crashed)
						case wheelqtest.AfterRun:
							require.Equal(t, 1, l.count(target))
						}
						require.NoError(t, h.Restart())
					}
					require.False(t, h.Crashed())
					crashes := h.Crashes()
					require.Len(t, crashes, 1)
					require.Equal(t, p, crashes[0].Point)
					if forJob {
						require.Equal(t, "b", crashes[0].ID)
					}
					require.GreaterOrEqual(t, l.count("a"), 1)
					require.GreaterOrEqual(t, l.count("b"), 1)
					runs := h.Runs("job", target)
					switch p {
					case wheelqtest.DuringRun, wheelqtest.AfterRun:
						require.Len(t, runs, 2, "the run cut short runs again")
						require.Equal(t, runs[0].Attempt, runs[1].Attempt, "with the same Attempt")
						require.Equal(t, 2, runs[1].Incarnation)
					default:
						require.Len(t, runs, 1)
					}
					pending, err := h.Scheduled("")
					require.NoError(t, err)
					require.Empty(t, pending)
					require.NoError(t, h.Check())
				})
			}
		}
	})
}

// TestAdvanceSteps: Advance stops at each due time on the way, so a job
// that a handler schedules, and a retry, run within the same Advance, each
// at its own time and never early.
func TestAdvanceSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := wheelqtest.New(t, wheelqtest.Options{Config: wheelq.Config{
		Backoff: func(int, error) time.Duration { return 10 * time.Minute },
	}})
	var mu sync.Mutex
	var started []time.Time
	require.NoError(t, h.Handle("chain", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		mu.Lock()
		started = append(started, h.Now())
		mu.Unlock()
		if j.Attempt == 1 && string(j.Payload) == "fail-once" {
			return errors.New("flaky")
		}
		if string(j.Payload) == "next" {
			_, err := h.Queue().Schedule(ctx, "chain", []byte("last"), wheelq.ID("last"), wheelq.After(5*time.Minute))
			return err
		}
		return nil
	})))
	t0 := h.Now()
	_, err := h.Queue().Schedule(ctx, "chain", []byte("next"), wheelq.ID("first"), wheelq.After(time.Hour))
	require.NoError(t, err)
	_, err = h.Queue().Schedule(ctx, "chain", []byte("fail-once"), wheelq.ID("flaky"), wheelq.After(2*time.Hour))
	require.NoError(t, err)
	require.NoError(t, h.ExpectScheduled("chain", "first", t0.Add(time.Hour), time.Millisecond, []byte("next")))
	require.ErrorIs(t, h.ExpectScheduled("chain", "first", t0, time.Second, nil), wheelqtest.ErrNotScheduled)
	require.ErrorIs(t, h.ExpectScheduled("chain", "nope", t0, time.Second, nil), wheelqtest.ErrNotScheduled)

	require.NoError(t, h.Advance(3*time.Hour))
	mu.Lock()
	require.Equal(t, []time.Time{t0.Add(time.Hour), t0.Add(time.Hour + 5*time.Minute), t0.Add(2 * time.Hour), t0.Add(2*time.Hour + 10*time.Minute)}, started)
	mu.Unlock()
	require.Equal(t, t0.Add(3*time.Hour), h.Now())
	flaky := h.Runs("chain", "flaky")
	require.Len(t, flaky, 2)
	require.Error(t, flaky[0].Err)
	require.NoError(t, flaky[1].Err)
}

// TestProducerHelpers: Scheduled lists what is pending; RunNow runs one
// topic's jobs now and leaves the others.
func TestProducerHelpers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := wheelqtest.New(t, wheelqtest.Options{})
	l := &ledger{done: map[string]int{}}
	require.NoError(t, h.Handle("mail", l.handler()))
	require.NoError(t, h.Handle("sms", l.handler()))
	for i, id := range []string{"m1", "m2"} {
		_, err := h.Queue().Schedule(ctx, "mail", []byte(id), wheelq.ID(id), wheelq.After(time.Duration(i+1)*time.Hour))
		require.NoError(t, err)
	}
	_, err := h.Queue().Schedule(ctx, "sms", []byte("s1"), wheelq.ID("s1"), wheelq.After(time.Minute))
	require.NoError(t, err)
	all, err := h.Scheduled("")
	require.NoError(t, err)
	require.Len(t, all, 3)
	require.Equal(t, "s1", all[0].ID, "in due order")
	mail, err := h.Scheduled("mail")
	require.NoError(t, err)
	require.Len(t, mail, 2)
	require.Equal(t, []byte("m2"), mail[1].Payload)

	runs, err := h.RunNow("mail")
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.Equal(t, 1, l.count("m1"))
	require.Equal(t, 1, l.count("m2"))
	require.Zero(t, l.count("s1"))
	rest, err := h.Scheduled("")
	require.NoError(t, err)
	require.Len(t, rest, 1)
}

// TestCheckFindsViolations: the checker reports a job lost from Redis
// behind the queue's back, and a duplicate success with no crash between.
func TestCheckFindsViolations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := wheelqtest.New(t, wheelqtest.Options{SkipCheck: true})
	l := &ledger{done: map[string]int{}}
	require.NoError(t, h.Handle("job", l.handler()))
	_, err := h.Queue().Schedule(ctx, "job", nil, wheelq.ID("x"), wheelq.After(time.Hour))
	require.NoError(t, err)
	require.NoError(t, h.Check())
	// Delete the namespace's keys as a bug would.
	keys, err := h.Redis().Keys(ctx, "wq:{wheelqtest:*").Result()
	require.NoError(t, err)
	var del []string
	for _, k := range keys {
		if !contains(k, ":lease") && !contains(k, ":layout") && !contains(k, ":meta") {
			del = append(del, k)
		}
	}
	require.NotEmpty(t, del)
	require.NoError(t, h.Redis().Del(ctx, del...).Err())
	err = h.Check()
	require.ErrorIs(t, err, wheelqtest.ErrViolation)
	require.Contains(t, err.Error(), "job/x was stored and is gone")
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestBadInput: errors, never panics.
func TestBadInput(t *testing.T) {
	t.Parallel()
	h := wheelqtest.New(t, wheelqtest.Options{})
	require.ErrorIs(t, h.CrashAt(wheelqtest.Point(0)), wheelqtest.ErrInvalidPoint)
	require.ErrorIs(t, h.CrashAt(wheelqtest.Point(99)), wheelqtest.ErrInvalidPoint)
	require.ErrorIs(t, h.CrashAtJob(wheelqtest.AfterRun, "", "x"), wheelq.ErrInvalidOption)
	require.ErrorIs(t, h.Advance(-time.Second), wheelqtest.ErrNegative)
	require.Error(t, h.Handle("t", nil))
	require.ErrorIs(t, h.ExpectScheduled("t", "x", time.Time{}, -1, nil), wheelq.ErrInvalidOption)
	_, err := wheelqtest.Start(wheelqtest.Options{Config: wheelq.Config{Clock: h.Clock()}})
	require.ErrorIs(t, err, wheelq.ErrInvalidOption)
	_, err = wheelqtest.Start(wheelqtest.Options{Config: wheelq.Config{Concurrency: -1}})
	require.Error(t, err)
	require.NoError(t, h.Close())
	require.ErrorIs(t, h.Restart(), wheelqtest.ErrClosed)
}

// TestCancelAndDuringRun: a cancelled job never runs (the checker agrees),
// and a run cut short by DuringRun sees its context cancelled with
// ErrCrashed as the cause.
func TestCancelAndDuringRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := wheelqtest.New(t, wheelqtest.Options{})
	causes := make(chan error, 4)
	require.NoError(t, h.Handle("job", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
		causes <- context.Cause(ctx)
		return nil
	})))
	for _, id := range []string{"paid", "cut"} {
		_, err := h.Queue().Schedule(ctx, "job", nil, wheelq.ID(id), wheelq.After(time.Minute))
		require.NoError(t, err)
	}
	require.NoError(t, h.Queue().Cancel(ctx, "job", "paid"))
	require.NoError(t, h.CrashAtJob(wheelqtest.DuringRun, "job", "cut"))
	require.NoError(t, h.Advance(time.Hour))
	require.True(t, h.Crashed())
	require.ErrorIs(t, <-causes, wheelqtest.ErrCrashed)
	require.NoError(t, h.Restart())
	require.NoError(t, <-causes, "the rerun has a live context")
	require.Empty(t, h.Runs("job", "paid"))
	require.Len(t, h.Runs("job", "cut"), 2)
	require.NoError(t, h.Check())
}
