package persist

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

type bundle struct {
	srv   *redistest.Server
	rdb   redis.UniversalClient
	store *Store
	ctx   context.Context
}

func setup(t testing.TB, parts int) *bundle {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	s, err := New(rdb, Options{Namespace: "t", Partitions: parts})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, s.Init(ctx))
	return &bundle{srv: srv, rdb: rdb, store: s, ctx: ctx}
}

func rec(payload string) []byte {
	return (&Record{Rev: 1, MaxAttempts: 3, Created: time.Now(), Payload: []byte(payload)}).Encode()
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	_, err := New(nil, Options{})
	require.Error(t, err)
	_, err = New(rdb, Options{Namespace: "a{b"})
	require.Error(t, err)
	_, err = New(rdb, Options{Partitions: -1})
	require.Error(t, err)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	_, err = New(ring, Options{})
	require.ErrorIs(t, err, ErrUnsupportedClient)
	s, err := New(rdb, Options{})
	require.NoError(t, err)
	require.Equal(t, 16, s.Partitions())
	require.Equal(t, "default", s.Namespace())
}

// TestClientThatWaitsForever: a client with no read timeout that ignores
// contexts' deadlines would hang the queue's loops on an unreachable Redis.
func TestClientThatWaitsForever(t *testing.T) {
	t.Parallel()
	forever := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: -1})
	defer forever.Close()
	_, err := New(forever, Options{})
	require.ErrorIs(t, err, ErrUnsupportedClient)
	bounded := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: -1, ContextTimeoutEnabled: true})
	defer bounded.Close()
	_, err = New(bounded, Options{})
	require.NoError(t, err, "contexts' deadlines bound its calls")
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ReadTimeout: -2})
	defer cluster.Close()
	_, err = New(cluster, Options{})
	require.ErrorIs(t, err, ErrUnsupportedClient)
}

func TestLayoutMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t, 4)
	other, err := New(b.rdb, Options{Namespace: "t", Partitions: 8})
	require.NoError(t, err)
	require.ErrorIs(t, other.Init(b.ctx), ErrLayout)
}

func TestWriteDuplicateReplace(t *testing.T) {
	t.Parallel()
	b := setup(t, 4)
	res, err := b.store.Write(b.ctx, nil, []Write{
		{Key: "a/1", Due: 1000, Record: rec("x")},
		{Key: "a/2", Due: 2000, Record: rec("y")},
		{Key: "a/1", Due: 3000, Record: rec("z")},
		{Key: "a/2", Due: 4000, Record: rec("w"), Replace: true},
	})
	require.NoError(t, err)
	require.Equal(t, []WriteResult{Stored, Stored, Duplicate, Replaced}, res)
	r, st, err := b.store.Get(b.ctx, "a/1")
	require.NoError(t, err)
	require.Equal(t, Pending, st)
	require.Equal(t, "x", string(r.Payload), "a rejected duplicate changes nothing")
	require.Equal(t, int64(1000), r.Due.UnixMicro())
	r, _, err = b.store.Get(b.ctx, "a/2")
	require.NoError(t, err)
	require.Equal(t, "w", string(r.Payload))
	require.Equal(t, int64(4000), r.Due.UnixMicro())
	_, _, err = b.store.Get(b.ctx, "a/3")
	require.ErrorIs(t, err, ErrNotFound)
}

func TestSettleChecksRevision(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	var ws []Write
	for i := range 4 {
		ws = append(ws, Write{Key: fmt.Sprintf("t/%d", i), Due: 1000, Record: rec("p")})
	}
	_, err := b.store.Write(b.ctx, nil, ws)
	require.NoError(t, err)
	retried := (&Record{Rev: 2, Attempt: 1, MaxAttempts: 3, LastError: "boom"}).Encode()
	applied, err := b.store.Settle(b.ctx, nil, 5000, []Outcome{
		{Op: Ack, Key: "t/0", Rev: 1},
		{Op: Retry, Key: "t/1", Rev: 1, Due: 9000, Record: retried},
		{Op: Dead, Key: "t/2", Rev: 1, Record: retried},
		{Op: Ack, Key: "t/3", Rev: 99}, // stale revision
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true, false}, applied)

	_, _, err = b.store.Get(b.ctx, "t/0")
	require.ErrorIs(t, err, ErrNotFound)
	r, st, err := b.store.Get(b.ctx, "t/1")
	require.NoError(t, err)
	require.Equal(t, Pending, st)
	require.Equal(t, int64(9000), r.Due.UnixMicro())
	require.Equal(t, "boom", r.LastError)
	_, st, err = b.store.Get(b.ctx, "t/2")
	require.NoError(t, err)
	require.Equal(t, DeadLettered, st)
	_, st, err = b.store.Get(b.ctx, "t/3")
	require.NoError(t, err)
	require.Equal(t, Pending, st, "a stale outcome is not applied")

	pending, dead, err := b.store.Counts(b.ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), pending)
	require.Equal(t, int64(1), dead)

	// Requeue the dead job with a fresh record.
	r, _, err = b.store.Get(b.ctx, "t/2")
	require.NoError(t, err)
	ok, err := b.store.Requeue(b.ctx, "", "t/2", r.Rev, 7000, rec("again"))
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = b.store.Requeue(b.ctx, "", "t/2", r.Rev, 7000, rec("again"))
	require.NoError(t, err)
	require.True(t, ok, "the same request again (a replay): requeued already")
	ok, err = b.store.Requeue(b.ctx, "", "t/2", r.Rev, 7000, rec("another"))
	require.NoError(t, err)
	require.False(t, ok, "another requeue: not dead any more")
	_, st, err = b.store.Get(b.ctx, "t/2")
	require.NoError(t, err)
	require.Equal(t, Pending, st)
}

func TestClaimCancelReschedule(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	_, err := b.store.Write(b.ctx, nil, []Write{
		{Key: "c/1", Due: 1000, Record: rec("one")},
		{Key: "c/2", Due: 1000, Record: rec("two")},
		{Key: "c/3", Due: 1000, Record: rec("three")},
	})
	require.NoError(t, err)
	ch, err := b.store.Cancel(b.ctx, "c/2")
	require.NoError(t, err)
	require.Equal(t, Changed, ch)
	ch, err = b.store.Cancel(b.ctx, "c/2")
	require.NoError(t, err)
	require.Equal(t, NotFound, ch)
	ch, err = b.store.Reschedule(b.ctx, "", "c/3", 5000, 42)
	require.NoError(t, err)
	require.Equal(t, Changed, ch)
	ch, err = b.store.Reschedule(b.ctx, "", "c/2", 5000, 42)
	require.NoError(t, err)
	require.Equal(t, NotFound, ch)

	res, err := b.store.Claim(b.ctx, nil, []ClaimRequest{
		{Key: "c/1", Rev: 1, HaveRev: true},
		{Key: "c/2"},
		{Key: "c/3", Rev: 1, HaveRev: true},
		{Key: "c/1"},
	}, nil)
	require.NoError(t, err)
	require.False(t, res[0].Gone)
	require.Nil(t, res[0].Record, "the caller's revision is current")
	require.True(t, res[1].Gone, "cancelled")
	require.Equal(t, int64(5000), res[2].Due, "rescheduled")
	r, err := DecodeRecord(res[2].Record)
	require.NoError(t, err)
	require.Equal(t, uint32(42), r.Rev)
	require.Equal(t, "three", string(r.Payload))
	require.NotNil(t, res[3].Record, "the same (unfenced) caller may claim again")

	// c/1 is claimed now: cancelling or rescheduling says so, and settle
	// clears the mark.
	ch, err = b.store.Reschedule(b.ctx, "", "c/1", 6000, 43)
	require.NoError(t, err)
	require.Equal(t, ChangedWhileRunning, ch)
	applied, err := b.store.Settle(b.ctx, nil, 1, []Outcome{{Op: Ack, Key: "c/1", Rev: 1}})
	require.NoError(t, err)
	require.Equal(t, []bool{false}, applied, "the run's revision is stale after the reschedule")
	ch, err = b.store.Cancel(b.ctx, "c/1")
	require.NoError(t, err)
	require.Equal(t, Changed, ch, "the claim mark was cleared by settle")
	_, err = b.store.Claim(b.ctx, nil, []ClaimRequest{{Key: "c/3"}}, nil)
	require.NoError(t, err)
	ch, err = b.store.Cancel(b.ctx, "c/3")
	require.NoError(t, err)
	require.Equal(t, ChangedWhileRunning, ch)
}

