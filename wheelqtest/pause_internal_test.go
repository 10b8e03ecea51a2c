package wheelqtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
)

// TestRunnablePagesPastPaused: behind more pending jobs of a paused topic
// than a page holds, firstRunnable (which quiet and nextDue use) finds the
// first job of a topic that is not paused, and nextDue returns its due
// time, not a paused job's. With the other topic paused too, there is
// none; resumed, the first job is the answer again.
func TestRunnablePagesPastPaused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := New(t, Options{Config: wheelq.Config{Partitions: 1}})
	t0 := h.Now()
	q := h.Queue()
	require.NoError(t, q.Pause(ctx, "held"))
	n := 2*pagePaused + 3
	for i := range n {
		_, err := q.Schedule(ctx, "held", nil, wheelq.ID(fmt.Sprintf("j%04d", i)), wheelq.After(time.Duration(i+1)*time.Second))
		require.NoError(t, err)
	}
	freeDue := t0.Add(time.Hour)
	_, err := q.Schedule(ctx, "free", nil, wheelq.ID("late"), wheelq.At(freeDue))
	require.NoError(t, err)
	until := t0.Add(2 * time.Hour).UnixMicro()
	first := func() (string, bool) {
		t.Helper()
		var paused pausedTopics
		e, ok, err := h.firstRunnable(ctx, 0, minScore, until, &paused)
		require.NoError(t, err)
		return e.Key, ok
	}

	key, ok := first()
	require.True(t, ok)
	require.Equal(t, "free/late", key)
	next, ok, err := h.nextDue()
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, freeDue.Equal(next), "nextDue %v, want %v", next, freeDue)

	require.NoError(t, q.Pause(ctx, "free"))
	_, ok = first()
	require.False(t, ok, "every job's topic is paused")
	_, ok, err = h.nextDue()
	require.NoError(t, err)
	require.False(t, ok)

	require.NoError(t, q.Resume(ctx, "held"))
	key, ok = first()
	require.True(t, ok)
	require.Equal(t, "held/j0000", key)
	require.NoError(t, q.Resume(ctx, "free"))
}
