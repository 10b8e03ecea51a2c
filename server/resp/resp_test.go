package resp_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/config"
	"github.com/wheelq/wheelq/server/internal/servertest"
)

const wait = 20 * time.Second

// start runs a wheelq server in this process on a real redis-server with
// the RESP front end, pulling topics; tokens, if any, are required. It
// returns the RESP address.
func start(t *testing.T, tokens []config.Token, pull ...string) string {
	t.Helper()
	return servertest.Start(t, func(c *config.Config) {
		c.RESP.Addr = "127.0.0.1:0"
		c.Queue.Pull = pull
		c.Tokens = tokens
	}).RESP
}

// TestGoRedis: go-redis connects speaking RESP2, then schedules, reserves with a
// block (the job at its due time, not before), nacks, acks, cancels,
// gets, counts, and gets each error with its prefix.
func TestGoRedis(t *testing.T) {
	t.Parallel()
	addr := start(t, nil, "sms")
	rdb := redis.NewClient(&redis.Options{Addr: addr, ClientName: "test", Protocol: 2})
	defer rdb.Close()
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())

	due := time.Now().Add(300 * time.Millisecond)
	id, err := rdb.Do(ctx, "WQ.SCHEDULE", "sms", []byte{0, 1, 0xff}, "ID", "a", "AT", due.UnixMilli(), "HEADER", "k", "v").Text()
	require.NoError(t, err)
	require.Equal(t, "a", id)
	err = rdb.Do(ctx, "WQ.SCHEDULE", "sms", "x", "ID", "a").Err()
	require.ErrorContains(t, err, "DUPLICATE ")

	res, err := rdb.Do(ctx, "WQ.RESERVE", "COUNT", 10, "BLOCK", 10000, "TTR", 60000, "TOPICS", "sms").Slice()
	require.NoError(t, err)
	require.Len(t, res, 1)
	job := res[0].([]any)
	require.Equal(t, "sms", job[0])
	require.Equal(t, "a", job[1])
	token := job[2].(string)
	require.Equal(t, string([]byte{0, 1, 0xff}), job[3], "binary payloads round-trip")
	require.EqualValues(t, 1, job[4])
	require.False(t, time.Now().Before(due.Truncate(time.Millisecond)), "not before its due time")

	require.NoError(t, rdb.Do(ctx, "WQ.NACK", "sms", "a", token, "RETRY", 20, "ERROR", "later").Err())
	require.ErrorContains(t, rdb.Do(ctx, "WQ.ACK", "sms", "a", token).Err(), "RESERVATIONLOST ")
	res, err = rdb.Do(ctx, "WQ.RESERVE", "BLOCK", 10000, "TOPICS", "sms").Slice()
	require.NoError(t, err)
	job = res[0].([]any)
	require.EqualValues(t, 2, job[4])
	dl, err := rdb.Do(ctx, "WQ.TOUCH", "sms", "a", job[2], "TTR", 120000).Int64()
	require.NoError(t, err)
	require.Greater(t, dl, time.Now().Add(time.Minute).UnixMilli())
	require.NoError(t, rdb.Do(ctx, "WQ.ACK", "sms", "a", job[2]).Err())

	get, err := rdb.Do(ctx, "WQ.GET", "sms", "a").Slice()
	require.NoError(t, err)
	m := map[string]any{}
	for i := 0; i+1 < len(get); i += 2 {
		m[get[i].(string)] = get[i+1]
	}
	require.Equal(t, "done", m["state"])
	require.EqualValues(t, 2, m["attempts"])

	// A blocked reserve that times out is a null array.
	err = rdb.Do(ctx, "WQ.RESERVE", "BLOCK", 100, "TOPICS", "sms").Err()
	require.ErrorIs(t, err, redis.Nil)

	_, err = rdb.Do(ctx, "WQ.SCHEDULE", "sms", "y", "ID", "later", "DELAY", 3600000).Text()
	require.NoError(t, err)
	require.NoError(t, rdb.Do(ctx, "WQ.RESCHEDULE", "sms", "later", "DELAY", 7200000).Err())
	counts, err := rdb.Do(ctx, "WQ.COUNTS").Slice()
	require.NoError(t, err)
	require.Len(t, counts, 1)
	require.EqualValues(t, 1, counts[0].([]any)[1])
	n, err := rdb.Do(ctx, "WQ.CANCEL", "sms", "later").Int()
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.ErrorContains(t, rdb.Do(ctx, "WQ.CANCEL", "sms", "later").Err(), "NOTFOUND ")
	require.ErrorContains(t, rdb.Do(ctx, "WQ.RESERVE", "TOPICS", "mail").Err(), "TOPICMODE ")
	require.ErrorContains(t, rdb.Do(ctx, "WQ.SCHEDULE", "sms", "x", "DELAY", "soon").Err(), "ERR DELAY")
	require.ErrorContains(t, rdb.Do(ctx, "WQ.SCHEDULE", "sms").Err(), "ERR wrong number of arguments")
	require.ErrorContains(t, rdb.Do(ctx, "WQ.NOPE").Err(), "ERR unknown command")
	require.ErrorContains(t, rdb.Do(ctx, "WQ.RESERVE", "BLOCK", 999999999, "TOPICS", "sms").Err(), "ERR BLOCK")
	require.NoError(t, rdb.Do(ctx, "WQ.PAUSE", "sms").Err())
	require.NoError(t, rdb.Do(ctx, "WQ.SCHEDULE", "sms", "due", "ID", "p1").Err())
	require.ErrorContains(t, rdb.Do(ctx, "WQ.RESERVE", "BLOCK", 5000, "TOPICS", "sms").Err(), "PAUSED ")
	require.NoError(t, rdb.Do(ctx, "WQ.RESUME", "sms").Err())
}

