package persist

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// scriptMicros is the time Redis has spent in EVALSHA so far (µs, from
// INFO commandstats): the scripts' own time, inner commands included.
func scriptMicros(tb testing.TB, b *bundle) float64 {
	info, err := b.rdb.Info(b.ctx, "commandstats").Result()
	require.NoError(tb, err)
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			for f := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					us, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
					require.NoError(tb, err)
					return us
				}
			}
		}
	}
	return 0
}

// BenchmarkFiringScripts: what firing costs Redis per job, in the
// scripts (claim.lua then settle.lua's acks, with the run history),
// when jobs come due a few at a time over 16 partitions, as at 10,000
// jobs a second (a claim call a millisecond carries about 10), and in
// backlogs (calls of 100). The figure is Redis's EVALSHA time per job
// (INFO commandstats), not the round trip. Run with
//
//	go test ./internal/persist -run '^$' -bench FiringScripts -count 3
func BenchmarkFiringScripts(b *testing.B) {
	for _, batch := range []int{10, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			bb := setup(b, 16)
			store, err := New(bb.rdb, Options{Namespace: "bench", Partitions: 16, HistoryCount: 100_000, HistoryAge: time.Hour})
			require.NoError(b, err)
			require.NoError(b, store.Init(bb.ctx))
			bb.store = store
			n := max(b.N, batch)
			reqs := firingJobs(b, bb, store, n)
			b.ReportAllocs()
			us0 := scriptMicros(b, bb)
			b.ResetTimer()
			claimAndAck(b, bb, store, make([]string, 16), reqs, batch)
			b.StopTimer()
			b.ReportMetric((scriptMicros(b, bb)-us0)/float64(n), "redis-µs/job")
		})
	}
}

// firingJobs writes n jobs with 64-byte payloads, due at 1000+i µs, over
// the store's partitions, and returns their claims.
func firingJobs(tb testing.TB, bb *bundle, s *Store, n int) []ClaimRequest {
	payload := strings.Repeat("p", 64)
	reqs := make([]ClaimRequest, 0, n)
	var ws []Write
	for i := range n {
		k := JobKey("t", fmt.Sprintf("job-%08d", i))
		ws = append(ws, Write{Key: k, Due: int64(1000 + i), Record: rec(payload), Replace: true})
		reqs = append(reqs, ClaimRequest{Key: k, Rev: 1, HaveRev: true, Due: int64(1000 + i)})
		if len(ws) == 500 || i == n-1 {
			_, err := s.Write(bb.ctx, nil, ws)
			require.NoError(tb, err)
			ws = ws[:0]
		}
	}
	return reqs
}

// claimAndAck claims reqs in calls of batch and acks each call's jobs
// (settle.lua), as a worker does, with the partitions' lease tokens
// ("" skips the fencing check), checking that every one was claimed and
// acked.
func claimAndAck(tb testing.TB, bb *bundle, s *Store, tokens []string, reqs []ClaimRequest, batch int) {
	for lo := 0; lo < len(reqs); lo += batch {
		chunk := reqs[lo:min(len(reqs), lo+batch)]
		res, err := s.Claim(bb.ctx, tokens, chunk, nil)
		require.NoError(tb, err)
		os := make([]Outcome, len(chunk))
		for i, r := range chunk {
			cr := res[i]
			require.False(tb, cr.Gone || cr.Busy || cr.Deferred || cr.Paused, "claimed: %+v", cr)
			os[i] = Outcome{Op: Ack, Key: r.Key, Rev: 1}
		}
		ok, err := s.Settle(bb.ctx, tokens, time.Now().UnixMicro(), os)
		require.NoError(tb, err)
		for _, applied := range ok {
			require.True(tb, applied, "acked")
		}
	}
}
