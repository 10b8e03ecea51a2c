package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/client"
)

// stub answers every request with status, body and its content type.
func stub(t *testing.T, status int, ctype, body string) *client.Client {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ctype != "" {
			w.Header().Set("Content-Type", ctype)
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(s.Close)
	return client.New(s.URL, "")
}

var res = []client.Reservation{{Topic: "t", ID: "a", Token: "0123456789abc"}, {Topic: "t", ID: "b", Token: "0123456789abd"}}

// A reply that is not a 2xx is never taken for success.
func TestRedirectIsAnError(t *testing.T) {
	ctx := context.Background()
	c := stub(t, http.StatusMultipleChoices, "", "")
	_, err := c.Schedule(ctx, "t", nil, client.Schedule{ID: "a"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "POST /v1/jobs/t")
	errs, err := c.AckAll(ctx, res)
	require.Error(t, err)
	require.Nil(t, errs)
	require.Error(t, c.Cancel(ctx, "t", "a"))
	_, err = c.Get(ctx, "t", "a")
	require.Error(t, err)
}

// A 2xx whose body is empty, not JSON, or not what was asked for is an
// error naming the method and path.
func TestMalformedSuccess(t *testing.T) {
	ctx := context.Background()
	for _, body := range []string{"", "<html>ok</html>", "{}", `{"id":""}`} {
		c := stub(t, http.StatusCreated, "application/json", body)
		_, err := c.Schedule(ctx, "t", nil, client.Schedule{ID: "a"})
		require.Error(t, err, "%q", body)
		require.Contains(t, err.Error(), "POST /v1/jobs/t", "%q", body)
	}
	for _, body := range []string{"", "nope", "{}", `{"results":[]}`, `{"results":[{},{},{}]}`} {
		c := stub(t, http.StatusOK, "application/json", body)
		errs, err := c.AckAll(ctx, res)
		require.Error(t, err, "%q", body)
		require.Contains(t, err.Error(), "POST /v1/ack", "%q", body)
		require.Nil(t, errs)
	}
	for _, body := range []string{"", "{}", "[]"} {
		c := stub(t, http.StatusOK, "application/json", body)
		_, err := c.Reserve(ctx, client.Reserve{Topics: []string{"t"}})
		require.Error(t, err, "%q", body)
		_, err = c.Get(ctx, "t", "a")
		require.Error(t, err, "%q", body)
		_, err = c.Touch(ctx, &res[0], time.Minute)
		require.Error(t, err, "%q", body)
	}
	// A reply without a body is fine where none is expected.
	c := stub(t, http.StatusNoContent, "", "")
	require.NoError(t, c.Cancel(ctx, "t", "a"))
	require.NoError(t, c.Ack(ctx, &res[0]))
}

// A reply that is not the server's JSON error (a proxy's) maps to the
// sentinel its status allows: 503 unavailable; 502 and 504 unavailable
// for a read, outcome unknown for a write.
func TestProxyErrors(t *testing.T) {
	ctx := context.Background()
	c := stub(t, http.StatusServiceUnavailable, "text/html", "<html>busy</html>")
	_, err := c.Get(ctx, "t", "a")
	require.ErrorIs(t, err, client.ErrUnavailable)
	_, err = c.Schedule(ctx, "t", nil, client.Schedule{})
	require.ErrorIs(t, err, client.ErrUnavailable)
	for _, st := range []int{http.StatusBadGateway, http.StatusGatewayTimeout} {
		c := stub(t, st, "text/plain", "bad gateway")
		_, err := c.Get(ctx, "t", "a")
		require.ErrorIs(t, err, client.ErrUnavailable, "%d", st)
		require.NotErrorIs(t, err, client.ErrOutcomeUnknown)
		_, err = c.Schedule(ctx, "t", nil, client.Schedule{})
		require.ErrorIs(t, err, client.ErrOutcomeUnknown, "%d", st)
		require.NotErrorIs(t, err, client.ErrUnavailable)
		require.Contains(t, err.Error(), "POST /v1/jobs/t")
		require.ErrorIs(t, c.Ack(ctx, &res[0]), client.ErrOutcomeUnknown)
	}
	// Another status of a proxy is an error matching no sentinel.
	c = stub(t, http.StatusBadRequest, "text/plain", "bad")
	err = c.Cancel(ctx, "t", "a")
	require.Error(t, err)
	require.NotErrorIs(t, err, client.ErrInvalid)
	// The server's own JSON error keeps its code.
	c = stub(t, http.StatusServiceUnavailable, "application/json", `{"error":{"code":"outcome_unknown","message":"m"}}`)
	require.ErrorIs(t, c.Cancel(ctx, "t", "a"), client.ErrOutcomeUnknown)
}

// A server that refuses connections (restarting) is unavailable.
func TestConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	c := client.New("http://"+addr, "")
	_, err = c.Schedule(context.Background(), "t", nil, client.Schedule{})
	require.ErrorIs(t, err, client.ErrUnavailable)
	require.True(t, errors.Is(c.Ack(context.Background(), &res[0]), client.ErrUnavailable))
}
