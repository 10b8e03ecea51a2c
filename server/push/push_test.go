package push_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
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

var secret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123"))

// TestDeliver: a job is POSTed with its payload and a signature the
// receiver verifies; 2xx acks, anything else is an error (with the
// receiver's Retry-After), redirects are not followed.
func TestDeliver(t *testing.T) {
	type got struct {
		h    http.Header
		body []byte
	}
	reqs := make(chan got, 10)
	status := http.StatusNoContent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reqs <- got{r.Header.Clone(), b}
		if status == http.StatusFound {
			w.Header().Set("Location", "http://127.0.0.1:1/elsewhere")
		}
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "7")
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/hook")
	d, err := push.New(push.Target{URL: u, Secret: secret, Timeout: 5 * time.Second}, []string{u.Host})
	require.NoError(t, err)
	j := &wheelq.Job{Topic: "hooks", ID: "o/1", Attempt: 2, Payload: []byte{0, 1, 0xff}, Headers: map[string]string{"traceparent": "00-a"}}
	require.NoError(t, d.HandleJob(context.Background(), j))
	g := <-reqs
	require.Equal(t, []byte{0, 1, 0xff}, g.body)
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, push.Verify(key, g.h, g.body, time.Now(), 5*time.Minute))
	require.Error(t, push.Verify(key, g.h, append(g.body, 1), time.Now(), 5*time.Minute), "a changed body fails")
	require.Error(t, push.Verify(key, g.h, g.body, time.Now().Add(time.Hour), 5*time.Minute), "an old message fails")
	require.Equal(t, "hooks/o%2F1/2", g.h.Get("webhook-id"))
	require.Equal(t, "2", g.h.Get(push.HeaderAttempt))
	require.JSONEq(t, `{"traceparent":"00-a"}`, g.h.Get(push.HeaderHeaders))

	status = http.StatusServiceUnavailable
	err = d.HandleJob(context.Background(), j)
	var re *wheelq.RetryError
	require.True(t, errors.As(err, &re), "%v", err)
	<-reqs
	status = http.StatusFound
	require.ErrorContains(t, d.HandleJob(context.Background(), j), "302")
	<-reqs
}

func TestAllowList(t *testing.T) {
	u, _ := url.Parse("http://169.254.169.254/latest/meta-data")
	_, err := push.New(push.Target{URL: u, Secret: secret}, []string{"127.0.0.1:9000"})
	require.ErrorIs(t, err, push.ErrNotAllowed)
	u, _ = url.Parse("http://127.0.0.1:9000/x")
	_, err = push.New(push.Target{URL: u, Secret: "whsec_short"}, []string{"127.0.0.1:9000"})
	require.Error(t, err)
	// Credentials in the URL would not be sent (a push sends none): refused,
	// as the server's configuration refuses them, and not printed.
	u, _ = url.Parse("http://user:hunter2@127.0.0.1:9000/x")
	_, err = push.New(push.Target{URL: u, Secret: secret}, []string{"127.0.0.1:9000"})
	require.ErrorContains(t, err, "credentials in the URL")
	require.NotContains(t, err.Error(), "hunter2")
}

// TestReusesConnections: concurrent deliveries to one receiver reuse
// their connections (the default transport keeps 2 idle per host, and
// most pushes dialled anew: p50 0.44 s late at 10,000 jobs/s).
func TestReusesConnections(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/hook")
	d, err := push.New(push.Target{URL: u, Secret: secret, Timeout: 5 * time.Second}, []string{u.Host})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 20 {
				require.NoError(t, d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: fmt.Sprint(g, "-", i), Attempt: 1}))
			}
		})
	}
	wg.Wait()
	// About one connection each (32 to 42 seen beside stress-ng --cpu 2,
	// where a goroutine sometimes dials while another's connection is on
	// its way back); with the default transport's 2 idle per host, 173 to
	// 291.
	require.LessOrEqual(t, conns.Load(), int32(96), "640 pushes from 32 goroutines: about one connection each")
}

