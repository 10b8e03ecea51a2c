package wheelq

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/faultproxy"
	"github.com/wheelq/wheelq/internal/redistest"
)

// behaviour runs the queue's basic promises on rdb (a worker, and a
// producer that never starts): jobs run once at their time, cancels win,
// reschedules move, a failed run retries, a dead job is requeued and runs,
// and nothing is left pending.
func behaviour(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	cfg := Config{Namespace: "b", Partitions: 8, Backoff: func(int, error) time.Duration { return 20 * time.Millisecond }}
	worker, err := New(rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = worker.Shutdown(context.Background()) })
	producer, err := New(rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Shutdown(context.Background()) })
	log := newRunLog()
	h := log.handler(t, "worker")
	var deadOnce atomic.Bool
	require.NoError(t, worker.Handle("b", HandlerFunc(func(ctx context.Context, j *Job) error {
		_ = h.HandleJob(ctx, j)
		switch {
		case j.ID == "retry" && j.Attempt == 1:
			return errors.New("once more")
		case j.ID == "dead" && deadOnce.CompareAndSwap(false, true): // requeued, it runs with attempts reset
			return Permanent(errors.New("give up"))
		}
		return nil
	})))
	require.NoError(t, worker.Start(ctx))
	<-worker.Ready()
	const n = 40
	// Due 1.5 s on: the cancels and reschedules below come first, however
	// busy the machine (at 300 ms, beside stress-ng, a cancel found its
	// job already run).
	for i := range n {
		_, err := producer.Schedule(ctx, "b", nil, ID(fmt.Sprint(i)), After(1500*time.Millisecond+time.Duration(i)*10*time.Millisecond))
		require.NoError(t, err)
	}
	for _, id := range []string{"retry", "dead"} {
		_, err := producer.Schedule(ctx, "b", nil, ID(id), After(100*time.Millisecond))
		require.NoError(t, err)
	}
	for i := range 10 {
		require.NoError(t, producer.Cancel(ctx, "b", fmt.Sprint(i)))
		require.NoError(t, producer.Reschedule(ctx, "b", fmt.Sprint(10+i), time.Now().Add(2500*time.Millisecond)))
	}
	runs := func() int {
		c := 0
		for _, ps := range log.snapshot() {
			c += len(ps)
		}
		return c
	}
	eventually(t, func() bool { return runs() == n-10+3 }, "30 jobs, the retry twice, the dead one once")
	eventually(t, func() bool {
		info, err := producer.Lookup(ctx, "b", "dead")
		return err == nil && info.State == StateDead
	}, "dead-lettered")
	require.NoError(t, producer.Requeue(ctx, "b", "dead", time.Now()))
	eventually(t, func() bool { return len(log.snapshot()["dead"]) == 2 }, "the requeued job runs")
	var last string
	if !assert.Eventually(t, func() bool {
		st, err := producer.Stats(ctx)
		last = fmt.Sprintf("pending %d dead %d err %v", st.Pending, st.Dead, err)
		return err == nil && st.Pending == 0 && st.Dead == 0
	}, wait, 10*time.Millisecond, "nothing left pending") {
		for p := range 8 {
			k := producer.store.Keys(p)
			t.Logf("partition %d: pending %v dead %v running %v", p, rdb.ZRange(ctx, k.Pending, 0, -1).Val(),
				rdb.ZRange(ctx, k.Dead, 0, -1).Val(), rdb.HGetAll(ctx, k.Running).Val())
		}
		st, _ := worker.Stats(ctx)
		t.Fatalf("%s; worker %+v", last, st)
	}
	for id, ps := range log.snapshot() {
		switch id {
		case "retry", "dead":
			require.Len(t, ps, 2, id)
		default:
			require.Len(t, ps, 1, "job %s", id)
			var i int
			_, _ = fmt.Sscan(id, &i)
			require.GreaterOrEqual(t, i, 10, "cancelled job %s ran", id)
		}
	}
}

// TestDeployments runs the behaviour above on a real Sentinel set (a
// primary, two replicas, three Sentinels, through a failover client) and
// a real Redis Cluster (three primaries with a replica each).
func TestDeployments(t *testing.T) {
	t.Parallel()
	redistest.Start(t, redistest.Options{}).RequireReal(t)
	t.Run("Sentinel", func(t *testing.T) {
		t.Parallel()
		set := redistest.StartSentinelSet(t, 2)
		behaviour(t, set.Client(t, redis.FailoverOptions{ContextTimeoutEnabled: true}))
	})
	t.Run("Cluster", func(t *testing.T) {
		t.Parallel()
		c := redistest.StartCluster(t)
		behaviour(t, c.Client(t, redis.ClusterOptions{ContextTimeoutEnabled: true}))
	})
}

