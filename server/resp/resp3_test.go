package resp_test

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestRESP3: go-redis with its defaults speaks RESP3 (HELLO 3): WQ.GET is
// a map (headers a map within), a blocked reserve's timeout and an unset
// name are RESP3 nulls; the same commands in RESP2 stay flat arrays.
func TestRESP3(t *testing.T) {
	t.Parallel()
	addr := start(t, nil, "r3")
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr}) // Protocol 3 by default
	defer rdb.Close()

	hello, err := rdb.Do(ctx, "HELLO", "3").Result()
	require.NoError(t, err)
	hm, ok := hello.(map[any]any)
	require.True(t, ok, "HELLO 3 is a map: %#v", hello)
	require.EqualValues(t, 3, hm["proto"])
	require.Equal(t, "wheelq", hm["server"])

	require.NoError(t, rdb.Do(ctx, "WQ.SCHEDULE", "r3", "pay", "ID", "a", "HEADER", "k", "v").Err())
	res, err := rdb.Do(ctx, "WQ.RESERVE", "BLOCK", 5000, "TOPICS", "r3").Slice()
	require.NoError(t, err)
	job := res[0].([]any)
	require.Equal(t, "a", job[1])
	require.NoError(t, rdb.Do(ctx, "WQ.ACK", "r3", "a", job[2]).Err())

	get, err := rdb.Do(ctx, "WQ.GET", "r3", "a").Result()
	require.NoError(t, err)
	m, ok := get.(map[any]any)
	require.True(t, ok, "WQ.GET is a map in RESP3: %#v", get)
	require.Equal(t, "done", m["state"])
	require.Contains(t, m, "payload")
	require.Nil(t, m["payload"], "a finished job keeps no payload: a null")

	require.NoError(t, rdb.Do(ctx, "WQ.SCHEDULE", "r3", "later", "ID", "b", "DELAY", 3600000, "HEADER", "k", "v").Err())
	get, err = rdb.Do(ctx, "WQ.GET", "r3", "b").Result()
	require.NoError(t, err)
	m = get.(map[any]any)
	require.Equal(t, "pending", m["state"])
	require.Equal(t, "later", m["payload"])
	require.Equal(t, map[any]any{"k": "v"}, m["headers"])

	require.ErrorIs(t, rdb.Do(ctx, "WQ.RESERVE", "BLOCK", 50, "TOPICS", "r3").Err(), redis.Nil)
	require.ErrorIs(t, rdb.Do(ctx, "CLIENT", "GETNAME").Err(), redis.Nil)

	// On the wire: RESP3's map and null; RESP2's flat array and null array.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
	rd := bufio.NewReader(c)
	line := func() string {
		t.Helper()
		l, err := rd.ReadString('\n')
		require.NoError(t, err)
		return l
	}
	_, err = c.Write([]byte("WQ.RESERVE TOPICS r3\r\nHELLO 3\r\n"))
	require.NoError(t, err)
	require.Equal(t, "*-1\r\n", line(), "RESP2 by default")
	require.Equal(t, "%7\r\n", line())
	for range 14 {
		if l := line(); l[0] == '$' {
			line()
		}
	}
	_, err = c.Write([]byte("WQ.RESERVE TOPICS r3\r\nHELLO 2\r\nHELLO 4\r\nWQ.RESERVE TOPICS r3\r\n"))
	require.NoError(t, err)
	require.Equal(t, "_\r\n", line())
	require.Equal(t, "*14\r\n", line())
	for range 14 {
		if l := line(); l[0] == '$' {
			line()
		}
	}
	require.Contains(t, line(), "-NOPROTO")
	require.Equal(t, "*-1\r\n", line(), "back to RESP2")
}