func TestRangePagesThroughTies(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	var ws []Write
	for i := range 25 {
		ws = append(ws, Write{Key: fmt.Sprintf("r/%02d", i), Due: int64(1000 + i/10*1000), Record: rec("")})
	}
	_, err := b.store.Write(b.ctx, nil, ws)
	require.NoError(t, err)
	var got []string
	cur := Cursor{}
	for !cur.Done {
		var es []Entry
		es, cur, err = b.store.RangePending(b.ctx, 0, 0, 2000, cur, 4)
		require.NoError(t, err)
		for _, e := range es {
			got = append(got, e.Key)
		}
	}
	require.Len(t, got, 20, "due <= 2000: the first two groups of ten")
	seen := map[string]bool{}
	for _, k := range got {
		require.False(t, seen[k], "repeated %s", k)
		seen[k] = true
	}
	es, _, err := b.store.RangePending(b.ctx, 0, 2000, 5000, Cursor{}, 100)
	require.NoError(t, err)
	require.Len(t, es, 5, "after is exclusive")
	recs, err := b.store.Records(b.ctx, 0, []string{"r/00", "nope"})
	require.NoError(t, err)
	require.NotNil(t, recs[0])
	require.Nil(t, recs[1])
}

// TestRangeWhileReadMembersAreRemoved: a reload of
// jobs sharing one due time, whose first pages are acked (removed) while
// later pages are read. Paged by score + offset, the offset skipped as many
// unread jobs as had been removed; a cursor on (score, member) skips none.
// Member bytes above 0x7f check the script's byte-wise order.
func TestRangeWhileReadMembersAreRemoved(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	const n, page = 3000, 200
	var ws []Write
	for i := range n {
		due := int64(5000)
		if i%7 == 0 {
			due = 4000 + int64(i%3) // a few before, some ties there too
		}
		ws = append(ws, Write{Key: fmt.Sprintf("r/%04d\xe9%d", i, i%5), Due: due, Record: rec(""), Replace: true, Fresh: true})
	}
	_, err := b.store.Write(b.ctx, nil, ws)
	require.NoError(t, err)
	seen := map[string]bool{}
	var last Entry
	cur := Cursor{}
	for !cur.Done {
		var es []Entry
		es, cur, err = b.store.RangePending(b.ctx, 0, 0, 5000, cur, page)
		require.NoError(t, err)
		var keys []any
		for _, e := range es {
			require.False(t, seen[e.Key], "repeated %s", e.Key)
			require.True(t, e.Due > last.Due || (e.Due == last.Due && e.Key > last.Key), "out of order: %v after %v", e, last)
			seen[e.Key], last = true, e
			keys = append(keys, e.Key)
		}
		if len(keys) > 0 { // acked while the next page is read
			require.NoError(t, b.rdb.ZRem(b.ctx, b.store.Keys(0).Pending, keys...).Err())
		}
	}
	require.Equal(t, n, len(seen), "every job read once")
}

// TestCancelClearsClaimMark: a claim
// applied (its mark set) whose run never came (its reply was lost, or the
// start was refused), then a cancel: the mark stayed until the next
// take-over, and made the job "running" for every later look.
func TestCancelClearsClaimMark(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ownAndAnnounce(t, b, 1, 0)
	_, err := b.store.Write(b.ctx, nil, []Write{{Key: "t/a", Due: 5, Record: rec("x")}})
	require.NoError(t, err)
	res, err := b.store.Claim(b.ctx, []string{"O"}, []ClaimRequest{{Key: "t/a"}}, nil)
	require.NoError(t, err)
	require.False(t, res[0].Gone)
	ch, err := b.store.Cancel(b.ctx, "t/a")
	require.NoError(t, err)
	require.Equal(t, ChangedWhileRunning, ch, "claimed: a run may be in progress")
	n, err := b.rdb.HLen(b.ctx, b.store.Keys(0).Running).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the claim mark of a deleted job is gone with it")
}

func TestLeaseFencing(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	held, _, err := b.store.Lease(b.ctx, 0, LeaseAcquire, "A", time.Minute)
	require.NoError(t, err)
	require.True(t, held)
	held, wait, err := b.store.Lease(b.ctx, 0, LeaseAcquire, "B", time.Minute)
	require.NoError(t, err)
	require.False(t, held)
	require.Greater(t, wait, 50*time.Second)

	key := "f/0"
	for i := 1; b.store.PartitionOf(key) != 0; i++ {
		key = fmt.Sprintf("f/%d", i)
	}
	_, err = b.store.Write(b.ctx, nil, []Write{{Key: key, Due: 1, Record: rec("")}})
	require.NoError(t, err)
	_, err = b.store.Settle(b.ctx, []string{"B", ""}, 1, []Outcome{{Op: Ack, Key: key, Rev: 1}})
	require.ErrorIs(t, err, ErrFenced, "B does not hold partition 0")
	held, _, err = b.store.Lease(b.ctx, 0, LeaseRelease, "A", 0)
	require.NoError(t, err)
	require.True(t, held)
	all, err := b.store.LeaseAll(b.ctx, []int{0, 1}, LeaseAcquire, "B", time.Minute)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, all)
	applied, err := b.store.Settle(b.ctx, []string{"B", "B"}, 1, []Outcome{{Op: Ack, Key: key, Rev: 1}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, applied)
}

// TestScriptsSurviveRestart: a restarted Redis has lost its script cache;
// pipelined EVALSHA must reload and go on.
func TestScriptsSurviveRestart(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	b.srv.RequireReal(t)
	b.srv.Kill()
	require.NoError(t, b.srv.Restart())
	res, err := b.store.Write(b.ctx, nil, []Write{{Key: "s/1", Due: 1, Record: rec("")}})
	require.NoError(t, err)
	require.Equal(t, []WriteResult{Stored}, res)
}

