package runs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSplit(t *testing.T) {
	keys := func(ks ...string) func(int) string { return func(i int) string { return ks[i] } }
	require.Empty(t, Split(0, 10, keys()))
	require.Equal(t, [][2]int{{0, 3}}, Split(3, 10, keys("", "", "")), "no ids: one run")
	require.Equal(t, [][2]int{{0, 2}, {2, 4}, {4, 5}}, Split(5, 2, keys("", "", "", "", "")), "at most most")
	a, b := Key("t", "a"), Key("t", "b")
	require.Equal(t, [][2]int{{0, 2}, {2, 4}, {4, 5}}, Split(5, 10, keys(a, b, a, "", a)), "a repeated id starts a run")
	require.Equal(t, [][2]int{{0, 2}}, Split(2, 10, keys(Key("t", "a"), Key("u", "a"))), "one id in two topics: two jobs")
	require.Equal(t, [][2]int{{0, 1}, {1, 2}}, Split(2, 1, keys(a, a)))
	require.Empty(t, Key("t", ""))
}
