package wheelq

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/redistest"
)

const (
	envRestartRedis    = "WHEELQ_RESTART_CHILD_REDIS"
	envRestartInstance = "WHEELQ_RESTART_CHILD_INSTANCE"
)

// restartConfig is the configuration of TestRestartTakesOverAtOnce's
// processes.
func restartConfig(instance string) Config {
	return Config{Namespace: "restart", Partitions: 2, LeaseTTL: 3 * time.Second, InstanceID: instance}
}

// TestRestartChild is the child process of TestRestartTakesOverAtOnce; it
// does nothing unless the parent set its environment.
func TestRestartChild(t *testing.T) {
	addr := os.Getenv(envRestartRedis)
	if addr == "" {
		t.Skip("child process of TestRestartTakesOverAtOnce")
	}
	q, err := New(redis.NewClient(&redis.Options{Addr: addr}), restartConfig(os.Getenv(envRestartInstance)))
	require.NoError(t, err)
	// Topic "slow": a handler that never returns (TestRerunFlagged kills
	// the process during its run).
	require.NoError(t, q.Handle("slow", HandlerFunc(func(context.Context, *Job) error { select {} })))
	require.NoError(t, q.Start(context.Background()))
	select {} // until killed
}

// TestRestartTakesOverAtOnce: a process killed
// with -9 and restarted owned no partition until its former incarnation's
// leases lapsed (LeaseTTL), and its own new jobs waited that long. With a
// stable InstanceID the restarted process takes its leases over at once:
// they never lapse in Redis. Without one, they must lapse first.
func TestRestartTakesOverAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	lease := func(p int) string {
		v, _ := rdb.Get(ctx, fmt.Sprintf("wq:{restart:%d}:lease", p)).Result()
		return v
	}
	first := startTestChild(t, "TestRestartChild", envRestartRedis+"="+srv.Addr, envRestartInstance+"=worker-1")
	t.Cleanup(first.kill)
	eventually(t, func() bool { return lease(0) != "" && lease(1) != "" }, "the first incarnation owns both partitions")
	old := lease(0)
	require.True(t, strings.HasPrefix(old, "worker-1#"), "the token carries the instance: %q", old)
	first.kill()
	second := startTestChild(t, "TestRestartChild", envRestartRedis+"="+srv.Addr, envRestartInstance+"=worker-1")
	t.Cleanup(second.kill)
	deadline := time.Now().Add(wait)
	for {
		l0, l1 := lease(0), lease(1)
		require.NotEmpty(t, l0, "partition 0's lease lapsed: the restart waited for it")
		require.NotEmpty(t, l1, "partition 1's lease lapsed: the restart waited for it")
		if l0 != old && l1 != old {
			require.True(t, strings.HasPrefix(l0, "worker-1#") && strings.HasPrefix(l1, "worker-1#"))
			break
		}
		require.True(t, time.Now().Before(deadline), "no take-over")
		time.Sleep(5 * time.Millisecond)
	}

	// Another instance name never takes a live lease over (a process of
	// another instance gets a share only when its holder hands it over).
	st, err := persist.New(rdb, persist.Options{Namespace: "restart", Partitions: 2})
	require.NoError(t, err)
	for p := range 2 {
		held, wait, err := st.Lease(ctx, p, persist.LeaseAcquire, "worker-2#other", 3*time.Second)
		require.NoError(t, err)
		require.False(t, held, "worker-2 took worker-1's live lease of partition %d", p)
		require.Positive(t, wait)
	}
}

// TestRestartDefaultConfigTakesOver: with the default
// Config (no InstanceID) a process killed with -9 and restarted on the
// same host stalled every job for up to LeaseTTL (p50 6.2 s late). Its
// former incarnation's lock file (Config.LockDir) proves that process
// dead, so the restarted one takes its leases and roster place over at
// once: the leases never lapse in Redis.
func TestRestartDefaultConfigTakesOver(t *testing.T) {
	t.Parallel()
	h := newRestartHost(t)
	first := h.child(t)
	h.owned(t)
	old0, old1 := h.lease(0), h.lease(1)
	first.kill()
	// The killed process renews no more: its leases end by these times.
	end0, end1 := leaseEnd(t, h.rdb, 0), leaseEnd(t, h.rdb, 1)
	h.child(t)
	for {
		l0, l1 := h.lease(0), h.lease(1)
		require.NotEmpty(t, l0, "partition 0's lease lapsed: the restart waited for it")
		require.NotEmpty(t, l1, "partition 1's lease lapsed: the restart waited for it")
		if l0 != old0 && l1 != old1 {
			break
		}
		require.True(t, time.Now().Before(end0) || l0 != old0, "no take-over of partition 0 before its lease lapsed")
		require.True(t, time.Now().Before(end1) || l1 != old1, "no take-over of partition 1 before its lease lapsed")
		time.Sleep(5 * time.Millisecond)
	}
	members, err := h.rdb.ZRange(context.Background(), "wq:{restart}:members", 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, members, 1, "the dead incarnation left the roster: %v", members)
}

