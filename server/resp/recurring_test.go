package resp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestRecur: WQ.RECUR declares a schedule (again: no change), WQ.RECURS
// lists it with its next slot, its slots' jobs are reserved with
// WQ.RESERVE, WQ.UNRECUR removes it; bad options are -ERR, an unknown
// name -NOTFOUND.
func TestRecur(t *testing.T) {
	t.Parallel()
	addr := start(t, nil, "beat")
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	ctx := context.Background()

	args := []any{"WQ.RECUR", "beat-200", "beat", "EVERY", 200, "PAYLOAD", "tick", "MISSED", "skip", "HEADER", "k", "v"}
	require.NoError(t, rdb.Do(ctx, args...).Err())
	require.NoError(t, rdb.Do(ctx, args...).Err(), "the same again")
	list, err := rdb.Do(ctx, "WQ.RECURS").Slice()
	require.NoError(t, err)
	require.Len(t, list, 1)
	row := list[0].([]any)
	require.Equal(t, []any{"beat-200", "beat", "every 200ms"}, row[:3])
	next := row[3].(int64)
	require.Greater(t, next, time.Now().Add(-time.Second).UnixMilli())
	require.Zero(t, next%200, "slots are whole multiples of the interval")

	res, err := rdb.Do(ctx, "WQ.RESERVE", "COUNT", 10, "BLOCK", 5000, "TOPICS", "beat").Slice()
	require.NoError(t, err)
	job := res[0].([]any)
	require.True(t, strings.HasPrefix(job[1].(string), "beat-200@"), job[1])
	require.Equal(t, "tick", job[3])
	require.NoError(t, rdb.Do(ctx, "WQ.ACK", "beat", job[1], job[2]).Err())

	require.ErrorContains(t, rdb.Do(ctx, "WQ.RECUR", "bad", "beat", "CRON", "61 * * * *").Err(), "ERR ")
	require.ErrorContains(t, rdb.Do(ctx, "WQ.RECUR", "bad", "beat", "EVERY", 0).Err(), "ERR EVERY")
	require.ErrorContains(t, rdb.Do(ctx, "WQ.RECUR", "bad", "beat", "EVERY", 10, "MISSED", "never").Err(), "ERR MISSED")
	require.ErrorContains(t, rdb.Do(ctx, "WQ.RECUR", "bad", "beat", "EVERY").Err(), "ERR ")

	n, err := rdb.Do(ctx, "WQ.UNRECUR", "beat-200").Int()
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.ErrorContains(t, rdb.Do(ctx, "WQ.UNRECUR", "beat-200").Err(), "NOTFOUND ")
	list, err = rdb.Do(ctx, "WQ.RECURS").Slice()
	require.NoError(t, err)
	require.Empty(t, list)
}
