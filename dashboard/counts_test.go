package dashboard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
)

// TestCountsCacheSharesScans: the overview's counts come from one scan
// at a time, kept for four times the scan's duration and at least a
// second; concurrent requests share a scan; an action forgets the result;
// an error is not kept. The clock is a fake one: a scan "takes" what the
// counter advances it by.
func TestCountsCacheSharesScans(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	advance := func(d time.Duration) {
		mu.Lock()
		now = now.Add(d)
		mu.Unlock()
	}
	c := &countsCache{now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	var scans atomic.Int64
	scanTakes := 2 * time.Second
	var fail error
	count := func(context.Context) ([]wheelq.TopicCounts, error) {
		scans.Add(1)
		advance(scanTakes)
		if fail != nil {
			return nil, fail
		}
		return []wheelq.TopicCounts{{Topic: "t", Pending: scans.Load()}}, nil
	}
	ctx := context.Background()

	got, err := c.get(ctx, count)
	require.NoError(t, err)
	require.Equal(t, int64(1), got[0].Pending)

	// Concurrent requests within the window share the scan.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			got, err := c.get(ctx, count)
			require.NoError(t, err)
			require.Equal(t, int64(1), got[0].Pending)
		})
	}
	wg.Wait()
	require.Equal(t, int64(1), scans.Load(), "one scan for all")

	// Kept for four times the scan's 2 s: still fresh at 7.9 s, not at 8 s.
	advance(7900 * time.Millisecond)
	_, err = c.get(ctx, count)
	require.NoError(t, err)
	require.Equal(t, int64(1), scans.Load())
	advance(100 * time.Millisecond)
	got, err = c.get(ctx, count)
	require.NoError(t, err)
	require.Equal(t, int64(2), scans.Load(), "stale after 4x the scan")
	require.Equal(t, int64(2), got[0].Pending)

	// A fast scan is kept for at least a second.
	scanTakes = time.Millisecond
	c.forget()
	_, err = c.get(ctx, count)
	require.NoError(t, err)
	require.Equal(t, int64(3), scans.Load(), "forget drops the counts")
	advance(900 * time.Millisecond)
	_, err = c.get(ctx, count)
	require.NoError(t, err)
	require.Equal(t, int64(3), scans.Load(), "fresh for a second")

	// An error is returned and not kept: the next request scans again.
	advance(time.Second)
	fail = errors.New("redis down")
	_, err = c.get(ctx, count)
	require.ErrorIs(t, err, fail)
	fail = nil
	got, err = c.get(ctx, count)
	require.NoError(t, err)
	require.Equal(t, int64(5), scans.Load())
	require.Equal(t, int64(5), got[0].Pending)
}
