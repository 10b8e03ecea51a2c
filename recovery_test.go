package wheelq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/wheel"
)

// TestAnnounceThenScanRace races Schedule, from the owner and from a
// process that owns nothing, against a poller that advances a short
// horizon every 5ms: every job must run exactly once (no crash here, so no
// duplicate is allowed), however its write interleaves with the poller's
// announce and scan.
func TestAnnounceThenScanRace(t *testing.T) {
	t.Parallel()
	cfg := Config{Horizon: time.Second, PollInterval: 5 * time.Millisecond}
	b := setup(t, cfg)
	other := b.newQueue(t, cfg)
	var mu sync.Mutex
	runs := map[string]int{}
	require.NoError(t, b.q.Handle("r", HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		return nil
	})))
	const perWriter = 400
	var wg sync.WaitGroup
	for w, q := range []*Queue{b.q, other, b.q, other} {
		wg.Go(func() {
			for i := range perWriter {
				// Due around the horizon's edge, where the race is.
				d := time.Second + time.Duration(rand.IntN(40)-20)*time.Millisecond
				if i%4 == 0 {
					d = time.Duration(rand.IntN(20)) * time.Millisecond
				}
				_, err := q.Schedule(b.ctx, "r", nil, ID(fmt.Sprintf("%d-%d", w, i)), After(d))
				require.NoError(t, err)
				if i%16 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) == 4*perWriter
	}, "every job runs")
	// Both processes are done with every job (run, acked, nothing armed):
	// a duplicate that shows itself now came from a stale arming.
	quiesced(t, b.q, 0)
	quiesced(t, other, 0)
	time.Sleep(300 * time.Millisecond) // let a duplicate show itself
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		require.Equal(t, 1, n, "job %s ran %d times", id, n)
	}
	st, err := other.Stats(b.ctx)
	require.NoError(t, err)
	require.Zero(t, st.OwnedPartitions)
}

// TestReloadAfterRestart: a queue that stops (or dies) leaves its jobs in
// Redis; a new one reloads those within the horizon at start-up, runs the
// overdue ones at once, oldest first, and keeps later ones in Redis only.
func TestReloadAfterRestart(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		require.NoError(t, b.q.Shutdown(b.ctx)) // the process "died"
		producer := b.newQueue(t, Config{})     // never started: writes only
		// More overdue jobs than the one worker's channel holds, so that most
		// wait in the start queue.
		const n = 200
		var want []string
		for i := range n {
			id := fmt.Sprintf("due-%03d", i)
			want = append(want, id)
			_, err := producer.Schedule(b.ctx, "r", nil, ID(id), At(time.Now().Add(-time.Duration(n-i)*10*time.Millisecond)))
			require.NoError(t, err)
		}
		_, err := producer.Schedule(b.ctx, "r", nil, ID("far"), After(2*time.Hour))
		require.NoError(t, err)

		second := b.newQueue(t, Config{Concurrency: 1})
		r := newRuns()
		require.NoError(t, second.Handle("r", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
		require.NoError(t, second.Start(b.ctx))
		var got []string
		for range n {
			got = append(got, r.next(t).ID)
		}
		require.Equal(t, want, got, "overdue jobs run oldest first")
		r.none(t, 100*time.Millisecond)
		st, err := second.Stats(b.ctx)
		require.NoError(t, err)
		require.Zero(t, st.InMemory, "the job due in 2h stays in Redis only")
		require.Equal(t, int64(1), st.Pending)
	})
}

// TestSweepArmsOrphans: a pending job that nothing armed (its arming was
// lost: here, written behind the queue's back into the scanned window) is
// re-armed by the sweep and runs, once.
func TestSweepArmsOrphans(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.bundle(t)
		clk := wheel.NewFakeClock(time.Now().Truncate(time.Millisecond))
		b.q = b.newQueue(t, Config{Clock: clk})
		r := newRuns()
		require.NoError(t, b.q.Handle("o", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
		require.NoError(t, b.q.Start(b.ctx))
		<-b.q.Ready()
		// An orphan: stored, due now, inside the announced window, in no inbox.
		rec := (&persist.Record{Rev: 1, MaxAttempts: 3, Created: clk.Now()}).Encode()
		_, err := b.q.store.Write(b.ctx, b.q.recov.Tokens(), []persist.Write{{Key: "o/orphan", Due: clk.Now().UnixMicro(), Record: rec, Replace: true}})
		require.NoError(t, err)
		clk.Advance(5 * time.Second)
		r.none(t, 100*time.Millisecond)
		clk.Advance(5*time.Second + 100*time.Millisecond) // the sweep comes due
		require.Equal(t, "orphan", r.next(t).ID)
		r.none(t, 100*time.Millisecond)
	})
}

// TestRedisOutageSeveralSeconds: Redis is unreachable for 3 seconds while
// jobs come due. Jobs the owner holds without their records (scheduled by
// another process) cannot be verified, so they wait; once Redis is back
// every one runs, none is lost, and the lateness is reported.
func TestRedisOutageSeveralSeconds(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	srv.RequireReal(t)
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	b.q = b.newQueue(t, Config{WriteTimeout: 300 * time.Millisecond})
	r := newRuns()
	require.NoError(t, b.q.Handle("o", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
	require.NoError(t, b.q.Start(b.ctx))
	<-b.q.Ready()
	producer := b.newQueue(t, Config{})
	for i := range 10 {
		_, err := producer.Schedule(b.ctx, "o", nil, ID(fmt.Sprint(i)), After(500*time.Millisecond+time.Duration(i)*50*time.Millisecond))
		require.NoError(t, err)
	}
	eventually(t, func() bool {
		st, err := b.q.Stats(b.ctx)
		return err == nil && st.InMemory == 10
	}, "the owner armed them from its inbox")

	srv.Kill()
	down := time.Now()
	// All come due and leave the wheel, and claims fail: the engine has
	// tried to run them while Redis is down.
	eventually(t, func() bool {
		st, _ := b.q.Stats(b.ctx) // the in-process figures, with an error
		return st.InMemory == 0 && st.RedisErrors > 0
	}, "the jobs fired and their claims failed")
	time.Sleep(time.Until(down.Add(3 * time.Second))) // the outage goes on: its length shows in the lateness below
	require.Zero(t, len(r.ch), "nothing ran while Redis was down: the jobs could not be verified")
	require.NoError(t, srv.Restart())
	seen := map[string]bool{}
	for range 10 {
		seen[r.next(t).ID] = true
	}
	require.Len(t, seen, 10, "none lost")
	quiesced(t, b.q, 0) // all acked, nothing armed: a second run would be a duplicate
	r.none(t, 200*time.Millisecond)
	st, err := b.q.Stats(b.ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.Lateness.Max, 2*time.Second, "the outage shows in the lateness")
}
