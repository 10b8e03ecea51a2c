package recovery

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func members(n int, prefix string) []string {
	ms := make([]string, n)
	for i := range ms {
		ms[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	slices.Sort(ms)
	return ms
}

func loads(owner []int, n int) []int {
	l := make([]int, n)
	for _, o := range owner {
		l[o]++
	}
	return l
}

// TestAssignBalanced: every partition has exactly one owner, and the
// loads differ by at most one, for any number of members and partitions.
func TestAssignBalanced(t *testing.T) {
	t.Parallel()
	for _, parts := range []int{1, 2, 7, 16, 64, 256} {
		for n := 1; n <= 9; n++ {
			owner := Assign(members(n, "proc-"), parts)
			require.Len(t, owner, parts)
			l := loads(owner, n)
			require.LessOrEqual(t, slices.Max(l)-slices.Min(l), 1, "parts %d members %d loads %v", parts, n, l)
			sum := 0
			for _, x := range l {
				sum += x
			}
			require.Equal(t, parts, sum)
		}
	}
	require.Nil(t, Assign(nil, 16))
	require.Nil(t, Assign([]string{"a"}, 0))
}

// TestAssignDeterministic: the same roster gives the same assignment, in
// any process: it depends on the ids only.
func TestAssignDeterministic(t *testing.T) {
	t.Parallel()
	ms := []string{"a#x", "b#y", "c#z"}
	require.Equal(t, Assign(ms, 16), Assign(slices.Clone(ms), 16))
}

// TestAssignMovesLittle: a member joining takes about its share, and the
// partitions that stay with the old members are most of the rest.
func TestAssignMovesLittle(t *testing.T) {
	t.Parallel()
	const parts = 256
	for n := 1; n <= 6; n++ {
		before := members(n, "m")
		after := members(n+1, "m") // m0..m<n>: one more member
		ob, oa := Assign(before, parts), Assign(after, parts)
		moved := 0
		for p := range parts {
			if before[ob[p]] != after[oa[p]] {
				moved++
			}
		}
		share := parts / (n + 1)
		// The newcomer's share must move; allow as much again for the
		// bounded loads' knock-on moves.
		require.LessOrEqual(t, moved, 2*share+2, "members %d -> %d: moved %d of %d", n, n+1, moved, parts)
	}
}
