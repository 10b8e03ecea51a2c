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
			payload := strings.Repeat("p", 64)
			var reqs []ClaimRequest
			for lo := 0; lo < n; lo += 1000 {
				var ws []Write
				for i := lo; i < min(n, lo+1000); i++ {
					k := JobKey("t", fmt.Sprintf("job-%08d", i))
					ws = append(ws, Write{Key: k, Due: int64(1000 + i), Record: rec(payload), Replace: true})
					reqs = append(reqs, ClaimRequest{Key: k, Rev: 1, HaveRev: true, Due: int64(1000 + i)})
				}
				_, err := store.Write(bb.ctx, nil, ws)
				require.NoError(b, err)
			}
			tokens := make([]string, 16)
			b.ReportAllocs()
			us0 := scriptMicros(b, bb)
			b.ResetTimer()
			for lo := 0; lo < n; lo += batch {
				chunk := reqs[lo:min(n, lo+batch)]
				res, err := store.Claim(bb.ctx, tokens, chunk, nil)
				require.NoError(b, err)
				os := make([]Outcome, len(chunk))
				for i, r := range chunk {
					cr := res[i]
					require.False(b, cr.Gone || cr.Busy || cr.Deferred || cr.Paused, "claimed: %+v", cr)
					os[i] = Outcome{Op: Ack, Key: r.Key, Rev: 1}
				}
				ok, err := store.Settle(bb.ctx, tokens, time.Now().UnixMicro(), os)
				require.NoError(b, err)
				for _, applied := range ok {
					require.True(b, applied, "acked")
				}
			}
			b.StopTimer()
			b.ReportMetric((scriptMicros(b, bb)-us0)/float64(n), "redis-µs/job")
		})
	}
}
