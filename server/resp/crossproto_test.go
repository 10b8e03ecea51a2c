package resp_test

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/config"
	"github.com/wheelq/wheelq/server/internal/servertest"
)

// TestHTTPRequestRunsNothing: an HTTP request sent to the RESP port runs
// none of the commands in its body. A server without tokens serves
// anyone on loopback, and a web page open in a browser there can POST to
// http://127.0.0.1:8781/ with a text/plain body (no preflight): each line
// of the request is an inline command, the request line and headers
// unknown ones, and the body's lines commands like any other. As Redis
// does, a command named POST or "Host:" is taken for such a request: the
// connection is closed, and nothing read with it runs.
//
// Found by a red team: the body's WQ.SCHEDULE stored the job.
func TestHTTPRequestRunsNothing(t *testing.T) {
	t.Parallel()
	addr := start(t, nil, "t")
	body := "WQ.SCHEDULE t from-a-web-page ID xproto\r\n"
	c := rawConn(t, addr)
	_, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: 127.0.0.1:8781\r\nContent-Type: text/plain\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	require.NoError(t, err)
	_, _ = io.ReadAll(c) // until the server closes it

	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	err = rdb.Do(context.Background(), "WQ.GET", "t", "xproto").Err()
	require.ErrorContains(t, err, "NOTFOUND", "the body of an HTTP request ran as commands")
}

// TestPipelineAcrossAuth: commands pipelined in one write are each run
// with the permissions the connection has when its turn comes: before
// AUTH none, after it the token's, after another AUTH the other token's
// (a failed AUTH keeps the one before), also where WQ.SCHEDULEs in a row
// go to Redis together.
func TestPipelineAcrossAuth(t *testing.T) {
	t.Parallel()
	shopTok, shopSum, err := auth.Generate("shop")
	require.NoError(t, err)
	mailTok, mailSum, err := auth.Generate("mail")
	require.NoError(t, err)
	addr := start(t, []config.Token{
		{ID: "shop", SHA256: shopSum, Produce: []string{"p"}},
		{ID: "mail", SHA256: mailSum, Produce: []string{"q"}},
	}, "p", "q")
	c := rawConn(t, addr)
	_, err = io.WriteString(c, "WQ.SCHEDULE p x ID a\r\nAUTH "+shopTok+"\r\nWQ.SCHEDULE p x ID b\r\nWQ.SCHEDULE q x ID c\r\nWQ.SCHEDULE p x ID b2\r\n"+
		"AUTH wq_mail_wrong\r\nWQ.SCHEDULE q x ID c2\r\nAUTH "+mailTok+"\r\nWQ.SCHEDULE p x ID d\r\nWQ.SCHEDULE q x ID e\r\nQUIT\r\n")
	require.NoError(t, err)
	got, _ := io.ReadAll(c)
	lines := strings.Split(strings.TrimSuffix(string(got), "\r\n"), "\r\n")
	want := []string{"-NOAUTH", "+OK", "$1", "b", "-FORBIDDEN", "$2", "b2", "-WRONGPASS", "-FORBIDDEN", "+OK", "-FORBIDDEN", "$1", "e", "+OK"}
	require.Len(t, lines, len(want), "%q", got)
	for i, w := range want {
		require.True(t, strings.HasPrefix(lines[i], w), "reply line %d: %q, want %q...; all: %q", i, lines[i], w, got)
	}
}

// TestCompatPermissions: the delayedqueue mode's commands keep to the
// token's topics: SADD needs produce, SPOP consume, DEL admin on every
// queue named (checked for all before any is touched), SCARD any
// permission; KEYS lists only the queues the token has a permission on,
// whatever the pattern.
func TestCompatPermissions(t *testing.T) {
	t.Parallel()
	shopTok, shopSum, err := auth.Generate("shop")
	require.NoError(t, err)
	opsTok, opsSum, err := auth.Generate("ops")
	require.NoError(t, err)
	addr := servertest.Start(t, func(c *config.Config) {
		c.RESP.Addr = "127.0.0.1:0"
		c.RESP.DelayedQueue = true
		c.Queue.Pull = []string{"p", "q"}
		c.Tokens = []config.Token{
			{ID: "shop", SHA256: shopSum, Produce: []string{"p"}},
			{ID: "ops", SHA256: opsSum, Produce: []string{"q"}, Admin: []string{"q"}},
		}
	}).RESP
	ctx := context.Background()
	shop := redis.NewClient(&redis.Options{Addr: addr, Password: shopTok, Protocol: 2})
	defer shop.Close()
	ops := redis.NewClient(&redis.Options{Addr: addr, Password: opsTok, Protocol: 2})
	defer ops.Close()

	require.NoError(t, shop.Do(ctx, "SADD", "p", "x", 60000).Err())
	require.NoError(t, ops.Do(ctx, "SADD", "q", "y", 60000).Err())
	require.ErrorContains(t, shop.Do(ctx, "SADD", "q", "x", 0).Err(), "FORBIDDEN")
	require.ErrorContains(t, shop.Do(ctx, "SPOP", "p").Err(), "FORBIDDEN")
	require.ErrorContains(t, shop.Do(ctx, "SCARD", "q").Err(), "FORBIDDEN")
	for _, pat := range []string{"*", "q", "?", "[pq]"} {
		keys, err := shop.Do(ctx, "KEYS", pat).StringSlice()
		require.NoError(t, err)
		require.NotContains(t, keys, "q", "KEYS %s lists a queue the token has no permission on", pat)
	}
	require.ErrorContains(t, shop.Do(ctx, "DEL", "p").Err(), "FORBIDDEN")
	require.ErrorContains(t, ops.Do(ctx, "DEL", "q", "p").Err(), "FORBIDDEN")
	n, err := ops.Do(ctx, "SCARD", "q").Int()
	require.NoError(t, err)
	require.Equal(t, 1, n, "nothing of q cancelled by the refused DEL")
}