// TestPausedProcessNotTakenOver: a process stopped with SIGSTOP is alive:
// its lock stays held, and a new process on its host waits for its leases
// to lapse as for any other live owner's.
func TestPausedProcessNotTakenOver(t *testing.T) {
	t.Parallel()
	h := newRestartHost(t)
	first := h.child(t)
	h.owned(t)
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGSTOP))
	// Stopped, it renews no more: its lease ends by end (after its last
	// renewal, however late the machine made it).
	old0, end := h.lease(0), leaseEnd(t, h.rdb, 0)
	h.child(t)
	for {
		l := h.lease(0)
		if l != old0 {
			// end is at or before the lease's expiry in Redis (its TTL was
			// read after end's clock reading), so a take-over at or after
			// the expiry is seen at or after end.
			require.False(t, time.Now().Before(end.Add(-20*time.Millisecond)),
				"a live (stopped) owner's lease was taken %v before it lapsed", time.Until(end))
			break
		}
		require.True(t, time.Now().Before(end.Add(wait)), "not taken after it lapsed")
		time.Sleep(10 * time.Millisecond)
	}
	eventually(t, func() bool { l := h.lease(0); return l != "" && l != old0 }, "taken once it lapsed")
	_ = first.cmd.Process.Signal(syscall.SIGCONT)
}

// TestRerunFlagged: a run interrupted by kill -9 was
// run again with the same Attempt and nothing to tell it from a first
// run. The rerun has Job.Rerun set (the Attempt stays); a job whose run
// was never claimed before has it unset; once the rerun's outcome is
// stored the flag is gone.
func TestRerunFlagged(t *testing.T) {
	t.Parallel()
	h := newRestartHost(t)
	rdb, ctx := h.rdb, context.Background()
	child := h.child(t)
	h.owned(t)
	producer, err := New(rdb, restartConfig(""))
	require.NoError(t, err)
	_, err = producer.Schedule(ctx, "slow", nil, ID("s1"))
	require.NoError(t, err)
	eventually(t, func() bool {
		info, err := producer.Lookup(ctx, "slow", "s1")
		return err == nil && info.State == StateRunning
	}, "the child runs s1")
	child.kill()

	cfg := restartConfig("")
	cfg.LockDir = filepath.Join(h.dir, "wheelq-"+strconv.Itoa(os.Getuid())) // the child's (its default under its TMPDIR)
	q, err := New(rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	got := make(chan Job, 4)
	require.NoError(t, q.Handle("slow", HandlerFunc(func(_ context.Context, j *Job) error {
		got <- *j
		return nil
	})))
	require.NoError(t, q.Start(ctx))
	select {
	case j := <-got:
		require.Equal(t, "s1", j.ID)
		require.True(t, j.Rerun, "the run the kill interrupted may have done its work")
		require.Equal(t, 1, j.Attempt, "the same attempt")
	case <-time.After(wait):
		t.Fatal("s1 not run again")
	}
	_, err = q.Schedule(ctx, "slow", nil, ID("s2"))
	require.NoError(t, err)
	select {
	case j := <-got:
		require.Equal(t, "s2", j.ID)
		require.False(t, j.Rerun, "a first run")
	case <-time.After(wait):
		t.Fatal("s2 not run")
	}
	eventually(t, func() bool {
		for _, id := range []string{"s1", "s2"} {
			if info, err := q.Lookup(ctx, "slow", id); err != nil || info.State != StateDone {
				return false
			}
		}
		return true
	}, "the runs' outcomes are stored")
	for p := range 2 {
		marks, err := rdb.HGetAll(ctx, fmt.Sprintf("wq:{restart:%d}:running", p)).Result()
		require.NoError(t, err)
		require.Empty(t, marks, "no mark is left: the rerun flag went with the outcome")
	}
}

// restartHost is a restart test's redis-server and its processes' host:
// a temporary directory the child processes take as TMPDIR (their lock
// directory is under it).
type restartHost struct {
	srv *redistest.Server
	rdb redis.UniversalClient
	dir string
}

func newRestartHost(t *testing.T) *restartHost {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	return &restartHost{srv: srv, rdb: srv.Client(t), dir: t.TempDir()}
}

// child starts a TestRestartChild process on the host with the default
// Config; the test's end kills it.
func (h *restartHost) child(t *testing.T) *child {
	t.Helper()
	c := startTestChild(t, "TestRestartChild", envRestartRedis+"="+h.srv.Addr, "TMPDIR="+h.dir)
	t.Cleanup(c.kill)
	return c
}

// lease returns partition p's lease holder ("" if none).
func (h *restartHost) lease(p int) string {
	v, _ := h.rdb.Get(context.Background(), fmt.Sprintf("wq:{restart:%d}:lease", p)).Result()
	return v
}

// owned waits until a process owns both partitions.
func (h *restartHost) owned(t *testing.T) {
	t.Helper()
	eventually(t, func() bool { return h.lease(0) != "" && h.lease(1) != "" }, "a process owns both partitions")
}

// leaseEnd returns when partition p's lease ends if nobody renews it: now
// plus its time to live in Redis.
func leaseEnd(t *testing.T, rdb redis.UniversalClient, p int) time.Time {
	t.Helper()
	now := time.Now()
	ttl, err := rdb.PTTL(context.Background(), fmt.Sprintf("wq:{restart:%d}:lease", p)).Result()
	require.NoError(t, err)
	require.Positive(t, ttl, "partition %d's lease has a TTL", p)
	return now.Add(ttl)
}
