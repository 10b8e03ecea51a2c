package batch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBatcherGroupsCalls(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sizes []int
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	b := NewBatcher(Config{MaxBatch: 64, InFlight: 1}, func(_ context.Context, reqs []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(reqs))
		mu.Unlock()
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		out := make([]int, len(reqs))
		for i, r := range reqs {
			out[i] = r * 2
		}
		return out, nil
	})
	b.peak.Store(100) // as if callers had been many: none takes the lone path
	var wg sync.WaitGroup
	results := make([]int, 100)
	for i := range 100 {
		wg.Go(func() {
			v, err := b.Do(context.Background(), i)
			require.NoError(t, err)
			results[i] = v
		})
	}
	// The first batch is in flight; the rest queue up behind it.
	<-entered
	mu.Lock()
	first := sizes[0]
	mu.Unlock()
	require.Eventually(t, func() bool { return len(b.in) == min(cap(b.in), 100-first) }, 10*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	b.Stop()
	for i, v := range results {
		require.Equal(t, 2*i, v, "every caller gets its own result")
	}
	total := 0
	for _, n := range sizes {
		require.LessOrEqual(t, n, 64)
		total += n
	}
	require.Equal(t, 100, total)
	require.Less(t, len(sizes), 100, "calls were grouped")
	_, err := b.Do(context.Background(), 1)
	require.ErrorIs(t, err, ErrClosed)
}

// TestBatcherLoneRequest: a request with none other outstanding is run
// from the caller's goroutine under the caller's context (a value of it
// reaches exec, and cancelling it ends the round trip); one that comes
// while another is outstanding goes through a flusher, as does every
// request while callers have lately been many.
func TestBatcherLoneRequest(t *testing.T) {
	t.Parallel()
	type key struct{}
	type seen struct {
		reqs   []int
		caller any
	}
	calls := make(chan seen, 10)
	block := make(chan struct{})
	b := NewBatcher(Config{InFlight: 1}, func(ctx context.Context, reqs []int) ([]int, error) {
		calls <- seen{slices.Clone(reqs), ctx.Value(key{})}
		switch reqs[0] {
		case -1:
			<-block
		case -2: // only the caller's context ends it
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return reqs, nil
	})
	defer b.Stop()
	ctx := context.WithValue(context.Background(), key{}, "caller")

	v, err := b.Do(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, 1, v)
	require.Equal(t, seen{[]int{1}, "caller"}, <-calls, "a lone request runs in the caller's context")

	// While a lone request is in flight, the next goes to a flusher.
	lone := make(chan error, 1)
	go func() { _, err := b.Do(ctx, -1); lone <- err }()
	require.Equal(t, seen{[]int{-1}, "caller"}, <-calls)
	v, err = b.Do(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, 2, v)
	require.Equal(t, seen{[]int{2}, nil}, <-calls, "with another outstanding, a flusher runs it")
	close(block)
	require.NoError(t, <-lone)

	// Cancelling the caller's context ends its lone round trip. (Two
	// callers were outstanding just now; after a lull one is lone again.)
	b.peak.Store(1)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := b.Do(cctx, -2); done <- err }()
	<-calls
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled lone request did not return")
	}

	// After many callers, requests go through the flushers until a lull.
	b.peak.Store(32)
	b.lastFlush.Store(time.Now().UnixNano())
	v, err = b.Do(ctx, 3)
	require.NoError(t, err)
	require.Equal(t, 3, v)
	require.Equal(t, seen{[]int{3}, nil}, <-calls)
}

func TestBatcherError(t *testing.T) {
	t.Parallel()
	boom := fmt.Errorf("boom")
	b := NewBatcher(Config{}, func(context.Context, []int) ([]int, error) { return nil, boom })
	defer b.Stop()
	_, err := b.Do(context.Background(), 1)
	require.ErrorIs(t, err, boom)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = b.Do(ctx, 1)
	require.ErrorIs(t, err, context.Canceled)
}

