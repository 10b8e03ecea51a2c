package wheelqtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/wheelqtest"
)

// TestAdvanceHonoursPause: a paused topic's job that comes due within an
// Advance is not unfinished work. Advance returns without error, having
// run the other topic's job at its time; the paused job has not run and
// is still scheduled at its due time. Restart and RunNow settle too (the
// RunNow moves it to the present, where it still waits). Resume, then
// Advance(0), runs it, and the history check passes throughout.
func TestAdvanceHonoursPause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := wheelqtest.New(t, wheelqtest.Options{Redis: rdb, Config: wheelq.Config{Namespace: "pause"}})
		l := &ledger{done: map[string]int{}}
		require.NoError(t, h.Handle("held", l.handler()))
		require.NoError(t, h.Handle("free", l.handler()))
		t0 := h.Now()
		require.NoError(t, h.Queue().Pause(ctx, "held"))
		_, err := h.Queue().Schedule(ctx, "held", []byte("h"), wheelq.ID("h1"), wheelq.After(time.Minute))
		require.NoError(t, err)
		_, err = h.Queue().Schedule(ctx, "free", []byte("f"), wheelq.ID("f1"), wheelq.After(2*time.Minute))
		require.NoError(t, err)

		require.NoError(t, h.Advance(time.Hour), "a paused job due is not a job left unsettled")
		require.Equal(t, t0.Add(time.Hour), h.Now())
		free := h.Runs("free", "f1")
		require.Len(t, free, 1, "the other topic's job ran")
		require.Equal(t, t0.Add(2*time.Minute), free[0].Start, "at its due time")
		require.Zero(t, l.count("h1"), "the paused job did not run")
		require.Empty(t, h.Runs("held", "h1"))
		require.NoError(t, h.ExpectScheduled("held", "h1", t0.Add(time.Minute), time.Millisecond, []byte("h")))
		require.NoError(t, h.Check(), "a paused job not running is no violation")

		require.NoError(t, h.Restart(), "a restart's reload settles past the paused job")
		require.Zero(t, l.count("h1"))
		runs, err := h.RunNow("held")
		require.NoError(t, err, "RunNow settles past the paused job")
		require.Empty(t, runs)
		require.NoError(t, h.ExpectScheduled("held", "h1", h.Now(), time.Millisecond, []byte("h")), "moved to the present")
		require.Zero(t, l.count("h1"))

		require.NoError(t, h.Queue().Resume(ctx, "held"))
		require.NoError(t, h.Advance(0))
		held := h.Runs("held", "h1")
		require.Len(t, held, 1, "resumed: the job ran")
		require.Equal(t, h.Now(), held[0].Start)
		require.Equal(t, 1, l.count("f1"))
		pending, err := h.Scheduled("")
		require.NoError(t, err)
		require.Empty(t, pending)
		require.NoError(t, h.Check())
	})
}

// TestPauseLeftInPlace: a topic paused to the end of the test leaves its
// jobs pending; Advance settles past any number of them (more than a page
// of the harness's reads, spread over the advance), New's cleanup check
// finds no violation, and Close shuts the queue down.
func TestPauseLeftInPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := wheelqtest.New(t, wheelqtest.Options{Config: wheelq.Config{Partitions: 1}})
	l := &ledger{done: map[string]int{}}
	require.NoError(t, h.Handle("held", l.handler()))
	require.NoError(t, h.Handle("free", l.handler()))
	require.NoError(t, h.Queue().Pause(ctx, "held"))
	const n = 1500
	for i := range n {
		_, err := h.Queue().Schedule(ctx, "held", nil, wheelq.ID(fmt.Sprintf("j%04d", i)), wheelq.After(time.Duration(i+1)*time.Second))
		require.NoError(t, err)
	}
	// Due after every paused job: found behind all of them.
	_, err := h.Queue().Schedule(ctx, "free", nil, wheelq.ID("late"), wheelq.After(time.Hour))
	require.NoError(t, err)
	require.NoError(t, h.Advance(2*time.Hour))
	require.Equal(t, 1, l.count("late"))
	pending, err := h.Scheduled("held")
	require.NoError(t, err)
	require.Len(t, pending, n)
	runs := h.History().Runs
	require.Len(t, runs, 1)
	require.Equal(t, "free", runs[0].Topic)
}
