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
	// A caller that holds the current revision gets no record, but Redis
	// reads each record whole to compare its revision: those reads count
	// against the budget too, so one call confirms about the budget's
	// worth and defers the rest (counting only the records returned let a
	// call read every record of a batch of large ones: a second of Redis's
	// time for 400 MiB). Every job is confirmed within a few calls.
	rv, err := DecodeRecord(rec(strings.Repeat("x", 1000)))
	require.NoError(t, err)
	confirmed := map[string]bool{}
	for round := 0; len(confirmed) < 8; round++ {
		require.Less(t, round, 10, "claims make progress")
		var ask []ClaimRequest
		for _, r := range reqs[:8] {
			if !confirmed[r.Key] {
				ask = append(ask, ClaimRequest{Key: r.Key, Rev: rv.Rev, HaveRev: true})
			}
		}
		res, err := b.store.Claim(b.ctx, []string{""}, ask, nil)
		require.NoError(t, err)
		n := 0
		for i, r := range res {
			require.Nil(t, r.Record, "round %d, job %s: the caller's revision is current", round, ask[i].Key)
			if !r.Deferred {
				confirmed[ask[i].Key] = true
				n++
			}
		}
		require.Positive(t, n, "round %d: at least the first", round)
		require.LessOrEqual(t, n, 4, "round %d: about the budget's worth read (a first chunk of 4)", round)
	}
}