// TestClusterScriptCacheLost: one primary
// lost its script cache (a promoted replica: SCRIPT LOAD is not
// replicated); calls that had applied on the other primaries were sent
// again, and 140 of 320 new jobs came back ErrDuplicate. Only the calls
// that got NOSCRIPT are sent again (and a replay is recognised anyway).
func TestClusterScriptCacheLost(t *testing.T) {
	t.Parallel()
	redistest.Start(t, redistest.Options{}).RequireReal(t)
	c := redistest.StartCluster(t)
	rdb := c.Client(t, redis.ClusterOptions{ContextTimeoutEnabled: true})
	ctx := context.Background()
	q, err := New(rdb, Config{Namespace: "sc"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	_, err = q.Schedule(ctx, "s", nil, ID("warm"), After(time.Hour)) // the layout check and the scripts loaded
	require.NoError(t, err)
	require.NoError(t, c.Primaries(ctx)[0].NewClient().ScriptFlush(ctx).Err())
	var dup, other atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 10 {
				_, err := q.Schedule(ctx, "s", nil, ID(fmt.Sprintf("%02d-%d", g, i)), After(time.Hour))
				switch {
				case errors.Is(err, ErrDuplicate):
					dup.Add(1)
				case err != nil:
					other.Add(1)
					t.Log(err)
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, dup.Load(), "new jobs reported duplicate")
	require.Zero(t, other.Load())
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(321), st.Pending)
}

// TestClusterFailoverUnderLoad: CLUSTER FAILOVER of one primary while 16
// goroutines schedule jobs due within seconds, with ReplicaAcks 1 (each
// primary's one replica), and a worker runs them: no acknowledged job is
// lost, every one runs.
func TestClusterFailoverUnderLoad(t *testing.T) {
	t.Parallel()
	redistest.Start(t, redistest.Options{}).RequireReal(t)
	c := redistest.StartCluster(t)
	rdb := c.Client(t, redis.ClusterOptions{ContextTimeoutEnabled: true})
	ctx := context.Background()
	cfg := Config{Namespace: "cf", Partitions: 8, WriteTimeout: 2 * time.Second, ReplicaAcks: 1}
	worker, err := New(rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = worker.Shutdown(context.Background()) })
	log := newRunLog()
	require.NoError(t, worker.Handle("cf", log.handler(t, "worker")))
	require.NoError(t, worker.Start(ctx))
	<-worker.Ready()
	producer, err := New(rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Shutdown(context.Background()) })

	stop := scheduleLoad(producer, "cf", time.Second, 5*time.Millisecond) // a few hundred jobs a second
	// pacing: load before the failover, and after it
	time.Sleep(time.Second)
	c.Failover(t)
	time.Sleep(time.Second)
	ids, failed := stop()
	var missing []string
	if !assert.Eventually(t, func() bool {
		runs := log.snapshot()
		missing = missing[:0]
		for _, id := range ids {
			if len(runs[id]) == 0 {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0
	}, wait, 20*time.Millisecond, "every acknowledged job ran") {
		for _, id := range missing[:min(5, len(missing))] {
			info, err := producer.Lookup(ctx, "cf", id)
			t.Logf("not run: %s: %+v %v", id, info, err)
		}
		st, _ := worker.Stats(ctx)
		t.Fatalf("%d of %d acknowledged jobs did not run; worker %+v", len(missing), len(ids), st)
	}
	t.Logf("cluster failover, ReplicaAcks 1: %d acknowledged, %d failed calls; all ran, 0 lost", len(ids), failed)
}

var deployAll = flag.Bool("deploy.all", false,
	"run the behaviour tests that loop over eachDeployment on a real Sentinel set and a real Redis Cluster too, not only on a standalone server")

// shared holds the Sentinel set and the Cluster that -deploy.all's subtests
// share, started at first use and stopped by TestMain; each test works in
// a namespace of its own.
var shared struct {
	sentinelOnce, clusterOnce sync.Once
	sentinel                  *redistest.SentinelSet
	cluster                   *redistest.Cluster
	sentinelErr, clusterErr   error
	ns                        atomic.Int64
}

// closeShared stops what shared started.
func closeShared() {
	if shared.sentinel != nil {
		shared.sentinel.Close()
	}
	if shared.cluster != nil {
		shared.cluster.Close()
	}
}

// deployment is a Redis deployment that behaviour tests run on.
type deployment struct {
	name string
	// client returns a client of the shared deployment, closed at t's
	// cleanup; nil for a standalone server of the test's own.
	client func(t *testing.T) redis.UniversalClient
	// acks is the ReplicaAcks of its queues (every replica of a primary).
	acks int
}

// setup is the package's setup on d: a started queue in a namespace of the
// test's own.
func (d deployment) setup(t *testing.T, cfg Config) *bundle {
	t.Helper()
	if d.client == nil {
		return setup(t, cfg)
	}
	b := d.bundle(t)
	b.q = b.newQueue(t, cfg)
	require.NoError(t, b.q.Start(b.ctx))
	<-b.q.Ready()
	return b
}

// bundle returns a bundle on d without a queue: a server of the test's
// own, or a client of the shared deployment and a namespace of the test's
// own.
func (d deployment) bundle(t *testing.T) *bundle {
	t.Helper()
	if d.client == nil {
		srv := redistest.Start(t, redistest.Options{})
		return &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	}
	return &bundle{rdb: d.client(t), ctx: context.Background(), ns: fmt.Sprintf("d%d", shared.ns.Add(1)), acks: d.acks}
}

// eachDeployment runs body as a parallel subtest per deployment: a
// standalone server ("standalone") always; with -deploy.all also a real
// Sentinel set (a primary, two replicas, three Sentinels; "sentinel") and a
// real Cluster (three primaries with a replica each; "cluster"), where
// queues wait for every replica (ReplicaAcks 2 and 1) unless the test's
// Config says otherwise.
func eachDeployment(t *testing.T, body func(t *testing.T, d deployment)) {
	ds := []deployment{{name: "standalone"}}
	if *deployAll {
		ds = append(ds, deployment{name: "sentinel", client: sharedSentinel, acks: 2}, deployment{name: "cluster", client: sharedCluster, acks: 1})
	}
	for _, d := range ds {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			body(t, d)
		})
	}
}