func TestRetrierRetriesUntilSuccess(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	fails := 3
	var got []int
	var errs int
	r := NewRetrier(Config{MaxBatch: 2}, func(_ context.Context, items []int) error {
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			return fmt.Errorf("down")
		}
		got = append(got, items...)
		return nil
	}, func(error, int) { errs++ })
	require.NoError(t, r.Add(1, 2, 3))
	require.NoError(t, r.Add(4))
	require.NoError(t, r.Stop(context.Background()))
	require.Equal(t, []int{1, 2, 3, 4}, got, "nothing dropped, order kept")
	require.Equal(t, 3, errs)
	require.ErrorIs(t, r.Add(5), ErrClosed)
}

// TestRetrierLinger: an item that comes after a quiet spell is sent at
// once; while items come faster than one per linger, they wait to go out
// together; Close cuts the linger short.
func TestRetrierLinger(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var batches [][]int
	sent := make(chan struct{}, 10)
	r := NewRetrier(Config{Linger: time.Hour}, func(_ context.Context, items []int) error {
		mu.Lock()
		defer mu.Unlock()
		batches = append(batches, slices.Clone(items))
		sent <- struct{}{}
		return nil
	}, nil)
	require.NoError(t, r.Add(1))
	select {
	case <-sent: // nothing was sent lately: no linger
	case <-time.After(10 * time.Second):
		t.Fatal("the first item lingered")
	}
	// A control without a linger, given the same items at the same time:
	// once it has sent its 2, a retrier that did not linger would have had
	// the time to send its own (on a slow machine a fixed sleep proves
	// nothing).
	controlSent := make(chan int, 10)
	control := NewRetrier(Config{}, func(_ context.Context, items []int) error {
		for _, it := range items {
			controlSent <- it
		}
		return nil
	}, nil)
	require.NoError(t, control.Add(1))
	require.Equal(t, 1, <-controlSent)
	require.NoError(t, r.Add(2))
	require.NoError(t, control.Add(2))
	select {
	case <-controlSent:
	case <-time.After(10 * time.Second):
		t.Fatal("the control did not send")
	}
	time.Sleep(5 * time.Millisecond) // and a little more
	require.NoError(t, r.Add(3))
	mu.Lock()
	require.Equal(t, [][]int{{1}}, batches, "2 is lingering")
	mu.Unlock()
	require.NoError(t, control.Stop(context.Background()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, r.Stop(ctx), "Close ends the linger")
	require.Equal(t, [][]int{{1}, {2, 3}}, batches)
}

func TestRetrierCloseGivesUpAtDeadline(t *testing.T) {
	t.Parallel()
	r := NewRetrier(Config{}, func(context.Context, []int) error { return fmt.Errorf("down") }, nil)
	require.NoError(t, r.Add(1, 2))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, r.Stop(ctx), context.DeadlineExceeded)
	require.Equal(t, 2, r.Pending(), "what could not be sent is still counted")
}

// TestBatcherShareWaitEnds: a flusher that waits for its share of a past
// peak of callers still sends a lone request once the wait is over, and
// one that comes after a lull is sent on its own.
func TestBatcherShareWaitEnds(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sizes []int
	b := NewBatcher(Config{InFlight: 1}, func(_ context.Context, reqs []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(reqs))
		mu.Unlock()
		return reqs, nil
	})
	defer b.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, lull := range []bool{false, true} {
		b.peak.Store(64) // as if 64 callers had just been waiting
		at := time.Now()
		if lull {
			at = at.Add(-time.Second)
		}
		b.lastFlush.Store(at.UnixNano())
		v, err := b.Do(ctx, 7)
		require.NoError(t, err, "lull %v", lull)
		require.Equal(t, 7, v)
	}
	require.Equal(t, []int{1, 1}, sizes)
}