// TestAuth: with tokens, every command but AUTH, HELLO, QUIT and COMMAND
// needs AUTH first; a token's permissions hold as over HTTP; go-redis
// connects with a password (the token) and its defaults.
func TestAuth(t *testing.T) {
	t.Parallel()
	tok, sum, err := auth.Generate("shop")
	require.NoError(t, err)
	addr := start(t, []config.Token{{ID: "shop", SHA256: sum, Produce: []string{"orders.*"}}}, "orders.x")
	ctx := context.Background()

	anon := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer anon.Close()
	require.ErrorContains(t, anon.Do(ctx, "WQ.SCHEDULE", "orders.x", "p").Err(), "NOAUTH")
	bad := redis.NewClient(&redis.Options{Addr: addr, Password: "wq_shop_wrong", MaxRetries: -1})
	defer bad.Close()
	require.ErrorContains(t, bad.Ping(ctx).Err(), "WRONGPASS")

	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: tok})
	defer rdb.Close()
	require.NoError(t, rdb.Ping(ctx).Err())
	require.NoError(t, rdb.Do(ctx, "WQ.SCHEDULE", "orders.x", "p", "ID", "1").Err())
	require.ErrorContains(t, rdb.Do(ctx, "WQ.SCHEDULE", "mail", "p").Err(), "FORBIDDEN ")
	require.ErrorContains(t, rdb.Do(ctx, "WQ.RESERVE", "TOPICS", "orders.x").Err(), "FORBIDDEN ")
	user := redis.NewClient(&redis.Options{Addr: addr, Username: "anyone", Password: tok})
	defer user.Close()
	require.NoError(t, user.Ping(ctx).Err(), "AUTH user token")

	// A HELLO that fails sets no name (found by a red team: the name of a
	// refused HELLO stuck to the connection).
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
	rd := bufio.NewReader(c)
	send := func(cmd string) string {
		t.Helper()
		_, err := c.Write([]byte(cmd + "\r\n"))
		require.NoError(t, err)
		line, err := rd.ReadString('\n')
		require.NoError(t, err)
		return line
	}
	require.True(t, strings.HasPrefix(send("HELLO 2 SETNAME sneaky"), "-NOAUTH"))
	require.True(t, strings.HasPrefix(send("HELLO 2 SETNAME n2 AUTH u wq_shop_wrong"), "-WRONGPASS"))
	require.Equal(t, "+OK\r\n", send("AUTH "+tok))
	require.Equal(t, "$-1\r\n", send("CLIENT GETNAME"), "no name from the refused HELLOs")
}

