package persist

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// packBackends runs f on a real redis-server (or redistest's fallback),
// alone and as in a cluster (a call per partition), and on miniredis (the
// embedded Redis of the quickstart, whose Lua lacks the struct library):
// claim.lua and settle.lua decode their packed arguments on all of them.
func packBackends(t *testing.T, parts int, f func(t *testing.T, b *bundle)) {
	for _, name := range []string{"redis", "cluster", "miniredis"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var b *bundle
			if name == "miniredis" {
				m := miniredis.RunT(t)
				rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
				t.Cleanup(func() { _ = rdb.Close() })
				s, err := New(rdb, Options{Namespace: "t", Partitions: parts})
				require.NoError(t, err)
				b = &bundle{rdb: rdb, store: s, ctx: context.Background()}
				require.NoError(t, s.Init(b.ctx))
			} else {
				b = setup(t, parts)
				b.store.cluster = name == "cluster"
			}
			f(t, b)
		})
	}
}

// awkwardKeys are job keys that a packed argument must carry intact: an
// empty id, binary bytes, commas and line ends (the reply's separators
// and RESP's), a key longer than 64 KiB.
func awkwardKeys() []string {
	return []string{
		"a/",
		"a/\x00\xff\x01,\r\n",
		"a/,,,",
		"a/" + strings.Repeat("k,\x00", 30_000),
		"a/plain",
		"",
	}
}

// TestClaimPackedAwkward: a claim packs its jobs into one argument per
// partition; awkward keys, records of 0 bytes and of more than 64 KiB,
// expected due times that match the score, differ from it, or are not
// given, all come back as they are stored.
func TestClaimPackedAwkward(t *testing.T) {
	t.Parallel()
	packBackends(t, 3, func(t *testing.T, b *bundle) {
		big := rec(strings.Repeat("x", 70<<10))
		var ws []Write
		for i, k := range awkwardKeys() {
			r := rec(fmt.Sprint(i))
			switch i {
			case 1:
				r = big
			case 2:
				r = []byte{} // not a record: claim returns it as it is
			}
			ws = append(ws, Write{Key: k, Due: 1_764_000_000_000_000 + int64(i), Record: r, Replace: true})
		}
		_, err := b.store.Write(b.ctx, nil, ws)
		require.NoError(t, err)
		var reqs []ClaimRequest
		for i, w := range ws {
			r := ClaimRequest{Key: w.Key}
			switch i % 3 {
			case 0:
				r.Due = w.Due // expected right
			case 1:
				r.Due = w.Due - 7 // rescheduled since: the score is returned
			}
			if i >= 3 {
				r.Rev, r.HaveRev = 1, true
			}
			reqs = append(reqs, r)
		}
		reqs = append(reqs, ClaimRequest{Key: "a/missing", Due: 5}, ClaimRequest{Key: "a/missing2"})
		res, err := b.store.Claim(b.ctx, []string{"", "", ""}, reqs, nil)
		require.NoError(t, err)
		require.Len(t, res, len(reqs))
		for i, w := range ws {
			r := res[i]
			require.False(t, r.Gone || r.Busy || r.Deferred || r.Paused, "job %d: %+v", i, r)
			require.Equal(t, w.Due, r.Due, "job %d: its score, whatever the caller expected", i)
			if i >= 3 {
				require.Nil(t, r.Record, "job %d: the caller's revision is current", i)
			} else {
				require.Equal(t, w.Record, r.Record, "job %d: its record", i)
			}
		}
		require.True(t, res[len(ws)].Gone)
		require.True(t, res[len(ws)+1].Gone)
		// Claimed: marked running under each key, byte for byte.
		for _, w := range ws {
			ch, err := b.store.Cancel(b.ctx, w.Key)
			require.NoError(t, err)
			require.Equal(t, ChangedWhileRunning, ch, "key %q", w.Key[:min(len(w.Key), 12)])
		}
	})
}

