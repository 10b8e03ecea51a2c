package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the master name a SentinelSet monitors.
const SentinelMaster = "wheelq"

// SentinelSet is a real Sentinel deployment on loopback: a primary, its
// replicas and three Sentinels (redis-server in sentinel mode), each its own
// process in its own temporary directory.
type SentinelSet struct {
	Primary   *Server
	Replicas  []*Server
	Sentinels []*Server
}

// StartSentinelSet starts a primary, replicas replicas of it, and three
// Sentinels with quorum 2 that fail over after 1 s without a reply, and
// waits until the replicas are in sync and every Sentinel knows them. It
// stops them all at the test's cleanup. A test that needs it should call
// RequireReal on a Start()ed server first, or skip where redis-server is
// missing: there is no fallback.
func StartSentinelSet(t testing.TB, replicas int) *SentinelSet {
	t.Helper()
	return StartSentinelSetVia(t, replicas, nil)
}

// StartSentinelSetVia is StartSentinelSet where the replicas and the
// Sentinels reach the primary at the address via returns for the
// primary's own (a fault proxy, say, which can then cut them off from it
// while clients that dial the primary directly still reach it); nil via
// is the primary's address.
func StartSentinelSetVia(t testing.TB, replicas int, via func(primary string) string) *SentinelSet {
	t.Helper()
	set, err := NewSentinelSet(replicas, via)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(set.Close)
	return set
}

// NewSentinelSet is StartSentinelSetVia for a set that outlives a test
// (shared by several): the caller must Close it.
func NewSentinelSet(replicas int, via func(primary string) string) (*SentinelSet, error) {
	set := &SentinelSet{}
	start := func(opts Options) (*Server, error) {
		s, err := StartServer(opts)
		if err != nil {
			set.Close()
			return nil, fmt.Errorf("redistest: sentinel set: %w", err)
		}
		return s, nil
	}
	var err error
	if set.Primary, err = start(Options{AOF: true}); err != nil {
		return nil, err
	}
	primary := set.Primary.Addr
	if via != nil {
		primary = via(primary)
	}
	for range replicas {
		r, err := start(Options{AOF: true, ReplicaOf: primary})
		if err != nil {
			return nil, err
		}
		set.Replicas = append(set.Replicas, r)
	}
	host, port := "127.0.0.1", strings.TrimPrefix(primary, "127.0.0.1:")
	conf := strings.Join([]string{
		fmt.Sprintf("sentinel monitor %s %s %s 2", SentinelMaster, host, port),
		fmt.Sprintf("sentinel down-after-milliseconds %s 1000", SentinelMaster),
		fmt.Sprintf("sentinel failover-timeout %s 5000", SentinelMaster),
		fmt.Sprintf("sentinel parallel-syncs %s 1", SentinelMaster),
	}, "\n")
	for range 3 {
		s, err := start(Options{Sentinel: conf})
		if err != nil {
			return nil, err
		}
		set.Sentinels = append(set.Sentinels, s)
	}
	ctx := context.Background()
	err = set.wait("replicas in sync and known to every Sentinel", func() bool {
		for _, r := range set.Replicas {
			info, err := r.client().Info(ctx, "replication").Result()
			if err != nil || !strings.Contains(info, "master_link_status:up") {
				return false
			}
		}
		for _, s := range set.Sentinels {
			rs, err := s.client().Do(ctx, "SENTINEL", "REPLICAS", SentinelMaster).Slice()
			if err != nil || len(rs) != replicas {
				return false
			}
			ss, err := s.client().Do(ctx, "SENTINEL", "SENTINELS", SentinelMaster).Slice()
			if err != nil || len(ss) != len(set.Sentinels)-1 {
				return false
			}
		}
		return true
	})
	if err != nil {
		set.Close()
		return nil, err
	}
	return set, nil
}

// Close stops the Sentinels, the replicas and the primary.
func (set *SentinelSet) Close() {
	for _, s := range set.Sentinels {
		s.Close()
	}
	for _, s := range set.Replicas {
		s.Close()
	}
	if set.Primary != nil {
		set.Primary.Close()
	}
}

// SentinelAddrs returns the Sentinels' addresses.
func (set *SentinelSet) SentinelAddrs() []string {
	var out []string
	for _, s := range set.Sentinels {
		out = append(out, s.Addr)
	}
	return out
}

// Client returns a failover client of the set (go-redis asks the Sentinels
// for the primary and follows a failover), closed at the test's cleanup.
// opt may set further options (timeouts, retries); its MasterName and
// SentinelAddrs are filled in.
func (set *SentinelSet) Client(t testing.TB, opt redis.FailoverOptions) *redis.Client {
	opt.MasterName, opt.SentinelAddrs = SentinelMaster, set.SentinelAddrs()
	c := redis.NewFailoverClient(&opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// PrimaryAddr returns the primary's address as the first Sentinel reports
// it.
func (set *SentinelSet) PrimaryAddr(ctx context.Context) (string, error) {
	a, err := set.Sentinels[0].client().Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster).StringSlice()
	if err != nil {
		return "", err
	}
	if len(a) != 2 {
		return "", fmt.Errorf("redistest: sentinel answered %v", a)
	}
	return a[0] + ":" + a[1], nil
}

// Failover asks a Sentinel to fail over (SENTINEL FAILOVER: a replica is
// promoted without the primary's agreement) and waits until the Sentinels
// report a new primary and it accepts writes.
func (set *SentinelSet) Failover(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	old, err := set.PrimaryAddr(ctx)
	if err != nil {
		t.Fatalf("redistest: failover: %v", err)
	}
	if err := set.Sentinels[0].client().Do(ctx, "SENTINEL", "FAILOVER", SentinelMaster).Err(); err != nil {
		t.Fatalf("redistest: failover: %v", err)
	}
	set.waitUntil(t, "a new primary", func() bool {
		now, err := set.PrimaryAddr(ctx)
		if err != nil || now == old {
			return false
		}
		c := redis.NewClient(&redis.Options{Addr: now})
		defer c.Close()
		role, err := c.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	})
}

func (set *SentinelSet) waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if err := set.wait(what, cond); err != nil {
		t.Fatalf("%v", err)
	}
}

func (set *SentinelSet) wait(what string, cond func() bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: sentinel set: no %s after 30 s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// client returns a client of s, kept for s's life (closed by Close).
func (s *Server) client() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin == nil {
		s.admin = redis.NewClient(&redis.Options{Addr: s.Addr})
	}
	return s.admin
}