func sharedSentinel(t *testing.T) redis.UniversalClient {
	shared.sentinelOnce.Do(func() { shared.sentinel, shared.sentinelErr = redistest.NewSentinelSet(2, nil) })
	if shared.sentinelErr != nil {
		t.Fatalf("-deploy.all: %v", shared.sentinelErr)
	}
	return shared.sentinel.Client(t, redis.FailoverOptions{ContextTimeoutEnabled: true})
}

func sharedCluster(t *testing.T) redis.UniversalClient {
	shared.clusterOnce.Do(func() { shared.cluster, shared.clusterErr = redistest.NewCluster() })
	if shared.clusterErr != nil {
		t.Fatalf("-deploy.all: %v", shared.clusterErr)
	}
	return shared.cluster.Client(t, redis.ClusterOptions{ContextTimeoutEnabled: true})
}

// partitionedClusterPrimary schedules jobs from 16 goroutines on a Cluster
// whose first primary's replica replicates through a fault proxy (clients
// and the cluster bus reach the primary directly). The proxy is
// blackholed: the replica gets none of the primary's writes from then on,
// while the primary goes on taking them for a second; then the replica
// takes over (CLUSTER FAILOVER TAKEOVER, as after a failure it could not
// tell from a dead primary), the old primary learns it over the bus and
// becomes its replica (its writes since the cut are gone). It reports how
// many jobs Schedule acknowledged and how many of those the primaries
// lack.
func partitionedClusterPrimary(t *testing.T, acks int) (acked, lost int) {
	var proxy *faultproxy.Proxy
	c := redistest.StartClusterVia(t, func(first string) string {
		proxy = faultproxy.Start(t, first)
		return proxy.Addr()
	})
	ctx := context.Background()
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == proxy.Addr() {
			addr = c.Nodes[0].Addr // clients reach the primary directly
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	rdb := c.Client(t, redis.ClusterOptions{ContextTimeoutEnabled: true, Dialer: dial})
	var replica *redis.Client
	for _, n := range c.Nodes[1:] {
		nc := n.NewClient()
		t.Cleanup(func() { _ = nc.Close() })
		role, err := nc.Do(ctx, "ROLE").Slice()
		require.NoError(t, err)
		if role[0] == "slave" && fmt.Sprintf("%v:%v", role[1], role[2]) == proxy.Addr() {
			replica = nc
		}
	}
	require.NotNil(t, replica, "the first node is a primary whose replica replicates through the proxy")
	q, err := New(rdb, Config{Namespace: "cp", Partitions: 8, ReplicaAcks: acks, ReplicaTimeout: 300 * time.Millisecond, WriteTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })

	stop := scheduleLoad(q, "cp", time.Hour, 0)
	time.Sleep(500 * time.Millisecond) // pacing: load before the partition
	proxy.Blackhole(true)
	time.Sleep(time.Second) // the old primary goes on taking writes
	require.NoError(t, replica.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err())
	old := c.Nodes[0].NewClient()
	t.Cleanup(func() { _ = old.Close() })
	require.Eventually(t, func() bool {
		role, err := old.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "slave"
	}, 30*time.Second, 20*time.Millisecond, "the old primary becomes a replica of the new one")
	time.Sleep(500 * time.Millisecond) // writes go on to the new primary
	ids, _ := stop()
	proxy.Blackhole(false)
	proxy.CloseAll()
	fresh := c.Client(t, redis.ClusterOptions{Dialer: dial})
	lost = missingJobs(t, fresh, q, "cp", ids)
	t.Logf("cluster, partitioned primary, ReplicaAcks %d: %d acknowledged, %d acknowledged but lost", acks, len(ids), lost)
	return len(ids), lost
}

// TestClusterPartitionedPrimaryFailover is TestPartitionedPrimaryFailover
// on a Cluster: a primary that no longer reaches its replica goes on
// taking writes until the replica takes over; without ReplicaAcks they
// were acknowledged and are lost, with it none of them is acknowledged.
func TestClusterPartitionedPrimaryFailover(t *testing.T) {
	t.Parallel()
	partitionedFailover(t, 1, partitionedClusterPrimary)
}
