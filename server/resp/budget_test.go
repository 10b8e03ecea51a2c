package resp_test

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/config"
	"github.com/wheelq/wheelq/server/internal/servertest"
)

// slowCommand is a WQ.SCHEDULE of a payload of size bytes, cut in two:
// head (all but the last byte of the payload) and tail (the rest).
func slowCommand(size int) (head, tail []byte) {
	cmd := "*3\r\n$11\r\nWQ.SCHEDULE\r\n$1\r\np\r\n$" + strconv.Itoa(size) + "\r\n" + strings.Repeat("x", size) + "\r\n"
	return []byte(cmd[:len(cmd)-3]), []byte(cmd[len(cmd)-3:])
}

// sendSlowly writes b to c in chunks of 32 KiB, a few milliseconds
// apart, stopping at the first error (the server closed the connection).
func sendSlowly(c net.Conn, b []byte) error {
	for len(b) > 0 {
		n := min(len(b), 32<<10)
		if _, err := c.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
		time.Sleep(3 * time.Millisecond)
	}
	return nil
}

// TestInflightBudget: resp.max_inflight_bytes bounds the bytes of
// unfinished commands all connections hold at once. Six connections each
// send most of a 700 KB command, slowly, and keep it unfinished: with a
// budget of 2 MiB (each connection's first 64 KiB not counted) at most
// three may hold theirs, and the others are answered -UNAVAILABLE and
// closed. Once they are gone the budget is whole again: three
// connections hold 700 KB each at once and complete their commands, and
// a normal command works.
func TestInflightBudget(t *testing.T) {
	t.Parallel()
	addr := servertest.Start(t, func(c *config.Config) {
		c.RESP.Addr = "127.0.0.1:0"
		c.RESP.MaxCommandBytes = 1 << 20
		c.RESP.MaxInflightBytes = 2 << 20
		c.HTTP.MaxBody = 1 << 20
		c.Queue.Pull = []string{"p"}
	}).RESP
	const size = 700_000
	head, tail := slowCommand(size)

	// Six connections, each holding most of a command; a reader per
	// connection collects what the server answers until it closes.
	const n = 6
	conns := make([]net.Conn, n)
	replies := make([]chan string, n)
	var wg sync.WaitGroup
	for i := range conns {
		c := rawConn(t, addr)
		require.NoError(t, c.SetDeadline(time.Now().Add(2*wait))) // past the wait for refusals below
		conns[i], replies[i] = c, make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(c)
			replies[i] <- string(b)
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = sendSlowly(c, head)
		}()
	}
	wg.Wait()
	// Those refused are answered -UNAVAILABLE (and closed); the others
	// hold their unfinished commands and are answered nothing.
	refused := 0
	collect := func() {
		for i := range conns {
			select {
			case r := <-replies[i]:
				require.Contains(t, r, "-UNAVAILABLE", "connection %d was answered otherwise", i)
				require.Contains(t, r, "resp.max_inflight_bytes")
				refused++
			default:
			}
		}
	}
	deadline := time.Now().Add(wait)
	for refused < n-3 && time.Now().Before(deadline) {
		collect()
		time.Sleep(20 * time.Millisecond)
	}
	require.GreaterOrEqual(t, refused, n-3, "six connections held %d bytes each at once past a budget of 2 MiB", size)
	time.Sleep(500 * time.Millisecond)
	collect()
	require.Less(t, refused, n, "a connection within the budget was refused")
	for _, c := range conns {
		c.Close()
	}

	// The budget is whole again once the server has seen them go: three
	// connections hold 700 KB each at once (1.9 MB counted), then
	// complete their commands and get their ids.
	require.Eventually(t, func() bool {
		var cs []net.Conn
		defer func() {
			for _, c := range cs {
				c.Close()
			}
		}()
		for range 3 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return false
			}
			cs = append(cs, c)
			_ = c.SetDeadline(time.Now().Add(wait))
			if sendSlowly(c, head) != nil {
				return false
			}
		}
		for _, c := range cs {
			if _, err := c.Write(tail); err != nil {
				return false
			}
		}
		for _, c := range cs {
			buf := make([]byte, 64)
			m, _ := c.Read(buf)
			if !strings.HasPrefix(string(buf[:m]), "$") {
				t.Logf("reply %q", buf[:m])
				return false
			}
		}
		return true
	}, wait, 100*time.Millisecond, "the budget was not given back")

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	id, err := rdb.Do(context.Background(), "WQ.SCHEDULE", "p", strings.Repeat("y", size), "DELAY", 60000).Text()
	require.NoError(t, err)
	require.NotEmpty(t, id)
}