// rawReceiver accepts connections (over TLS if tc is set) and answers
// each request read with reply(k), where k counts requests over all
// connections, and 20 ms later with later(k) if that is not empty (bytes
// no push asked for); closeAfter closes the connection after the reply
// (without saying so in it, as a receiver closing an idle connection
// does). It counts connections and requests.
type rawReceiver struct {
	l                      net.Listener
	tls                    bool
	conns, requests, lated atomic.Int32 // lated: later bytes written
}

func startRaw(t *testing.T, tc *tls.Config, reply, later func(k int32) string, closeAfter bool) *rawReceiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &rawReceiver{l: l, tls: tc != nil}
	if tc != nil {
		l = tls.NewListener(l, tc)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r.conns.Add(1)
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					k := r.requests.Add(1)
					if _, err := io.WriteString(c, reply(k)); err != nil || closeAfter {
						return
					}
					if later != nil {
						if s := later(k); s != "" {
							time.Sleep(20 * time.Millisecond)
							_, _ = io.WriteString(c, s)
							r.lated.Add(1) // on loopback, in the push's socket now
						}
					}
				}
			})
		}
	})
	return r
}

func (r *rawReceiver) deliverer(t *testing.T, timeout time.Duration) *push.Deliverer {
	t.Helper()
	scheme := "http"
	if r.tls {
		scheme = "https"
	}
	u, _ := url.Parse(scheme + "://" + r.l.Addr().String() + "/hook")
	d, err := push.New(push.Target{URL: u, Secret: secret, Timeout: timeout}, []string{u.Host})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

const noContent = "HTTP/1.1 204 No Content\r\n\r\n"

// TestClosedIdleConnection: a kept connection the receiver closed while
// it was idle is not used: it is seen closed before the push (the socket
// is looked at; over TLS, or if the close comes meanwhile, the push finds
// it closed and goes again on a new connection). Each push succeeds, and the
// receiver saw each once.
func TestClosedIdleConnection(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	tc := srv.TLS.Clone()
	srv.Close()
	for _, c := range []struct {
		name string
		tls  *tls.Config
	}{{"plain", nil}, {"TLS", tc}} {
		t.Run(c.name, func(t *testing.T) {
			r := startRaw(t, c.tls, func(int32) string { return noContent }, nil, true)
			d := r.deliverer(t, 5*time.Second)
			if c.tls != nil {
				push.TrustForTest(d, roots)
			}
			for i := range 3 {
				require.NoError(t, d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: fmt.Sprint(i), Attempt: 1, Payload: []byte("p")}))
				time.Sleep(10 * time.Millisecond) // the receiver's close arrives
			}
			require.EqualValues(t, 3, r.requests.Load(), "each push reached the receiver once")
			require.EqualValues(t, 3, r.conns.Load())
		})
	}
}

// TestUnaskedReplyNotTaken: bytes a receiver sends that no push asked
// for (a second reply to one request), with the reply or later while the
// connection is idle, are not read as the next push's reply: that push
// goes on a new connection and gets its own.
func TestUnaskedReplyNotTaken(t *testing.T) {
	const unasked = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"
	for _, c := range []struct {
		name         string
		reply, later string
	}{{"with the reply", noContent + unasked, ""}, {"later", noContent, unasked}} {
		t.Run(c.name, func(t *testing.T) {
			r := startRaw(t, nil, func(int32) string { return c.reply }, func(int32) string { return c.later }, false)
			d := r.deliverer(t, 5*time.Second)
			require.NoError(t, d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: "0", Attempt: 1}))
			if c.later != "" {
				require.Eventually(t, func() bool { return r.lated.Load() == 1 }, 10*time.Second, time.Millisecond, "the later bytes sent")
			}
			require.NoError(t, d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: "1", Attempt: 1}))
			require.EqualValues(t, 2, r.conns.Load())
		})
	}
}

