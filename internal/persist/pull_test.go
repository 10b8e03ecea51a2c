package persist

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

// TestPullScripts walks a pulled job through the scripts: due queues it
// (or reserves it), take reserves the oldest for any process, resolve
// acks, retries, touches and releases it by token, a stale or replayed
// token is told apart, and a reservation past its deadline lapses into
// the owner's claim.
//
// It runs on a redis-server and on miniredis (a newcomer's first run):
// miniredis's Lua once handed out one job five times in one take.
func TestPullScripts(t *testing.T) {
	t.Parallel()
	onRedisAndMiniredis(t, pullScripts)
}

// onRedisAndMiniredis runs f on a redis-server and on miniredis (the
// embedded Redis of a newcomer's first run), in parallel subtests.
func onRedisAndMiniredis(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		f(t, setup(t, 1).rdb)
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		srv, err := redistest.StartMiniredis()
		require.NoError(t, err)
		t.Cleanup(srv.Close)
		rdb := srv.NewClient()
		t.Cleanup(func() { _ = rdb.Close() })
		f(t, rdb)
	})
}

// ownedStore returns a store of one partition on namespace ns, with a
// run history, whose lease the token "own" holds.
func ownedStore(t *testing.T, rdb redis.UniversalClient, ns string) *Store {
	t.Helper()
	s, err := New(rdb, Options{Namespace: ns, Partitions: 1, HistoryCount: 100, HistoryAge: time.Hour})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, s.Init(ctx))
	held, _, err := s.Lease(ctx, 0, LeaseAcquire, "own", time.Minute)
	require.NoError(t, err)
	require.True(t, held)
	return s
}