// TestPollAnnounceThenInbox: a job written by a non-owner at or before the
// owner's announced loaded-until time lands in the inbox; one due later, or
// written by the owner, does not.
func TestPollAnnounceThenInbox(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	held, _, err := b.store.Lease(b.ctx, 0, LeaseAcquire, "O", time.Minute)
	require.NoError(t, err)
	require.True(t, held)

	res, err := b.store.Poll(b.ctx, 0, "O", 10_000, time.Minute, true, 100)
	require.NoError(t, err)
	require.False(t, res.HavePrev, "a reset scans from the beginning")

	_, err = b.store.Write(b.ctx, nil, []Write{
		{Key: "i/early", Due: 9_000, Record: rec("")},
		{Key: "i/late", Due: 11_000, Record: rec("")},
	})
	require.NoError(t, err)
	_, err = b.store.Write(b.ctx, []string{"O"}, []Write{{Key: "i/own", Due: 5_000, Record: rec("")}})
	require.NoError(t, err)
	ch, err := b.store.Reschedule(b.ctx, "", "i/late", 8_000, 5)
	require.NoError(t, err)
	require.Equal(t, Changed, ch)
	_, err = b.store.Cancel(b.ctx, "i/early")
	require.NoError(t, err)
	_, err = b.store.Write(b.ctx, nil, []Write{{Key: "i/early", Due: 7_000, Record: rec("")}})
	require.NoError(t, err)

	res, err = b.store.Poll(b.ctx, 0, "O", 20_000, time.Minute, false, 100)
	require.NoError(t, err)
	require.True(t, res.HavePrev)
	require.Equal(t, int64(10_000), res.Prev)
	// i/early twice (its cancelled first incarnation's key is pending again),
	// i/late once (rescheduled into the window); never i/own.
	require.Equal(t, []Entry{{"i/early", 7_000}, {"i/late", 8_000}, {"i/early", 7_000}}, res.Inbox)

	res, err = b.store.Poll(b.ctx, 0, "O", 15_000, time.Minute, false, 100)
	require.NoError(t, err)
	require.Equal(t, int64(20_000), res.Prev)
	require.Empty(t, res.Inbox)
	loaded, err := b.rdb.Get(b.ctx, b.store.Keys(0).Loaded).Int64()
	require.NoError(t, err)
	require.Equal(t, int64(20_000), loaded, "loaded-until never moves back")

	_, err = b.store.Poll(b.ctx, 0, "X", 30_000, time.Minute, false, 100)
	require.ErrorIs(t, err, ErrFenced)
	_, err = b.store.Claim(b.ctx, []string{"X"}, []ClaimRequest{{Key: "i/late"}}, nil)
	require.ErrorIs(t, err, ErrFenced)
}

func TestClaimOfClaimedJobIsBusy(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	_, err := b.store.Write(b.ctx, nil, []Write{{Key: "b/1", Due: 10, Record: rec("x")}})
	require.NoError(t, err)
	held, _, err := b.store.Lease(b.ctx, 0, LeaseAcquire, "A", time.Minute)
	require.NoError(t, err)
	require.True(t, held)
	res, err := b.store.Claim(b.ctx, []string{"A"}, []ClaimRequest{{Key: "b/1"}}, nil)
	require.NoError(t, err)
	require.False(t, res[0].Busy)
	require.NotNil(t, res[0].Record)
	res, err = b.store.Claim(b.ctx, []string{"A"}, []ClaimRequest{{Key: "b/1"}}, nil)
	require.NoError(t, err)
	require.False(t, res[0].Busy, "the claimer's own mark: a claim whose reply was lost is claimed again")
	_, err = b.store.Claim(b.ctx, []string{"B"}, []ClaimRequest{{Key: "b/1"}}, nil)
	require.ErrorIs(t, err, ErrFenced, "B does not hold the lease")
	_, _, err = b.store.Lease(b.ctx, 0, LeaseRelease, "A", 0)
	require.NoError(t, err)
	held, _, err = b.store.Lease(b.ctx, 0, LeaseAcquire, "B", time.Minute)
	require.NoError(t, err)
	require.True(t, held)
	res, err = b.store.Claim(b.ctx, []string{"B"}, []ClaimRequest{{Key: "b/1"}}, nil)
	require.NoError(t, err)
	require.True(t, res[0].Busy, "a run claimed by the previous owner is not run again by the next")
	_, err = b.store.Settle(b.ctx, nil, 1, []Outcome{{Op: Unclaim, Key: "b/1"}})
	require.NoError(t, err)
	res, err = b.store.Claim(b.ctx, []string{"B"}, []ClaimRequest{{Key: "b/1", Rev: 1, HaveRev: true}}, nil)
	require.NoError(t, err)
	require.False(t, res[0].Busy)
	require.Nil(t, res[0].Record, "cached revision current")
}

// TestPlainWriteUsesInbox: a replacing (plain, script-free) write by a
// non-owner into the announced window lands in the inbox, as the scripted
// one does; the owner's own does not. In a cluster (where replacing writes
// run schedule.lua) too.
func TestPlainWriteUsesInbox(t *testing.T) {
	t.Parallel()
	for _, cluster := range []bool{false, true} {
		t.Run(fmt.Sprint("cluster=", cluster), func(t *testing.T) {
			t.Parallel()
			testPlainWriteUsesInbox(t, cluster)
		})
	}
}

func testPlainWriteUsesInbox(t *testing.T, cluster bool) {
	b := setup(t, 1)
	b.store.cluster = cluster
	ownAndAnnounce(t, b, 1, 10_000)
	res, err := b.store.Write(b.ctx, nil, []Write{
		{Key: "p/in", Due: 9_000, Record: rec(""), Replace: true},
		{Key: "p/out", Due: 11_000, Record: rec(""), Replace: true},
	})
	require.NoError(t, err)
	require.Equal(t, []WriteResult{Stored, Stored}, res)
	res, err = b.store.Write(b.ctx, []string{"O"}, []Write{
		{Key: "p/own", Due: 9_000, Record: rec(""), Replace: true},
		{Key: "p/in", Due: 9_500, Record: rec("again"), Replace: true},
	})
	require.NoError(t, err)
	require.Equal(t, []WriteResult{Stored, Replaced}, res)
	pr, err := b.store.Poll(b.ctx, 0, "O", 20_000, time.Minute, false, 100)
	require.NoError(t, err)
	require.Equal(t, []Entry{{"p/in", 9_500}}, pr.Inbox)
}

// TestFreshWritesGrouped: fresh writes of one partition share one HSET and
// one ZADD; every job is stored with its own record and due time, the
// non-owner's ones inside the announced window reach the inbox, and a
// replacing write in the same batch is still told apart. In a cluster
// (where they run schedule.lua) too.
func TestFreshWritesGrouped(t *testing.T) {
	t.Parallel()
	for _, cluster := range []bool{false, true} {
		t.Run(fmt.Sprint("cluster=", cluster), func(t *testing.T) {
			t.Parallel()
			testFreshWritesGrouped(t, cluster)
		})
	}
}

