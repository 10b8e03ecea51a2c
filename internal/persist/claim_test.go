package persist

import (
	"fmt"
	"strings"
	"testing"
	"time"

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

// TestRerunMarks: a take-over turns the old owner's
// claim marks into "!": the jobs are claimable, not running (Get, the
// running list, Cancel), and their next claim says Rerun; an unclaim keeps
// the "!", an outcome clears it; repair turns a mark of another token
// into "!" and clears one of a job that is gone.
func TestRerunMarks(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	reqs := writeBig(t, b, 3, 10)
	k := b.store.Keys(0)
	lease := func(tok string) {
		held, _, err := b.store.Lease(b.ctx, 0, LeaseAcquire, tok, time.Minute)
		require.NoError(t, err)
		require.True(t, held)
	}
	lease("old")
	res, err := b.store.Claim(b.ctx, []string{"old"}, reqs, nil)
	require.NoError(t, err)
	for _, r := range res {
		require.False(t, r.Rerun, "a first claim")
	}
	_, st, err := b.store.Get(b.ctx, reqs[0].Key)
	require.NoError(t, err)
	require.Equal(t, Running, st)

	// "old" dies; "new" takes the lease over and polls with reset.
	require.NoError(t, b.rdb.Del(b.ctx, k.Lease).Err())
	lease("new")
	_, err = b.store.Poll(b.ctx, 0, "new", 2000, time.Minute, true, 100)
	require.NoError(t, err)
	marks, err := b.rdb.HGetAll(b.ctx, k.Running).Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{reqs[0].Key: "!", reqs[1].Key: "!", reqs[2].Key: "!"}, marks)
	_, st, err = b.store.Get(b.ctx, reqs[0].Key)
	require.NoError(t, err)
	require.Equal(t, Pending, st, "interrupted, not running")
	running, err := b.store.Running(b.ctx, 0)
	require.NoError(t, err)
	require.Empty(t, running)
	ch, err := b.store.Cancel(b.ctx, reqs[2].Key)
	require.NoError(t, err)
	require.Equal(t, Changed, ch, "not ChangedWhileRunning")

	res, err = b.store.Claim(b.ctx, []string{"new"}, reqs[:2], nil)
	require.NoError(t, err)
	for i, r := range res {
		require.True(t, r.Rerun, "job %d", i)
		require.NotNil(t, r.Record, "job %d: 'R' carries the record", i)
	}
	// Claimed again by the same owner whose record is current: 'C'.
	res, err = b.store.Claim(b.ctx, []string{"new"}, []ClaimRequest{{Key: reqs[0].Key, Rev: 0, HaveRev: false}}, nil)
	require.NoError(t, err)
	require.True(t, res[0].Rerun)
	_, st, err = b.store.Get(b.ctx, reqs[0].Key)
	require.NoError(t, err)
	require.Equal(t, Running, st, "claimed by new")

	// Unclaimed (not run): still a rerun. Acked: the flag goes.
	_, err = b.store.Settle(b.ctx, []string{"new"}, 3000, []Outcome{{Op: Unclaim, Key: reqs[0].Key}})
	require.NoError(t, err)
	require.Equal(t, "!", b.rdb.HGet(b.ctx, k.Running, reqs[0].Key).Val())
	dec, err := DecodeRecord(rec("0123456789"))
	require.NoError(t, err)
	_, err = b.store.Settle(b.ctx, []string{"new"}, 3000, []Outcome{{Op: Ack, Key: reqs[1].Key, Rev: dec.Rev}})
	require.NoError(t, err)
	require.False(t, b.rdb.HExists(b.ctx, k.Running, reqs[1].Key).Val())

	// Repair: another token's mark becomes "!"; a gone job's mark goes.
	require.NoError(t, b.rdb.HSet(b.ctx, k.Running, reqs[0].Key, "ghost", "big/gone", "ghost").Err())
	cur := RepairCursor{}
	for !cur.Done {
		cur, _, err = b.store.Repair(b.ctx, 0, "new", cur, 100, 3000)
		require.NoError(t, err)
	}
	marks, err = b.rdb.HGetAll(b.ctx, k.Running).Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{reqs[0].Key: "!"}, marks)
}
