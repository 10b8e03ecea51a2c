package wheelq

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

// TestWorkersFigures: under `wheelq-server -set queue.start=false` the
// dashboard's running and lateness panels read 0: they showed the
// serving process's own figures, and it runs no job. Every started queue
// publishes its figures; any queue reads every live worker's, and
// SumWorkers adds them up, lateness over all their runs.
func TestWorkersFigures(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	var ran atomic.Int64
	var workers []*Queue
	for range 2 {
		q := b.newQueue(t, Config{Namespace: "figs", Partitions: 4})
		require.NoError(t, q.Handle("t", HandlerFunc(func(context.Context, *Job) error { ran.Add(1); return nil })))
		require.NoError(t, q.Start(b.ctx))
		workers = append(workers, q)
	}
	viewer := b.newQueue(t, Config{Namespace: "figs", Partitions: 4}) // never started, as under serve
	const n = 40
	for i := range n {
		_, err := viewer.Schedule(b.ctx, "t", nil, ID(fmt.Sprint(i)), After(100*time.Millisecond))
		require.NoError(t, err)
	}
	eventually(t, func() bool { return ran.Load() == n }, "the jobs ran")
	var ws []WorkerStats
	eventually(t, func() bool {
		var err error
		ws, err = viewer.Workers(b.ctx)
		return err == nil && len(ws) == 2 && SumWorkers(ws).Fired == n
	}, "both workers' figures, with every run")
	sum := SumWorkers(ws)
	require.Equal(t, uint64(n), sum.Succeeded)
	require.Equal(t, uint64(n), sum.Lateness.Count)
	require.Equal(t, 4, sum.OwnedPartitions)
	require.Positive(t, sum.Lateness.Max)
	require.LessOrEqual(t, sum.Lateness.P50, sum.Lateness.P99)
	require.LessOrEqual(t, sum.Lateness.P99, sum.Lateness.Max)
	for _, w := range ws {
		require.NotEmpty(t, w.Member)
		require.WithinDuration(t, time.Now(), w.At, 10*time.Second)
	}
	own, err := workers[0].Stats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, own.Lateness.Count+func() uint64 { s, _ := workers[1].Stats(b.ctx); return s.Lateness.Count }(), sum.Lateness.Count)

	// A worker that shuts down takes its figures with it.
	require.NoError(t, workers[0].Shutdown(b.ctx))
	ws, err = viewer.Workers(b.ctx)
	require.NoError(t, err)
	require.Len(t, ws, 1)
}