func testFreshWritesGrouped(t *testing.T, cluster bool) {
	b := setup(t, 2)
	b.store.cluster = cluster
	ownAndAnnounce(t, b, 2, 10_000)
	_, err := b.store.Write(b.ctx, nil, []Write{{Key: "g/old", Due: 50_000, Record: rec("old"), Replace: true}})
	require.NoError(t, err)
	var ws []Write
	for i := range 20 {
		ws = append(ws, Write{Key: fmt.Sprintf("g/%d", i), Due: int64(5_000 + 1_000*i), Record: rec(fmt.Sprint(i)), Replace: true, Fresh: true})
	}
	ws = append(ws, Write{Key: "g/old", Due: 6_000, Record: rec("new"), Replace: true})
	res, err := b.store.Write(b.ctx, nil, ws)
	require.NoError(t, err)
	for i, r := range res[:20] {
		require.Equal(t, Stored, r, "write %d", i)
	}
	require.Equal(t, Replaced, res[20])
	var inbox []Entry
	for p := range 2 {
		pr, err := b.store.Poll(b.ctx, p, "O", 20_000, time.Minute, false, 100)
		require.NoError(t, err)
		inbox = append(inbox, pr.Inbox...)
	}
	var want []Entry
	for _, w := range ws {
		if w.Due <= 10_000 {
			want = append(want, Entry{w.Key, w.Due})
		}
	}
	require.ElementsMatch(t, want, inbox, "due within the announced window, written by a non-owner")
	for _, w := range ws {
		got, err := b.rdb.HGet(b.ctx, b.store.Keys(b.store.PartitionOf(w.Key)).Jobs, w.Key).Bytes()
		require.NoError(t, err)
		require.Equal(t, w.Record, got, w.Key)
		due, err := b.rdb.ZScore(b.ctx, b.store.Keys(b.store.PartitionOf(w.Key)).Pending, w.Key).Result()
		require.NoError(t, err)
		require.Equal(t, float64(w.Due), due, w.Key)
	}
}

// TestWriteAfterScriptFlush: a batch that meets NOSCRIPT (Redis lost its
// script cache) is sent again whole, and its plain writes' announcement
// reads still hold: the non-owner's jobs inside the window reach the inbox.
func TestWriteAfterScriptFlush(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ownAndAnnounce(t, b, 1, 10_000)
	require.NoError(t, b.rdb.ScriptFlush(b.ctx).Err())
	res, err := b.store.Write(b.ctx, nil, []Write{
		{Key: "n/rejecting", Due: 9_000, Record: rec("")},
		{Key: "n/fresh", Due: 9_500, Record: rec(""), Replace: true, Fresh: true},
		{Key: "n/later", Due: 12_000, Record: rec(""), Replace: true, Fresh: true},
	})
	require.NoError(t, err)
	require.Equal(t, []WriteResult{Stored, Stored, Stored}, res)
	pr, err := b.store.Poll(b.ctx, 0, "O", 20_000, time.Minute, false, 100)
	require.NoError(t, err)
	require.ElementsMatch(t, []Entry{{"n/rejecting", 9_000}, {"n/fresh", 9_500}}, pr.Inbox)
}

// TestScriptFlushResendsOnlyScripts: a server that lost its script cache
// (a restart, a promoted replica: Redis does not replicate SCRIPT LOAD)
// answers NOSCRIPT to the script calls of a pipeline and runs the rest.
// The whole pipeline was sent again, so a plain write that had applied
// applied twice: a caller's new id written with Replace came back
// Replaced. Only the script calls are sent again.
func TestScriptFlushResendsOnlyScripts(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	require.NoError(t, b.rdb.ScriptFlush(b.ctx).Err())
	res, err := b.store.Write(b.ctx, nil, []Write{
		{Key: "n/rejecting", Due: 9_000, Record: rec("")},
		{Key: "n/replacing-new", Due: 9_500, Record: rec(""), Replace: true},
	})
	require.NoError(t, err)
	require.Equal(t, []WriteResult{Stored, Stored}, res, "each applied once")
}

// TestRepair: inconsistent state that no path writes today but
// a foreign tool, an older version or a partial write may leave: a pending
// entry without a record (it can never run, and sweeps re-armed it
// forever), a record in neither set (a job that will never run, invisible
// to DeadJobs), claim marks of another owner's token or of deleted jobs.
// Repair walks a partition in bounded steps and fixes each.
func TestRepair(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ownAndAnnounce(t, b, 1, 0)
	k := b.store.Keys(0)
	_, err := b.store.Write(b.ctx, nil, []Write{{Key: "t/live", Due: 5, Record: rec("x")}})
	require.NoError(t, err)
	_, err = b.store.Claim(b.ctx, []string{"O"}, []ClaimRequest{{Key: "t/live"}}, nil)
	require.NoError(t, err)
	for i := range 30 { // more than one step's worth
		require.NoError(t, b.rdb.ZAdd(b.ctx, k.Pending, redis.Z{Score: 7, Member: fmt.Sprintf("t/ghost%02d", i)}).Err())
	}
	require.NoError(t, b.rdb.HSet(b.ctx, k.Jobs, "t/orphan", rec("lost")).Err())
	require.NoError(t, b.rdb.HSet(b.ctx, k.Running, "t/gone", "O", "t/stale", "old-owner").Err())
	require.NoError(t, b.rdb.HSet(b.ctx, k.Jobs, "t/stale", rec("s")).Err())
	require.NoError(t, b.rdb.ZAdd(b.ctx, k.Pending, redis.Z{Score: 9, Member: "t/stale"}).Err())

	var cur RepairCursor
	var total RepairResult
	for steps := 0; ; steps++ {
		require.Less(t, steps, 100, "the walk ends")
		var res RepairResult
		cur, res, err = b.store.Repair(b.ctx, 0, "O", cur, 10, 1000)
		require.NoError(t, err)
		total.PendingWithoutRecord += res.PendingWithoutRecord
		total.RecordsInNoSet += res.RecordsInNoSet
		total.StaleMarks += res.StaleMarks
		total.Keys = append(total.Keys, res.Keys...)
		if cur.Done {
			break
		}
	}
	require.Equal(t, 30, total.PendingWithoutRecord)
	require.Equal(t, 1, total.RecordsInNoSet)
	require.Equal(t, 2, total.StaleMarks, "t/gone (no record) and t/stale (another owner's token)")
	require.Contains(t, total.Keys, "t/orphan")
	_, st, err := b.store.Get(b.ctx, "t/orphan")
	require.NoError(t, err)
	require.Equal(t, DeadLettered, st, "the orphan record is dead-lettered: visible and requeue-able")
	n, err := b.rdb.ZCard(b.ctx, k.Pending).Result()
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "t/live and t/stale stay pending")
	marks, err := b.rdb.HGetAll(b.ctx, k.Running).Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"t/live": "O", "t/stale": "!"}, marks,
		"the owner's own mark of a live job stays; another's is a run interrupted: its next run is a rerun")
	_, _, err = b.store.Repair(b.ctx, 0, "intruder", RepairCursor{}, 10, 1000)
	require.ErrorIs(t, err, ErrFenced)
}

// TestRepairLargeRecords: a repair step reads about 1 MiB of
// records, not count of them whatever their size (HSCAN returns values:
// a step of 200 records of 1 MiB held Redis for 3 s). Over 40 records of
// 256 KiB, a step of count 200 stops early; the walk still finds the
// record in no set.
func TestRepairLargeRecords(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ownAndAnnounce(t, b, 1, 0)
	k := b.store.Keys(0)
	big := strings.Repeat("b", 256<<10)
	var ws []Write
	for i := range 40 {
		ws = append(ws, Write{Key: fmt.Sprintf("t/big%02d", i), Due: 5, Record: rec(big)})
	}
	_, err := b.store.Write(b.ctx, nil, ws)
	require.NoError(t, err)
	require.NoError(t, b.rdb.HSet(b.ctx, k.Jobs, "t/orphan", rec(big)).Err())
	var cur RepairCursor
	var found []string
	steps := 0
	for ; !cur.Done; steps++ {
		require.Less(t, steps, 100, "the walk ends")
		var res RepairResult
		cur, res, err = b.store.Repair(b.ctx, 0, "O", cur, 200, 1000)
		require.NoError(t, err)
		found = append(found, res.Keys...)
	}
	require.Equal(t, []string{"t/orphan"}, found)
	require.GreaterOrEqual(t, steps, 4, "41 records of 256 KiB take several steps of about 1 MiB")
}