// TestLazyStartAndSafeStop: a batcher or retrier never used owns no
// goroutine and closes at once; closing twice is safe; a closed one
// refuses work.
func TestLazyStartAndSafeStop(t *testing.T) {
	t.Parallel()
	b := NewBatcher(Config{}, func(_ context.Context, reqs []int) ([]int, error) { return reqs, nil })
	b.Stop()
	b.Stop()
	_, err := b.Do(context.Background(), 1)
	require.ErrorIs(t, err, ErrClosed)

	r := NewRetrier(Config{}, func(context.Context, []int) error { return nil }, nil)
	require.NoError(t, r.Stop(context.Background()))
	require.NoError(t, r.Stop(context.Background()))
	require.ErrorIs(t, r.Add(1), ErrClosed)

	// Used, then closed from several goroutines at once.
	var sent atomic.Int64
	r = NewRetrier(Config{}, func(_ context.Context, items []int) error {
		sent.Add(int64(len(items)))
		return nil
	}, nil)
	require.NoError(t, r.Add(1, 2, 3))
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { require.NoError(t, r.Stop(context.Background())) })
	}
	wg.Wait()
	require.Equal(t, int64(3), sent.Load(), "Close sends what was queued")
}

// TestBatcherDoAll: several callers' sets of requests share round trips
// (while one is in flight, the next batch gathers what they all sent), each
// request gets its own result in its place, and a batch's error is only
// its own requests'. Closed or cancelled, every request not answered gets
// the error.
func TestBatcherDoAll(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var batches [][]int
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	boom := fmt.Errorf("boom")
	b := NewBatcher(Config{MaxBatch: 64, InFlight: 1}, func(_ context.Context, reqs []int) ([]int, error) {
		mu.Lock()
		batches = append(batches, slices.Clone(reqs))
		mu.Unlock()
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		if slices.Contains(reqs, -1) {
			return nil, boom
		}
		out := make([]int, len(reqs))
		for i, r := range reqs {
			out[i] = r * 2
		}
		return out, nil
	})
	b.peak.Store(100) // as if callers had been many: none takes the lone path
	// One request in flight, holding the flusher.
	first := make(chan error, 1)
	go func() {
		_, err := b.Do(context.Background(), 1000)
		first <- err
	}()
	<-entered
	var wg sync.WaitGroup
	got := make([][]int, 3)
	for c := range 3 {
		wg.Go(func() {
			reqs := []int{c * 10, c*10 + 1, c*10 + 2}
			res, errs := b.DoAll(context.Background(), reqs)
			for i := range reqs {
				require.NoError(t, errs[i])
			}
			got[c] = res
		})
	}
	require.Eventually(t, func() bool { return len(b.in) == 9 }, 10*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	require.NoError(t, <-first)
	for c := range 3 {
		require.Equal(t, []int{c * 20, c*20 + 2, c*20 + 4}, got[c], "each request's own result, in its place")
	}
	mu.Lock()
	require.Len(t, batches, 2, "the three callers' requests went in one round trip")
	require.Len(t, batches[1], 9)
	mu.Unlock()

	// A failed batch fails its requests, and only its own: -1 and 5 may go
	// in one batch or in two (the flusher, after a lull, does not wait
	// for the second).
	res, errs := b.DoAll(context.Background(), []int{-1, 5})
	require.Len(t, res, 2)
	require.ErrorIs(t, errs[0], boom)
	mu.Lock()
	together := slices.ContainsFunc(batches, func(b []int) bool { return slices.Contains(b, -1) && slices.Contains(b, 5) })
	mu.Unlock()
	if together {
		require.ErrorIs(t, errs[1], boom)
	} else {
		require.NoError(t, errs[1])
		require.Equal(t, 10, res[1])
	}

	// Cancelled before any was sent: all get ctx's error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, errs = b.DoAll(ctx, []int{7, 8})
	for _, err := range errs {
		require.Error(t, err)
	}
	b.Stop()
	_, errs = b.DoAll(context.Background(), []int{1, 2})
	require.ErrorIs(t, errs[0], ErrClosed)
	require.ErrorIs(t, errs[1], ErrClosed)
}
