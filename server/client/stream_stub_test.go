package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/client"
)

// jobLine is a job's line as the server writes it.
func jobLine(id string) string {
	return `{"topic":"t","id":"` + id + `","token":"0123456789abc","payload":"p","attempt":1,"max_attempts":10,` +
		`"due":"2030-01-01T00:00:00Z","created":"2030-01-01T00:00:00Z","deadline":"2030-01-01T00:00:30Z"}` + "\n"
}

// streamStub serves h as the API and returns a client of it.
func streamStub(t *testing.T, h http.HandlerFunc) *client.Client {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return client.New(s.URL, "")
}

// ndjson answers 200 application/x-ndjson with body.
func ndjson(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, body)
	}
}

// ids streams with c until the stream ends, and returns the ids fn got.
// (Max 100: a stub's stream of fewer jobs ends the call, as the server's
// that ends at its wait does.)
func ids(c *client.Client) ([]string, error) {
	var got []string
	err := c.ReserveStream(context.Background(), client.Reserve{Topics: []string{"t"}, Max: 100, Wait: time.Second}, func(r client.Reservation) error {
		got = append(got, r.ID)
		return nil
	})
	return got, err
}

// The request is the API's: its route, the Reserve's fields, the token.
func TestReserveStreamRequest(t *testing.T) {
	var got struct {
		Topics []string `json:"topics"`
		Max    int      `json:"max"`
		TTRMS  int64    `json:"ttr_ms"`
		WaitMS int64    `json:"wait_ms"`
	}
	var path, authz, accept string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, authz, accept = r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Accept")
		_ = json.NewDecoder(r.Body).Decode(&got)
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, jobLine("a"))
	}))
	defer s.Close()
	c := client.New(s.URL, "wq_w_secret")
	var rs []client.Reservation
	err := c.ReserveStream(context.Background(), client.Reserve{Topics: []string{"t", "u"}, Max: 5, TTR: 2 * time.Minute, Wait: 3 * time.Second},
		func(r client.Reservation) error { rs = append(rs, r); return nil })
	require.NoError(t, err)
	require.Equal(t, "/v1/reserve/stream", path)
	require.Equal(t, "Bearer wq_w_secret", authz)
	require.Equal(t, "application/x-ndjson", accept)
	require.Equal(t, []string{"t", "u"}, got.Topics)
	require.Equal(t, 5, got.Max)
	require.EqualValues(t, 120000, got.TTRMS)
	require.EqualValues(t, 3000, got.WaitMS)
	require.Len(t, rs, 1)
	require.Equal(t, client.Reservation{Topic: "t", ID: "a", Token: "0123456789abc", Payload: rs[0].Payload, Attempt: 1, MaxAttempts: 10,
		Due: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Created: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		Deadline: time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC)}, rs[0])
	require.Equal(t, "p", string(rs[0].Bytes()))
}

// A nil fn, or a TTR under a millisecond, is ErrInvalid, without a
// request.
func TestReserveStreamBadArgs(t *testing.T) {
	var n atomic.Int32
	c := streamStub(t, func(w http.ResponseWriter, r *http.Request) { n.Add(1) })
	ctx := context.Background()
	require.ErrorIs(t, c.ReserveStream(ctx, client.Reserve{Topics: []string{"t"}}, nil), client.ErrInvalid)
	err := c.ReserveStream(ctx, client.Reserve{Topics: []string{"t"}, TTR: time.Microsecond}, func(client.Reservation) error { return nil })
	require.ErrorIs(t, err, client.ErrInvalid)
	require.Zero(t, n.Load())
}

// A line that is neither a job nor the server's error ends the stream
// with an error naming the route and the line, after the jobs before it;
// so does a last line cut off (no newline). Blank lines are skipped. The
// server's error line is its code's sentinel.
func TestReserveStreamMalformed(t *testing.T) {
	for _, c := range []struct {
		body  string
		ids   int
		check func(t *testing.T, err error)
	}{
		{"<html>ok</html>\n", 0, contains("line 1 of the reply (200 OK, application/x-ndjson) is not a job nor an error")},
		{"{}\n", 0, contains("no topic, id or token")},
		{"null\n", 0, contains("no topic, id or token")},
		{"[1]\n", 0, contains("is not a job nor an error")},
		{`"job"` + "\n", 0, contains("is not a job nor an error")},
		{`{"topic":"t","id":"a","token":"x"} {}` + "\n", 0, contains("is not a job nor an error")},
		{`{"topic":"t","id":"a","token":"x","attempt":"one"}` + "\n", 0, contains("is not a job nor an error")},
		{`{"error":{}}` + "\n", 0, contains("an error without a code")},
		{`{"error":"boom"}` + "\n", 0, contains("is not a job nor an error")},
		{jobLine("a") + "garbage\n", 1, contains("line 2 of the reply")},
		{jobLine("a") + strings.TrimSuffix(jobLine("b"), "\n"), 1, func(t *testing.T, err error) {
			require.ErrorIs(t, err, io.ErrUnexpectedEOF)
			require.Contains(t, err.Error(), "line 2 of the reply (200 OK, application/x-ndjson) is cut off")
		}},
		{jobLine("a") + `{"error":{"code":"unavailable","message":"redis is gone"}}` + "\n", 1, func(t *testing.T, err error) {
			require.ErrorIs(t, err, client.ErrUnavailable)
			require.Contains(t, err.Error(), "redis is gone")
		}},
		{"\n" + jobLine("a") + "\r\n \n" + strings.TrimSuffix(jobLine("b"), "\n") + "\r\n", 2, nil},
		{"", 0, nil},
	} {
		got, err := ids(streamStub(t, ndjson(c.body)))
		require.Len(t, got, c.ids, "%q", c.body)
		if c.check == nil {
			require.NoError(t, err, "%q", c.body)
			continue
		}
		require.Error(t, err, "%q", c.body)
		c.check(t, err)
	}
}