// TestReplicaAcks: with ReplicaAcks a write returns only once replicas
// acknowledged it (WAIT in the same round trip); without enough replicas it
// fails with ErrNotReplicated, though the primary applied it.
func TestReplicaAcks(t *testing.T) {
	t.Parallel()
	primary := redistest.Start(t, redistest.Options{})
	primary.RequireReal(t)
	replica := primary.StartReplica(t)
	rdb := primary.Client(t)
	ctx := context.Background()
	rc := replica.NewClient()
	defer rc.Close()

	one, err := New(rdb, Options{Namespace: "r", Partitions: 2, ReplicaAcks: 1})
	require.NoError(t, err)
	require.NoError(t, one.Init(ctx))
	res, err := one.Write(ctx, nil, []Write{{Key: "t/a", Due: 5, Record: rec("")}, {Key: "t/b", Due: 5, Record: rec(""), Replace: true, Fresh: true}})
	require.NoError(t, err, "the replica acknowledged")
	require.Equal(t, []WriteResult{Stored, Stored}, res)
	_, err = one.CancelMany(ctx, []string{"t/a"})
	require.NoError(t, err)

	two, err := New(rdb, Options{Namespace: "r", Partitions: 2, ReplicaAcks: 2, ReplicaTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	_, err = two.Write(ctx, nil, []Write{{Key: "t/c", Due: 5, Record: rec("")}})
	require.ErrorIs(t, err, ErrNotReplicated, "one replica of two")
	_, st, err := two.Get(ctx, "t/c")
	require.NoError(t, err)
	require.Equal(t, Pending, st, "the primary applied it")
	_, err = two.RescheduleMany(ctx, nil, []Move{{Key: "t/c", Due: 9, Rev: 2}})
	require.ErrorIs(t, err, ErrNotReplicated)

	// A pop finishes jobs: it too returns them only once replicas have the
	// finish (else a failover could hand them out again).
	for _, k := range []string{"p/x", "p/y"} {
		_, err = one.Write(ctx, nil, []Write{{Key: k, Due: 5, Record: rec("")}})
		require.NoError(t, err)
		require.NoError(t, rdb.ZAdd(ctx, one.ReadyKey(one.PartitionOf(k), "p"), redis.Z{Score: 5, Member: k}).Err())
	}
	_, err = two.Pop(ctx, []string{"p"}, 1, 100, 0)
	require.ErrorIs(t, err, ErrNotReplicated, "one replica of two")
	pr, err := one.Pop(ctx, []string{"p"}, 5, 100, 0)
	require.NoError(t, err, "the replica acknowledged")
	require.Len(t, pr.Jobs, 1, "the other was popped by the call not acknowledged")
}

// TestReplicaAcksCluster: on a real Cluster (three primaries with a
// replica each) every primary that takes a write waits for its own
// replica: writes of every partition succeed; after a CLUSTER FAILOVER
// (the client's slot map is stale: the old primary answers MOVED) and after
// a primary lost its script cache (NOSCRIPT) they still do, each call run
// once; and once one primary has lost its replica, a write to it fails
// with ErrNotReplicated (applied all the same) while writes to the others
// succeed. A keyless WAIT sent to whichever primary go-redis picks would
// count another connection's writes, or none.
func TestReplicaAcksCluster(t *testing.T) {
	t.Parallel()
	redistest.Start(t, redistest.Options{}).RequireReal(t)
	c := redistest.StartCluster(t)
	rdb := c.Client(t, redis.ClusterOptions{ContextTimeoutEnabled: true})
	ctx := context.Background()
	s, err := New(rdb, Options{Namespace: "rc", Partitions: 16, ReplicaAcks: 1, ReplicaTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, s.Init(ctx))
	n := 0
	writeAll := func(what string) {
		t.Helper()
		var ws []Write
		for i := range 48 {
			ws = append(ws, Write{Key: fmt.Sprintf("t/%s-%d", what, n+i), Due: 5, Record: rec(""), Replace: i%2 == 0, Fresh: i%2 == 0})
		}
		n += len(ws)
		var res []WriteResult
		retried := false
		require.Eventually(t, func() bool { // after a failover, the old primary resyncs before it acknowledges
			res, err = s.Write(ctx, nil, ws)
			if errors.Is(err, ErrNotReplicated) {
				retried = true // applied, but not acknowledged in time (a busy machine, a fresh replica)
				return false
			}
			return true
		}, 20*time.Second, 50*time.Millisecond)
		require.NoError(t, err, what)
		for i, r := range res {
			switch {
			case !retried:
				require.Equal(t, Stored, r, "%s: write %d", what, i)
			case ws[i].Replace:
				// The attempt that was not acknowledged may have stored it.
				require.Contains(t, []WriteResult{Stored, Replaced}, r, "%s: write %d, sent again", what, i)
			default:
				require.Contains(t, []WriteResult{Stored, Duplicate}, r, "%s: write %d, sent again", what, i)
			}
		}
		keys := make([]string, len(ws))
		for i, w := range ws {
			keys[i] = w.Key
		}
		chs, err := s.CancelMany(ctx, keys[:8])
		require.NoError(t, err, what)
		require.Equal(t, slices.Repeat([]Change{Changed}, 8), chs)
		var ms []Move
		for _, k := range keys[8:16] {
			ms = append(ms, Move{Key: k, Due: 9, Rev: 2})
		}
		chs, err = s.RescheduleMany(ctx, nil, ms)
		require.NoError(t, err, what)
		require.Equal(t, slices.Repeat([]Change{Changed}, 8), chs)
	}
	writeAll("first")
	c.Failover(t)
	writeAll("after-failover")
	flush := c.Primaries(ctx)[0].NewClient()
	require.NoError(t, flush.ScriptFlush(ctx).Err())
	require.NoError(t, flush.Close())
	writeAll("after-script-flush")

	// Cut one primary's replica off: writes there are applied but not
	// acknowledged; writes elsewhere are.
	var lonely string
	for _, node := range c.Nodes {
		nc := node.NewClient()
		role, err := nc.Do(ctx, "ROLE").Slice()
		_ = nc.Close()
		if err == nil && len(role) > 2 && role[0] == "slave" {
			lonely = fmt.Sprintf("%v:%v", role[1], role[2])
			node.Close()
			break
		}
	}
	require.NotEmpty(t, lonely)
	var there, elsewhere []Write
	for i := 0; len(there) < 4 || len(elsewhere) < 4; i++ {
		w := Write{Key: fmt.Sprintf("t/cut-%d", i), Due: 5, Record: rec("")}
		node, err := rdb.MasterForKey(ctx, s.Keys(s.PartitionOf(w.Key)).Pending)
		require.NoError(t, err)
		if node.Options().Addr == lonely {
			there = append(there, w)
		} else {
			elsewhere = append(elsewhere, w)
		}
	}
	_, err = s.Write(ctx, nil, elsewhere)
	require.NoError(t, err, "the other primaries' replicas acknowledge")
	_, err = s.Write(ctx, nil, there)
	require.ErrorIs(t, err, ErrNotReplicated, "a primary without its replica")
	_, st, err := s.Get(ctx, there[0].Key)
	require.NoError(t, err)
	require.Equal(t, Pending, st, "the primary applied it")
	_, err = s.Write(ctx, nil, append(elsewhere[:1:1], Write{Key: "t/cut-mixed", Due: 5, Record: rec("")}, there[1]))
	require.ErrorIs(t, err, ErrNotReplicated, "one primary of the batch without its replica")
}

// ownAndAnnounce takes the first n partitions' leases as owner "O" and
// announces loaded-until time loaded in each.
func ownAndAnnounce(t *testing.T, b *bundle, n int, loaded int64) {
	t.Helper()
	for p := range n {
		held, _, err := b.store.Lease(b.ctx, p, LeaseAcquire, "O", time.Minute)
		require.NoError(t, err)
		require.True(t, held)
		_, err = b.store.Poll(b.ctx, p, "O", loaded, time.Minute, true, 100)
		require.NoError(t, err)
	}
}

// TestSettleInOrderWithRepeats checks that outcomes of one batch apply as
// if one by one, also when a batch names a job twice (the script reads and
// writes in bulk).
func TestSettleInOrderWithRepeats(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	_, err := b.store.Write(b.ctx, nil, []Write{
		{Key: "s/1", Due: 1000, Record: rec("p")},
		{Key: "s/2", Due: 1000, Record: rec("p")},
	})
	require.NoError(t, err)
	retried := (&Record{Rev: 2, Attempt: 1, MaxAttempts: 3}).Encode()
	applied, err := b.store.Settle(b.ctx, nil, 5000, []Outcome{
		{Op: Ack, Key: "s/1", Rev: 1},
		{Op: Ack, Key: "s/1", Rev: 1}, // gone by now
		{Op: Retry, Key: "s/2", Rev: 1, Due: 9000, Record: retried},
		{Op: Ack, Key: "s/2", Rev: 1}, // stale: the retry gave it revision 2
		{Op: Ack, Key: "s/2", Rev: 2},
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, true, false, true}, applied)
	pending, dead, err := b.store.Counts(b.ctx)
	require.NoError(t, err)
	require.Zero(t, pending)
	require.Zero(t, dead)
	n, err := b.rdb.HLen(b.ctx, b.store.parts[0].Jobs).Result()
	require.NoError(t, err)
	require.Zero(t, n, "no record left")
}

// TestClaimAndSettleLargeBatch claims and acks more jobs of one partition
// than one command of the scripts takes arguments (they split them).
func TestClaimAndSettleLargeBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	const n = 2500
	ws := make([]Write, n)
	reqs := make([]ClaimRequest, n)
	for i := range ws {
		key := fmt.Sprintf("l/%d", i)
		ws[i] = Write{Key: key, Due: int64(1000 + i), Record: rec("p"), Replace: true, Fresh: true}
		reqs[i] = ClaimRequest{Key: key, Rev: 1, HaveRev: i%2 == 0}
	}
	_, err := b.store.Write(b.ctx, nil, ws)
	require.NoError(t, err)
	_, err = b.store.Cancel(b.ctx, "l/7")
	require.NoError(t, err)
	res, err := b.store.Claim(b.ctx, nil, reqs, nil)
	require.NoError(t, err)
	require.Len(t, res, n)
	os := make([]Outcome, 0, n)
	for i, r := range res {
		if i == 7 {
			require.True(t, r.Gone)
			continue
		}
		require.False(t, r.Gone || r.Busy, "job %d", i)
		require.Equal(t, int64(1000+i), r.Due, "job %d", i)
		require.Equal(t, i%2 == 0, r.Record == nil, "job %d: a record only when asked for", i)
		os = append(os, Outcome{Op: Ack, Key: reqs[i].Key, Rev: 1})
	}
	marks, err := b.rdb.HLen(b.ctx, b.store.parts[0].Running).Result()
	require.NoError(t, err)
	require.Equal(t, int64(n-1), marks, "every claimed job is marked running")
	applied, err := b.store.Settle(b.ctx, nil, 5000, os)
	require.NoError(t, err)
	for i, ok := range applied {
		require.True(t, ok, "outcome %d", i)
	}
	for _, k := range []string{b.store.parts[0].Running, b.store.parts[0].Jobs, b.store.parts[0].Pending} {
		exists, err := b.rdb.Exists(b.ctx, k).Result()
		require.NoError(t, err)
		require.Zero(t, exists, "%s is empty", k)
	}
}

// TestClaimSettleAcrossPartitions claims and settles a batch spread over
// partitions, laid out both ways: one script call for all (a standalone
// server) and one per partition (as in a cluster). A partition whose
// lease the caller lost fails the whole call and changes nothing.
func TestClaimSettleAcrossPartitions(t *testing.T) {
	t.Parallel()
	for _, cluster := range []bool{false, true} {
		b := setup(t, 4)
		b.store.cluster = cluster
		const n = 40
		tokens := []string{"A", "A", "A", "A"}
		for p := range 4 {
			held, _, err := b.store.Lease(b.ctx, p, LeaseAcquire, "A", time.Minute)
			require.NoError(t, err)
			require.True(t, held)
		}
		var ws []Write
		var reqs []ClaimRequest
		for i := range n {
			key := fmt.Sprintf("x/%d", i)
			ws = append(ws, Write{Key: key, Due: int64(100 + i), Record: rec("p"), Replace: true, Fresh: true})
			reqs = append(reqs, ClaimRequest{Key: key})
		}
		_, err := b.store.Write(b.ctx, tokens, ws)
		require.NoError(t, err)
		seen := map[int]bool{}
		for _, r := range reqs {
			seen[b.store.PartitionOf(r.Key)] = true
		}
		require.Len(t, seen, 4, "the batch spans every partition")

		// Partition 2's lease goes to B: the claim fails and marks nothing.
		_, _, err = b.store.Lease(b.ctx, 2, LeaseRelease, "A", 0)
		require.NoError(t, err)
		held, _, err := b.store.Lease(b.ctx, 2, LeaseAcquire, "B", time.Minute)
		require.NoError(t, err)
		require.True(t, held)
		_, err = b.store.Claim(b.ctx, tokens, reqs, nil)
		require.ErrorIs(t, err, ErrFenced, "cluster=%v", cluster)
		if !cluster { // (in a cluster the other partitions' calls went through)
			for p := range 4 {
				marks, err := b.rdb.HLen(b.ctx, b.store.parts[p].Running).Result()
				require.NoError(t, err)
				require.Zero(t, marks, "one call: a refusal changes nothing")
			}
		}
		tokens[2] = "B"

		res, err := b.store.Claim(b.ctx, tokens, reqs, nil)
		require.NoError(t, err, "cluster=%v", cluster)
		os := make([]Outcome, n)
		for i, r := range res {
			require.False(t, r.Gone || r.Busy, "job %d", i)
			require.Equal(t, int64(100+i), r.Due, "job %d: its own result", i)
			os[i] = Outcome{Op: Ack, Key: reqs[i].Key, Rev: 1}
		}
		os[5].Rev = 9 // stale: not applied
		applied, err := b.store.Settle(b.ctx, tokens, 1000, os)
		require.NoError(t, err)
		for i, ok := range applied {
			require.Equal(t, i != 5, ok, "outcome %d", i)
		}
		pending, _, err := b.store.Counts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), pending, "only the stale outcome's job is left")
	}
}