// TestSettlePackedAwkward: a settle packs its outcomes into two arguments
// per partition; awkward keys, records of 0 bytes and of more than 64
// KiB, duplicates of a key in one batch, a replay, a stale revision and an
// unclaim all settle as they did one argument each.
func TestSettlePackedAwkward(t *testing.T) {
	t.Parallel()
	packBackends(t, 3, func(t *testing.T, b *bundle) {
		keys := awkwardKeys()
		var ws []Write
		for _, k := range keys {
			ws = append(ws, Write{Key: k, Due: 1000, Record: rec("p"), Replace: true})
		}
		_, err := b.store.Write(b.ctx, nil, ws)
		require.NoError(t, err)
		big := (&Record{Rev: 2, Attempt: 1, MaxAttempts: 3, Payload: []byte(strings.Repeat("y", 70<<10))}).Encode()
		small := (&Record{Rev: 2, Attempt: 1, MaxAttempts: 3}).Encode()
		const due = 1_764_000_000_000_123 // past 2^50: exact only as written
		os := []Outcome{
			{Op: Retry, Key: keys[0], Rev: 1, Due: due, Record: big},
			{Op: Dead, Key: keys[1], Rev: 1, Record: []byte{}}, // 0 bytes
			{Op: Ack, Key: keys[2], Rev: 1},
			{Op: Ack, Key: keys[2], Rev: 1}, // gone by now
			{Op: Retry, Key: keys[3], Rev: 1, Due: due + 1, Record: small},
			{Op: Ack, Key: keys[3], Rev: 1}, // stale: the retry gave it revision 2
			{Op: Unclaim, Key: keys[4]},
			{Op: Ack, Key: keys[5], Rev: 9},                          // stale
			{Op: Retry, Key: keys[0], Rev: 1, Due: due, Record: big}, // a replay of the first
		}
		applied, err := b.store.Settle(b.ctx, nil, 5000, os)
		require.NoError(t, err)
		require.Equal(t, []bool{true, true, true, false, true, false, true, false, true}, applied)

		p := func(k string) Keys { return b.store.Keys(b.store.PartitionOf(k)) }
		raw, err := b.rdb.HGet(b.ctx, p(keys[0]).Jobs, keys[0]).Bytes()
		require.NoError(t, err)
		require.Equal(t, big, raw, "a record of more than 64 KiB, intact")
		score, err := b.rdb.ZScore(b.ctx, p(keys[0]).Pending, keys[0]).Result()
		require.NoError(t, err)
		require.Equal(t, int64(due), int64(score))
		raw, err = b.rdb.HGet(b.ctx, p(keys[1]).Jobs, keys[1]).Bytes()
		require.NoError(t, err)
		require.Empty(t, raw, "a record of 0 bytes")
		_, err = b.rdb.ZScore(b.ctx, p(keys[1]).Dead, keys[1]).Result()
		require.NoError(t, err, "dead-lettered")
		_, _, err = b.store.Get(b.ctx, keys[2])
		require.ErrorIs(t, err, ErrNotFound)
		r, st, err := b.store.Get(b.ctx, keys[3])
		require.NoError(t, err)
		require.Equal(t, Pending, st)
		require.Equal(t, int64(due+1), r.Due.UnixMicro())
		require.Equal(t, uint32(2), r.Rev)
		for _, k := range keys[4:] {
			raw, err := b.rdb.HGet(b.ctx, p(k).Jobs, k).Bytes()
			require.NoError(t, err)
			require.Equal(t, rec("p")[1:5], raw[1:5], "unclaimed or stale: as it was")
			score, err := b.rdb.ZScore(b.ctx, p(k).Pending, k).Result()
			require.NoError(t, err)
			require.Equal(t, float64(1000), score)
		}

		// Large records (sent as arguments of their own) and small ones
		// (packed), interleaved over the partitions: each job stores its own.
		os = os[:0]
		recs := map[string][]byte{}
		for i := range 12 {
			k := fmt.Sprintf("l/%d", i)
			_, err := b.store.Write(b.ctx, nil, []Write{{Key: k, Due: 1000, Record: rec(""), Replace: true}})
			require.NoError(t, err)
			size := 10
			if i%3 != 0 {
				size = maxPackedRecord + i // just past the limit, each its own size
			}
			r := (&Record{Rev: 1, Attempt: 1, MaxAttempts: 3, Payload: []byte(strings.Repeat(fmt.Sprint(i%10), size))}).Encode()
			recs[k] = r
			os = append(os, Outcome{Op: Retry, Key: k, Rev: 1, Due: 3000, Record: r})
		}
		applied, err = b.store.Settle(b.ctx, nil, 5000, os)
		require.NoError(t, err)
		for i, ok := range applied {
			require.True(t, ok, "outcome %d", i)
		}
		for k, r := range recs {
			raw, err := b.rdb.HGet(b.ctx, p(k).Jobs, k).Bytes()
			require.NoError(t, err)
			require.Equal(t, r, raw, "job %s stores its own record", k)
		}

		// Many outcomes of one partition in one call, each its own result.
		os = os[:0]
		var want []bool
		for i := range 300 {
			k := fmt.Sprintf("m/%d", i)
			_, err := b.store.Write(b.ctx, nil, []Write{{Key: k, Due: 1000, Record: rec(""), Replace: true}})
			require.NoError(t, err)
			os = append(os, Outcome{Op: Ack, Key: k, Rev: uint32(1 + i%2)})
			want = append(want, i%2 == 0)
		}
		applied, err = b.store.Settle(b.ctx, nil, 6000, os)
		require.NoError(t, err)
		require.Equal(t, want, applied)
	})
}

