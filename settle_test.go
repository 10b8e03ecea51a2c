package wheelq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/wheel"
)

func TestInflightSet(t *testing.T) {
	t.Parallel()
	s := inflightSet{keys: map[string]struct{}{}}
	s.keys["a/1"], s.keys["b/2"] = struct{}{}, struct{}{}
	isB := func(k string) bool { return k[0] == 'b' }
	require.True(t, s.any(isB))
	s.remove("b/2", "c/3")
	require.False(t, s.any(isB))
	require.True(t, s.any(func(k string) bool { return k == "a/1" }))
	s.remove("a/1")
	require.Empty(t, s.keys)
}

// settleCalls is an engineStore that records storeOutcomes' Settle calls:
// a key's partition is its first byte's offset from 'a', and an outcome
// applies when its revision is odd. Only Settle and PartitionOf are
// called.
type settleCalls struct {
	engineStore
	calls [][]persist.Outcome
	fail  int // the call (1-based) that fails; 0: none
}

func (s *settleCalls) PartitionOf(key string) int { return int(key[0] - 'a') }

func (s *settleCalls) Settle(_ context.Context, _ []string, _ int64, os []persist.Outcome) ([]bool, error) {
	s.calls = append(s.calls, slices.Clone(os))
	if len(s.calls) == s.fail {
		return nil, errors.New("down")
	}
	res := make([]bool, len(os))
	for i, o := range os {
		res[i] = o.Rev%2 == 1
	}
	return res, nil
}

func TestSettleInCallsOfWholePartitions(t *testing.T) {
	t.Parallel()
	const parts = 16
	// 77 outcomes over 16 partitions, unevenly, in no order; partition
	// 'c' has 20 (a call of its own, past preciseSettle), 'p' none.
	var os []persist.Outcome
	for i := range 77 {
		p := byte('a' + (i*7)%15)
		if i < 20 {
			p = 'c'
		}
		os = append(os, persist.Outcome{Op: persist.Ack, Key: fmt.Sprintf("%c/%d", p, i), Rev: uint32(i)})
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(os), func(i, j int) { os[i], os[j] = os[j], os[i] })
	newSettler := func(precise bool, st *settleCalls) *settler {
		return &settler{settleDeps: settleDeps{
			stageDeps: stageDeps{store: st, fence: make([]string, parts), clock: wheel.RealClock()},
			precise:   func() bool { return precise },
		}}
	}
	check := func(t *testing.T, got []bool) {
		t.Helper()
		require.Len(t, got, len(os))
		for i, o := range os {
			require.Equal(t, o.Rev%2 == 1, got[i], "outcome %d (%s)", i, o.Key)
		}
	}

	t.Run("not precise: one call", func(t *testing.T) {
		st := &settleCalls{}
		got, err := newSettler(false, st).storeOutcomes(t.Context(), os)
		require.NoError(t, err)
		require.Len(t, st.calls, 1)
		require.Equal(t, os, st.calls[0])
		check(t, got)
	})

	t.Run("precise: calls of whole partitions", func(t *testing.T) {
		st := &settleCalls{}
		s := newSettler(true, st)
		got, err := s.storeOutcomes(t.Context(), os)
		require.NoError(t, err)
		check(t, got)
		require.Greater(t, len(st.calls), 3)
		seen := map[int]int{} // partition -> call
		n := 0
		for c, call := range st.calls {
			if c < len(st.calls)-1 {
				require.GreaterOrEqual(t, len(call), preciseSettle, "call %d", c)
			}
			for _, o := range call {
				p := st.PartitionOf(o.Key)
				if prev, ok := seen[p]; ok {
					require.Equal(t, c, prev, "partition %d split over calls", p)
				}
				seen[p] = c
			}
			n += len(call)
		}
		require.Equal(t, len(os), n)
		// Each partition's outcomes keep their order.
		for p := range parts {
			var want, have []string
			for _, o := range os {
				if st.PartitionOf(o.Key) == p {
					want = append(want, o.Key)
				}
			}
			for _, o := range st.calls[seen[p]] {
				if st.PartitionOf(o.Key) == p {
					have = append(have, o.Key)
				}
			}
			require.Equal(t, want, have, "partition %d", p)
		}
		for _, o := range s.byPart[:cap(s.byPart)] {
			require.Empty(t, o.Key, "the buffer keeps no outcome")
		}
	})

	t.Run("precise, few outcomes: one call", func(t *testing.T) {
		st := &settleCalls{}
		got, err := newSettler(true, st).storeOutcomes(t.Context(), os[:preciseSettle])
		require.NoError(t, err)
		require.Len(t, st.calls, 1)
		require.Len(t, got, preciseSettle)
	})

	t.Run("precise: an error stops the calls", func(t *testing.T) {
		st := &settleCalls{fail: 2}
		_, err := newSettler(true, st).storeOutcomes(t.Context(), os)
		require.ErrorContains(t, err, "down")
		require.Len(t, st.calls, 2)
	})
}

