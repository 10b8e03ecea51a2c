package wheelq

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHeaders: the handler sees the job's headers, as stored (read back
// from Redis, not only from the cache), on every attempt; two Headers
// options merge; the caller's map is copied.
func TestHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	r := newRuns()
	require.NoError(t, b.q.Handle("h", HandlerFunc(func(_ context.Context, j *Job) error {
		r.add(j)
		if j.Attempt == 1 {
			return errors.New("again")
		}
		return nil
	})))
	mine := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "a"}
	_, err := b.q.Schedule(b.ctx, "h", []byte("p"), ID("1"), After(300*time.Millisecond),
		Headers(mine), Headers(map[string]string{"tenant": "b", "x": ""}))
	require.NoError(t, err)
	mine["tenant"] = "changed after Schedule"
	b.q.cache.Remove("h/1") // the claim reads the record from Redis
	want := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "b", "x": ""}
	for attempt := 1; attempt <= 2; attempt++ {
		j := r.next(t)
		require.Equal(t, attempt, j.Attempt)
		require.Equal(t, want, j.Headers, "attempt %d", attempt)
		require.Equal(t, "p", string(j.Payload))
	}
	// The run history keeps them (its entry is the record cut before the
	// payload, which the headers precede).
	eventually(t, func() bool {
		info, err := b.q.Lookup(b.ctx, "h", "1")
		return err == nil && info.State == StateDone
	}, "job done")
	info, err := b.q.Lookup(b.ctx, "h", "1")
	require.NoError(t, err)
	require.Equal(t, want, info.Headers)
	require.Nil(t, info.Payload)
	// A job without headers has none.
	require.NoError(t, b.q.Handle("plain", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
	_, err = b.q.Schedule(b.ctx, "plain", nil, Headers(nil))
	require.NoError(t, err)
	require.Nil(t, r.next(t).Headers)
}

// TestHeadersTooLarge: past MaxHeaders pairs or MaxHeadersSize bytes,
// Schedule fails with ErrHeadersTooLarge and stores nothing; at the
// limits it succeeds.
func TestHeadersTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	pairs := func(n int) map[string]string {
		h := map[string]string{}
		for i := range n {
			h[strconv.Itoa(i)] = "v"
		}
		return h
	}
	big := func(size int) map[string]string { return map[string]string{"k": strings.Repeat("v", size-1)} }
	for _, h := range []map[string]string{pairs(MaxHeaders), big(MaxHeadersSize)} {
		_, err := b.q.Schedule(b.ctx, "t", nil, Headers(h), After(time.Hour))
		require.NoError(t, err)
	}
	for _, h := range []map[string]string{pairs(MaxHeaders + 1), big(MaxHeadersSize + 1)} {
		_, err := b.q.Schedule(b.ctx, "t", nil, Headers(h), ID("no"), After(time.Hour))
		require.ErrorIs(t, err, ErrHeadersTooLarge)
	}
	// Merged options count together.
	_, err := b.q.Schedule(b.ctx, "t", nil, Headers(pairs(10)), Headers(map[string]string{"a": "", "b": "", "c": "", "d": "", "e": "", "f": "", "g": ""}), ID("no"))
	require.ErrorIs(t, err, ErrHeadersTooLarge)
	require.ErrorIs(t, b.q.Cancel(b.ctx, "t", "no"), ErrNotFound)
	require.Equal(t, `Headers(map[a:1])`, Headers(map[string]string{"a": "1"}).String())
}
