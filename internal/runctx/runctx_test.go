package runctx

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRunCtxEndsWithTheRun(t *testing.T) {
	t.Parallel()
	r := New(1, time.Hour, false)
	s := &r.slots[0]
	c := s.Begin()
	ctx := context.Context(&c)
	dl, ok := ctx.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(time.Hour), dl, time.Minute)
	require.NoError(t, ctx.Err())
	done := ctx.Done()
	select {
	case <-done:
		t.Fatal("done before the run ended")
	default:
	}
	child, cancelChild := context.WithCancel(ctx) // through AfterFunc: no goroutine
	defer cancelChild()
	var called atomic.Bool
	stopped := context.AfterFunc(ctx, func() {})
	require.True(t, stopped(), "a stopped AfterFunc is not called")
	fired := make(chan struct{})
	context.AfterFunc(ctx, func() { called.Store(true); close(fired) })

	s.Finish(c.gen)
	<-done
	<-child.Done()
	<-fired
	require.True(t, called.Load())
	require.ErrorIs(t, ctx.Err(), context.Canceled)
	require.ErrorIs(t, context.Cause(ctx), context.Canceled)
	require.ErrorIs(t, child.Err(), context.Canceled)

	// The slot's next run: the old context stays done.
	c2 := s.Begin()
	require.NoError(t, (&c2).Err())
	require.ErrorIs(t, ctx.Err(), context.Canceled)
	<-ctx.Done()
	late := make(chan struct{})
	require.False(t, context.AfterFunc(ctx, func() { close(late) })())
	<-late // called at once: the context ended already
	s.Finish(c2.gen)
}

func TestRunCtxDeadline(t *testing.T) {
	t.Parallel()
	r := New(2, 20*time.Millisecond, false)
	r.Start()
	defer r.Stop()
	for range 3 { // the watchdog idles between runs and is woken again
		c := r.slots[1].Begin()
		ctx := context.Context(&c)
		child, cancel := context.WithTimeout(ctx, time.Hour)
		<-ctx.Done()
		<-child.Done()
		require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
		require.ErrorIs(t, child.Err(), context.DeadlineExceeded)
		dl, _ := ctx.Deadline()
		require.False(t, time.Now().Before(dl), "ended before its deadline")
		cancel()
		r.slots[1].Finish(c.gen)
		require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded, "the run's end does not change why")
	}
}

func TestRunCtxHardCancel(t *testing.T) {
	t.Parallel()
	r := New(2, time.Hour, false)
	c := r.slots[0].Begin()
	ctx := context.Context(&c)
	r.CancelAll()
	<-ctx.Done()
	require.ErrorIs(t, ctx.Err(), context.Canceled)
	c2 := r.slots[1].Begin() // begun after: cancelled from the start
	<-(&c2).Done()
	require.ErrorIs(t, (&c2).Err(), context.Canceled)
	r.Stop()
	r.Stop() // twice is safe
}

// BenchmarkRunCtx: a run's context costs no allocation.
func BenchmarkRunCtx(b *testing.B) {
	r := New(1, time.Minute, false)
	r.Start()
	defer r.Stop()
	s := &r.slots[0]
	b.ReportAllocs()
	for b.Loop() {
		c := s.Begin()
		_ = (&c).Err()
		s.Finish(c.gen)
	}
}

// TestCallCtxReused: a round trip's context ends at its deadline, not when
// the call returns, and its Done channel serves the slot's next calls.
func TestCallCtxReused(t *testing.T) {
	t.Parallel()
	r := New(1, 30*time.Millisecond, true)
	r.Start()
	defer r.Stop()
	s := &r.slots[0]
	ctx, end := s.Call()
	d := ctx.Done()
	end()
	require.NoError(t, ctx.Err(), "a call's end does not cancel it")
	ctx, end = s.Call()
	require.Equal(t, d, ctx.Done(), "the channel is kept")
	<-ctx.Done() // the watchdog ends it at its deadline
	require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
	end()
	ctx, end = s.Call()
	require.NotEqual(t, d, ctx.Done(), "a closed channel is not reused")
	require.NoError(t, ctx.Err())
	end()
}

// BenchmarkCallCtx: a round trip's context costs nothing, Done included.
func BenchmarkCallCtx(b *testing.B) {
	r := New(1, time.Minute, true)
	r.Start()
	defer r.Stop()
	s := &r.slots[0]
	b.ReportAllocs()
	for b.Loop() {
		ctx, end := s.Call()
		_ = ctx.Done()
		end()
	}
}
