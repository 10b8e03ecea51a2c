package wheelq

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/persist"
)

func TestRecordCacheBytes(t *testing.T) {
	rec := func(n int) *persist.Record { return &persist.Record{Payload: []byte(strings.Repeat("p", n))} }
	w := recordWeight("k00", rec(1000))
	c, err := newRecordCache(100, 3*w)
	require.NoError(t, err)
	for i := range 5 {
		c.Add(fmt.Sprintf("k%02d", i), rec(1000))
	}
	n, b := c.size()
	require.Equal(t, 3, n, "the byte bound holds three")
	require.Equal(t, 3*w, b)
	_, ok := c.Peek("k01")
	require.False(t, ok, "the oldest went first")
	_, ok = c.Peek("k04")
	require.True(t, ok)

	// Replacing a record counts its new weight only.
	c.Add("k04", rec(10))
	n, b = c.size()
	require.Equal(t, 3, n)
	require.Equal(t, 2*w+recordWeight("k04", rec(10)), b)

	// One heavier than the whole bound is not kept, and drops the old one.
	c.Add("k03", rec(10_000))
	_, ok = c.Peek("k03")
	require.False(t, ok)
	n, b = c.size()
	require.Equal(t, 2, n)
	require.Equal(t, w+recordWeight("k04", rec(10)), b)

	c.Remove("k04")
	c.Remove("k02")
	c.Remove("nope")
	n, b = c.size()
	require.Zero(t, n)
	require.Zero(t, b)

	// The count bound holds too, and keeps the weight right.
	c2, err := newRecordCache(2, 1<<30)
	require.NoError(t, err)
	for i := range 4 {
		c2.Add(fmt.Sprint(i), rec(100))
	}
	n, b = c2.size()
	require.Equal(t, 2, n)
	require.Equal(t, 2*recordWeight("0", rec(100)), b)
}

func TestCacheBytesConfig(t *testing.T) {
	var c Config
	require.NoError(t, c.fill())
	require.Equal(t, 128<<20, c.CacheBytes)
	c = Config{CacheBytes: -1}
	err := c.fill()
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.EqualError(t, err, "wheelq: invalid config: cache bytes -1 < 1")
}
