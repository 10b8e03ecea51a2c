package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/client"
)

// AckAll of no reservations sends nothing and returns nil, nil.
func TestAckAllEmpty(t *testing.T) {
	var n atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"code":"invalid","message":"no receipts"}}`))
	}))
	defer s.Close()
	c := client.New(s.URL, "")
	errs, err := c.AckAll(context.Background(), nil)
	require.NoError(t, err)
	require.Nil(t, errs)
	require.Zero(t, n.Load())
}

// A TTR that is not 0 but under a millisecond is refused, not sent as 0
// (the server's default, 30 s).
func TestSubMillisecondTTR(t *testing.T) {
	var n atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = w.Write([]byte(`{"jobs":[],"deadline":"2030-01-01T00:00:00Z"}`))
	}))
	defer s.Close()
	c := client.New(s.URL, "")
	ctx := context.Background()
	for _, ttr := range []time.Duration{time.Microsecond, 999 * time.Microsecond, -time.Nanosecond} {
		_, err := c.Reserve(ctx, client.Reserve{Topics: []string{"t"}, TTR: ttr})
		require.ErrorIs(t, err, client.ErrInvalid, "%v", ttr)
		_, err = c.Touch(ctx, &client.Reservation{Topic: "t", ID: "a", Token: "x"}, ttr)
		require.ErrorIs(t, err, client.ErrInvalid, "%v", ttr)
	}
	require.Zero(t, n.Load())
	// 0 is the server's default.
	_, err := c.Reserve(ctx, client.Reserve{Topics: []string{"t"}})
	require.NoError(t, err)
	_, err = c.Touch(ctx, &client.Reservation{Topic: "t", ID: "a", Token: "x"}, 0)
	require.NoError(t, err)
}

// Every code the server answers with has its sentinel.
func TestEveryCodeHasASentinel(t *testing.T) {
	for code, want := range map[string]error{"no_route": client.ErrNoRoute, "method_not_allowed": client.ErrMethodNotAllowed, "internal": client.ErrInternal,
		"contended": client.ErrContended} {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"code":"` + code + `","message":"m"}}`))
		}))
		err := client.New(s.URL, "").Cancel(context.Background(), "t", "a")
		s.Close()
		require.ErrorIs(t, err, want, code)
	}
}