func pullScripts(t *testing.T, rdb redis.UniversalClient) {
	// With a run history (a replayed ack is told by it).
	s := ownedStore(t, rdb, "h")
	ctx := context.Background()
	var ws []Write
	for i := range 4 {
		ws = append(ws, Write{Key: JobKey("p", fmt.Sprint(i)), Due: int64(1000 + i), Record: rec(fmt.Sprint("pay", i)), Replace: true})
	}
	ws = append(ws, Write{Key: JobKey("p", "later"), Due: 5000, Record: rec("later"), Replace: true})
	_, err := s.Write(ctx, nil, ws)
	require.NoError(t, err)

	// Fenced: another token changes nothing.
	fenced, err := s.Due(ctx, []string{"other"}, 2000, 2000, []DueJob{{Key: "p/0"}})
	require.NoError(t, err)
	require.Equal(t, DueFenced, fenced[0].Status)

	// p/0..2 queued, p/3 reserved at once, p/later not due, q/x gone.
	res, err := s.Due(ctx, []string{"own"}, 2000, 2000, []DueJob{{Key: "p/1"}, {Key: "p/0"}, {Key: "p/2"},
		{Key: "p/3", Nonce: "n3", Deadline: 9000}, {Key: "p/later"}, {Key: "q/x"}})
	require.NoError(t, err)
	require.Equal(t, []DueStatus{DueQueued, DueQueued, DueQueued, DueReserved, DueMoved, DueGone},
		[]DueStatus{res[0].Status, res[1].Status, res[2].Status, res[3].Status, res[4].Status, res[5].Status})
	require.Equal(t, int64(5000), res[4].Score)
	tok3 := res[3].Token
	// Queued again (a reload armed it again): still queued, once.
	again, err := s.Due(ctx, []string{"own"}, 2000, 2000, []DueJob{{Key: "p/1"}})
	require.NoError(t, err)
	require.Equal(t, DueQueued, again[0].Status)
	n0, err := rdb.ZCard(ctx, s.ReadyKey(0, "p")).Result()
	require.NoError(t, err)
	require.Equal(t, int64(3), n0)
	require.Equal(t, "00000001n3", tok3)
	d3, err := DecodeRecord(res[3].Record)
	require.NoError(t, err)
	require.Equal(t, "pay3", string(d3.Payload))

	// take: oldest first, at most max; then the rest.
	tr, err := s.Take(ctx, []string{"p"}, 2, 2000, 8000, "N", "", 0)
	require.NoError(t, err)
	require.Len(t, tr.Jobs, 2)
	require.Equal(t, "p/0", tr.Jobs[0].Key)
	require.Equal(t, "p/1", tr.Jobs[1].Key)
	require.Equal(t, int64(1000), tr.Jobs[0].Due)
	// A cancelled job's ready entry is stale: skipped.
	_, err = s.Cancel(ctx, "p/2")
	require.NoError(t, err)
	tr2, err := s.Take(ctx, []string{"p"}, 5, 2000, 8000, "M", "", 0)
	require.NoError(t, err)
	require.Empty(t, tr2.Jobs)
	n, err := rdb.ZCard(ctx, s.ReadyKey(0, "p")).Result()
	require.NoError(t, err)
	require.Zero(t, n, "stale entry removed")

	t0, t1 := tr.Jobs[0], tr.Jobs[1]
	// Ack p/0; the same ack again is recognised; a wrong token is lost.
	r, err := s.Resolve(ctx, 3000, []ResolveOp{{Op: 'a', Key: t0.Key, Token: t0.Token}, {Op: 'a', Key: t0.Key, Token: t0.Token},
		{Op: 'a', Key: t1.Key, Token: "00000001bogus"}})
	require.NoError(t, err)
	require.Equal(t, "11x", string(r))
	_, st, err := s.Get(ctx, t0.Key)
	require.ErrorIs(t, err, ErrNotFound)
	_, st, _, err = s.History(ctx, t0.Key)
	require.NoError(t, err)
	require.Equal(t, Done, st)

	// Touch p/1, then retry it; its mark is gone and it is pending again.
	r, err = s.Resolve(ctx, 3000, []ResolveOp{{Op: 't', Key: t1.Key, Token: t1.Token, Score: 20000}})
	require.NoError(t, err)
	require.Equal(t, "1", string(r))
	sc, err := rdb.ZScore(ctx, s.Keys(0).Pending, t1.Key).Result()
	require.NoError(t, err)
	require.Equal(t, float64(20000), sc)
	retry := (&Record{Rev: 7, Attempt: 1, MaxAttempts: 3, Payload: []byte("pay1")}).Encode()
	op := ResolveOp{Op: 'r', Key: t1.Key, Token: t1.Token, Score: 4000, Record: retry}
	r, err = s.Resolve(ctx, 3000, []ResolveOp{op, op})
	require.NoError(t, err)
	require.Equal(t, "11", string(r), "a retry sent again is recognised")
	got, st, err := s.Get(ctx, t1.Key)
	require.NoError(t, err)
	require.Equal(t, Pending, st)
	require.Equal(t, 1, got.Attempt)
	// The old token no longer acks it.
	r, err = s.Resolve(ctx, 3000, []ResolveOp{{Op: 'a', Key: t1.Key, Token: t1.Token}})
	require.NoError(t, err)
	require.Equal(t, "x", string(r))

	// p/3's reservation: at its deadline due.lua says lapsed and claims
	// it for the owner; the consumer's ack is then lost.
	res, err = s.Due(ctx, []string{"own"}, 8999, 8999, []DueJob{{Key: "p/3"}})
	require.NoError(t, err)
	require.Equal(t, DueMoved, res[0].Status)
	require.Equal(t, int64(9000), res[0].Score)
	res, err = s.Due(ctx, []string{"own"}, 9000, 9000, []DueJob{{Key: "p/3"}})
	require.NoError(t, err)
	require.Equal(t, DueLapsed, res[0].Status)
	r, err = s.Resolve(ctx, 9001, []ResolveOp{{Op: 'a', Key: "p/3", Token: tok3}})
	require.NoError(t, err)
	require.Equal(t, "x", string(r))

	// Release: back in the ready set at its due time, for the next take.
	res, err = s.Due(ctx, []string{"own"}, 6000, 6000, []DueJob{{Key: "p/later", Nonce: "L", Deadline: 50000}})
	require.NoError(t, err)
	require.Equal(t, DueReserved, res[0].Status)
	r, err = s.Resolve(ctx, 6000, []ResolveOp{{Op: 'u', Key: "p/later", Token: res[0].Token, Score: 5000}})
	require.NoError(t, err)
	require.Equal(t, "1", string(r))
	res, err = s.Due(ctx, []string{"own"}, 6000, 6000, []DueJob{{Key: "p/1"}}) // the retry's time came
	require.NoError(t, err)
	require.Equal(t, DueQueued, res[0].Status)
	tr, err = s.Take(ctx, []string{"p"}, 5, 6000, 70000, "K", "", 0)
	require.NoError(t, err)
	require.Len(t, tr.Jobs, 2, "p/1 (retried, due 4000) and p/later")
	require.Equal(t, "p/1", tr.Jobs[0].Key)
	require.Equal(t, "p/later", tr.Jobs[1].Key)
	require.Empty(t, tr.Paused)

	// Cancel while reserved: the ack says cancelled.
	_, err = s.Cancel(ctx, "p/later")
	require.NoError(t, err)
	r, err = s.Resolve(ctx, 6000, []ResolveOp{{Op: 'a', Key: "p/later", Token: tr.Jobs[1].Token}})
	require.NoError(t, err)
	require.Equal(t, "c", string(r))

	// Paused topics are reported and not taken.
	require.NoError(t, s.SetPaused(ctx, "p", true))
	tr, err = s.Take(ctx, []string{"p", "z"}, 5, 6000, 70000, "P", "", 0)
	require.NoError(t, err)
	require.Equal(t, []string{"p"}, tr.Paused)
}