// TestPipelineAndRaw: raw RESP and inline commands, many in one write,
// are answered in order; a blocked reserve does not hold another
// connection; bad frames get an error, not a crash.
func TestPipelineAndRaw(t *testing.T) {
	t.Parallel()
	addr := start(t, nil, "p")
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
	var b strings.Builder
	for i := range 50 {
		b.WriteString("*4\r\n$11\r\nWQ.SCHEDULE\r\n$1\r\np\r\n$0\r\n\r\n$2\r\nID\r\n")
		_ = i
	}
	// (the $2 ID above is followed by no value: each of these is an error)
	_, err = c.Write([]byte(b.String() + "PING\r\n"))
	require.NoError(t, err)
	rd := bufio.NewReader(c)
	for range 50 {
		line, err := rd.ReadString('\n')
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(line, "-ERR syntax error"), "%q", line)
	}
	line, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", line)

	// A blocked reserve on one connection; another is served meanwhile.
	blocked, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer blocked.Close()
	_, err = blocked.Write([]byte("WQ.RESERVE BLOCK 3000 TOPICS p\r\n"))
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	_, err = c.Write([]byte("*3\r\n$11\r\nWQ.SCHEDULE\r\n$1\r\np\r\n$5\r\nhello\r\n"))
	require.NoError(t, err)
	line, err = rd.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "$"), "%q", line)
	require.Less(t, time.Since(start), 2*time.Second)
	_, _ = rd.ReadString('\n')
	require.NoError(t, blocked.SetDeadline(time.Now().Add(wait)))
	brd := bufio.NewReader(blocked)
	line, err = brd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "*1\r\n", line, "the blocked reserve got the job")

	// Bad frames: an error reply, and the server goes on serving.
	for _, frame := range []string{"*-5\r\n", "*1\r\n$-3\r\n", "*2\r\n$4\r\nPING\r\n$99999999999\r\n", "*1\r\n$4\r\nPI"} {
		bc, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		require.NoError(t, bc.SetDeadline(time.Now().Add(2*time.Second)))
		_, _ = bc.Write([]byte(frame))
		buf := make([]byte, 256)
		n, _ := bc.Read(buf)
		bc.Close()
		if n > 0 {
			require.True(t, buf[0] == '-', "%q: %q", frame, buf[:n])
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	require.NoError(t, rdb.Ping(context.Background()).Err(), "still serving")
}

// TestRedisCLI: redis-cli, scripted, schedules, cancels, reserves with a
// block, nacks and acks.
func TestRedisCLI(t *testing.T) {
	t.Parallel()
	needRedisCLI(t)
	cli := redisCLI(t, start(t, nil, "cli"))
	require.Equal(t, "PONG", cli("PING"))
	require.Equal(t, "o-1", cli("WQ.SCHEDULE", "cli", "hello", "ID", "o-1", "DELAY", "50"))
	out := cli("WQ.RESERVE", "BLOCK", "5000", "TOPICS", "cli")
	lines := strings.Split(out, "\n")
	require.GreaterOrEqual(t, len(lines), 4, "%s", out)
	require.Equal(t, "cli", lines[0])
	require.Equal(t, "o-1", lines[1])
	require.Equal(t, "hello", lines[3])
	require.Equal(t, "OK", cli("WQ.ACK", "cli", "o-1", lines[2]))
	require.Contains(t, cli("WQ.GET", "cli", "o-1"), "done")
	require.Contains(t, cli("WQ.CANCEL", "cli", "nope"), "NOTFOUND")

	// Cancelled before its time; and a run nacked, then acked.
	require.Equal(t, "o-2", cli("WQ.SCHEDULE", "cli", "later", "ID", "o-2", "DELAY", "3600000"))
	require.Equal(t, "1", cli("WQ.CANCEL", "cli", "o-2"))
	require.Contains(t, cli("WQ.GET", "cli", "o-2"), "cancelled")
	require.Equal(t, "o-3", cli("WQ.SCHEDULE", "cli", "retry me", "ID", "o-3"))
	lines = strings.Split(cli("WQ.RESERVE", "BLOCK", "5000", "TOPICS", "cli"), "\n")
	require.Equal(t, []string{"o-3", "1"}, []string{lines[1], lines[4]})
	require.Equal(t, "OK", cli("WQ.NACK", "cli", "o-3", lines[2], "RETRY", "0", "ERROR", "busy"))
	lines = strings.Split(cli("WQ.RESERVE", "BLOCK", "5000", "TOPICS", "cli"), "\n")
	require.Equal(t, []string{"o-3", "2"}, []string{lines[1], lines[4]}, "retried after the nack")
	require.Equal(t, "OK", cli("WQ.ACK", "cli", "o-3", lines[2]))
}

// rawConn dials addr for raw RESP bytes, with a deadline of wait for
// every read and write; the test's end closes it.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
	return c
}

