package resp_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/server/auth"
	"github.com/wheelq/wheelq/server/resp"
)

// TestRevokedOnOpenConnections: when the server's tokens are reloaded
// without a connection's token, its next command is refused (NOAUTH),
// not only new connections.
func TestRevokedOnOpenConnections(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t, redistest.Options{})
	q, err := wheelq.New(rs.Client(t), wheelq.Config{})
	require.NoError(t, err)
	tokA, sumA, _ := auth.Generate("a")
	_, sumB, _ := auth.Generate("b")
	first, err := auth.New([]auth.Entry{{ID: "a", SHA256: sumA, Perms: [3][]string{nil, nil, {"*"}}}}, true)
	require.NoError(t, err)
	second, err := auth.New([]auth.Entry{{ID: "b", SHA256: sumB}}, true)
	require.NoError(t, err)
	var cur atomic.Pointer[auth.Authorizer]
	cur.Store(first)
	s := resp.New(q, cur.Load, resp.Options{MaxConns: 10, MaxCommandBytes: 1 << 20, MaxBlock: 1e9})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(func() { _ = s.Close() })

	rdb := redis.NewClient(&redis.Options{Addr: l.Addr().String(), Password: tokA, PoolSize: 1, MaxRetries: -1})
	defer rdb.Close()
	ctx := context.Background()
	require.NoError(t, rdb.Ping(ctx).Err())
	cur.Store(second) // a reload that drops token a
	require.ErrorContains(t, rdb.Ping(ctx).Err(), "NOAUTH")
}