// TestConnectionKept: a receiver that keeps its connections gets every
// push on the first one; one that says Connection: close, or whose reply
// is longer than a push reads, gets a new connection for the next push.
func TestConnectionKept(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply string
		conns int32
	}{
		{"kept", noContent, 1},
		{"connection close", "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n", 3},
		{"a long reply", "HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n" + strings.Repeat("x", 70000), 3},
		{"100 Continue first", "HTTP/1.1 100 Continue\r\n\r\n" + noContent, 1},
		{"HTTP/1.0", "HTTP/1.0 204 No Content\r\n\r\n", 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := startRaw(t, nil, func(int32) string { return c.reply }, nil, false)
			d := r.deliverer(t, 5*time.Second)
			for i := range 3 {
				require.NoError(t, d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: fmt.Sprint(i), Attempt: 1}))
			}
			require.EqualValues(t, 3, r.requests.Load())
			require.Equal(t, c.conns, r.conns.Load())
		})
	}
}

// TestSilentReceiver: a receiver that never answers fails the push at
// the target's timeout, or when the queue's ctx ends (its shutdown); the
// connection is not kept, and a receiver that answers again is reached.
func TestSilentReceiver(t *testing.T) {
	silent := atomic.Bool{}
	silent.Store(true)
	r := startRaw(t, nil, func(int32) string {
		for silent.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		return noContent
	}, nil, false)
	t.Cleanup(func() { silent.Store(false) }) // before the receiver's: it waits for its replies
	d := r.deliverer(t, 200*time.Millisecond)
	began := time.Now()
	err := d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: "a", Attempt: 1})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(began), 5*time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	d2 := r.deliverer(t, 0) // no timeout of its own
	err = d2.HandleJob(ctx, &wheelq.Job{Topic: "t", ID: "b", Attempt: 1})
	require.ErrorIs(t, err, context.Canceled)

	silent.Store(false)
	require.NoError(t, d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: "c", Attempt: 1}))
	require.EqualValues(t, 3, r.conns.Load(), "neither interrupted connection was used again")
}

// TestDeliverTLS: an https target is reached over TLS, its certificate
// checked against the roots trusted.
func TestDeliverTLS(t *testing.T) {
	var got atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/hook")
	d, err := push.New(push.Target{URL: u, Secret: secret, Timeout: 5 * time.Second}, []string{u.Host})
	require.NoError(t, err)
	defer d.Close()
	job := &wheelq.Job{Topic: "t", ID: "a", Attempt: 1}
	require.Error(t, d.HandleJob(context.Background(), job), "a certificate no root vouches for fails")
	require.Zero(t, got.Load())
	push.TrustForTest(d, srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs)
	require.NoError(t, d.HandleJob(context.Background(), job))
	require.NoError(t, d.HandleJob(context.Background(), job))
	require.EqualValues(t, 2, got.Load())
}

// TestCloseClosesKeptConnections: Close closes the idle connections; a
// push after it still goes, on a connection not kept.
func TestCloseClosesKeptConnections(t *testing.T) {
	r := startRaw(t, nil, func(int32) string { return noContent }, nil, false)
	d := r.deliverer(t, 5*time.Second)
	require.NoError(t, d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: "a", Attempt: 1}))
	d.Close()
	require.NoError(t, d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: "b", Attempt: 1}))
	require.NoError(t, d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: "c", Attempt: 1}))
	require.EqualValues(t, 3, r.conns.Load())
}

// TestEndlessReplyHead: a receiver whose reply's head does not end fails
// the push once a bound is read, rather than filling the server's memory
// until the timeout.
func TestEndlessReplyHead(t *testing.T) {
	r := startRaw(t, nil, func(int32) string {
		return "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("x", 1000)+"\r\n", 2000)
	}, nil, false)
	d := r.deliverer(t, 10*time.Second)
	began := time.Now()
	err := d.HandleJob(context.Background(), &wheelq.Job{Topic: "t", ID: "a", Attempt: 1})
	require.ErrorContains(t, err, "reply head too large")
	require.Less(t, time.Since(began), 5*time.Second, "not at the timeout")
}

