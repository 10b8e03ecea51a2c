package wheelq

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/faultproxy"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/redistest"
)

var sentinelMeasure = flag.Bool("sentinel.measure", false,
	"TestSentinelFailoverUnderLoad: also run without ReplicaAcks and log the acknowledged jobs a failover loses")

// failoverUnderLoad schedules jobs from 16 goroutines on a queue with
// ReplicaAcks acks through a failover client of a real Sentinel set (a
// primary, replicas replicas, three Sentinels), fails the primary over with
// SENTINEL FAILOVER while they run, and reports how many jobs Schedule
// acknowledged and how many of those the new primary does not have.
func failoverUnderLoad(t *testing.T, replicas, acks int) (acked, lost int) {
	set := redistest.StartSentinelSet(t, replicas)
	rdb := set.Client(t, redis.FailoverOptions{ContextTimeoutEnabled: true})
	q, err := New(rdb, Config{Namespace: "fo", ReplicaAcks: acks, WriteTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	ctx := context.Background()

	stop := scheduleLoad(q, "fo", time.Hour, 0)
	time.Sleep(time.Second) // pacing: load before the failover
	set.Failover(t)
	time.Sleep(2 * time.Second) // writes go on through the switch
	ids, failed := stop()
	// Every acknowledged job must be on the new primary.
	require.Eventually(t, func() bool { return rdb.Ping(ctx).Err() == nil }, 20*time.Second, 50*time.Millisecond)
	lost = missingJobs(t, rdb, q, "fo", ids)
	t.Logf("%d replicas, ReplicaAcks %d: %d acknowledged, %d failed calls, %d acknowledged but lost at the failover", replicas, acks, len(ids), failed, lost)
	return len(ids), lost
}

// TestSentinelFailoverUnderLoad: a
// SENTINEL FAILOVER during writes from 16 goroutines lost tens of
// thousands of acknowledged jobs (the old primary took writes for seconds
// after the replica was promoted). With ReplicaAcks equal to the number of
// replicas, an acknowledgement means every replica has the job, so the
// promoted one has it: none is lost. DefaultConfig: a
// primary and one replica, Config{} — which waits for one replica on a
// Sentinel client — loses none either (with NoReplicaAcks, the old
// default, the same run lost thousands: -sentinel.measure).
func TestSentinelFailoverUnderLoad(t *testing.T) {
	t.Parallel()
	redistest.Start(t, redistest.Options{}).RequireReal(t)
	t.Run("ReplicaAcks=2", func(t *testing.T) {
		acked, lost := failoverUnderLoad(t, 2, 2)
		require.Positive(t, acked)
		require.Zero(t, lost, "acknowledged jobs lost at the failover")
	})
	t.Run("DefaultConfig", func(t *testing.T) {
		acked, lost := failoverUnderLoad(t, 1, 0)
		require.Positive(t, acked)
		require.Zero(t, lost, "acknowledged jobs lost at the failover")
	})
	if *sentinelMeasure {
		t.Run("NoReplicaAcks", func(t *testing.T) {
			acked, _ := failoverUnderLoad(t, 1, NoReplicaAcks)
			require.Positive(t, acked)
		})
	}
}

// TestReplicaAcksDefault: Config.ReplicaAcks's default is one replica on a
// Sentinel or Cluster client and none on a plain one; NoReplicaAcks opts
// out; below it is an error.
func TestReplicaAcksDefault(t *testing.T) {
	t.Parallel()
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	universal := redis.NewUniversalClient(&redis.UniversalOptions{MasterName: "m", Addrs: []string{"127.0.0.1:1"}})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	for _, c := range []redis.UniversalClient{plain, failover, universal, cluster} {
		t.Cleanup(func() { _ = c.Close() })
	}
	for _, c := range []struct {
		rdb        redis.UniversalClient
		set, wants int
	}{
		{plain, 0, 0}, {failover, 0, 1}, {universal, 0, 1}, {cluster, 0, 1},
		{failover, NoReplicaAcks, 0}, {cluster, NoReplicaAcks, 0}, {plain, 2, 2}, {failover, 3, 3},
	} {
		require.Equal(t, c.wants, replicaAcksFor(c.rdb, c.set), "%T set to %d", c.rdb, c.set)
	}
	_, err := New(plain, Config{ReplicaAcks: -2})
	require.ErrorContains(t, err, "replica acks -2")
	_, err = New(failover, Config{ReplicaAcks: NoReplicaAcks})
	require.NoError(t, err)
}

// BenchmarkScheduleReplicaAcks measures what ReplicaAcks costs: Schedule
// from 32 goroutines on a primary with two replicas, with no WAIT and with
// WAIT for both replicas.
func BenchmarkScheduleReplicaAcks(b *testing.B) {
	primary := redistest.Start(b, redistest.Options{})
	primary.RequireReal(b)
	for range 2 {
		primary.StartReplica(b)
	}
	rdb := primary.Client(b)
	ctx := context.Background()
	for _, acks := range []int{NoReplicaAcks, 2} {
		b.Run(fmt.Sprintf("acks=%d", acks), func(b *testing.B) {
			q, err := New(rdb, Config{Namespace: fmt.Sprintf("ra%d", acks), ReplicaAcks: acks})
			require.NoError(b, err)
			defer func() { _ = q.Shutdown(ctx) }()
			b.ReportAllocs()
			b.SetParallelism(16) // 2 cores x 16 = 32 goroutines
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := q.Schedule(ctx, "t", nil, After(time.Hour)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkScheduleReplicaAcksCluster is BenchmarkScheduleReplicaAcks on a
// Cluster (three primaries with a replica each, all six nodes on the same
// cores): Schedule from 32 goroutines with no WAIT and with each primary
// waiting for its replica (a WAIT per primary a batch touches, on that
// primary's connection).
func BenchmarkScheduleReplicaAcksCluster(b *testing.B) {
	redistest.Start(b, redistest.Options{}).RequireReal(b)
	c := redistest.StartCluster(b)
	rdb := c.Client(b, redis.ClusterOptions{ContextTimeoutEnabled: true})
	ctx := context.Background()
	for _, acks := range []int{NoReplicaAcks, 1} {
		b.Run(fmt.Sprintf("acks=%d", acks), func(b *testing.B) {
			q, err := New(rdb, Config{Namespace: fmt.Sprintf("rc%d", acks), ReplicaAcks: acks})
			require.NoError(b, err)
			defer func() { _ = q.Shutdown(ctx) }()
			b.ReportAllocs()
			b.SetParallelism(16) // 2 cores x 16 = 32 goroutines
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := q.Schedule(ctx, "t", nil, After(time.Hour)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// partitionedPrimary schedules jobs from 16 goroutines through a client
// that reaches the primary directly, while the primary's replicas and the
// Sentinels reach it through a fault proxy; the proxy is blackholed (the
// primary is cut off from them, not from its clients), the Sentinels
// promote a replica, writes go on to the old primary for a second, then
// the partition heals and the Sentinels make the old primary a replica of
// the new one (its writes since the cut are gone). It reports how many
// jobs Schedule acknowledged and how many of those the new primary lacks.
func partitionedPrimary(t *testing.T, acks int) (acked, lost int) {
	var proxy *faultproxy.Proxy
	set := redistest.StartSentinelSetVia(t, 2, func(primary string) string {
		proxy = faultproxy.Start(t, primary)
		return proxy.Addr()
	})
	ctx := context.Background()
	direct := redis.NewClient(&redis.Options{Addr: set.Primary.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = direct.Close() })
	q, err := New(direct, Config{Namespace: "pp", ReplicaAcks: acks, ReplicaTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })

	stop := scheduleLoad(q, "pp", time.Hour, 0)
	time.Sleep(500 * time.Millisecond) // pacing: load before the partition
	old := proxy.Addr()
	proxy.Blackhole(true)
	require.Eventually(t, func() bool {
		now, err := set.PrimaryAddr(ctx)
		return err == nil && now != old
	}, 30*time.Second, 50*time.Millisecond, "the Sentinels promote a replica")
	time.Sleep(time.Second) // the old primary goes on taking writes
	ids, _ := stop()
	proxy.Blackhole(false)
	proxy.CloseAll() // connections that lost bytes in the blackhole are broken
	newAddr, err := set.PrimaryAddr(ctx)
	require.NoError(t, err)
	newPrimary := redis.NewClient(&redis.Options{Addr: newAddr})
	t.Cleanup(func() { _ = newPrimary.Close() })
	require.Eventually(t, func() bool {
		role, err := direct.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "slave"
	}, 30*time.Second, 50*time.Millisecond, "the old primary becomes a replica of the new one")
	lost = missingJobs(t, newPrimary, q, "pp", ids)
	t.Logf("partitioned primary, ReplicaAcks %d: %d acknowledged, %d acknowledged but lost", acks, len(ids), lost)
	return len(ids), lost
}

// TestPartitionedPrimaryFailover: an old primary cut off from its replicas
// and the Sentinels but not from its clients takes writes after a replica
// was promoted; without ReplicaAcks they were acknowledged and are lost
// when the partition heals. With ReplicaAcks none of them is
// acknowledged, and no acknowledged job is lost.
func TestPartitionedPrimaryFailover(t *testing.T) {
	t.Parallel()
	partitionedFailover(t, 2, partitionedPrimary)
}

// partitionedFailover runs a partitioned-primary scenario (run, which
// returns how many jobs were acknowledged and how many of those were lost)
// without ReplicaAcks, where acknowledged jobs are lost, and with acksOn,
// where none is.
func partitionedFailover(t *testing.T, acksOn int, run func(t *testing.T, acks int) (acked, lost int)) {
	redistest.Start(t, redistest.Options{}).RequireReal(t)
	t.Run("NoReplicaAcks", func(t *testing.T) {
		acked, lost := run(t, NoReplicaAcks)
		require.Positive(t, acked)
		require.Positive(t, lost, "without ReplicaAcks the cut-off primary's acknowledged writes are lost")
	})
	t.Run(fmt.Sprintf("ReplicaAcks=%d", acksOn), func(t *testing.T) {
		acked, lost := run(t, acksOn)
		require.Positive(t, acked)
		require.Zero(t, lost, "acknowledged jobs lost")
	})
}

// scheduleLoad schedules jobs of topic, each with a new id and due after,
// from 16 goroutines, pausing pace between a goroutine's calls, until the
// returned stop is called; stop waits for them and returns the ids whose
// Schedule returned nil and how many calls failed.
func scheduleLoad(q *Queue, topic string, after, pace time.Duration) (stop func() (acked []string, failed int64)) {
	ctx := context.Background()
	var mu sync.Mutex
	var ids []string
	var fails atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				id := fmt.Sprintf("g%02d-%07d", g, i)
				if _, err := q.Schedule(ctx, topic, nil, ID(id), After(after)); err != nil {
					fails.Add(1)
					time.Sleep(time.Millisecond) // Redis is switching: do not spin
					continue
				}
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
				if pace > 0 {
					time.Sleep(pace) // pacing: the rate asked for
				}
			}
		})
	}
	return func() ([]string, int64) {
		close(done)
		wg.Wait()
		return ids, fails.Load()
	}
}

// missingJobs counts the jobs of topic among ids that rdb (a primary) does
// not have, reading q's keys.
func missingJobs(t *testing.T, rdb redis.Cmdable, q *Queue, topic string, ids []string) (lost int) {
	ctx := context.Background()
	for lo := 0; lo < len(ids); lo += 1000 {
		pipe := rdb.Pipeline()
		batch := ids[lo:min(lo+1000, len(ids))]
		cmds := make([]*redis.BoolCmd, len(batch))
		for i, id := range batch {
			key := persist.JobKey(topic, id)
			cmds[i] = pipe.HExists(ctx, q.store.Keys(q.store.PartitionOf(key)).Jobs, key)
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		for _, c := range cmds {
			if !c.Val() {
				lost++
			}
		}
	}
	return lost
}

// TestPingSaysReplicasMissing: with ReplicaAcks, Ping says when fewer
// replicas acknowledge than writes wait for (every write would fail):
// ErrNotReplicated, wrapped in ErrUnavailable, so a readiness check built
// on it reports a process that cannot take writes. (Found by a red team:
// with the one replica of a Sentinel set down, wheelq-server answered
// every write 504 and /readyz 200.)
func TestPingSaysReplicasMissing(t *testing.T) {
	t.Parallel()
	primary := redistest.Start(t, redistest.Options{})
	primary.RequireReal(t)
	replica := primary.StartReplica(t)
	rdb := primary.Client(t)
	ctx := context.Background()
	q, err := New(rdb, Config{ReplicaAcks: 1, ReplicaTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, q.Ping(ctx), "the replica acknowledges")
	replica.Kill()
	require.Eventually(t, func() bool {
		err := q.Ping(ctx)
		return errors.Is(err, ErrNotReplicated) && errors.Is(err, ErrUnavailable)
	}, 20*time.Second, 50*time.Millisecond, "the replica is gone")
	_, err = q.Schedule(ctx, "t", nil, After(time.Hour))
	require.ErrorIs(t, err, ErrNotReplicated, "a write says why too")
	require.ErrorIs(t, err, ErrOutcomeUnknown)
}