// settleSizes is an engineStore that records the number of outcomes of
// each Settle call.
type settleSizes struct {
	engineStore
	mu    sync.Mutex
	sizes []int
}

func (s *settleSizes) Settle(ctx context.Context, tokens []string, now int64, os []persist.Outcome) ([]bool, error) {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(os))
	s.mu.Unlock()
	return s.engineStore.Settle(ctx, tokens, now, os)
}

func (s *settleSizes) total() (n, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.sizes {
		n, most = n+k, max(most, k)
	}
	return n, most
}

// TestSettlesSplitWhileJobsWait: while a claimed job waits in the start
// gate for its time, the outcomes of the runs before it are stored in
// calls of whole partitions, each closed at preciseSettle outcomes or
// more (a call of 77 acks held Redis 1-2 ms, and the jobs due meanwhile
// came late: docs/benchmarks-history.md). A fake clock holds the waiting
// job in the gate for as long as the test needs.
func TestSettlesSplitWhileJobsWait(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	clk := wheel.NewFakeClock(time.Now().Truncate(time.Millisecond))
	rec := &settleSizes{}
	const parts, each = 8, 5
	q, err := New(srv.Client(t), Config{Clock: clk, Horizon: time.Hour, Partitions: parts,
		test: testHooks{wrapStore: func(s engineStore) engineStore { rec.engineStore = s; return rec }}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	var ran atomic.Int64
	require.NoError(t, q.Handle("t", HandlerFunc(func(context.Context, *Job) error { ran.Add(1); return nil })))
	require.NoError(t, q.Start(t.Context()))
	<-q.Ready()

	// each jobs of every partition due at t0 + 1 minute, and one due 3 ms
	// later: within ClaimLead, so it is claimed with them and waits.
	due := clk.Now().Add(time.Minute)
	count := make([]int, parts)
	for i := 0; slices.Min(count) < each; i++ {
		id := fmt.Sprintf("j%d", i)
		p := q.store.PartitionOf("t/" + id)
		if count[p] == each {
			continue
		}
		count[p]++
		_, err := q.Schedule(t.Context(), "t", nil, ID(id), At(due))
		require.NoError(t, err)
	}
	_, err = q.Schedule(t.Context(), "t", nil, ID("later"), At(due.Add(3*time.Millisecond)))
	require.NoError(t, err)
	// First to 2 ms before the due time: nothing is due, and every job,
	// the later one too, is within ClaimLead and claimed into the gate.
	// (Advancing to the due time at once let the first runs' outcomes go
	// before the later job's claim came back, with no job waiting yet:
	// one call of 11 seen beside stress-ng.)
	clk.BlockUntilSleeping()
	clk.Advance(time.Minute - 2*time.Millisecond)
	eventually(t, func() bool { return q.gate.len() == parts*each+1 }, "every job claimed into the gate")
	clk.Advance(2 * time.Millisecond)
	eventually(t, func() bool { n, _ := rec.total(); return n == parts*each }, "the runs' outcomes stored")
	require.EqualValues(t, parts*each, ran.Load())
	require.Equal(t, 1, q.gate.len(), "the later job waits in the gate")
	_, most := rec.total()
	// A store carries what came within its linger: up to 5 outcomes of a
	// partition (fewer on a busy machine, where the runs spread over
	// several stores), and a call is closed once it holds 8 or more: 7 +
	// 5 at most, where one call would carry 40 (34 and 39 seen with the
	// split off).
	rec.mu.Lock()
	sizes := slices.Clone(rec.sizes)
	rec.mu.Unlock()
	require.LessOrEqual(t, most, preciseSettle-1+each, "calls of %v", sizes)

	clk.Advance(3 * time.Millisecond)
	eventually(t, func() bool { return ran.Load() == parts*each+1 }, "the later job runs at its time")
}

// TestTruncateKeepsRunes: a last error cut to its bound is cut at a rune
// boundary, so the stored text stays valid UTF-8. (A helper saw the cut
// split a character.)
func TestTruncateKeepsRunes(t *testing.T) {
	s := strings.Repeat("a", 2047) + "é" + "tail" // é is 2 bytes, at 2047-2048
	got := truncate(s, 2048)
	require.True(t, utf8.ValidString(got), "%q", got[len(got)-4:])
	require.Equal(t, strings.Repeat("a", 2047), got)
	require.Equal(t, "abc", truncate("abc", 2048))
	require.Equal(t, "ab", truncate("abc", 2))
}