// TestTopicBackoff: with a Target.Backoff, a failed push (a status, or a
// refused connection) is retried after the topic's delay for its attempt,
// within ±25%; a receiver's Retry-After wins; without one the error is
// left to the queue's backoff.
func TestTopicBackoff(t *testing.T) {
	retryAfter := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/hook")
	d, err := push.New(push.Target{URL: u, Secret: secret, Timeout: 5 * time.Second,
		Backoff: push.Exponential(2*time.Second, 10*time.Second)}, []string{u.Host})
	require.NoError(t, err)
	defer d.Close()
	delay := func(d *push.Deliverer, attempt int) time.Duration {
		t.Helper()
		err := d.HandleJob(context.Background(), &wheelq.Job{Topic: "hooks", ID: "a", Attempt: attempt})
		var re *wheelq.RetryError
		require.True(t, errors.As(err, &re), "%v", err)
		return re.Delay
	}
	for attempt, want := range map[int]time.Duration{1: 2 * time.Second, 2: 4 * time.Second, 3: 8 * time.Second, 4: 10 * time.Second, 60: 10 * time.Second} {
		got := delay(d, attempt)
		require.GreaterOrEqual(t, got, want*3/4, "attempt %d", attempt)
		require.Less(t, got, want*5/4, "attempt %d", attempt)
	}
	retryAfter = "7"
	require.Equal(t, 7*time.Second, delay(d, 1), "the receiver's Retry-After wins")
	// Bounded by push.MaxRetryAfter: seconds that overflowed a Duration
	// made a negative delay (five attempts in 30 ms, then dead), a few
	// fewer parked the job for three centuries.
	for _, ra := range []string{"9223372037", "9223372036", "99999999999999999999999"} {
		retryAfter = ra
		require.Equal(t, push.MaxRetryAfter, delay(d, 1), ra)
	}
	// An HTTP date, as RFC 9110 allows.
	retryAfter = time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	got := delay(d, 1)
	require.Greater(t, got, 80*time.Second)
	require.LessOrEqual(t, got, 90*time.Second)
	retryAfter = ""

	// A refused connection is a failed attempt too.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gone, _ := url.Parse("http://" + ln.Addr().String() + "/hook")
	require.NoError(t, ln.Close())
	dg, err := push.New(push.Target{URL: gone, Secret: secret, Timeout: 5 * time.Second,
		Backoff: push.Exponential(time.Minute, 0)}, []string{gone.Host})
	require.NoError(t, err)
	defer dg.Close()
	got = delay(dg, 1)
	require.GreaterOrEqual(t, got, 45*time.Second)
	require.Less(t, got, 75*time.Second)

	// No Backoff: the queue's backoff decides.
	plain, err := push.New(push.Target{URL: u, Secret: secret, Timeout: 5 * time.Second}, []string{u.Host})
	require.NoError(t, err)
	defer plain.Close()
	err = plain.HandleJob(context.Background(), &wheelq.Job{Topic: "hooks", ID: "a", Attempt: 1})
	var re *wheelq.RetryError
	require.Error(t, err)
	require.False(t, errors.As(err, &re), "%v", err)
}

// TestErrorsMaskTheQuery: a failed push's error (a job's last error, the
// log's line) names the target with its query's values masked: the
// receiver still gets the whole URL.
func TestErrorsMaskTheQuery(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.URL.RawQuery
		w.WriteHeader(http.StatusBadGateway)
	}))
	u, _ := url.Parse(srv.URL + "/hook?token=S3CRET&tenant=acme")
	d, err := push.New(push.Target{URL: u, Secret: secret, Timeout: 5 * time.Second}, []string{u.Host})
	require.NoError(t, err)
	j := &wheelq.Job{Topic: "hooks", ID: "1", Attempt: 1}
	err = d.HandleJob(context.Background(), j)
	require.Equal(t, "token=S3CRET&tenant=acme", <-got)
	require.ErrorContains(t, err, "/hook?token=xxxxx&tenant=xxxxx: 502")
	require.NotContains(t, err.Error(), "S3CRET")
	srv.Close() // refused: the dial's error
	err = d.HandleJob(context.Background(), j)
	require.ErrorContains(t, err, "token=xxxxx")
	require.NotContains(t, err.Error(), "S3CRET")

	bad, _ := url.Parse("ftp://" + u.Host + "/x?token=S3CRET")
	_, err = push.New(push.Target{URL: bad, Secret: secret}, []string{u.Host})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "S3CRET")
}
