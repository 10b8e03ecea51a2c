package resp_test

import (
	"bufio"
	"context"
	"io"
	"sort"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestCommandSubcommands: COMMAND's subcommands answer as Redis 7's do
// (each checked against a redis-server 7.0), not with the whole table:
// COUNT an integer; INFO one entry per name asked, in order, a null for
// an unknown one, names in any case (all commands without names); LIST
// the names (FILTERBY PATTERN a glob); DOCS a map of the known names
// asked; HELP its lines; GETKEYS no keys; an unknown subcommand, or a
// wrong number of arguments, Redis's error. go-redis's Command (which
// parses COMMAND's reply) reads the table, in RESP2 and in RESP3.
func TestCommandSubcommands(t *testing.T) {
	t.Parallel()
	addr := start(t, nil, "p")
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1})
	defer rdb.Close()
	do := func(args ...any) *redis.Cmd { return rdb.Do(ctx, args...) }

	count, err := do("COMMAND", "COUNT").Int()
	require.NoError(t, err)
	require.Greater(t, count, 20)

	info, err := do("COMMAND", "INFO", "WQ.Schedule", "get", "nosuch", "wq.ack").Slice()
	require.NoError(t, err)
	require.Len(t, info, 4, "one entry per name asked")
	sched := info[0].([]any)
	require.Len(t, sched, 10, "Redis 7's ten fields")
	require.Equal(t, "wq.schedule", sched[0])
	require.EqualValues(t, -3, sched[1])
	require.Nil(t, info[1], "GET is no wheelq command (without the delayedqueue mode)")
	require.Nil(t, info[2])
	require.Equal(t, "wq.ack", info[3].([]any)[0])
	require.EqualValues(t, 4, info[3].([]any)[1])
	all, err := do("COMMAND", "INFO").Slice()
	require.NoError(t, err)
	require.Len(t, all, count, "INFO without names: every command")

	list, err := do("COMMAND", "LIST").StringSlice()
	require.NoError(t, err)
	require.Len(t, list, count)
	require.Contains(t, list, "wq.reserve")
	require.Contains(t, list, "command")
	wq, err := do("COMMAND", "LIST", "FILTERBY", "PATTERN", "WQ.*").StringSlice()
	require.NoError(t, err)
	require.NotEmpty(t, wq)
	for _, n := range wq {
		require.True(t, strings.HasPrefix(n, "wq."), n)
	}
	require.Contains(t, wq, "wq.schedule")
	none, err := do("COMMAND", "LIST", "FILTERBY", "MODULE", "x").StringSlice()
	require.NoError(t, err)
	require.Empty(t, none, "no modules")
	require.EqualError(t, do("COMMAND", "LIST", "x").Err(), "ERR syntax error")
	require.EqualError(t, do("COMMAND", "LIST", "FILTERBY", "PATTERN", "a", "b").Err(), "ERR syntax error")

	docs, err := do("COMMAND", "DOCS", "wq.ack", "nosuch").Slice()
	require.NoError(t, err)
	require.Len(t, docs, 2, "the known name only, as a flat map in RESP2")
	require.Equal(t, "wq.ack", docs[0])
	require.Equal(t, []any{"summary", "WQ.ACK topic id token"}, docs[1])

	help, err := do("COMMAND", "HELP").StringSlice()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(help[0], "COMMAND <subcommand>"), help[0])
	require.EqualError(t, do("COMMAND", "GETKEYS", "WQ.SCHEDULE", "p", "x").Err(), "ERR The command has no key arguments")
	require.EqualError(t, do("COMMAND", "GETKEYS", "nosuch", "x").Err(), "ERR Invalid command specified")
	require.EqualError(t, do("COMMAND", "COUNT", "x").Err(), "ERR wrong number of arguments for 'command|count' command")
	require.EqualError(t, do("COMMAND", "NOSUCH").Err(), "ERR unknown subcommand 'NOSUCH'. Try COMMAND HELP.")
	require.EqualError(t, do("COMMAND", "nosuch", "a", "b").Err(), "ERR unknown subcommand 'nosuch'. Try COMMAND HELP.")

	// go-redis's Command parses the whole table, in both protocols.
	for _, proto := range []int{2, 3} {
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto})
		cmds, err := c.Command(ctx).Result()
		c.Close()
		require.NoError(t, err, "RESP%d", proto)
		require.Len(t, cmds, count)
		require.EqualValues(t, -3, cmds["wq.schedule"].Arity)
		require.Contains(t, cmds["auth"].Flags, "no_auth")
	}

	// RESP3: an unknown name's entry is RESP3's null.
	raw := rawConn(t, addr)
	rd := bufio.NewReader(raw)
	_, err = raw.Write([]byte("HELLO 3\r\n"))
	require.NoError(t, err)
	skipReply(t, rd)
	_, err = raw.Write([]byte("COMMAND INFO nosuch\r\n"))
	require.NoError(t, err)
	line, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "*1\r\n", line)
	line, err = rd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "_\r\n", line)
}

// skipReply reads one RESP2 or RESP3 reply (of the types HELLO's uses).
func skipReply(t *testing.T, rd *bufio.Reader) {
	t.Helper()
	line, err := rd.ReadString('\n')
	require.NoError(t, err)
	n := 0
	switch line[0] {
	case '*', '%':
		for _, c := range strings.TrimSpace(line[1:]) {
			n = n*10 + int(c-'0')
		}
		if line[0] == '%' {
			n *= 2
		}
		for range n {
			skipReply(t, rd)
		}
	case '$':
		for _, c := range strings.TrimSpace(line[1:]) {
			n = n*10 + int(c-'0')
		}
		_, err = io.ReadFull(rd, make([]byte, n+2))
		require.NoError(t, err)
	}
}

// TestCommandNamesSorted: COMMAND and COMMAND LIST give the commands in
// one order (by name), whatever the map's.
func TestCommandNamesSorted(t *testing.T) {
	t.Parallel()
	addr := start(t, nil, "p")
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	list, err := rdb.Do(context.Background(), "COMMAND", "LIST").StringSlice()
	require.NoError(t, err)
	require.True(t, sort.StringsAreSorted(list), "%v", list)
}