func contains(s string) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		require.Contains(t, err.Error(), "wheelq client: POST /v1/reserve/stream: ")
		require.Contains(t, err.Error(), s)
	}
}

// A line past MaxStreamLine ends the stream (bufio.ErrTooLong), read no
// further than the bound.
func TestReserveStreamLongLine(t *testing.T) {
	var sent atomic.Int64
	c := streamStub(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, jobLine("a"))
		chunk := []byte(`{"topic":"t","payload":"` + strings.Repeat("x", 64<<10))
		for sent.Load() < 2*client.MaxStreamLine {
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	got, err := ids(c)
	require.ErrorIs(t, err, bufio.ErrTooLong)
	require.Contains(t, err.Error(), "line 2 of the reply (200 OK, application/x-ndjson) is longer than MaxStreamLine (67108864 bytes)")
	require.Equal(t, []string{"a"}, got)
	require.Less(t, sent.Load(), int64(2*client.MaxStreamLine), "read no further")
}

// A reply that is not a 200 is the error Reserve gives for it: the
// server's JSON error by its code, a proxy's page by its status.
func TestReserveStreamNotOK(t *testing.T) {
	for _, c := range []struct {
		status      int
		ctype, body string
		want        error
	}{
		{http.StatusServiceUnavailable, "text/html", "<html>busy</html>", client.ErrUnavailable},
		{http.StatusBadGateway, "text/plain", "bad gateway", client.ErrOutcomeUnknown},
		{http.StatusGatewayTimeout, "text/html", "<html>timeout</html>", client.ErrOutcomeUnknown},
		{http.StatusTooManyRequests, "application/json", `{"error":{"code":"too_many_waiters","message":"m"}}`, client.ErrTooManyWaiters},
		{http.StatusUnauthorized, "application/json", `{"error":{"code":"unauthorized","message":"m"}}`, client.ErrUnauthorized},
		{http.StatusBadRequest, "text/plain", "bad", nil},
		{http.StatusNoContent, "", "", nil},
		{http.StatusCreated, "application/x-ndjson", jobLine("a"), nil},
	} {
		got, err := ids(stub(t, c.status, c.ctype, c.body))
		require.Error(t, err, "%d", c.status)
		require.Empty(t, got, "%d", c.status)
		if c.ctype != "application/json" { // the server's error is as Reserve returns it
			require.Contains(t, err.Error(), "POST /v1/reserve/stream", "%d", c.status)
		}
		if c.want != nil {
			require.ErrorIs(t, err, c.want, "%d", c.status)
		} else {
			require.NotErrorIs(t, err, client.ErrInvalid, "%d", c.status)
			require.NotErrorIs(t, err, client.ErrUnavailable, "%d", c.status)
		}
	}
}

// A stream cut off (the connection closed mid-reply) is an error, not
// taken for the stream's end, after the jobs received whole.
func TestReserveStreamCut(t *testing.T) {
	c := streamStub(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, jobLine("a")+`{"topic":"t","id":"b"`)
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	})
	got, err := ids(c)
	require.Error(t, err)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Contains(t, err.Error(), "wheelq client: POST /v1/reserve/stream: ")
	require.Equal(t, []string{"a"}, got)
}

// The http.Client's Timeout does not cut the stream: a server that holds
// it past Timeout + wait fails it (context.DeadlineExceeded), but the
// time spent in fn does not count.
func TestReserveStreamBound(t *testing.T) {
	// served writes a job, another 300 ms later, then ends, or with hang
	// holds the stream open until the client goes.
	served := func(hang bool) *client.Client {
		c := streamStub(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-ndjson")
			_, _ = io.WriteString(w, jobLine("a"))
			_ = http.NewResponseController(w).Flush()
			select {
			case <-time.After(300 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
			_, _ = io.WriteString(w, jobLine("b"))
			_ = http.NewResponseController(w).Flush()
			if hang {
				<-r.Context().Done()
			}
		})
		c.HTTP = &http.Client{Timeout: 200 * time.Millisecond}
		return c
	}
	ctx := context.Background()
	r := client.Reserve{Topics: []string{"t"}, Max: 100, Wait: 500 * time.Millisecond}

	// fn takes 1 s on the first job, past Timeout + wait (700 ms): the
	// server's part took far less.
	c := served(false)
	var got []string
	start := time.Now()
	err := c.ReserveStream(ctx, r, func(r client.Reservation) error {
		got = append(got, r.ID)
		if r.ID == "a" {
			time.Sleep(time.Second)
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, got)
	require.GreaterOrEqual(t, time.Since(start), time.Second)
	require.Equal(t, 200*time.Millisecond, c.HTTP.Timeout, "the user's client is left as it is")

	// A server that holds the stream open past Timeout + wait.
	got = nil
	start = time.Now()
	err = served(true).ReserveStream(ctx, r, func(r client.Reservation) error { got = append(got, r.ID); return nil })
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "wheelq client: POST /v1/reserve/stream: the client's Timeout 200ms + the wait 500ms passed")
	require.Equal(t, []string{"a", "b"}, got)
	require.GreaterOrEqual(t, took, 650*time.Millisecond)
	require.Less(t, took, 5*time.Second)
}
