package wheelq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// writeCounter counts the round trips that write jobs: pipelines and
// commands carrying an HSET or a script call with an argument that holds
// match (a topic's job keys, "topic/"), so that a started queue's own
// calls meanwhile (leases, polls: more of them on a loaded machine) are
// not counted.
type writeCounter struct {
	match string
	n     atomic.Int64
}

func (c *writeCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *writeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.writes(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *writeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if c.writes(cmd) {
				c.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

func (c *writeCounter) writes(cmd redis.Cmder) bool {
	switch strings.ToLower(cmd.Name()) {
	case "hset", "evalsha", "eval":
	default:
		return false
	}
	for _, a := range cmd.Args() {
		switch v := a.(type) {
		case string:
			if strings.Contains(v, c.match) {
				return true
			}
		case []byte:
			if bytes.Contains(v, []byte(c.match)) {
				return true
			}
		}
	}
	return false
}

// TestScheduleBatch: a batch of 2,500 jobs with ids, random ids and bad
// entries is written in a round trip per thousand jobs; each good job
// runs once, not early, and each bad one gets its own error while the
// others are stored.
func TestScheduleBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	b.srv.RequireReal(t)
	var mu sync.Mutex
	ran := map[string]int{}
	early := 0
	done := make(chan struct{}, 4096)
	require.NoError(t, b.q.Handle("batch", HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		ran[j.ID]++
		if time.Now().Before(j.Due) {
			early++
		}
		mu.Unlock()
		done <- struct{}{}
		return nil
	})))
	_, err := b.q.Schedule(b.ctx, "batch", nil, ID("taken"), After(time.Hour))
	require.NoError(t, err)

	// Due in a second: no claim of them (which names their keys) comes
	// while the batch is written, however slow the machine.
	due := time.Now().Add(time.Second)
	var jobs []BatchJob
	for i := range 2500 {
		j := BatchJob{Topic: "batch", Payload: []byte{byte(i)}, Options: []Option{At(due)}}
		if i%2 == 0 {
			j.Options = append(j.Options, ID(fmt.Sprintf("j%d", i)))
		}
		jobs = append(jobs, j)
	}
	jobs[10].Options = append(jobs[10].Options[:1], ID("taken"))   // stored before: a duplicate
	jobs[12].Options = append(jobs[12].Options[:1], ID("j14"))     // twice in this list
	jobs[20].Topic = "no/slash"                                    // invalid topic
	jobs[30].Options = append(jobs[30].Options, MaxAttempts(0))    // invalid option
	jobs[40].Options = []Option{After(100 * 365 * 24 * time.Hour)} // too far
	jobs[50].Payload = make([]byte, b.q.cfg.MaxPayload+1)          // too large
	bad := map[int]error{10: ErrDuplicate, 14: ErrInvalidOption, 20: ErrInvalidTopic, 30: ErrInvalidOption, 40: ErrTooFar, 50: ErrPayloadTooLarge}

	wc := writeCounter{match: "batch/"}
	b.rdb.AddHook(&wc)
	res, err := b.q.ScheduleBatch(b.ctx, jobs)
	require.NoError(t, err)
	require.Len(t, res, len(jobs))
	// 3 chunks; a chunk whose jobs fall within an owner's loaded window may
	// take a second round trip to the owner's inbox (none here: one owner).
	require.LessOrEqual(t, wc.n.Load(), int64(6), "round trips that wrote")
	require.GreaterOrEqual(t, wc.n.Load(), int64(3), "a round trip per chunk, seen by the counter")
	want := map[string]bool{}
	for i, r := range res {
		if e, ok := bad[i]; ok {
			require.ErrorIs(t, r.Err, e, "jobs[%d]", i)
			require.Empty(t, r.ID)
			continue
		}
		require.NoError(t, r.Err, "jobs[%d]", i)
		if i == 12 {
			require.Equal(t, "j14", r.ID)
		} else if i%2 == 0 {
			require.Equal(t, fmt.Sprintf("j%d", i), r.ID)
		} else {
			require.Len(t, r.ID, 12)
		}
		want[r.ID] = true
	}
	require.Contains(t, res[14].Err.Error(), "jobs[12]", "the error names the first")
	for range want {
		select {
		case <-done:
		case <-time.After(wait):
			t.Fatalf("ran %d of %d", len(ran), len(want))
		}
	}
	quiesced(t, b.q, 1)                // every run settled: only "taken" is pending
	time.Sleep(100 * time.Millisecond) // a second run would come now
	mu.Lock()
	defer mu.Unlock()
	require.Zero(t, early, "jobs ran early")
	require.Len(t, ran, len(want))
	for id, n := range ran {
		require.True(t, want[id], "ran %s", id)
		require.Equal(t, 1, n, "runs of %s", id)
	}
	info, err := b.q.Lookup(b.ctx, "batch", "taken")
	require.NoError(t, err)
	require.Equal(t, StatePending, info.State, "the duplicate left the stored job alone")
}