// needRedisCLI skips t without redis-cli (fails it when
// WHEELQ_REQUIRE_CLIENTS is set).
func needRedisCLI(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		if os.Getenv("WHEELQ_REQUIRE_CLIENTS") != "" {
			t.Fatal("redis-cli not installed (WHEELQ_REQUIRE_CLIENTS is set)")
		}
		t.Skip("redis-cli not installed")
	}
}

// redisCLI runs redis-cli against addr with args, and returns its output
// trimmed.
func redisCLI(t *testing.T, addr string) func(args ...string) string {
	host, port, _ := net.SplitHostPort(addr)
	return func(args ...string) string {
		t.Helper()
		out, err := exec.Command("redis-cli", append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.TrimSpace(string(out))
	}
}

// TestHugeLengthsRefused: lengths no client sends, refused from their
// header line alone with a protocol error and the connection closed, the
// server serving on. redcon (used unmodified) let a bulk length near
// 2^63 overflow its bounds check and panic on the connection's goroutine,
// which took the whole process down, and looped for ever over an array
// length near 2^63 without the bytes to match.
func TestHugeLengthsRefused(t *testing.T) {
	t.Parallel()
	addr := start(t, nil, "p")
	for _, frame := range []string{
		"*1\r\n$9223372036854775807\r\nx\r\n",
		"*9223372036854775807\r\n$1\r\nx\r\n",
		"*1\r\n$9223372036854775806\r\n",
		"*2\r\n$4\r\nPING\r\n$1099511627776\r\n",
		"*1048577\r\n$4\r\nPING\r\n",
		"*1\r\n$123456789012345678901234567890\r\n",
		"*" + strings.Repeat("1", 40) + "\r\n",
	} {
		c := rawConn(t, addr)
		_, err := c.Write([]byte(frame))
		require.NoError(t, err)
		reply, err := io.ReadAll(c)
		require.NoError(t, err, "%q: the connection is closed, not left hanging", frame)
		require.True(t, strings.HasPrefix(string(reply), "-ERR Protocol error: "), "%q: %q", frame, reply)
		c.Close()
	}
	// Commands before a refused one in the same write are served.
	c := rawConn(t, addr)
	_, err := c.Write([]byte("PING\r\n*1\r\n$4\r\nPING\r\n*1\r\n$9223372036854775807\r\n"))
	require.NoError(t, err)
	reply, err := io.ReadAll(c)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(reply), "+PONG\r\n+PONG\r\n-ERR Protocol error: "), "%q", reply)

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	require.NoError(t, rdb.Ping(context.Background()).Err(), "still serving")
}

// getFields is WQ.GET's reply as a map (RESP2's flat array).
func getFields(t *testing.T, rdb *redis.Client, topic, id string) map[string]any {
	t.Helper()
	get, err := rdb.Do(context.Background(), "WQ.GET", topic, id).Slice()
	require.NoError(t, err)
	m := map[string]any{}
	for i := 0; i+1 < len(get); i += 2 {
		m[get[i].(string)] = get[i+1]
	}
	return m
}

