package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

func TestSentinelSetFailsOver(t *testing.T) {
	t.Parallel()
	Start(t, Options{}).RequireReal(t)
	set := StartSentinelSet(t, 2)
	ctx := context.Background()
	c := set.Client(t, redis.FailoverOptions{})
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	before, err := set.PrimaryAddr(ctx)
	require.NoError(t, err)
	require.Equal(t, set.Primary.Addr, before)
	set.Failover(t)
	after, err := set.PrimaryAddr(ctx)
	require.NoError(t, err)
	require.NotEqual(t, before, after)
	require.Eventually(t, func() bool { return c.Set(ctx, "k2", "v2", 0).Err() == nil }, 20*time.Second, 50*time.Millisecond,
		"the failover client writes to the new primary")
	require.Equal(t, "v", c.Get(ctx, "k").Val(), "a replicated write survives")
}

func TestClusterFailsOver(t *testing.T) {
	t.Parallel()
	Start(t, Options{}).RequireReal(t)
	c := StartCluster(t)
	ctx := context.Background()
	cc := c.Client(t, redis.ClusterOptions{})
	for i := range 100 {
		require.NoError(t, cc.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err())
	}
	require.Len(t, c.Primaries(ctx), 3)
	promoted := c.Failover(t)
	require.Len(t, c.Primaries(ctx), 3)
	require.Contains(t, c.Primaries(ctx), promoted)
	require.Eventually(t, func() bool {
		for i := range 100 {
			if v, err := cc.Get(ctx, fmt.Sprintf("k%d", i)).Int(); err != nil || v != i {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "every key readable after the failover")
}
