package resp_test

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/config"
	"github.com/wheelq/wheelq/server/internal/servertest"
)

// TestLimits: past resp.max_conns a connection is refused with Redis's
// error and closed (and one is let in again once another closed); a
// connection silent for resp.idle_timeout is closed; one that sends more
// than resp.max_command_bytes without completing a command gets an error
// and is closed; the server serves on.
func TestLimits(t *testing.T) {
	t.Parallel()
	addr := servertest.Start(t, func(c *config.Config) {
		c.RESP.Addr = "127.0.0.1:0"
		c.RESP.MaxConns = 2
		c.RESP.IdleTimeout = config.Duration(700 * time.Millisecond)
		c.RESP.MaxCommandBytes = 64 << 10
		c.HTTP.MaxBody = 32 << 10
		c.Queue.MaxPayload = 16 << 10
		c.Queue.Pull = []string{"p"}
	}).RESP
	dial := func() (net.Conn, func(string) string) {
		c := rawConn(t, addr)
		return c, func(cmd string) string {
			_, err := c.Write([]byte(cmd))
			require.NoError(t, err)
			buf := make([]byte, 512)
			n, err := c.Read(buf)
			require.NoError(t, err)
			return string(buf[:n])
		}
	}
	a, sendA := dial()
	_, sendB := dial()
	require.Equal(t, "+PONG\r\n", sendA("PING\r\n"))
	require.Equal(t, "+PONG\r\n", sendB("PING\r\n"))
	third := rawConn(t, addr)
	reply, err := io.ReadAll(third)
	require.NoError(t, err, "refused and closed")
	require.Equal(t, "-ERR max number of clients reached\r\n", string(reply))
	third.Close()
	a.Close()
	// served dials until the server lets a connection in (it counts a
	// close once it has seen it) and it answers a PING.
	served := func() net.Conn {
		var c net.Conn
		require.Eventually(t, func() bool {
			var err error
			if c, err = net.Dial("tcp", addr); err != nil {
				return false
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = c.Write([]byte("PING\r\n"))
			buf := make([]byte, 64)
			n, _ := c.Read(buf)
			if string(buf[:n]) != "+PONG\r\n" {
				c.Close()
				return false
			}
			return true
		}, 5*time.Second, 20*time.Millisecond, "a place freed by a close is taken again")
		t.Cleanup(func() { c.Close() })
		return c
	}

	// Idle: closed after 700 ms of silence, not before.
	idle := served()
	begin := time.Now()
	_, err = idle.Read(make([]byte, 16))
	require.ErrorIs(t, err, io.EOF, "the server closed the silent connection")
	require.GreaterOrEqual(t, time.Since(begin), 600*time.Millisecond)
	idle.Close()

	// A command past 64 KiB, not completed: an error, then closed.
	big := served()
	require.NoError(t, big.SetDeadline(time.Now().Add(10*time.Second)))
	// (each argument within the limit, the command not)
	_, err = big.Write([]byte("*4\r\n$11\r\nWQ.SCHEDULE\r\n$1\r\np\r\n$40000\r\n" + strings.Repeat("x", 40_000) +
		"\r\n$40000\r\n" + strings.Repeat("x", 30_000)))
	require.NoError(t, err)
	reply, _ = io.ReadAll(big)
	require.Contains(t, string(reply), "-ERR command past the limit of the server (resp.max_command_bytes)")

	// A bulk longer than the limit is refused from its header alone.
	bulk := served()
	_, err = bulk.Write([]byte("*3\r\n$11\r\nWQ.SCHEDULE\r\n$1\r\np\r\n$70000\r\n"))
	require.NoError(t, err)
	reply, err = io.ReadAll(bulk)
	require.NoError(t, err)
	require.Equal(t, "-ERR Protocol error: invalid bulk length\r\n", string(reply))
	bulk.Close()

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	require.NoError(t, rdb.Ping(context.Background()).Err(), "still serving")
}

// TestConnectionCommands: what client libraries and redis-cli send on
// connect, each answered as Redis does: SELECT 0 (and any other database
// refused), CLIENT SETNAME / GETNAME / SETINFO / ID, COMMAND, COMMAND
// COUNT and COMMAND DOCS, and QUIT.
func TestConnectionCommands(t *testing.T) {
	t.Parallel()
	addr := start(t, nil, "p")
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1})
	defer rdb.Close()
	ctx := context.Background()
	do := func(args ...any) *redis.Cmd { return rdb.Do(ctx, args...) }

	require.NoError(t, do("SELECT", 0).Err())
	require.ErrorContains(t, do("SELECT", 1).Err(), "ERR DB index is out of range")
	require.NoError(t, do("CLIENT", "SETNAME", "worker-7").Err())
	name, err := do("CLIENT", "GETNAME").Text()
	require.NoError(t, err)
	require.Equal(t, "worker-7", name)
	require.NoError(t, do("CLIENT", "SETINFO", "LIB-NAME", "go-redis").Err())
	require.ErrorContains(t, do("CLIENT", "SETINFO", "LIB-NAME").Err(), "ERR wrong number of arguments")
	require.ErrorContains(t, do("CLIENT", "KILL", "x").Err(), "ERR unknown subcommand")

	count, err := do("COMMAND", "COUNT").Int()
	require.NoError(t, err)
	all, err := do("COMMAND").Slice()
	require.NoError(t, err)
	require.Len(t, all, count)
	arity := map[string]int64{}
	for _, c := range all {
		f := c.([]any)
		arity[f[0].(string)] = f[1].(int64)
	}
	require.EqualValues(t, -3, arity["wq.schedule"], "WQ.SCHEDULE takes a topic and a payload at least")
	require.EqualValues(t, 4, arity["wq.ack"])

	docs, err := do("COMMAND", "DOCS", "WQ.RESERVE", "NOSUCH").Slice()
	require.NoError(t, err)
	require.Len(t, docs, 2, "one command known, the unknown one left out")
	require.Equal(t, "wq.reserve", docs[0])
	summary := docs[1].([]any)
	require.Equal(t, "summary", summary[0])
	require.Contains(t, summary[1], "WITHMETA")

	// QUIT: +OK, then the server closes the connection.
	c := rawConn(t, addr)
	_, err = c.Write([]byte("QUIT\r\n"))
	require.NoError(t, err)
	reply, err := io.ReadAll(c)
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", string(reply))
}