// TestArgBuffersReleasedClean checks that the argument slices claims and
// settles give back for reuse keep nothing of the batch (no key or record
// stays reachable from the pool) and that a reused slice lays out a
// later, differently shaped call correctly.
func TestArgBuffersReleasedClean(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // no I/O here
	defer rdb.Close()
	s, err := New(rdb, Options{Namespace: "t", Partitions: 4})
	require.NoError(t, err)
	// Keys of partitions 0 and 2.
	var of [4][]string
	for i := 0; len(of[0]) < 3 || len(of[2]) < 2; i++ {
		k := fmt.Sprintf("k/%d", i)
		p := s.PartitionOf(k)
		of[p] = append(of[p], k)
	}
	reused := 0
	for round := range 20 {
		n0 := 1 + round%3
		keys := append(slices.Clone(of[2][:2]), of[0][:n0]...) // partition 2's first
		c := s.layoutCalls(s.settleHead, nil, len(keys), func(i int) string { return keys[i] }, 5, int64(round))
		require.Len(t, c.args, 1)
		a := c.args[0]
		for i, k := range keys {
			b, j := c.item(i)
			b[j], b[j+1], b[j+2], b[j+3], b[j+4] = "a", k, RevBytes(1), int64(7), []byte("record")
		}
		// Heads: EVALSHA, sha, the number of keys, the keys of partitions
		// 0 and 2, now; then per partition its token, its count, its items.
		nkeys := 2 * len(keysSettle(s.parts[0]))
		require.Equal(t, nkeys, a[2])
		require.Equal(t, int64(round), a[3+nkeys])
		require.Equal(t, n0, a[3+nkeys+2])
		for x, v := range a[3+nkeys+3 : 3+nkeys+3+5*n0] {
			require.NotNil(t, v, "an item slot left empty")
			if x%5 == 1 {
				require.Equal(t, of[0][x/5], v, "partition 0's items in order")
			}
		}
		require.Equal(t, 2, a[3+nkeys+3+5*n0+1], "partition 2's count")
		replies := []any{"the call's reply"}
		for i := range keys {
			r, w := c.reply(replies, i)
			require.Equal(t, "the call's reply", r)
			if i < 2 {
				require.Equal(t, n0+i, w, "partition 2's items come after partition 0's in the reply")
			} else {
				require.Equal(t, i-2, w)
			}
		}
		backing := &a[:cap(a)][cap(a)-1]
		s.release(c)
		for _, v := range a {
			require.Nil(t, v, "a released buffer still holds %v", v)
		}
		b := s.argBuf(1)
		if cap(*b) > 0 && &(*b)[:cap(*b)][cap(*b)-1] == backing {
			reused++
			require.Empty(t, *b)
		}
		s.argBufs.Put(b)
	}
	// sync.Pool may drop what it is given (under -race, on purpose, a
	// quarter of the time); most rounds still get their buffer back.
	require.Positive(t, reused)
}

