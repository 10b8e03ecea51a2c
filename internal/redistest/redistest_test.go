package redistest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKillRestartKeepsAOF(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{AOF: true})
	s.RequireReal(t)
	ctx := context.Background()
	c := s.Client(t)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	s.Kill()
	require.Error(t, c.Ping(ctx).Err(), "killed server still answers")
	require.NoError(t, s.Restart())
	require.Equal(t, "v", c.Get(ctx, "k").Val(), "AOF with fsync always keeps an acknowledged write")
}

func TestWithoutAOFDataIsGone(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{})
	s.RequireReal(t)
	ctx := context.Background()
	c := s.Client(t)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	s.Kill()
	require.NoError(t, s.Restart())
	require.Zero(t, c.Exists(ctx, "k").Val())
	require.Error(t, s.Restart(), "restart of a running server")
}