// TestQuitEndsTheConnection: commands sent after QUIT in the same write
// are not run (as Redis), though they were read with it.
func TestQuitEndsTheConnection(t *testing.T) {
	t.Parallel()
	addr := start(t, nil, "p")
	c := rawConn(t, addr)
	_, err := c.Write([]byte("QUIT\r\nWQ.SCHEDULE p x ID afterquit\r\n*4\r\n$11\r\nWQ.SCHEDULE\r\n$1\r\np\r\n$1\r\ny\r\n$2\r\nID\r\n"))
	require.NoError(t, err)
	reply, err := io.ReadAll(c)
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", string(reply))
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	require.ErrorContains(t, rdb.Do(context.Background(), "WQ.GET", "p", "afterquit").Err(), "NOTFOUND", "a command after QUIT ran")
}

// TestUnauthenticatedHoldLittle: with tokens, a connection that has not
// authenticated may not hold an unfinished command past 64 KiB (a
// stranger cannot make the server hold resp.max_command_bytes for each
// of its connections); once authenticated it may send commands up to
// resp.max_command_bytes.
func TestUnauthenticatedHoldLittle(t *testing.T) {
	t.Parallel()
	tok, sum, err := auth.Generate("shop")
	require.NoError(t, err)
	addr := start(t, []config.Token{{ID: "shop", SHA256: sum, Produce: []string{"*"}, Admin: []string{"*"}}}, "p")
	c := rawConn(t, addr)
	_, _ = c.Write([]byte("*3\r\n$11\r\nWQ.SCHEDULE\r\n$1\r\np\r\n$200000\r\n" + strings.Repeat("x", 100_000)))
	reply, _ := io.ReadAll(c)
	require.Contains(t, string(reply), "-ERR command past the limit of the server (resp.max_command_bytes)")

	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: tok})
	defer rdb.Close()
	id, err := rdb.Do(context.Background(), "WQ.SCHEDULE", "p", strings.Repeat("x", 200_000), "DELAY", 60000).Text()
	require.NoError(t, err, "an authenticated connection sends a 200 KB payload")
	require.NotEmpty(t, id)
}
