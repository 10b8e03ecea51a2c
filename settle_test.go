package wheelq

import (
	"testing"

	"github.com/stretchr/testify/require"
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
