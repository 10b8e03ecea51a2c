package wheelqtest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/wheelqtest"
)

// TestPullConsumers: pulled jobs in the harness, on both backends. A job
// due waits for a consumer (Advance does not wait for it); a consumer
// that dies holding a reservation loses nothing (advance past the
// deadline: the job comes back, attempt 2); a crash at AfterReserve
// loses nothing either; Ack ends the run, and the history check passes.
func TestPullConsumers(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		h := wheelqtest.New(t, wheelqtest.Options{Redis: rdb, Pull: []string{"p"}, Config: wheelq.Config{
			Namespace: "pull", Backoff: func(int, error) time.Duration { return time.Second }}})
		q := h.Queue()
		ctx := t.Context()
		_, err := q.Schedule(ctx, "p", []byte("a"), wheelq.ID("a"), wheelq.After(time.Minute))
		require.NoError(t, err)
		rs, err := h.Reserve(wheelq.ReserveOptions{Topics: []string{"p"}})
		require.NoError(t, err)
		require.Empty(t, rs, "not due yet")
		require.NoError(t, h.Advance(time.Minute)) // settles: a due pulled job waits for a consumer
		opts := wheelq.ReserveOptions{Topics: []string{"p"}, TTR: 10 * time.Second}
		rs, err = h.Reserve(opts)
		require.NoError(t, err)
		require.Len(t, rs, 1)
		require.Equal(t, 1, rs[0].Job.Attempt)
		// The consumer dies holding it: after the deadline and the
		// backoff, the job is handed out again.
		require.NoError(t, h.Advance(10*time.Second+time.Second))
		rs, err = h.Reserve(opts)
		require.NoError(t, err)
		require.Len(t, rs, 1)
		require.Equal(t, 2, rs[0].Job.Attempt)
		require.NoError(t, h.Ack(rs[0]))

		// A crash right after a reservation is made: the job comes back
		// after its deadline, in the next incarnation.
		_, err = h.Queue().Schedule(ctx, "p", []byte("b"), wheelq.ID("b"), wheelq.After(time.Second))
		require.NoError(t, err)
		require.NoError(t, h.Advance(time.Second))
		require.NoError(t, h.CrashAt(wheelqtest.AfterReserve))
		_, err = h.Reserve(opts)
		require.True(t, errors.Is(err, wheelqtest.ErrCrashed), "%v", err)
		require.True(t, h.Crashed())
		require.NoError(t, h.Restart())
		require.NoError(t, h.Advance(10*time.Second+time.Second))
		rs, err = h.Reserve(opts)
		require.NoError(t, err)
		require.Len(t, rs, 1)
		require.Equal(t, "b", rs[0].ID)
		require.Equal(t, 2, rs[0].Job.Attempt)
		require.NoError(t, h.Ack(rs[0]))
		require.NoError(t, h.Check())
		// a's first reservation (lapsed), a's second and b's second
		// (acked); b's first was never handed over.
		runs := h.History().Runs
		require.Len(t, runs, 3)
		require.False(t, runs[0].Done)
		require.True(t, runs[1].Done && runs[2].Done)
		require.NoError(t, runs[2].Err)
	})
}