// TestMicrosecondsAndMeta: due times in µs (DELAYUS, ATUS) are kept to
// the µs, as WQ.GET's due_us shows; WQ.RESERVE WITHMETA adds max
// attempts, last error and headers (a flat array in RESP2, a map in
// RESP3), and without it the reply keeps its 7 fields.
func TestMicrosecondsAndMeta(t *testing.T) {
	t.Parallel()
	addr := start(t, nil, "p")
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	ctx := context.Background()

	at := time.Now().Add(time.Hour).Truncate(time.Millisecond).Add(123 * time.Microsecond)
	require.NoError(t, rdb.Do(ctx, "WQ.SCHEDULE", "p", "x", "ID", "a", "ATUS", at.UnixMicro()).Err())
	m := getFields(t, rdb, "p", "a")
	require.EqualValues(t, at.UnixMicro(), m["due_us"])
	require.EqualValues(t, at.UnixMilli(), m["due_ms"])

	before := time.Now().UnixMicro()
	require.NoError(t, rdb.Do(ctx, "WQ.SCHEDULE", "p", "x", "ID", "b", "DELAYUS", 3_600_000_007).Err())
	after := time.Now().UnixMicro()
	due := getFields(t, rdb, "p", "b")["due_us"].(int64)
	require.GreaterOrEqual(t, due, before+3_600_000_007)
	require.LessOrEqual(t, due, after+3_600_000_007)

	at2 := at.Add(time.Minute + 77*time.Microsecond)
	require.NoError(t, rdb.Do(ctx, "WQ.RESCHEDULE", "p", "a", "ATUS", at2.UnixMicro()).Err())
	require.EqualValues(t, at2.UnixMicro(), getFields(t, rdb, "p", "a")["due_us"])
	before = time.Now().UnixMicro()
	require.NoError(t, rdb.Do(ctx, "WQ.RESCHEDULE", "p", "a", "DELAYUS", 7_200_000_005).Err())
	after = time.Now().UnixMicro()
	due = getFields(t, rdb, "p", "a")["due_us"].(int64)
	require.GreaterOrEqual(t, due, before+7_200_000_005)
	require.LessOrEqual(t, due, after+7_200_000_005)

	require.ErrorContains(t, rdb.Do(ctx, "WQ.SCHEDULE", "p", "x", "DELAYUS", -1).Err(), "ERR DELAYUS")
	require.ErrorContains(t, rdb.Do(ctx, "WQ.SCHEDULE", "p", "x", "DELAY", 1, "ATUS", 1).Err(), "ERR syntax error: one of DELAY")
	require.ErrorContains(t, rdb.Do(ctx, "WQ.RESCHEDULE", "p", "a", "ATUS", "soon").Err(), "ERR ATUS")

	// WITHMETA, RESP2: max attempts, last error, headers as a flat array.
	require.NoError(t, rdb.Do(ctx, "WQ.SCHEDULE", "p", "y", "ID", "c", "MAXATTEMPTS", 3, "HEADER", "trace", "t1").Err())
	res, err := rdb.Do(ctx, "WQ.RESERVE", "BLOCK", 10000, "TOPICS", "p").Slice()
	require.NoError(t, err)
	job := res[0].([]any)
	require.Len(t, job, 7, "without WITHMETA the reply keeps its 7 fields")
	require.NoError(t, rdb.Do(ctx, "WQ.NACK", "p", "c", job[2], "RETRY", 0, "ERROR", "smtp down").Err())
	res, err = rdb.Do(ctx, "WQ.RESERVE", "WITHMETA", "BLOCK", 10000, "TOPICS", "p").Slice()
	require.NoError(t, err)
	job = res[0].([]any)
	require.Len(t, job, 10)
	require.Equal(t, "c", job[1])
	require.EqualValues(t, 2, job[4])
	require.EqualValues(t, 3, job[7])
	require.Equal(t, "smtp down", job[8])
	require.Equal(t, []any{"trace", "t1"}, job[9])
	require.NoError(t, rdb.Do(ctx, "WQ.NACK", "p", "c", job[2], "RETRY", 0, "ERROR", "again").Err())

	// RESP3: the headers are a map.
	r3 := redis.NewClient(&redis.Options{Addr: addr, Protocol: 3})
	defer r3.Close()
	res, err = r3.Do(ctx, "WQ.RESERVE", "WITHMETA", "BLOCK", 10000, "TOPICS", "p").Slice()
	require.NoError(t, err)
	job = res[0].([]any)
	require.Len(t, job, 10)
	require.EqualValues(t, 3, job[4])
	require.Equal(t, "again", job[8])
	require.Equal(t, map[any]any{"trace": "t1"}, job[9])
}
