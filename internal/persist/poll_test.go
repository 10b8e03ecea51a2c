package persist

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

// keysIn returns n job keys of partition p of s, named prefix/i.
func keysIn(s *Store, p, n int, prefix string) []string {
	var ks []string
	for i := 0; len(ks) < n; i++ {
		if k := fmt.Sprintf("%s/%d", prefix, i); s.PartitionOf(k) == p {
			ks = append(ks, k)
		}
	}
	return ks
}

// pollManyChecks runs PollMany's checks on a store of at least 4
// partitions (standalone or Cluster): each partition is done on its own, a
// reset reads from the beginning, pages end in a cursor that RangePending
// continues without repeats or gaps (ties at the page's end included), and
// the next window starts at the earlier of the previous announcement and
// the caller's Scanned.
func pollManyChecks(t *testing.T, ctx context.Context, s *Store, rdb redis.UniversalClient) {
	for p := range 4 {
		tok := "O"
		if p == 1 {
			tok = "X" // partition 1 is another owner's
		}
		held, _, err := s.Lease(ctx, p, LeaseAcquire, tok, time.Minute)
		require.NoError(t, err)
		require.True(t, held)
	}
	// Partition 0: seven jobs at 1000 (a tie across the page's end), three
	// at 3000, one at 9000 (beyond the window).
	ks := keysIn(s, 0, 11, "a")
	var ws []Write
	for i, k := range ks {
		due := int64(1000)
		if i >= 7 {
			due = 3000
		}
		if i == 10 {
			due = 9000
		}
		ws = append(ws, Write{Key: k, Due: due, Record: rec("")})
	}
	// Partition 2: a job in the window; partition 3: a corrupt
	// announcement, whose step fails.
	ws = append(ws, Write{Key: keysIn(s, 2, 1, "c")[0], Due: 2000, Record: rec("")})
	_, err := s.Write(ctx, nil, ws)
	require.NoError(t, err)
	require.NoError(t, rdb.Set(ctx, s.Keys(3).Loaded, "not a number", 0).Err())
	require.NoError(t, rdb.Set(ctx, s.Keys(1).Loaded, "77", 0).Err())

	reqs := []PollRequest{
		{P: 0, Token: "O", Reset: true, Scanned: PollFloor},
		{P: 1, Token: "O", Reset: true, Scanned: PollFloor},
		{P: 2, Token: "O", Reset: true, Scanned: PollFloor},
		{P: 3, Token: "O", Scanned: PollFloor},
	}
	out, err := s.PollMany(ctx, 5000, time.Minute, 100, 4, reqs, nil)
	require.NoError(t, err)
	require.Len(t, out, 4)

	require.NoError(t, out[0].Err)
	require.False(t, out[0].HavePrev)
	require.True(t, out[0].Read)
	require.Len(t, out[0].Page, 4)
	require.False(t, out[0].Cursor.Done)
	got := map[string]bool{}
	for _, e := range out[0].Page {
		got[e.Key] = true
		require.Equal(t, int64(1000), e.Due)
	}
	for cur := out[0].Cursor; !cur.Done; {
		var es []Entry
		es, cur, err = s.RangePending(ctx, 0, PollFloor, 5000, cur, 4)
		require.NoError(t, err)
		for _, e := range es {
			require.False(t, got[e.Key], "repeated %s", e.Key)
			got[e.Key] = true
		}
	}
	require.Len(t, got, 10, "every job due by 5000, once")

	require.ErrorIs(t, out[1].Err, ErrFenced)
	loaded, err := rdb.Get(ctx, s.Keys(1).Loaded).Result()
	require.NoError(t, err)
	require.Equal(t, "77", loaded, "a fenced partition is left as it was")

	require.NoError(t, out[2].Err)
	require.Equal(t, []Entry{{Key: keysIn(s, 2, 1, "c")[0], Due: 2000}}, out[2].Page)
	require.True(t, out[2].Cursor.Done)

	require.Error(t, out[3].Err, "a corrupt announcement fails its partition's step")
	require.NotErrorIs(t, out[3].Err, ErrFenced)

	// The next window: (min(previous announcement, Scanned), loaded]. A
	// Scanned behind the announcement (a scan that failed) widens it; an
	// inbox entry comes with it.
	ik := keysIn(s, 2, 2, "c")[1]
	_, err = s.Write(ctx, nil, []Write{{Key: ik, Due: 4000, Record: rec("")}}) // into the loaded window: inbox
	require.NoError(t, err)
	out, err = s.PollMany(ctx, 10_000, time.Minute, 100, 4, []PollRequest{
		{P: 0, Token: "O", Scanned: 5000},
		{P: 2, Token: "O", Scanned: 1000},
	}, out)
	require.NoError(t, err)
	require.Len(t, out, 2)
	require.NoError(t, out[0].Err)
	require.Equal(t, int64(5000), out[0].Prev)
	require.Equal(t, []Entry{{Key: ks[10], Due: 9000}}, out[0].Page)
	require.True(t, out[0].Cursor.Done)
	require.Empty(t, out[0].Inbox)
	require.NoError(t, out[1].Err)
	require.Equal(t, []Entry{{Key: ik, Due: 4000}}, out[1].Inbox)
	require.Equal(t, []Entry{{Key: keysIn(s, 2, 1, "c")[0], Due: 2000}, {Key: ik, Due: 4000}}, out[1].Page)

	// An empty window (the announcement did not move) reads nothing; a
	// page size of 0 reads no page.
	out, err = s.PollMany(ctx, 10_000, time.Minute, 100, 4, []PollRequest{{P: 0, Token: "O", Scanned: 10_000}}, out)
	require.NoError(t, err)
	require.NoError(t, out[0].Err)
	require.False(t, out[0].Read)
	require.Equal(t, int64(10_000), out[0].Prev)
	out, err = s.PollMany(ctx, 20_000, time.Minute, 100, 0, []PollRequest{{P: 0, Token: "O", Scanned: 10_000}}, out)
	require.NoError(t, err)
	require.NoError(t, out[0].Err)
	require.False(t, out[0].Read)

	_, err = s.PollMany(ctx, 1, time.Minute, 100, 4, []PollRequest{{P: s.Partitions(), Token: "O"}}, nil)
	require.Error(t, err, "a partition out of range")
	_, err = s.PollMany(ctx, 1, time.Minute, 100, -1, reqs, nil)
	require.Error(t, err, "a negative page")
}

