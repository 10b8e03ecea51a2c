package client_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/client"
)

// countingTransport counts the requests that go through it.
type countingTransport struct {
	n  atomic.Int32
	rt http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// A Reserve's wait is not cut short by the http.Client's Timeout, which
// is meant for ordinary calls: with a Timeout of 1 s, a reserve waiting
// 3 s on an empty topic returns no jobs and no error after its wait, and
// goes through the user's Transport.
func TestReserveWaitOutlastsHTTPTimeout(t *testing.T) {
	base := startServer(t, "work")
	tr := &countingTransport{rt: http.DefaultTransport}
	c := client.New(base, "")
	c.HTTP = &http.Client{Timeout: time.Second, Transport: tr}
	ctx := context.Background()
	start := time.Now()
	rs, err := c.Reserve(ctx, client.Reserve{Topics: []string{"work"}, Wait: 3 * time.Second})
	took := time.Since(start)
	require.NoError(t, err)
	require.Empty(t, rs)
	require.GreaterOrEqual(t, took, 2900*time.Millisecond)
	require.Less(t, took, 4*time.Second)
	require.EqualValues(t, 1, tr.n.Load())
	require.Equal(t, time.Second, c.HTTP.Timeout, "the user's client is left as it is")

	// A job that comes due during the wait is handed out.
	go func() {
		time.Sleep(500 * time.Millisecond)
		_, _ = c.Schedule(ctx, "work", []byte("p"), client.Schedule{ID: "late", Delay: time.Second})
	}()
	rs, err = c.Reserve(ctx, client.Reserve{Topics: []string{"work"}, Wait: 3 * time.Second})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, "late", rs[0].ID)
	require.NoError(t, c.Ack(ctx, &rs[0]))
}

// A waiting Reserve is still bounded: a server that never answers fails
// it after the client's Timeout plus the wait, with an error matching
// context.DeadlineExceeded (as the http.Client's own timeout does); and
// an ordinary call keeps the Timeout as it is.
func TestReserveBoundedByTimeoutPlusWait(t *testing.T) {
	release := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer s.Close()
	defer close(release)
	c := client.New(s.URL, "")
	c.HTTP = &http.Client{Timeout: 300 * time.Millisecond}
	ctx := context.Background()

	start := time.Now()
	_, err := c.Reserve(ctx, client.Reserve{Topics: []string{"t"}, Wait: time.Second})
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.GreaterOrEqual(t, took, 1300*time.Millisecond)
	require.Less(t, took, 3*time.Second)
	require.Contains(t, err.Error(), "the client's Timeout 300ms + the wait 1s passed")

	start = time.Now()
	_, err = c.Get(ctx, "t", "a")
	took = time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, took, time.Second)

	// The caller's own deadline, if sooner, still wins.
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = c.Reserve(cctx, client.Reserve{Topics: []string{"t"}, Wait: time.Second})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), time.Second)
	require.NotContains(t, err.Error(), "the client's Timeout")
}

// A Wait so long that Timeout + Wait is past time.Duration's range is
// sent as it is (the server refuses it: invalid), not failed at once.
func TestReserveHugeWait(t *testing.T) {
	base := startServer(t, "work")
	c := client.New(base, "")
	c.HTTP = &http.Client{Timeout: time.Second}
	_, err := c.Reserve(context.Background(), client.Reserve{Topics: []string{"work"}, Wait: math.MaxInt64})
	require.ErrorIs(t, err, client.ErrInvalid)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
}