// everyState writes 12 jobs topic/0 … topic/11 (due 100 + i) that span
// the 4 partitions of b, then dead-letters topic/0 and claims topic/1 (a
// run in progress). It returns their keys.
func everyState(t *testing.T, b *bundle, topic string, tokens []string) []string {
	t.Helper()
	var ws []Write
	var keys []string
	for i := range 12 {
		key := fmt.Sprintf("%s/%d", topic, i)
		keys = append(keys, key)
		ws = append(ws, Write{Key: key, Due: int64(100 + i), Record: rec("p"), Replace: true, Fresh: true})
	}
	_, err := b.store.Write(b.ctx, tokens, ws)
	require.NoError(t, err)
	seen := map[int]bool{}
	for _, k := range keys {
		seen[b.store.PartitionOf(k)] = true
	}
	require.Len(t, seen, 4, "the jobs span every partition")
	applied, err := b.store.Settle(b.ctx, nil, 1, []Outcome{{Op: Dead, Key: keys[0], Rev: 1, Record: rec("p")}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, applied)
	_, err = b.store.Claim(b.ctx, nil, []ClaimRequest{{Key: keys[1]}}, nil)
	require.NoError(t, err)
	return keys
}

// TestCancelManyAcrossPartitions cancels, in one call, jobs of every
// partition in every state: pending, dead, claimed (a run in progress),
// unknown, and one key twice; then a batch larger than one multi-key
// command takes (arguments split). Both layouts: one call for the batch,
// and one per partition as in a cluster.
func TestCancelManyAcrossPartitions(t *testing.T) {
	t.Parallel()
	for _, cluster := range []bool{false, true} {
		b := setup(t, 4)
		b.store.cluster = cluster
		keys := everyState(t, b, "m", nil)

		batch := append([]string{"m/3", "none/1"}, keys...) // m/3 twice: first, and again in keys
		chs, err := b.store.CancelMany(b.ctx, batch)
		require.NoError(t, err, "cluster=%v", cluster)
		want := []Change{Changed, NotFound, Changed, ChangedWhileRunning}
		for range keys[2:] {
			want = append(want, Changed)
		}
		want[2+3] = NotFound // m/3's second cancel
		require.Equal(t, want, chs, "cluster=%v", cluster)
		pending, dead, err := b.store.Counts(b.ctx)
		require.NoError(t, err)
		require.Zero(t, pending)
		require.Zero(t, dead)
		for p := range 4 {
			n, err := b.rdb.HLen(b.ctx, b.store.parts[p].Jobs).Result()
			require.NoError(t, err)
			require.Zero(t, n, "no record left in partition %d", p)
		}

		// 6,000 jobs, about 1,500 a partition: each partition's multi-key
		// commands are split (at most 1,000 arguments each).
		var ws []Write
		keys = keys[:0]
		for i := range 6000 {
			key := fmt.Sprintf("big/%d", i)
			keys = append(keys, key)
			ws = append(ws, Write{Key: key, Due: 5, Record: rec("p"), Replace: true, Fresh: true})
		}
		_, err = b.store.Write(b.ctx, nil, ws)
		require.NoError(t, err)
		chs, err = b.store.CancelMany(b.ctx, keys)
		require.NoError(t, err)
		for i, ch := range chs {
			require.Equal(t, Changed, ch, "job %d", i)
		}
		pending, _, err = b.store.Counts(b.ctx)
		require.NoError(t, err)
		require.Zero(t, pending)
	}
}

// TestRescheduleManyAcrossPartitions moves, in one call, jobs of every
// partition: pending, claimed (a run in progress), dead, unknown, and one
// key twice (both moves apply, in order); a move within the owner's
// announced window goes to the inbox when the caller is not the owner,
// and not when it is. Both layouts.
func TestRescheduleManyAcrossPartitions(t *testing.T) {
	t.Parallel()
	for _, cluster := range []bool{false, true} {
		b := setup(t, 4)
		b.store.cluster = cluster
		ownAndAnnounce(t, b, 4, 10_000) // owner "O" of every partition, loaded until 10,000
		keys := everyState(t, b, "v", []string{"O", "O", "O", "O"})

		// Not the owner: every job moved within the window (<= 10,000) goes
		// to its partition's inbox; v/3 moves twice, last to 20,000.
		ms := []Move{
			{Key: "v/0", Due: 500, Rev: 7},    // dead: not pending
			{Key: "none/1", Due: 500, Rev: 7}, // unknown
			{Key: "v/1", Due: 600, Rev: 7},    // claimed: moved, a run goes on
			{Key: "v/3", Due: 700, Rev: 8},    // within the window
			{Key: "v/3", Due: 20_000, Rev: 9}, // then beyond it
		}
		for _, k := range keys[4:] {
			ms = append(ms, Move{Key: k, Due: 900, Rev: 7})
		}
		chs, err := b.store.RescheduleMany(b.ctx, nil, ms)
		require.NoError(t, err, "cluster=%v", cluster)
		want := []Change{NotFound, NotFound, ChangedWhileRunning, Changed, Changed}
		for range keys[4:] {
			want = append(want, Changed)
		}
		require.Equal(t, want, chs)
		r, st, err := b.store.Get(b.ctx, "v/3")
		require.NoError(t, err)
		require.Equal(t, Pending, st)
		require.Equal(t, uint32(9), r.Rev, "the second move applied last")
		require.Equal(t, int64(20_000), r.Due.UnixMicro())
		var inboxed []string
		for p := range 4 {
			l, err := b.rdb.LRange(b.ctx, b.store.parts[p].Inbox, 0, -1).Result()
			require.NoError(t, err)
			inboxed = append(inboxed, l...)
		}
		wantInbox := append([]string{"v/1", "v/3"}, keys[4:]...)
		require.ElementsMatch(t, wantInbox, inboxed, "moves within the window by a non-owner reach the inbox")

		// The owner moving its own jobs arms them itself: no inbox.
		for p := range 4 {
			require.NoError(t, b.rdb.Del(b.ctx, b.store.parts[p].Inbox).Err())
		}
		chs, err = b.store.RescheduleMany(b.ctx, []string{"O", "O", "O", "O"}, []Move{{Key: "v/5", Due: 800, Rev: 10}, {Key: "v/6", Due: 800, Rev: 10}})
		require.NoError(t, err)
		require.Equal(t, []Change{Changed, Changed}, chs)
		for p := range 4 {
			n, err := b.rdb.LLen(b.ctx, b.store.parts[p].Inbox).Result()
			require.NoError(t, err)
			require.Zero(t, n, "the owner's moves stay out of the inbox")
		}
	}
}

// TestDeadLetterCorrupt: a corrupt record (here 3 bytes and 0 bytes, too
// short to hold a revision) is moved to the dead set only while it is
// still the bytes the caller read; a changed one is left alone; a caller
// that lost the lease changes nothing; the claim marker is cleared.
func TestDeadLetterCorrupt(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	k := b.store.Keys(0)
	dead := rec("raw bytes kept")
	for key, raw := range map[string]string{"x/short": "\x01\x02\x03", "x/empty": ""} {
		require.NoError(t, b.rdb.HSet(b.ctx, k.Jobs, key, raw).Err())
		require.NoError(t, b.rdb.ZAdd(b.ctx, k.Pending, redis.Z{Score: 5, Member: key}).Err())
		require.NoError(t, b.rdb.HSet(b.ctx, k.Running, key, "O").Err())

		moved, err := b.store.DeadLetterCorrupt(b.ctx, "", key, []byte(raw+"?"), dead, 100)
		require.NoError(t, err)
		require.False(t, moved, "%s: the record is not what the caller read", key)
		require.Equal(t, raw, b.rdb.HGet(b.ctx, k.Jobs, key).Val())
		require.Equal(t, float64(5), b.rdb.ZScore(b.ctx, k.Pending, key).Val(), "still pending")
		require.False(t, b.rdb.HExists(b.ctx, k.Running, key).Val(), "claim marker cleared")

		require.NoError(t, b.rdb.Set(b.ctx, k.Lease, "O", 0).Err())
		_, err = b.store.DeadLetterCorrupt(b.ctx, "B", key, []byte(raw), dead, 100)
		require.ErrorIs(t, err, ErrFenced)
		require.Equal(t, float64(5), b.rdb.ZScore(b.ctx, k.Pending, key).Val(), "fenced: nothing moved")

		moved, err = b.store.DeadLetterCorrupt(b.ctx, "O", key, []byte(raw), dead, 100)
		require.NoError(t, err)
		require.True(t, moved, key)
		require.Equal(t, string(dead), b.rdb.HGet(b.ctx, k.Jobs, key).Val())
		require.Zero(t, b.rdb.ZCard(b.ctx, k.Pending).Val())
		require.Equal(t, float64(100), b.rdb.ZScore(b.ctx, k.Dead, key).Val())
		require.NoError(t, b.rdb.Del(b.ctx, k.Lease).Err())
	}
}

// TestSteerKey: a steered key falls in the partition asked for, for any
// partition count the store takes, and is the same every time.
func TestSteerKey(t *testing.T) {
	for _, n := range []int{1, 2, 16, 64, 1000, 4096} {
		for _, p := range []int{0, n / 2, n - 1} {
			k := SteerKey("remind/nightly@1767225600000", p, n)
			require.Equal(t, p, partitionOf(k, n), "n=%d p=%d key %q", n, p, k)
			require.Equal(t, k, SteerKey("remind/nightly@1767225600000", p, n))
		}
	}
}

// TestPollInboxMore: a poll takes at most maxInbox inbox entries and says
// when the inbox may hold more (it held maxInbox or more); the next poll
// takes the rest.
func TestPollInboxMore(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ownAndAnnounce(t, b, 1, 10_000)
	var ws []Write
	for i := range 5 {
		ws = append(ws, Write{Key: fmt.Sprintf("i/%d", i), Due: 1000 + int64(i), Record: rec("")})
	}
	_, err := b.store.Write(b.ctx, nil, ws) // a non-owner's: into the inbox
	require.NoError(t, err)
	_, err = b.store.Cancel(b.ctx, "i/1") // its entry stays, and is skipped
	require.NoError(t, err)

	res, err := b.store.Poll(b.ctx, 0, "O", 10_000, time.Minute, false, 2)
	require.NoError(t, err)
	require.Equal(t, []Entry{{"i/0", 1000}}, res.Inbox)
	require.True(t, res.InboxMore)
	res, err = b.store.Poll(b.ctx, 0, "O", 10_000, time.Minute, false, 2)
	require.NoError(t, err)
	require.Equal(t, []Entry{{"i/2", 1002}, {"i/3", 1003}}, res.Inbox)
	require.True(t, res.InboxMore, "two taken of two: it may hold more")
	res, err = b.store.Poll(b.ctx, 0, "O", 10_000, time.Minute, false, 2)
	require.NoError(t, err)
	require.Equal(t, []Entry{{"i/4", 1004}}, res.Inbox)
	require.False(t, res.InboxMore)
	res, err = b.store.Poll(b.ctx, 0, "O", 10_000, time.Minute, false, 2)
	require.NoError(t, err)
	require.Empty(t, res.Inbox)
	require.False(t, res.InboxMore)
}

// TestPollInboxNone: a poll that asks for no inbox entries leaves them,
// and its partition's step does not fail (a count of 0 pops an empty
// array: no scores to read).
func TestPollInboxNone(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ownAndAnnounce(t, b, 1, 10_000)
	_, err := b.store.Write(b.ctx, nil, []Write{{Key: "i/0", Due: 1000, Record: rec("")}})
	require.NoError(t, err)
	res, err := b.store.Poll(b.ctx, 0, "O", 10_000, time.Minute, false, 0)
	require.NoError(t, err)
	require.Empty(t, res.Inbox)
	require.False(t, res.InboxMore)
	res, err = b.store.Poll(b.ctx, 0, "O", 10_000, time.Minute, false, 10)
	require.NoError(t, err)
	require.Equal(t, []Entry{{"i/0", 1000}}, res.Inbox)
}