// TestClaimSettleAfterScriptFlush: a server that lost its script cache
// answers NOSCRIPT; a claim and a settle load the scripts and are sent
// again, whether sent alone (one call) or as a pipeline of calls (one per
// partition, as in a cluster), and apply once.
func TestClaimSettleAfterScriptFlush(t *testing.T) {
	t.Parallel()
	packBackends(t, 3, func(t *testing.T, b *bundle) {
		var ws []Write
		var reqs []ClaimRequest
		for i := range 6 {
			k := fmt.Sprintf("f/%d", i)
			ws = append(ws, Write{Key: k, Due: 1000, Record: rec(""), Replace: true})
			reqs = append(reqs, ClaimRequest{Key: k, Rev: 1, HaveRev: true, Due: 1000})
		}
		_, err := b.store.Write(b.ctx, nil, ws)
		require.NoError(t, err)
		require.NoError(t, b.rdb.ScriptFlush(b.ctx).Err())
		res, err := b.store.Claim(b.ctx, nil, reqs, nil)
		require.NoError(t, err)
		var os []Outcome
		for i, r := range res {
			require.False(t, r.Gone || r.Busy || r.Deferred, "job %d: %+v", i, r)
			require.Equal(t, int64(1000), r.Due)
			os = append(os, Outcome{Op: Ack, Key: reqs[i].Key, Rev: 1})
		}
		require.NoError(t, b.rdb.ScriptFlush(b.ctx).Err())
		applied, err := b.store.Settle(b.ctx, nil, 2000, os)
		require.NoError(t, err)
		require.Equal(t, []bool{true, true, true, true, true, true}, applied)
		pending, _, err := b.store.Counts(b.ctx)
		require.NoError(t, err)
		require.Zero(t, pending)
	})
}

// TestPackedLayoutReleasedClean: a packed layout puts per partition its
// token and its packed arguments after the fixed ones, and release leaves
// the packs empty for the next batch (a large buffer dropped).
func TestPackedLayoutReleasedClean(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // no I/O here
	defer rdb.Close()
	s, err := New(rdb, Options{Namespace: "t", Partitions: 4})
	require.NoError(t, err)
	keys := []string{"k/1", "k/2", "k/3", "k/4", "k/5"}
	for round := range 3 {
		c := s.layoutPacked(s.settleHead, []string{"A", "B", "C", "D"}, len(keys), func(i int) string { return keys[i] }, 2, int64(round))
		require.Len(t, c.args, 1)
		for i, k := range keys {
			pk := c.pack(i)
			pk.ops.b = append(pk.ops.b, 'a')
			pk.data.b = appendField(pk.data.b, k)
			if round == 2 {
				pk.data.b = append(pk.data.b, make([]byte, maxPackBuf)...)
			}
		}
		n := 0
		c.packed(func(a []any, j int, pk *callPack) {
			a[j], a[j+1] = &pk.ops, &pk.data
			tok, ok := a[j-1].(*string)
			require.True(t, ok)
			require.Equal(t, string(rune('A'+c.touched[n])), *tok)
			n++
		})
		a := c.args[0]
		nkeys := len(c.touched) * len(keysSettle(s.parts[0]))
		require.Equal(t, nkeys, a[2])
		require.Equal(t, int64(round), a[3+nkeys])
		require.Len(t, a, 3+nkeys+1+3*len(c.touched))
		packs := slices.Clone(c.packs)
		s.release(c)
		for _, v := range a {
			require.Nil(t, v)
		}
		for _, pk := range packs {
			if pk != nil {
				require.Empty(t, pk.ops.b)
				require.Empty(t, pk.data.b)
				require.Empty(t, pk.tok)
				require.LessOrEqual(t, cap(pk.data.b), maxPackBuf)
			}
		}
	}
}