// TestCancelBatch: each job of the list gets Cancel's result, and the
// cancelled jobs never run.
func TestCancelBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	var ran atomic.Int64
	require.NoError(t, b.q.Handle("c", HandlerFunc(func(context.Context, *Job) error { ran.Add(1); return nil })))
	due := time.Now().Add(300 * time.Millisecond)
	for _, id := range []string{"a", "b", "c"} {
		_, err := b.q.Schedule(b.ctx, "c", nil, ID(id), At(due))
		require.NoError(t, err)
	}
	errs, err := b.q.CancelBatch(b.ctx, []JobRef{{"c", "a"}, {"c", "b"}, {"c", "missing"}, {"c", "a"}, {"c", ""}, {"", "x"}})
	require.NoError(t, err)
	require.Len(t, errs, 6)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.ErrorIs(t, errs[2], ErrNotFound)
	require.ErrorIs(t, errs[3], ErrInvalidOption)
	require.ErrorIs(t, errs[4], ErrInvalidID)
	require.ErrorIs(t, errs[5], ErrInvalidTopic)
	require.Eventually(t, func() bool { return ran.Load() == 1 }, wait, 5*time.Millisecond, "c runs")
	// a and b were due with c: once nothing is left in memory or in Redis,
	// the engine is past them; a run of one would come now.
	quiesced(t, b.q, 0)
	time.Sleep(200 * time.Millisecond)
	require.EqualValues(t, 1, ran.Load(), "a cancelled job ran")
}

// TestBatchBadInput: a list that is empty or too long, or a call after
// Shutdown, is refused whole, with nothing written.
func TestBatchBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	_, err := b.q.ScheduleBatch(b.ctx, nil)
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "empty batch")
	_, err = b.q.CancelBatch(b.ctx, []JobRef{})
	require.ErrorIs(t, err, ErrInvalidOption)
	long := make([]BatchJob, MaxBatchJobs+1)
	for i := range long {
		long[i] = BatchJob{Topic: "t", Options: []Option{ID(fmt.Sprint(i))}}
	}
	_, err = b.q.ScheduleBatch(b.ctx, long)
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "MaxBatchJobs")
	_, err = b.q.ScheduleBatch(nil, long[:1]) //nolint:staticcheck // a nil context is what is tested
	require.ErrorIs(t, err, ErrInvalidOption)
	require.NoError(t, b.q.Shutdown(b.ctx))
	_, err = b.q.ScheduleBatch(b.ctx, long[:1])
	require.True(t, errors.Is(err, ErrClosed), "%v", err)
	_, err = b.q.CancelBatch(b.ctx, []JobRef{{"t", "0"}})
	require.ErrorIs(t, err, ErrClosed)
	for p := range b.q.cfg.Partitions {
		n, err := b.rdb.HLen(b.ctx, b.q.store.Keys(p).Jobs).Result()
		require.NoError(t, err)
		require.Zero(t, n, "a refused batch wrote jobs")
	}
}
