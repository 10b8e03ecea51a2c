package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a real Redis Cluster on loopback: three primaries with a
// replica each, every node its own redis-server process in its own
// temporary directory, made into a cluster by redis-cli --cluster create.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts a cluster of three primaries with a replica each and
// waits until every node reports it healthy (cluster_state:ok, every slot
// served) and every replica is in sync; it stops them at the test's
// cleanup. There is no fallback: skip
// where redis-server is missing (RequireReal on a Start()ed server).
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return StartClusterVia(t, nil)
}

// StartClusterVia is StartCluster where the first node (one of the
// primaries) announces, as its client port, the address via returns for
// its own (a fault proxy, say): its replica replicates through it and
// cluster clients are told it, while the cluster bus goes direct. A client
// that should reach the node directly maps that address back (a Dialer).
// nil via is StartCluster.
func StartClusterVia(t testing.TB, via func(first string) string) *Cluster {
	t.Helper()
	c, err := NewClusterVia(via)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// NewCluster is StartCluster for a cluster that outlives a test (shared by
// several): the caller must Close it.
func NewCluster() (*Cluster, error) { return NewClusterVia(nil) }

// NewClusterVia is StartClusterVia for a cluster that outlives a test: the
// caller must Close it.
func NewClusterVia(via func(first string) string) (*Cluster, error) {
	c := &Cluster{}
	for range 6 {
		s, err := StartServer(Options{AOF: true, Cluster: true})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("redistest: cluster: %w", err)
		}
		c.Nodes = append(c.Nodes, s)
	}
	if via != nil {
		_, port, err := net.SplitHostPort(via(c.Nodes[0].Addr))
		if err == nil {
			err = c.Nodes[0].client().ConfigSet(context.Background(), "cluster-announce-port", port).Err()
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("redistest: cluster: announce: %w", err)
		}
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %w: %s", err, tail(out))
	}
	ctx := context.Background()
	err := c.wait("a healthy cluster", func() bool {
		for _, n := range c.Nodes {
			info, err := n.client().ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
				return false
			}
			if !strings.Contains(info, "cluster_known_nodes:6") {
				return false
			}
			repl, err := n.client().Info(ctx, "replication").Result()
			if err != nil || (strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up")) {
				return false // a replica not in sync yet cannot fail over
			}
		}
		return len(c.Primaries(ctx)) == 3
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close stops every node.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Close()
	}
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Addr)
	}
	return out
}

// Client returns a cluster client, closed at the test's cleanup. opt may
// set further options; its Addrs are filled in.
func (c *Cluster) Client(t testing.TB, opt redis.ClusterOptions) *redis.ClusterClient {
	opt.Addrs = c.Addrs()
	cc := redis.NewClusterClient(&opt)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Primaries returns the nodes that are primaries now.
func (c *Cluster) Primaries(ctx context.Context) []*Server {
	var out []*Server
	for _, n := range c.Nodes {
		role, err := n.client().Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			out = append(out, n)
		}
	}
	return out
}

// Failover makes a replica of a primary take its place with CLUSTER
// FAILOVER (a coordinated manual failover: the primary stops taking writes
// until the replica has caught up) and waits until it is a primary, the
// old primary has become a replica and the cluster is healthy again. It
// returns the promoted node.
func (c *Cluster) Failover(t testing.TB) *Server {
	t.Helper()
	ctx := context.Background()
	var replica *Server
	for _, n := range c.Nodes {
		role, err := n.client().Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "slave" {
			replica = n
			break
		}
	}
	if replica == nil {
		t.Fatalf("redistest: cluster: no replica to promote")
	}
	if err := replica.client().Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatalf("redistest: cluster failover: %v", err)
	}
	c.waitUntil(t, "the replica promoted", func() bool {
		role, err := replica.client().Do(ctx, "ROLE").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			return false
		}
		info, err := replica.client().ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok") && len(c.Primaries(ctx)) == 3
	})
	return replica
}

func (c *Cluster) waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if err := c.wait(what, cond); err != nil {
		t.Fatalf("%v", err)
	}
}

func (c *Cluster) wait(what string, cond func() bool) error {
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: cluster: no %s after 60 s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}
