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

// BenchmarkPollInbox: what a poll costs Redis when others scheduled
// jobs into the loaded windows of 16 partitions since the last one (at
// 10,000 jobs a second and the default 100 ms poll interval, about 1,000
// entries; a burst of Schedules, more): the longest script call a
// process's poll makes, which every other client of the Redis waits for.
// The figure is Redis's EVALSHA time per call (INFO commandstats). Run
// with
//
//	go test ./internal/persist -run '^$' -bench PollInbox -count 3
func BenchmarkPollInbox(b *testing.B) {
	for _, n := range []int{1_000, 5_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			bb := setup(b, 16)
			s := bb.store
			parts := make([]int, 16)
			reqs := make([]PollRequest, 16)
			for p := range parts {
				parts[p] = p
				reqs[p] = PollRequest{P: p, Token: "O", Reset: true, Scanned: PollFloor}
			}
			held, err := s.LeaseAll(bb.ctx, parts, LeaseAcquire, "O", time.Hour)
			require.NoError(b, err)
			require.NotContains(b, held, false)
			const loaded = 1 << 40
			out, err := s.PollMany(bb.ctx, loaded, time.Hour, 0, 0, reqs, nil)
			require.NoError(b, err)
			for p := range reqs {
				require.NoError(b, out[p].Err)
				reqs[p].Reset, reqs[p].Scanned = false, loaded
			}
			ws := make([]Write, n)
			r := rec(strings.Repeat("x", 64))
			b.ReportAllocs()
			var us float64
			for i := range b.N {
				b.StopTimer()
				for j := range ws {
					ws[j] = Write{Key: fmt.Sprintf("p/%d-%d", i, j), Due: 1000 + int64(j), Record: r}
				}
				_, err := s.Write(bb.ctx, nil, ws) // a non-owner's: into the inboxes
				require.NoError(b, err)
				us0 := scriptMicros(b, bb)
				b.StartTimer()
				out, err = s.PollMany(bb.ctx, loaded, time.Hour, 20_000, 2_000, reqs, out)
				b.StopTimer()
				us += scriptMicros(b, bb) - us0
				require.NoError(b, err)
				got := 0
				for p := range out {
					require.NoError(b, out[p].Err)
					got += len(out[p].Inbox)
				}
				require.Equal(b, n, got)
				b.StartTimer()
			}
			b.ReportMetric(us/float64(b.N), "redis-µs/call")
		})
	}
}
