package wheelq

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStuckHandlerAbandoned: a handler that ignored its
// context stayed "running" forever past a 2 s HandlerTimeout, with no log,
// held its partition's hand-overs, and Shutdown returned only "context
// deadline exceeded". A run still going a grace (StuckGrace) past its
// HandlerTimeout is abandoned: a Warn names it, Stats.Stuck counts it, its
// job is settled as a failed run (retried, so it may run again while the
// stuck handler goes on), and Shutdown returns within the grace with an
// error naming the runs it left behind.
func TestStuckHandlerAbandoned(t *testing.T) {
	t.Parallel()
	var out lockedBuffer
	b := setup(t, Config{HandlerTimeout: 300 * time.Millisecond, MaxAttempts: 5,
		Backoff: func(int, error) time.Duration { return time.Hour },
		Logger:  slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	started := make(chan struct{}, 1)
	require.NoError(t, b.q.Handle("stuck", HandlerFunc(func(context.Context, *Job) error {
		started <- struct{}{}
		<-release // ignores its context
		return nil
	})))
	_, err := b.q.Schedule(b.ctx, "stuck", nil, ID("s1"))
	require.NoError(t, err)
	<-started
	eventually(t, func() bool { return strings.Contains(out.String(), "ignores its context") }, "the stuck run is logged")
	line := out.String()
	require.Contains(t, line, "topic=stuck")
	require.Contains(t, line, "id=s1")
	require.Contains(t, line, "running_for=")
	st, err := b.q.Stats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Stuck)
	require.Zero(t, st.Running, "an abandoned run is not counted as running")
	eventually(t, func() bool {
		info, err := b.q.Lookup(b.ctx, "stuck", "s1")
		return err == nil && info.State == StatePending && info.Attempts == 1 && strings.Contains(info.LastError, "HandlerTimeout")
	}, "the abandoned run is settled as a failure: pending again, its error stored")

	// Shutdown does not wait for it past the grace, and says what it left.
	_, err = b.q.Schedule(b.ctx, "stuck", nil, ID("s2"))
	require.NoError(t, err)
	<-started
	t0 := time.Now()
	err = b.q.Shutdown(context.Background())
	require.Less(t, time.Since(t0), 5*time.Second, "Shutdown bounded by HandlerTimeout and the grace")
	var left *StuckRunsError
	require.ErrorAs(t, err, &left, "%v", err)
	require.Len(t, left.Runs, 2)
	keys := []string{left.Runs[0].Topic + "/" + left.Runs[0].ID, left.Runs[1].Topic + "/" + left.Runs[1].ID}
	require.ElementsMatch(t, []string{"stuck/s1", "stuck/s2"}, keys)
	require.Contains(t, err.Error(), "stuck/s1")
	require.False(t, errors.Is(err, context.DeadlineExceeded))
}
