package persist

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

// TestHistory: an ack and a cancel leave the job in the run history
// (outcome, finish time, the record without its payload), and the history
// keeps to its retention by count and by age.
func TestHistory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	checkHistory(t, srv.Client(t))
}

// TestHistoryOnMiniredis: the embedded Redis of the quickstart runs the
// history's Lua too.
func TestHistoryOnMiniredis(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	checkHistory(t, rdb)
}

func checkHistory(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	const keep = 5
	s, err := New(rdb, Options{Namespace: "h", Partitions: 1, HistoryCount: keep, HistoryAge: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.Init(ctx))
	created := time.Unix(1_700_000_000, 0)
	long := make([]byte, 300) // a payload of more than one varint byte's length
	w := func(key string, r Record) {
		_, err := s.Write(ctx, nil, []Write{{Key: key, Due: 1000, Record: r.Encode()}})
		require.NoError(t, err)
	}
	w("t/done", Record{Rev: 1, Attempt: 2, MaxAttempts: 7, Created: created, LastError: "timeout", Payload: long})
	w("t/gone", Record{Rev: 1, MaxAttempts: 3, Created: created, Payload: []byte("p")})
	w("t/ran", Record{Rev: 1, MaxAttempts: 3, Created: created})
	_, err = s.Claim(ctx, []string{""}, []ClaimRequest{{Key: "t/ran"}}, nil)
	require.NoError(t, err)

	_, _, _, err = s.History(ctx, "t/done")
	require.ErrorIs(t, err, ErrNotFound, "pending: not in the history")
	now := time.Now().Truncate(time.Microsecond)
	applied, err := s.Settle(ctx, nil, now.UnixMicro(), []Outcome{{Op: Ack, Key: "t/done", Rev: 1}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, applied)
	r, st, ran, err := s.History(ctx, "t/done")
	require.NoError(t, err)
	require.Equal(t, Done, st)
	require.False(t, ran)
	require.Equal(t, "t", r.Topic)
	require.Equal(t, "done", r.ID)
	require.Equal(t, 2, r.Attempt)
	require.Equal(t, 7, r.MaxAttempts)
	require.Equal(t, "timeout", r.LastError)
	require.True(t, r.Created.Equal(created))
	require.True(t, r.Finished.Equal(now), "finished %v, want %v", r.Finished, now)
	require.Nil(t, r.Payload, "the history keeps no payload")
	raw, err := rdb.HGet(ctx, s.Keys(0).History, "t/done").Result()
	require.NoError(t, err)
	require.Less(t, len(raw), 40, "the entry is the record cut before its 300-byte payload")

	chs, err := s.CancelMany(ctx, []string{"t/gone", "t/ran", "t/never"})
	require.NoError(t, err)
	require.Equal(t, []Change{Changed, ChangedWhileRunning, NotFound}, chs)
	r, st, ran, err = s.History(ctx, "t/gone")
	require.NoError(t, err)
	require.Equal(t, Cancelled, st)
	require.False(t, ran)
	require.Nil(t, r.Payload, "a one-byte payload is cut too")
	require.Equal(t, 3, r.MaxAttempts)
	_, st, ran, err = s.History(ctx, "t/ran")
	require.NoError(t, err)
	require.Equal(t, Cancelled, st)
	require.True(t, ran, "a run had been claimed")
	_, _, _, err = s.History(ctx, "t/never")
	require.ErrorIs(t, err, ErrNotFound)

	// By count: the latest keep stay.
	for i := range 3 * keep {
		key := fmt.Sprintf("t/n%02d", i)
		w(key, Record{Rev: 1, MaxAttempts: 1})
		_, err := s.Settle(ctx, nil, now.Add(time.Duration(i+1)*time.Second).UnixMicro(), []Outcome{{Op: Ack, Key: key, Rev: 1}})
		require.NoError(t, err)
	}
	requireHistory(t, rdb, s, keep)
	for i := 2 * keep; i < 3*keep; i++ {
		_, st, _, err := s.History(ctx, fmt.Sprintf("t/n%02d", i))
		require.NoError(t, err, "one of the latest")
		require.Equal(t, Done, st)
	}
	_, _, _, err = s.History(ctx, "t/done")
	require.ErrorIs(t, err, ErrNotFound, "trimmed")

	// By age: an ack two hours on trims every older entry.
	w("t/late", Record{Rev: 1, MaxAttempts: 1})
	_, err = s.Settle(ctx, nil, now.Add(2*time.Hour).UnixMicro(), []Outcome{{Op: Ack, Key: "t/late", Rev: 1}})
	require.NoError(t, err)
	requireHistory(t, rdb, s, 1)

	// No history: nothing is kept.
	none, err := New(rdb, Options{Namespace: "none", Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, none.Init(ctx))
	_, err = none.Write(ctx, nil, []Write{{Key: "t/x", Due: 1000, Record: rec("x")}})
	require.NoError(t, err)
	_, err = none.Settle(ctx, nil, now.UnixMicro(), []Outcome{{Op: Ack, Key: "t/x", Rev: 1}})
	require.NoError(t, err)
	_, _, _, err = none.History(ctx, "t/x")
	require.ErrorIs(t, err, ErrNotFound)
	n, err := rdb.Exists(ctx, none.Keys(0).History, none.Keys(0).HistoryIdx).Result()
	require.NoError(t, err)
	require.Zero(t, n)
}

// requireHistory checks that the history holds n entries, its index and
// its hash alike.
func requireHistory(t *testing.T, rdb redis.UniversalClient, s *Store, n int64) {
	t.Helper()
	ctx := context.Background()
	idx, err := rdb.ZCard(ctx, s.Keys(0).HistoryIdx).Result()
	require.NoError(t, err)
	h, err := rdb.HLen(ctx, s.Keys(0).History).Result()
	require.NoError(t, err)
	require.Equal(t, n, idx, "entries in the index")
	require.Equal(t, n, h, "entries in the hash")
}

// TestHistoryOptions: a retention that cannot be is refused.
func TestHistoryOptions(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	for _, o := range []Options{{HistoryCount: -1, HistoryAge: time.Hour}, {HistoryCount: 1}, {HistoryAge: -time.Second}} {
		_, err := New(rdb, o)
		require.Error(t, err, "%+v", o)
	}
}

// TestHistoryTrimsInSteps: past its count a partition's history is
// trimmed in steps of a 64th of the count, never holding more than the
// count plus one step, and a trim keeps the latest entries.
func TestHistoryTrimsInSteps(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	const keep, step = 128, 2 // 128 / 64
	s, err := New(rdb, Options{Namespace: "steps", Partitions: 1, HistoryCount: keep, HistoryAge: time.Hour})
	require.NoError(t, err)
	require.NoError(t, s.Init(ctx))
	now := time.Now().Truncate(time.Microsecond)
	var sizes []int64
	for i := range keep + 5*(step+1) {
		key := fmt.Sprintf("t/n%03d", i)
		_, err := s.Write(ctx, nil, []Write{{Key: key, Due: 1000, Record: rec("x")}})
		require.NoError(t, err)
		_, err = s.Settle(ctx, nil, now.Add(time.Duration(i)*time.Millisecond).UnixMicro(), []Outcome{{Op: Ack, Key: key, Rev: 1}})
		require.NoError(t, err)
		n, err := rdb.ZCard(ctx, s.Keys(0).HistoryIdx).Result()
		require.NoError(t, err)
		require.LessOrEqual(t, n, int64(keep+step), "after %d acks", i+1)
		sizes = append(sizes, n)
	}
	require.Contains(t, sizes, int64(keep+step), "held a step more before trimming")
	last := sizes[len(sizes)-1]
	requireHistory(t, rdb, s, last)
	// The entries kept are the latest.
	for i := keep + 5*(step+1) - int(last); i < keep+5*(step+1); i++ {
		_, st, _, err := s.History(ctx, fmt.Sprintf("t/n%03d", i))
		require.NoError(t, err, "entry %d is one of the latest", i)
		require.Equal(t, Done, st)
	}
	_, _, _, err = s.History(ctx, fmt.Sprintf("t/n%03d", keep+5*(step+1)-int(last)-1))
	require.ErrorIs(t, err, ErrNotFound, "older ones are trimmed")
}
