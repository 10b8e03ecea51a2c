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

// TestCountsCacheWaitHeedsContext: a request waiting for another's scan
// gives up when its own context ends (Options.Timeout bounds each
// request), rather than queueing behind scan after slow scan: with n
// pages open on a namespace whose scan takes past the timeout, the last
// request would otherwise wait n timeouts. And an action's forget does
// not wait for a scan under way (the action's answer would wait for it):
// that scan's counts, read before the action, are then not kept.
func TestCountsCacheWaitHeedsContext(t *testing.T) {
	t.Parallel()
	c := &countsCache{}
	release := make(chan struct{})
	started := make(chan struct{})
	slow := func(context.Context) ([]wheelq.TopicCounts, error) {
		started <- struct{}{}
		<-release // a scan that takes long
		return []wheelq.TopicCounts{{Topic: "t"}}, nil
	}
	noScan := func(why string) func(context.Context) ([]wheelq.TopicCounts, error) {
		return func(context.Context) ([]wheelq.TopicCounts, error) { return nil, errors.New("must not scan: " + why) }
	}
	first := make(chan error, 1)
	go func() {
		_, err := c.get(context.Background(), slow)
		first <- err
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	begin := time.Now()
	go func() {
		_, err := c.get(ctx, noScan("one runs"))
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(3 * time.Second):
		close(release)
		<-done
		t.Fatalf("a request whose context ended %v ago still waits for another's scan", time.Since(begin)-100*time.Millisecond)
	}
	release <- struct{}{}
	require.NoError(t, <-first)
	got, err := c.get(context.Background(), noScan("fresh counts"))
	require.NoError(t, err, "the scan's result serves the next request")
	require.Equal(t, "t", got[0].Topic)

	// A forget while a scan runs returns at once; that scan's result is
	// not kept.
	c.forget()
	go func() {
		_, err := c.get(context.Background(), slow)
		first <- err
	}()
	<-started
	forgot := make(chan struct{})
	go func() { c.forget(); close(forgot) }()
	select {
	case <-forgot:
	case <-time.After(3 * time.Second):
		close(release)
		t.Fatal("forget waits for the scan under way (an action's answer would wait for it)")
	}
	release <- struct{}{}
	require.NoError(t, <-first)
	var scanned bool
	_, err = c.get(context.Background(), func(context.Context) ([]wheelq.TopicCounts, error) {
		scanned = true
		return []wheelq.TopicCounts{{Topic: "u"}}, nil
	})
	require.NoError(t, err)
	require.True(t, scanned, "counts read before the action are not kept")
}
