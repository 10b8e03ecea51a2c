package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/faultproxy"
	"github.com/wheelq/wheelq/internal/leakcheck"
	"github.com/wheelq/wheelq/internal/redistest"
)

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	// go-redis logs every failed dial and bad connection; these tests cause many.
	redis.SetLogger(discardLogger{})
	code := m.Run()
	if code == 0 {
		if err := leakcheck.Check("github.com/wheelq/wheelq"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// setup starts a redis-server, a proxy in front of it, and a direct
// (unproxied) client of the server for checking what really applied.
func setup(t *testing.T) (*faultproxy.Proxy, redis.UniversalClient) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	return faultproxy.Start(t, srv.Addr), srv.Client(t)
}

// client returns a go-redis client through the proxy with one connection,
// closed at cleanup. opt's Addr is set; zero fields get go-redis defaults,
// except DialTimeout (1s).
func client(t *testing.T, p *faultproxy.Proxy, opt redis.Options) *redis.Client {
	t.Helper()
	opt.Addr = p.Addr()
	opt.PoolSize = 1
	if opt.DialTimeout == 0 {
		opt.DialTimeout = time.Second
	}
	c := redis.NewClient(&opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isConnLost reports an error of a connection closed under the client.
func isConnLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestProxyForwardsToTarget(t *testing.T) {
	p, direct := setup(t)
	c := client(t, p, redis.Options{MaxRetries: -1})
	require.NoError(t, c.Set(ctx(t), "k", "v", 0).Err())
	got, err := c.Get(ctx(t), "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
	got, err = direct.Get(ctx(t), "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got, "the write went to the target server")
	assert.Equal(t, 1, p.Conns())
	assert.Equal(t, int64(1), p.Accepted())
	assert.True(t, strings.HasPrefix(p.Addr(), "127.0.0.1:"), p.Addr())
}

func TestReplyDelayTimeoutButApplied(t *testing.T) {
	p, direct := setup(t)
	c := client(t, p, redis.Options{MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	require.NoError(t, c.Ping(ctx(t)).Err()) // connect before the fault
	const delay = 2 * time.Second            // the reply is still held when we look
	p.SetReplyDelay(delay)
	start := time.Now()
	err := c.Set(ctx(t), "k", "v", 0).Err()
	require.Error(t, err)
	assert.True(t, isTimeout(err), "want a timeout, got %v", err)
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	// Requests are not delayed: the command applied although the client
	// timed out, and long before its reply would have come.
	require.Eventually(t, func() bool {
		return direct.Get(ctx(t), "k").Val() == "v"
	}, delay/2, 10*time.Millisecond, "the SET applied on the server")
}

func TestReplyDelayDelivers(t *testing.T) {
	p, _ := setup(t)
	c := client(t, p, redis.Options{MaxRetries: -1, ReadTimeout: 5 * time.Second})
	require.NoError(t, c.Ping(ctx(t)).Err())
	const delay = 300 * time.Millisecond
	p.SetReplyDelay(delay)
	start := time.Now()
	n, err := c.Incr(ctx(t), "n").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
	assert.GreaterOrEqual(t, time.Since(start), delay, "the reply was held for the delay")

	// Many replies in flight come back complete and in order, each held
	// for the delay.
	raw, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer raw.Close()
	require.NoError(t, raw.SetDeadline(time.Now().Add(5*time.Second)))
	start = time.Now()
	_, err = raw.Write([]byte(strings.Repeat("INCR n\r\n", 50)))
	require.NoError(t, err)
	r := bufio.NewReader(raw)
	for i := range 50 {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf(":%d\r\n", i+2), line)
	}
	assert.GreaterOrEqual(t, time.Since(start), delay)
}

func TestReplyDelayClearReleasesHeld(t *testing.T) {
	p, _ := setup(t)
	c := client(t, p, redis.Options{MaxRetries: -1, ReadTimeout: 3 * time.Second})
	require.NoError(t, c.Ping(ctx(t)).Err())
	p.SetReplyDelay(time.Hour)
	done := make(chan error, 1)
	go func() { done <- c.Set(ctx(t), "k", "v", 0).Err() }()
	select {
	case err := <-done:
		t.Fatalf("reply not held: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	p.SetReplyDelay(0)
	// Without the clear the reply would come in an hour and the client
	// would time out after 3s.
	require.NoError(t, <-done)
}

func TestRequestDelay(t *testing.T) {
	p, direct := setup(t)
	c := client(t, p, redis.Options{MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	require.NoError(t, c.Ping(ctx(t)).Err())
	p.SetRequestDelay(time.Second)
	err := c.Set(ctx(t), "k", "v", 0).Err()
	require.Error(t, err)
	assert.True(t, isTimeout(err), "want a timeout, got %v", err)
	// The command is still on its way (~0.9s of margin) ...
	assert.Equal(t, redis.Nil, direct.Get(ctx(t), "k").Err(), "the SET arrived early")
	// ... and arrives late.
	require.Eventually(t, func() bool {
		return direct.Get(ctx(t), "k").Val() == "v"
	}, 3*time.Second, 10*time.Millisecond, "the delayed SET applied")

	p.SetRequestDelay(0)
	c2 := client(t, p, redis.Options{MaxRetries: -1, ReadTimeout: 2 * time.Second})
	require.NoError(t, c2.Set(ctx(t), "k2", "v", 0).Err())
}

func TestBlackhole(t *testing.T) {
	p, direct := setup(t)
	c := client(t, p, redis.Options{MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	require.NoError(t, c.Ping(ctx(t)).Err())
	require.Equal(t, int64(1), p.Accepted())

	p.Blackhole(true)
	start := time.Now()
	err := c.Set(ctx(t), "k", "v", 0).Err()
	require.Error(t, err)
	assert.True(t, isTimeout(err), "want a timeout (connection stays open), got %v", err)
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	// A new connection is accepted but its handshake gets no answer either.
	c2 := client(t, p, redis.Options{MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	err = c2.Ping(ctx(t)).Err()
	require.Error(t, err)
	assert.True(t, isTimeout(err), "want a timeout, got %v", err)
	assert.GreaterOrEqual(t, p.Accepted(), int64(2))

	p.Blackhole(false)
	require.NoError(t, c.Set(ctx(t), "k2", "v2", 0).Err(), "works again on a fresh connection")
	assert.GreaterOrEqual(t, p.Accepted(), int64(3), "the timed-out connection was replaced")
	require.NoError(t, c2.Ping(ctx(t)).Err())
	// The SET sent into the blackhole was dropped, not held and delivered later.
	assert.Equal(t, "v2", direct.Get(ctx(t), "k2").Val())
	assert.Equal(t, redis.Nil, direct.Get(ctx(t), "k").Err(), "the SET sent during the blackhole applied")
}

func TestDropRepliesNoRetry(t *testing.T) {
	p, direct := setup(t)
	c := client(t, p, redis.Options{MaxRetries: -1, ReadTimeout: 2 * time.Second})
	require.NoError(t, c.Ping(ctx(t)).Err())
	p.DropReplies(true)
	err := c.Incr(ctx(t), "n").Err()
	require.Error(t, err)
	assert.False(t, isTimeout(err), "want a lost connection, not a timeout: %v", err)
	assert.True(t, isConnLost(err), "want EOF or reset, got %v", err)
	assert.Equal(t, "1", direct.Get(ctx(t), "n").Val(), "the INCR applied once")
	require.Eventually(t, func() bool { return p.Conns() == 0 }, 2*time.Second, 5*time.Millisecond)

	p.DropReplies(false)
	n, err := c.Incr(ctx(t), "n").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(2), n)
}

// With go-redis's default retries, a lost reply makes the client send the
// command again: the client sees one INCR, the server applied two.
func TestDropRepliesRetryAppliesTwice(t *testing.T) {
	p, direct := setup(t)
	var dials atomic.Int32
	c := client(t, p, redis.Options{
		ReadTimeout: 2 * time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials.Add(1) == 2 {
				p.DropReplies(false) // the retry's connection works
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
	require.NoError(t, c.Ping(ctx(t)).Err())
	p.DropReplies(true)
	n, err := c.Incr(ctx(t), "n").Result()
	if err == nil {
		assert.Equal(t, int64(2), n, "the client saw the result of the retry")
	}
	assert.Equal(t, "2", direct.Get(ctx(t), "n").Val(), "the INCR was sent twice")
	assert.GreaterOrEqual(t, dials.Load(), int32(2))
}

func TestRefuseClosesNewConnectionsOnly(t *testing.T) {
	p, _ := setup(t)
	old := client(t, p, redis.Options{MaxRetries: -1})
	require.NoError(t, old.Ping(ctx(t)).Err())

	p.Refuse(true)
	c := client(t, p, redis.Options{MaxRetries: -1})
	err := c.Ping(ctx(t)).Err()
	require.Error(t, err)
	assert.True(t, isConnLost(err), "want EOF or reset, got %v", err)
	assert.GreaterOrEqual(t, p.Accepted(), int64(2), "the connection was accepted, then closed")
	assert.Equal(t, 1, p.Conns(), "only the old connection is proxied")
	require.NoError(t, old.Ping(ctx(t)).Err(), "an existing connection is untouched")

	p.Refuse(false)
	require.NoError(t, c.Ping(ctx(t)).Err())
	assert.Equal(t, 2, p.Conns())
}

func TestCloseAll(t *testing.T) {
	p, _ := setup(t)
	raw, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer raw.Close()
	r := bufio.NewReader(raw)
	_, err = raw.Write([]byte("PING\r\n"))
	require.NoError(t, err)
	require.NoError(t, raw.SetReadDeadline(time.Now().Add(5*time.Second)))
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", line)

	c := client(t, p, redis.Options{MaxRetries: -1})
	require.NoError(t, c.Ping(ctx(t)).Err())
	require.Equal(t, 2, p.Conns())

	p.CloseAll()
	assert.Equal(t, 0, p.Conns())
	_, err = r.ReadByte()
	require.Error(t, err)
	assert.False(t, isTimeout(err), "want a reset, got %v", err)
	assert.True(t, isConnLost(err), "want EOF or reset, got %v", err)

	// The client gets through again on a new connection (its first try may
	// fail on the reset one).
	require.Eventually(t, func() bool { return c.Ping(ctx(t)).Err() == nil }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, int64(3), p.Accepted())
	assert.Equal(t, 1, p.Conns())
}

func TestBandwidth(t *testing.T) {
	p, direct := setup(t)
	const size = 1 << 20
	require.NoError(t, direct.Set(ctx(t), "big", strings.Repeat("x", size), 0).Err())
	c := client(t, p, redis.Options{MaxRetries: -1, ReadTimeout: 5 * time.Second})
	require.NoError(t, c.Ping(ctx(t)).Err())

	p.SetBandwidth(2 << 20) // 2 MiB/s
	start := time.Now()
	v, err := c.Get(ctx(t), "big").Result()
	require.NoError(t, err)
	took := time.Since(start)
	assert.Len(t, v, size)
	assert.GreaterOrEqual(t, took, 400*time.Millisecond, "1 MiB at 2 MiB/s")

	p.SetBandwidth(0)
	v, err = c.Get(ctx(t), "big").Result()
	require.NoError(t, err)
	assert.Len(t, v, size)
}

func TestCloseStopsEverything(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	p, err := faultproxy.New(srv.Addr)
	require.NoError(t, err)

	// Connections in every state: idle, with a reply held by a delay, in a
	// blackhole, mid-way through a paced reply.
	idle := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, PoolSize: 1})
	defer idle.Close()
	require.NoError(t, idle.Ping(ctx(t)).Err())
	require.NoError(t, srv.Client(t).Set(ctx(t), "big", strings.Repeat("x", 1<<20), 0).Err())

	p.SetBandwidth(64 << 10) // 1 MiB takes 16s
	slow, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer slow.Close()
	_, err = slow.Write([]byte("GET big\r\n"))
	require.NoError(t, err)
	require.NoError(t, slow.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = io.ReadFull(slow, make([]byte, 10))
	require.NoError(t, err, "the paced reply started")

	p.SetReplyDelay(time.Hour)
	held, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer held.Close()
	_, err = held.Write([]byte("PING\r\n"))
	require.NoError(t, err)

	p.Blackhole(true)
	done := make(chan error, 1)
	go func() { done <- idle.Ping(ctx(t)).Err() }()
	require.Eventually(t, func() bool { return p.Conns() == 3 }, 5*time.Second, 5*time.Millisecond)

	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	assert.Equal(t, 0, p.Conns())
	require.NoError(t, p.Close(), "a second Close")
	require.Error(t, <-done, "the blackholed PING fails")
	for _, nc := range []net.Conn{slow, held} {
		require.NoError(t, nc.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err := io.ReadAll(nc)
		assert.False(t, isTimeout(err), "closed by Close: %v", err)
	}
	require.NoError(t, leakcheck.Check("github.com/wheelq/wheelq/internal/faultproxy"))
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	assert.Error(t, err, "the listener is closed")
}
