package persist

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeBig stores n jobs big/0..n-1 of partition-free keys, each with a
// payload of size bytes, and returns their claim requests.
func writeBig(t testing.TB, b *bundle, n, size int) []ClaimRequest {
	t.Helper()
	payload := strings.Repeat("x", size)
	var ws []Write
	var reqs []ClaimRequest
	for i := range n {
		k := JobKey("big", fmt.Sprint(i))
		ws = append(ws, Write{Key: k, Due: 1000, Record: rec(payload), Replace: true})
		reqs = append(reqs, ClaimRequest{Key: k})
	}
	res, err := b.store.Write(b.ctx, nil, ws)
	require.NoError(t, err)
	require.Len(t, res, n)
	return reqs
}

// TestClaimByteBudget: a claim returns records until its byte budget is
// spent (the first whatever its size) and defers the rest, which later
// calls claim; jobs gone or busy are said so even past the budget, and a
// caller whose revision is current gets no record and spends nothing.
func TestClaimByteBudget(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.store.maxClaimBytes = int64(3 * 1100) // about three records
	reqs := writeBig(t, b, 10, 1000)
	// big/9 is gone; big/8 is claimed by another owner (unfenced calls
	// mark with ""): mark it by hand.
	_, err := b.store.Cancel(b.ctx, reqs[9].Key)
	require.NoError(t, err)
	require.NoError(t, b.rdb.HSet(b.ctx, b.store.Keys(0).Running, reqs[8].Key, "other").Err())

	claimed := map[string]bool{}
	for round := 0; len(claimed) < 8; round++ {
		require.Less(t, round, 10, "claims make progress")
		var ask []ClaimRequest
		for _, r := range reqs[:8] {
			if !claimed[r.Key] {
				ask = append(ask, r)
			}
		}
		ask = append(ask, reqs[8], reqs[9])
		res, err := b.store.Claim(b.ctx, []string{""}, ask, nil)
		require.NoError(t, err)
		returned := 0
		for i, r := range res {
			switch ask[i].Key {
			case reqs[9].Key:
				require.True(t, r.Gone, "round %d: a cancelled job is gone, budget or not", round)
			case reqs[8].Key:
				require.True(t, r.Busy, "round %d: a job claimed elsewhere is busy, budget or not", round)
			default:
				if r.Deferred {
					continue
				}
				require.NotNil(t, r.Record)
				claimed[ask[i].Key] = true
				returned++
			}
		}
		require.LessOrEqual(t, returned, 3, "round %d: the budget holds about three records", round)
		require.Positive(t, returned, "round %d: at least the first record", round)
	}
	// A caller that holds the current revision gets no record: it costs
	// the budget nothing, so all of them fit.
	rv, err := DecodeRecord(rec(strings.Repeat("x", 1000)))
	require.NoError(t, err)
	var ask []ClaimRequest
	for _, r := range reqs[:8] {
		ask = append(ask, ClaimRequest{Key: r.Key, Rev: rv.Rev, HaveRev: true})
	}
	res, err := b.store.Claim(b.ctx, []string{""}, ask, nil)
	require.NoError(t, err)
	for i, r := range res {
		require.False(t, r.Deferred, "job %d", i)
		require.Nil(t, r.Record, "job %d", i)
	}
}

// BenchmarkClaimLargeRecords: one claim call of 40 jobs of 1 MiB, none
// cached by the caller: it returns about MaxClaimBytes of them and defers
// the rest. (Reading all 40 records before applying the budget took
// 0.86-1.02 s a call.)
func BenchmarkClaimLargeRecords(b *testing.B) {
	bb := setup(b, 1)
	reqs := writeBig(b, bb, 40, 1<<20)
	b.ReportAllocs()
	for b.Loop() {
		res, err := bb.store.Claim(bb.ctx, []string{""}, reqs, nil)
		if err != nil {
			b.Fatal(err)
		}
		if res[0].Record == nil || !res[len(res)-1].Deferred {
			b.Fatal("want the first record returned and the last deferred")
		}
	}
}

// BenchmarkClaimBatch: one claim call of 1024 small jobs spread over 16
// partitions, whose records the caller has (revision current), as the
// claimers send in a burst. ns/op is the round trip of the whole batch.
func BenchmarkClaimBatch(b *testing.B) {
	bb := setup(b, 16)
	var ws []Write
	var reqs []ClaimRequest
	for i := range 1024 {
		k := JobKey("burst", fmt.Sprintf("job-%08d", i))
		ws = append(ws, Write{Key: k, Due: 1000, Record: rec(""), Replace: true})
		reqs = append(reqs, ClaimRequest{Key: k, Rev: 1, HaveRev: true})
	}
	_, err := bb.store.Write(bb.ctx, nil, ws)
	require.NoError(b, err)
	tokens := make([]string, 16)
	b.ReportAllocs()
	for b.Loop() {
		res, err := bb.store.Claim(bb.ctx, tokens, reqs, nil)
		if err != nil {
			b.Fatal(err)
		}
		if res[0].Gone || res[0].Busy || res[0].Record != nil {
			b.Fatalf("want the first claimed with its revision current, got %+v", res[0])
		}
	}
}

// BenchmarkSettleLargeRecords: one settle call of 8 retries of 1 MiB
// records to one partition. A settle packs the records into one argument
// (a copy): B/op is about their size once, the buffer grown to it in one
// step.
func BenchmarkSettleLargeRecords(b *testing.B) {
	bb := setup(b, 1)
	reqs := writeBig(b, bb, 8, 1<<20)
	var os []Outcome
	for _, r := range reqs {
		os = append(os, Outcome{Op: Retry, Key: r.Key, Rev: 1, Due: 2000, Record: rec(strings.Repeat("y", 1<<20))})
	}
	b.ReportAllocs()
	for b.Loop() {
		applied, err := bb.store.Settle(bb.ctx, nil, 1000, os)
		if err != nil {
			b.Fatal(err)
		}
		if !applied[0] {
			b.Fatal("want the retry applied")
		}
	}
}
