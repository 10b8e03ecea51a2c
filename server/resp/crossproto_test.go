package resp_test

import (
	"context"
	"io"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
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
