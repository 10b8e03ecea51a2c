package resp_test

import (
	"bufio"
	"context"
	"errors"
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

// respCommand encodes args as a RESP command.
func respCommand(args ...string) []byte {
	b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, "$"+strconv.Itoa(len(a))+"\r\n"+a+"\r\n"...)
	}
	return b
}

// TestBlockedReserveGivesBackItsPipeline: a WQ.SCHEDULE of 900 KB and a
// WQ.RESERVE ... BLOCK pipelined after it, read together: once the
// schedule is answered (the reserve blocks then), its bytes no longer
// count against resp.max_inflight_bytes (1 MiB), so another connection's
// 400 KB command is served, while the reserve still blocks. They counted
// until the reserve's end before (up to its BLOCK), and the other
// connection was refused -UNAVAILABLE although nothing was held.
func TestBlockedReserveGivesBackItsPipeline(t *testing.T) {
	t.Parallel()
	addr := servertest.Start(t, func(c *config.Config) {
		c.RESP.Addr = "127.0.0.1:0"
		c.RESP.MaxCommandBytes = 1 << 20
		c.RESP.MaxInflightBytes = 1 << 20
		c.HTTP.MaxBody = 1 << 20
		c.Queue.Pull = []string{"p"}
	}).RESP

	// A: the schedule (due in a minute) and a reserve that blocks 30 s on
	// its topic. All but the schedule's last bytes first, so that the
	// server has read them when the rest comes with the reserve, in one
	// small write: redcon is handed both commands at once.
	sched := respCommand("WQ.SCHEDULE", "p", strings.Repeat("x", 900_000), "DELAY", "60000")
	reserve := respCommand("WQ.RESERVE", "BLOCK", "30000", "TOPICS", "p")
	a := rawConn(t, addr)
	ra := bufio.NewReader(a)
	_, err := a.Write(sched[:len(sched)-3])
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)
	_, err = a.Write(append(sched[len(sched)-3:], reserve...))
	require.NoError(t, err)
	line, err := ra.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "$"), "A's schedule answered %q", line)
	_, err = ra.ReadString('\n') // its id
	require.NoError(t, err)

	// A blocks now, holding only its reserve: B's 400 KB command fits in
	// the budget (it would not beside A's 900 KB).
	b := rawConn(t, addr)
	_, err = b.Write(respCommand("WQ.SCHEDULE", "p", strings.Repeat("y", 400_000), "DELAY", "60000"))
	require.NoError(t, err)
	line, err = bufio.NewReader(b).ReadString('\n')
	require.NoError(t, err, "B was answered nothing")
	require.True(t, strings.HasPrefix(line, "$"), "B's schedule was answered %q while A blocked", line)

	// A still blocks (30 s): nothing to read.
	require.NoError(t, a.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	line, err = ra.ReadString('\n')
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "A's reserve ended (%q, %v): the test tests nothing", line, err)
}