func TestPollMany(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	pollManyChecks(t, b.ctx, b.store, b.rdb)
}

// TestPollManyAfterScriptFlush: a server that lost its script cache
// still answers a poll.
func TestPollManyAfterScriptFlush(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	for p := range 2 {
		_, _, err := b.store.Lease(b.ctx, p, LeaseAcquire, "O", time.Minute)
		require.NoError(t, err)
	}
	require.NoError(t, b.rdb.ScriptFlush(b.ctx).Err())
	out, err := b.store.PollMany(b.ctx, 5, time.Minute, 10, 10, []PollRequest{{P: 0, Token: "O"}, {P: 1, Token: "O"}}, nil)
	require.NoError(t, err)
	require.NoError(t, out[0].Err)
	require.NoError(t, out[1].Err)
}

// TestPollManyCluster: on a real Cluster each partition is its own call,
// and the checks hold, with every primary's script cache lost first.
func TestPollManyCluster(t *testing.T) {
	t.Parallel()
	redistest.Start(t, redistest.Options{}).RequireReal(t)
	c := redistest.StartCluster(t)
	rdb := c.Client(t, redis.ClusterOptions{ContextTimeoutEnabled: true})
	ctx := context.Background()
	s, err := New(rdb, Options{Namespace: "pc", Partitions: 16})
	require.NoError(t, err)
	require.NoError(t, s.Init(ctx))
	for _, srv := range c.Primaries(ctx) {
		cl := srv.NewClient()
		require.NoError(t, cl.ScriptFlush(ctx).Err())
		require.NoError(t, cl.Close())
	}
	pollManyChecks(t, ctx, s, rdb)
}