// TestDeclareTopics: a topic is recorded one way; the other is refused
// until it is forgotten.
func TestDeclareTopics(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ctx, s := b.ctx, b.store
	require.NoError(t, s.DeclareTopics(ctx, map[string]string{"a": ModePull, "b": ModeHandler}))
	require.NoError(t, s.DeclareTopics(ctx, map[string]string{"a": ModePull}))
	err := s.DeclareTopics(ctx, map[string]string{"c": ModePull, "b": ModePull})
	require.ErrorIs(t, err, ErrTopicMode)
	m, err := s.TopicModes(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": ModePull, "b": ModeHandler}, m, "a refusal records nothing")
	require.NoError(t, b.rdb.HDel(ctx, topicsKey("t"), "b").Err()) // as docs/operations.md says to
	require.NoError(t, s.DeclareTopics(ctx, map[string]string{"b": ModePull}))
}

// BenchmarkTake: reserving 100 due jobs from the ready sets of 16
// partitions (outside a cluster, one call), and acking them (Resolve).
// Compare with BenchmarkClaimSettle's per-job figures.
func BenchmarkTake(b *testing.B) {
	for _, batch := range []int{100, 800} {
		b.Run(fmt.Sprint("batch=", batch), func(b *testing.B) { benchTake(b, batch) })
	}
}

// benchTake takes batch due jobs of 16 partitions at a time and acks them.
func benchTake(b *testing.B, batch int) {
	bb := setup(b, 16)
	ctx, s := bb.ctx, bb.store
	n := b.N * batch
	var ws []Write
	for i := range n {
		ws = append(ws, Write{Key: JobKey("p", fmt.Sprint(i)), Due: int64(1000 + i), Record: rec("0123456789012345678901234567890123456789012345678901234567890123"), Replace: true})
		if len(ws) == 1000 || i == n-1 {
			_, err := s.Write(ctx, nil, ws)
			require.NoError(b, err)
			ws = ws[:0]
		}
	}
	pipe := bb.rdb.Pipeline()
	for i := range n {
		k := JobKey("p", fmt.Sprint(i))
		pipe.ZAdd(ctx, s.ReadyKey(s.PartitionOf(k), "p"), redis.Z{Score: float64(1000 + i), Member: k})
	}
	_, err := pipe.Exec(ctx)
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	taken := 0
	var inTake time.Duration
	for i := range b.N {
		t0 := time.Now()
		tr, err := s.Take(ctx, []string{"p"}, batch, 1<<40, 1<<41, "n"+fmt.Sprint(i), "", 0)
		if err != nil {
			b.Fatal(err)
		}
		inTake += time.Since(t0)
		ops := make([]ResolveOp, len(tr.Jobs))
		for j, t := range tr.Jobs {
			ops[j] = ResolveOp{Op: 'a', Key: t.Key, Token: t.Token}
		}
		if _, err := s.Resolve(ctx, 1<<40, ops); err != nil {
			b.Fatal(err)
		}
		taken += len(tr.Jobs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(max(taken, 1)), "ns/job")
	b.ReportMetric(float64(inTake.Nanoseconds())/float64(max(taken, 1)), "take-ns/job")
}

// TestDueSpansPartitions: one due.lua call covers the jobs of several
// partitions; those of a partition whose lease is another's are answered
// fenced while the others are handed out.
// TestDueReplay: a reservation asked again with the nonce of the call
// that made it (its reply lost) is known: DueReplayed, the same token,
// the score it had (its deadline) and its deadline renewed; asked with
// another nonce it is another's (not due until its deadline); once its
// deadline passed it lapses whatever the nonce. On a redis-server and on
// miniredis.
func TestDueReplay(t *testing.T) {
	t.Parallel()
	onRedisAndMiniredis(t, func(t *testing.T, rdb redis.UniversalClient) {
		s := ownedStore(t, rdb, "replay")
		ctx := context.Background()
		_, err := s.Write(ctx, nil, []Write{{Key: "p/a", Due: 1000, Record: rec("pay"), Replace: true}})
		require.NoError(t, err)
		res, err := s.Due(ctx, []string{"own"}, 900, 1010, []DueJob{{Key: "p/a", Nonce: "N", Deadline: 5000}})
		require.NoError(t, err)
		require.Equal(t, DueReserved, res[0].Status, "reserved ahead")
		require.Equal(t, int64(1000), res[0].Score)
		tok := res[0].Token

		res, err = s.Due(ctx, []string{"own"}, 950, 1010, []DueJob{{Key: "p/a", Nonce: "N", Deadline: 6000}})
		require.NoError(t, err)
		require.Equal(t, DueReplayed, res[0].Status)
		require.Equal(t, tok, res[0].Token)
		require.Equal(t, int64(5000), res[0].Score, "the deadline it had")
		d, err := DecodeRecord(res[0].Record)
		require.NoError(t, err)
		require.Equal(t, "pay", string(d.Payload))
		sc, err := rdb.ZScore(ctx, s.Keys(0).Pending, "p/a").Result()
		require.NoError(t, err)
		require.Equal(t, float64(6000), sc, "renewed")

		res, err = s.Due(ctx, []string{"own"}, 950, 1010, []DueJob{{Key: "p/a", Nonce: "other", Deadline: 7000}})
		require.NoError(t, err)
		require.Equal(t, DueMoved, res[0].Status, "another's reservation")
		require.Equal(t, int64(6000), res[0].Score)

		res, err = s.Due(ctx, []string{"own"}, 6000, 6000, []DueJob{{Key: "p/a", Nonce: "N", Deadline: 9000}})
		require.NoError(t, err)
		require.Equal(t, DueLapsed, res[0].Status, "past its deadline: lapsed, not made again")
		r, err := s.Resolve(ctx, 6001, []ResolveOp{{Op: 'a', Key: "p/a", Token: tok}})
		require.NoError(t, err)
		require.Equal(t, "x", string(r))
	})
}

func TestDueSpansPartitions(t *testing.T) {
	t.Parallel()
	b := setup(t, 4)
	ctx, s := b.ctx, b.store
	var keys []string
	for i := 0; len(keys) < 12; i++ {
		keys = append(keys, JobKey("p", fmt.Sprint(i)))
	}
	var ws []Write
	for i, k := range keys {
		ws = append(ws, Write{Key: k, Due: int64(100 + i), Record: rec("x"), Replace: true})
	}
	_, err := s.Write(ctx, nil, ws)
	require.NoError(t, err)
	tokens := []string{"a", "a", "a", "a"}
	for p := range 3 {
		held, _, err := s.Lease(ctx, p, LeaseAcquire, "a", time.Minute)
		require.NoError(t, err)
		require.True(t, held)
	}
	held, _, err := s.Lease(ctx, 3, LeaseAcquire, "other", time.Minute)
	require.NoError(t, err)
	require.True(t, held)
	jobs := make([]DueJob, len(keys))
	for i, k := range keys {
		jobs[i] = DueJob{Key: k}
		if i%2 == 0 {
			jobs[i].Nonce, jobs[i].Deadline = fmt.Sprint("n", i), 9000
		}
	}
	res, err := s.Due(ctx, tokens, 1000, 1000, jobs)
	require.NoError(t, err)
	seen := map[int]bool{}
	for i, r := range res {
		p := s.PartitionOf(keys[i])
		seen[p] = true
		switch {
		case p == 3:
			require.Equal(t, DueFenced, r.Status, keys[i])
		case i%2 == 0:
			require.Equal(t, DueReserved, r.Status, keys[i])
			require.Equal(t, int64(100+i), r.Score)
			require.Equal(t, RevHex(string(r.Record))+fmt.Sprint("n", i), r.Token)
		default:
			require.Equal(t, DueQueued, r.Status, keys[i])
		}
	}
	require.Len(t, seen, 4, "the jobs span every partition")
}

// TestPop: a pop takes due ready jobs oldest first, as a take does, and
// finishes them in the same call: they leave the queue for the run
// history as done, and no take or pop hands them out again; a reserved
// job is not popped, nor a paused topic's. On a redis-server and on
// miniredis.
func TestPop(t *testing.T) {
	t.Parallel()
	onRedisAndMiniredis(t, popScript)
}

func popScript(t *testing.T, rdb redis.UniversalClient) {
	s := ownedStore(t, rdb, "pop")
	ctx := context.Background()
	var ws []Write
	var due []DueJob
	for i := range 5 {
		ws = append(ws, Write{Key: JobKey("p", fmt.Sprint(i)), Due: int64(1000 + i), Record: rec(fmt.Sprint("pay", i)), Replace: true})
		due = append(due, DueJob{Key: JobKey("p", fmt.Sprint(i))})
	}
	_, err := s.Write(ctx, nil, ws)
	require.NoError(t, err)
	_, err = s.Due(ctx, []string{"own"}, 2000, 2000, due)
	require.NoError(t, err)

	// p/0 reserved by a take: not popped.
	tr, err := s.Take(ctx, []string{"p"}, 1, 2000, 9000, "N", "", 0)
	require.NoError(t, err)
	require.Len(t, tr.Jobs, 1)
	require.Equal(t, "p/0", tr.Jobs[0].Key)

	pr, err := s.Pop(ctx, []string{"p"}, 2, 2000, 0)
	require.NoError(t, err)
	require.Len(t, pr.Jobs, 2)
	require.Equal(t, []string{"p/1", "p/2"}, []string{pr.Jobs[0].Key, pr.Jobs[1].Key})
	require.Empty(t, pr.Jobs[0].Token)
	require.Equal(t, int64(1001), pr.Jobs[0].Due)
	d, err := DecodeRecord(pr.Jobs[1].Record)
	require.NoError(t, err)
	require.Equal(t, "pay2", string(d.Payload))
	for _, j := range pr.Jobs {
		_, _, err := s.Get(ctx, j.Key)
		require.ErrorIs(t, err, ErrNotFound, "popped: gone from the queue")
		_, st, _, err := s.History(ctx, j.Key)
		require.NoError(t, err)
		require.Equal(t, Done, st, "popped: done in the run history")
	}
	// The reserved one is still reserved, the rest ready.
	_, st, err := s.Get(ctx, "p/0")
	require.NoError(t, err)
	require.Equal(t, Reserved, st)

	// Paused: nothing popped, and the topic said paused.
	require.NoError(t, s.SetPaused(ctx, "p", true))
	pr, err = s.Pop(ctx, []string{"p"}, 10, 2000, 0)
	require.NoError(t, err)
	require.Empty(t, pr.Jobs)
	require.Equal(t, []string{"p"}, pr.Paused)
	require.NoError(t, s.SetPaused(ctx, "p", false))

	// The rest, once; then nothing.
	pr, err = s.Pop(ctx, []string{"p"}, 10, 2000, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"p/3", "p/4"}, []string{pr.Jobs[0].Key, pr.Jobs[1].Key})
	pr, err = s.Pop(ctx, []string{"p"}, 10, 2000, 0)
	require.NoError(t, err)
	require.Empty(t, pr.Jobs)
	tr, err = s.Take(ctx, []string{"p"}, 10, 2000, 9000, "M", "", 0)
	require.NoError(t, err)
	require.Empty(t, tr.Jobs)
}

// TestTakeTokensOfEveryRevision: a take's token starts with its record's
// revision in hex (take.lua writes it with one format of the 4 bytes as a
// number), so a revision with its top bit set, or with leading zero
// bytes, must come out as the same 8 characters due.lua and the client
// write, and an ack by that token applies.
func TestTakeTokensOfEveryRevision(t *testing.T) {
	t.Parallel()
	onRedisAndMiniredis(t, func(t *testing.T, rdb redis.UniversalClient) {
		s := ownedStore(t, rdb, "revs")
		ctx := context.Background()
		revs := []uint32{0xdeadbeef, 0x0000010f, 0xffffffff, 0x80000000, 0}
		var ws []Write
		var due []DueJob
		for i, rv := range revs {
			r := &Record{Rev: rv, MaxAttempts: 3, Created: time.Now(), Payload: []byte("x")}
			key := JobKey("p", fmt.Sprint(i))
			ws = append(ws, Write{Key: key, Due: int64(1000 + i), Record: r.Encode(), Replace: true})
			due = append(due, DueJob{Key: key})
		}
		_, err := s.Write(ctx, nil, ws)
		require.NoError(t, err)
		_, err = s.Due(ctx, []string{"own"}, 2000, 2000, due)
		require.NoError(t, err)
		tr, err := s.Take(ctx, []string{"p"}, len(revs), 2000, 9000, "N", "own", 0)
		require.NoError(t, err)
		require.Len(t, tr.Jobs, len(revs))
		var ops []ResolveOp
		for i, j := range tr.Jobs {
			require.True(t, strings.HasPrefix(j.Token, fmt.Sprintf("%08xN", revs[i])), "job %s: token %q", j.Key, j.Token)
			ops = append(ops, ResolveOp{Op: 'a', Key: j.Key, Token: j.Token})
		}
		out, err := s.Resolve(ctx, 3000, ops)
		require.NoError(t, err)
		require.Equal(t, strings.Repeat(string(rune(Resolved)), len(revs)), string(out))
	})
}
