package wheelq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/persist"
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
