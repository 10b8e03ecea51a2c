package wheelq

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

var (
	backlogJobs = flag.Int("backlog.jobs", 400, "TestLargeBacklogDrains: how many jobs")
	backlogSize = flag.Int("backlog.size", 1<<20, "TestLargeBacklogDrains: each job's payload in bytes")
)

// TestLargeBacklogDrains: 400 jobs of 1 MiB
// (the default MaxPayload), scheduled by a producer that never started,
// all overdue when one worker with the default Config starts. Each run's
// payload is checked. It drained at about one job a second (48 of 400 in
// 40 s): claims of 4 MiB took over a second of Redis's time each and a
// repair pass 3 s. The bound here is a hang's, not a speed claim (the
// figures are cmd/wheelq-bench's -workload backlog); Redis's memory peak
// during the drain must stay within 1.2x what it held before.
func TestLargeBacklogDrains(t *testing.T) {
	if testing.Short() {
		t.Skip("400 MiB of records")
	}
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	rdb := srv.Client(t)
	b := &bundle{srv: srv, rdb: rdb, ctx: context.Background()}
	n := *backlogJobs
	payload := []byte(strings.Repeat("p", *backlogSize))
	producer := b.newQueue(t, Config{Namespace: "big", Partitions: 4, MaxPayload: max(*backlogSize, 1<<20)})
	for i := range n {
		_, err := producer.Schedule(b.ctx, "big", payload, ID(fmt.Sprint(i)), At(time.Now().Add(-time.Minute)))
		require.NoError(t, err)
	}
	require.NoError(t, rdb.ConfigResetStat(b.ctx).Err())
	require.NoError(t, rdb.ConfigSet(b.ctx, "slowlog-log-slower-than", "5000").Err())
	require.NoError(t, rdb.Do(b.ctx, "SLOWLOG", "RESET").Err())
	require.NoError(t, rdb.Do(b.ctx, "MEMORY", "PURGE").Err())
	before, err := redistest.UsedMemory(b.ctx, rdb)
	require.NoError(t, err)
	stopSampling := redistest.PeakMemory(rdb, before, 20*time.Millisecond)
	q, err := New(rdb, Config{Namespace: "big", Partitions: 4, MaxPayload: max(*backlogSize, 1<<20)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	var ran, bad atomic.Int32
	all := make(chan struct{}) // closed by the nth run
	require.NoError(t, q.Handle("big", HandlerFunc(func(_ context.Context, j *Job) error {
		if len(j.Payload) != len(payload) || j.Payload[0] != 'p' {
			bad.Add(1)
		}
		if int(ran.Add(1)) == n {
			close(all)
		}
		return nil
	})))
	start := time.Now()
	require.NoError(t, q.Start(b.ctx))
	select {
	case <-all:
	case <-time.After(60 * time.Second): // checked below
	}
	took := time.Since(start)
	peak := stopSampling()
	s, err := q.Stats(b.ctx)
	require.NoError(t, err)
	stats, _ := rdb.Info(b.ctx, "commandstats").Result()
	if testing.Verbose() {
		slow, _ := rdb.Do(b.ctx, "SLOWLOG", "GET", "10").Slice()
		for _, e := range slow {
			f := e.([]any)
			args := f[3].([]any)
			var head []string
			for _, a := range args[:min(len(args), 9)] {
				head = append(head, fmt.Sprint(a)[:min(len(fmt.Sprint(a)), 30)])
			}
			t.Logf("slow %6d us: %v", f[2], head)
		}
	}
	t.Logf("%d of %d ran in %v; Redis used_memory %d MB before, peak %d MB (%.2fx); RedisErrors %d; Redis's commands:\n%s",
		ran.Load(), n, took.Round(time.Millisecond), before>>20, peak>>20, float64(peak)/float64(before), s.RedisErrors, stats)
	require.EqualValues(t, n, int(ran.Load()), "every job ran within 60 s")
	require.Zero(t, bad.Load(), "every payload whole")
	require.LessOrEqual(t, float64(peak), 1.2*float64(before), "Redis's memory during the drain")
}
