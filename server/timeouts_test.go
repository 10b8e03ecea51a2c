package server_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

// TestHTTPTimeouts: a client that never finishes its request head is cut
// off after http.read_header_timeout, one that stalls in its body after
// http.read_timeout, and a kept-alive connection left silent is closed
// after http.idle_timeout; each not before its time, and the server
// serves on.
func TestHTTPTimeouts(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	p := startServer(t, nil, "-addr", "127.0.0.1:0", "-redis-url", redisURL(rs),
		"-set", "http.read_header_timeout=600ms", "-set", "http.read_timeout=1200ms", "-set", "http.idle_timeout=900ms")
	addr := strings.TrimPrefix(p.URL, "http://")
	// closedAfter sends what, then reads until the server closes the
	// connection, and returns how long that took and what it read.
	closedAfter := func(what string) (time.Duration, string) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
		start := time.Now()
		_, err = c.Write([]byte(what))
		require.NoError(t, err)
		b, err := io.ReadAll(c)
		require.NoError(t, err, "closed by the server, not by our deadline")
		return time.Since(start), string(b)
	}

	took, _ := closedAfter("GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
	require.GreaterOrEqual(t, took, 500*time.Millisecond, "a head cut off before read_header_timeout")

	took, got := closedAfter("POST /v1/jobs/t HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"payload\":")
	require.GreaterOrEqual(t, took, 1100*time.Millisecond, "a body cut off before read_timeout")
	if got != "" {
		require.NotContains(t, got, " 201 ", "a stalled body scheduled nothing")
		require.NotContains(t, got, " 500 ")
	}

	// Kept alive after a reply, then silent: closed after idle_timeout.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
	_, err = c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"))
	require.NoError(t, err)
	rd := bufio.NewReader(c)
	resp, err := http.ReadResponse(rd, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	start := time.Now()
	_, err = rd.ReadByte()
	require.ErrorIs(t, err, io.EOF, "closed by the server")
	require.GreaterOrEqual(t, time.Since(start), 800*time.Millisecond, "closed before idle_timeout")

	require.Equal(t, 200, call(t, "GET", p.URL+"/healthz", "", nil, nil), "still serving")
}
