package resp_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestClosedWhileBlockedLosesNothing: a client blocked in WQ.RESERVE
// (an hour's time-to-run) goes away; a job that comes due afterwards goes
// to another client at once, on its first attempt, not after the hour.
func TestClosedWhileBlockedLosesNothing(t *testing.T) {
	t.Parallel()
	addr := start(t, nil, "gone")
	ctx := context.Background()

	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = nc.Write([]byte("*9\r\n$10\r\nWQ.RESERVE\r\n$5\r\nCOUNT\r\n$2\r\n10\r\n$5\r\nBLOCK\r\n$5\r\n60000\r\n$3\r\nTTR\r\n$7\r\n3600000\r\n$6\r\nTOPICS\r\n$4\r\ngone\r\n"))
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond) // blocked
	require.NoError(t, nc.Close())
	time.Sleep(100 * time.Millisecond)

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	require.NoError(t, rdb.Do(ctx, "WQ.SCHEDULE", "gone", "p", "ID", "j", "DELAY", 200).Err())
	reservesFirstAttempt(t, rdb, "gone", "j")
}

// reservesFirstAttempt: a reserve on topic gets job id at once (not after
// a time-to-run), on its first attempt.
func reservesFirstAttempt(t *testing.T, rdb *redis.Client, topic, id string) {
	t.Helper()
	start := time.Now()
	res, err := rdb.Do(context.Background(), "WQ.RESERVE", "BLOCK", 5000, "TOPICS", topic).Slice()
	require.NoError(t, err, "the job went to the closed connection (waited %v)", time.Since(start))
	job := res[0].([]any)
	require.Equal(t, id, job[1])
	require.EqualValues(t, 1, job[4], "first attempt: nothing lapsed")
}

// TestClosedWithinGraceLosesNothing: a client that goes away moments
// after it blocked in WQ.RESERVE, before the server watches its socket,
// still loses no job: one handed to its command is seen to have nobody to
// go to when its reply is due, and goes to another client at once, on
// its first attempt, not after the hour's time-to-run.
func TestClosedWithinGraceLosesNothing(t *testing.T) {
	t.Parallel()
	addr := start(t, nil, "gone2")
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()

	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = nc.Write([]byte("*9\r\n$10\r\nWQ.RESERVE\r\n$5\r\nCOUNT\r\n$2\r\n10\r\n$5\r\nBLOCK\r\n$5\r\n60000\r\n$3\r\nTTR\r\n$7\r\n3600000\r\n$6\r\nTOPICS\r\n$5\r\ngone2\r\n"))
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond) // blocked, or about to be
	require.NoError(t, nc.Close())
	require.NoError(t, rdb.Do(ctx, "WQ.SCHEDULE", "gone2", "p", "ID", "j").Err())
	reservesFirstAttempt(t, rdb, "gone2", "j")
}
