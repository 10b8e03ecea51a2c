package push_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/push"
)

// testTLS gives a server certificate's config for a raw receiver and a
// function making a deliverer trust it.
func testTLS(t *testing.T) (*tls.Config, func(*push.Deliverer)) {
	t.Helper()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	tc := srv.TLS.Clone()
	srv.Close()
	return tc, func(d *push.Deliverer) { push.TrustForTest(d, roots) }
}

// TestUnaskedReplyNotTakenTLS: as TestUnaskedReplyNotTaken, over TLS: a
// second reply the receiver sent to the first push, while its connection
// was idle, is not the next push's reply. The receiver answers that push
// 500: taking the unasked 200 as its reply would ack a job the receiver
// refused.
func TestUnaskedReplyNotTakenTLS(t *testing.T) {
	tc, trust := testTLS(t)
	const unasked = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
	r := startRaw(t, tc, func(k int32) string {
		if k == 1 {
			return noContent
		}
		return "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"
	}, func(k int32) string {
		if k == 1 {
			return unasked
		}
		return ""
	}, false)
	d := r.deliverer(t, 5*time.Second)
	trust(d)
	require.NoError(t, d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: "0", Attempt: 1}))
	require.Eventually(t, func() bool { return r.lated.Load() == 1 }, 10*time.Second, time.Millisecond, "the later bytes sent")
	time.Sleep(20 * time.Millisecond) // on loopback, through the push's socket into its TLS records
	err := d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: "1", Attempt: 1})
	require.ErrorContains(t, err, "500", "the push's own reply, not the unasked 200")
	require.EqualValues(t, 2, r.conns.Load())
}

// TestUnaskedRecordNotTakenTLS: an unasked reply in a TLS record of its
// own, sent right after the reply's (so the push may read it off the
// socket with the reply, into the TLS connection's buffer, not its own),
// is not the next push's reply either.
func TestUnaskedRecordNotTakenTLS(t *testing.T) {
	tc, trust := testTLS(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns, requests atomic.Int32
	var wg sync.WaitGroup
	tl := tls.NewListener(l, tc)
	t.Cleanup(func() { tl.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if requests.Add(1) == 1 {
						_, _ = io.WriteString(c, noContent)                                      // a record
						_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") // another
					} else {
						_, _ = io.WriteString(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n")
					}
				}
			})
		}
	})
	u, _ := url.Parse("https://" + l.Addr().String() + "/hook")
	d, err := push.New(push.Target{URL: u, Secret: secret, Timeout: 5 * time.Second}, []string{u.Host})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	trust(d)
	require.NoError(t, d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: "0", Attempt: 1}))
	time.Sleep(20 * time.Millisecond) // the second record arrives
	err = d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: "1", Attempt: 1})
	require.ErrorContains(t, err, "500", "the push's own reply, not the unasked 200")
	require.EqualValues(t, 2, conns.Load())
}

// TestConnectionKeptTLS: looking at a kept TLS connection does not cost
// it: a receiver that keeps its connections (and sent its session
// tickets) gets every push on the first one.
func TestConnectionKeptTLS(t *testing.T) {
	tc, trust := testTLS(t)
	r := startRaw(t, tc, func(int32) string { return noContent }, nil, false)
	d := r.deliverer(t, 5*time.Second)
	trust(d)
	for i := range 5 {
		require.NoError(t, d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: fmt.Sprint(i), Attempt: 1}))
	}
	require.EqualValues(t, 5, r.requests.Load())
	require.EqualValues(t, 1, r.conns.Load())
}

// TestMalformedReplyErrorBounded: a reply that does not parse fails the
// push with an error that quotes a little of it, not all of it: the error
// is logged whole at every failed attempt, and a receiver (or a service
// that is not HTTP) could send a line of a megabyte, quoted to four.
func TestMalformedReplyErrorBounded(t *testing.T) {
	for _, c := range []struct{ name, reply, says string }{
		{"status line", strings.Repeat("\x01", 1<<20-10) + "\r\n", "malformed HTTP response"},
		{"version", strings.Repeat("\x01", 1<<20-10) + " 200 OK\r\n\r\n", "malformed HTTP version"},
		{"header line", "HTTP/1.1 200 OK\r\n" + strings.Repeat("\x01", 1<<20-100) + "\r\n\r\n", "malformed MIME header"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := startRaw(t, nil, func(int32) string { return c.reply }, nil, false)
			d := r.deliverer(t, 5*time.Second)
			err := d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: "a", Attempt: 1})
			require.ErrorContains(t, err, c.says)
			require.Less(t, len(err.Error()), 1024, "%.200s...", err.Error())
		})
	}
}
