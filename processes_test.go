package wheelq

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

// Issue 16: a team of processes shares a namespace's partitions evenly,
// hands them over without losing or repeating a job when one joins or
// leaves, and takes a crashed one's share over when its leases lapse.

const (
	envTeamRedis    = "WHEELQ_TEAM_CHILD_REDIS"
	envTeamLog      = "WHEELQ_TEAM_CHILD_LOG"
	envTeamInstance = "WHEELQ_TEAM_CHILD_INSTANCE"
	teamParts       = 16
)

// teamConfig is the configuration of the team tests' processes: the
// crash tests' (short leases and polls, so that a crash is taken over
// within the test's time) with the default 16 partitions.
func teamConfig(ns, instance string) Config {
	cfg := crashConfig()
	cfg.Namespace, cfg.Partitions, cfg.LeaseTTL, cfg.InstanceID = ns, teamParts, 2*time.Second, instance
	return cfg
}

// TestTeamChild is a worker process of the team tests; it does nothing
// unless the parent set its environment. It logs every start as
// TestCrashChild does, and shuts down gracefully on SIGTERM (as a deploy
// stops a process).
func TestTeamChild(t *testing.T) {
	addr := os.Getenv(envTeamRedis)
	if addr == "" {
		t.Skip("child process of the team tests")
	}
	f, err := os.OpenFile(os.Getenv(envTeamLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	require.NoError(t, err)
	cfg := teamConfig("team", os.Getenv(envTeamInstance))
	// The queue's log, for a parent's failure report (teamLogs).
	qlog, err := os.Create(fmt.Sprintf("%s.queue-%d", os.Getenv(envTeamLog), os.Getpid()))
	require.NoError(t, err)
	defer qlog.Close()
	cfg.Logger = slog.New(slog.NewTextHandler(qlog, &slog.HandlerOptions{Level: slog.LevelInfo}))
	q, err := New(redis.NewClient(&redis.Options{Addr: addr}), cfg)
	require.NoError(t, err)
	require.NoError(t, q.Handle("c", fireLogger(f)))
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	require.NoError(t, q.Start(context.Background()))
	<-term
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, q.Shutdown(ctx))
	os.Exit(0)
}

// team is three worker processes (TestTeamChild) and a producer in this
// process, on a redis-server of their own.
type team struct {
	srv      *redistest.Server
	rdb      redis.UniversalClient
	producer *Queue
	logPath  string
	children []*child
}

// startTeam starts a team and waits until its workers share the
// partitions.
func startTeam(t *testing.T) *team {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	tm := &team{srv: srv, rdb: srv.Client(t), logPath: filepath.Join(t.TempDir(), "fires.log")}
	var err error
	tm.producer, err = New(tm.rdb, teamConfig("team", ""))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tm.producer.Shutdown(context.Background()) })
	for range 3 {
		c := startTeamChild(t, srv.Addr, tm.logPath, "")
		t.Cleanup(c.kill)
		tm.children = append(tm.children, c)
	}
	eventually(t, func() bool { return tm.balanced(3) }, "three processes share the partitions")
	return tm
}

// balanced says whether n processes hold the team's partitions evenly.
func (tm *team) balanced(n int) bool {
	byTok, _ := holders(tm.rdb, "team")
	return balanced(leaseCounts(byTok), n)
}

func startTeamChild(t *testing.T, addr, logPath, instance string) *child {
	t.Helper()
	return startTestChild(t, "TestTeamChild", envTeamRedis+"="+addr, envTeamLog+"="+logPath, envTeamInstance+"="+instance)
}

// term stops the child as a deploy does (SIGTERM: a graceful shutdown)
// and waits for it to exit.
func (c *child) term(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-c.done:
	case <-time.After(wait):
		t.Fatal("the child did not exit after SIGTERM")
	}
}

// teamLogs logs what the team's worker processes' queues logged (beside
// the fires' log): a failure's report.
func teamLogs(t *testing.T, logPath string) {
	t.Helper()
	paths, _ := filepath.Glob(logPath + ".queue-*")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			t.Logf("%s: %s", filepath.Base(p), strings.TrimSpace(line))
		}
	}
}

// holders reads the namespace's partition leases: how many each token
// holds, and how many are free.
func holders(rdb redis.UniversalClient, ns string) (byToken map[string]int, free int) {
	byToken = map[string]int{}
	for p := range teamParts {
		tok, err := rdb.Get(context.Background(), fmt.Sprintf("wq:{%s:%d}:lease", ns, p)).Result()
		if err != nil {
			free++ // redis.Nil; an error counts as unknown, never as held
			continue
		}
		byToken[tok]++
	}
	return byToken, free
}

// balanced says whether n processes hold every partition, evenly (the
// most and the fewest differ by one at most).
func balanced(counts []int, n int) bool {
	if len(counts) != n {
		return false
	}
	sum := 0
	for _, c := range counts {
		sum += c
	}
	return sum == teamParts && slices.Max(counts)-slices.Min(counts) <= 1
}

func leaseCounts(byToken map[string]int) []int {
	var out []int
	for _, c := range byToken {
		out = append(out, c)
	}
	return out
}

// teamRuns records the runs of in-process workers as fires (proc: the
// worker's index).
type teamRuns struct {
	mu    sync.Mutex
	fires map[string][]fire
}

func (r *teamRuns) worker(t *testing.T, rdb redis.UniversalClient, ns string, idx int) *Queue {
	t.Helper()
	q, err := New(rdb, teamConfig(ns, ""))
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	require.NoError(t, q.Handle("c", HandlerFunc(func(_ context.Context, j *Job) error {
		start := time.Now().UnixMicro()
		r.mu.Lock()
		r.fires[j.ID] = append(r.fires[j.ID], fire{dueUs: j.Due.UnixMicro(), startUs: start, attempt: j.Attempt, proc: idx})
		r.mu.Unlock()
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // be in flight at a hand-over sometimes
		return nil
	})))
	require.NoError(t, q.Start(context.Background()))
	return q
}

// lateness returns the 50th and 99th percentiles and the maximum of the
// runs' lateness (start - due).
func lateness(fires map[string][]fire) (p50, p99, most time.Duration) {
	var ls []time.Duration
	for _, fs := range fires {
		for _, f := range fs {
			ls = append(ls, time.Duration(f.startUs-f.dueUs)*time.Microsecond)
		}
	}
	if len(ls) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ls)
	return ls[len(ls)/2], ls[len(ls)*99/100], ls[len(ls)-1]
}

// TestTeamBalance: 1 to 5 processes on a namespace each own an even share
// of its 16 partitions (not the first to start all of them, the others
// idle); when one shuts down, the others take its share
// over. It logs the time from the last start to a balanced namespace and
// from a graceful shutdown to the take-over (docs/benchmarks-history.md).
func TestTeamBalance(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	runs := &teamRuns{fires: map[string][]fire{}}
	for n := 1; n <= 5; n++ {
		ns := fmt.Sprintf("balance%d", n)
		var qs []*Queue
		for i := range n {
			qs = append(qs, runs.worker(t, rdb, ns, i))
		}
		start := time.Now()
		owned := func(qs []*Queue) []int {
			var out []int
			for _, q := range qs {
				out = append(out, len(q.Owned()))
			}
			return out
		}
		eventually(t, func() bool { return balanced(owned(qs), n) }, fmt.Sprintf("%d processes share the partitions evenly", n))
		counts := owned(qs)
		t.Logf("%d processes: balanced %v after the last start; owned %v (most %d, fewest %d)",
			n, time.Since(start).Round(time.Millisecond), counts, slices.Max(counts), slices.Min(counts))
		eventually(t, func() bool {
			st, err := qs[0].Stats(context.Background())
			return err == nil && st.Members == n
		}, "Stats.Members counts the live workers")
		if n == 1 {
			continue
		}
		stopped := time.Now()
		require.NoError(t, qs[0].Shutdown(context.Background()))
		eventually(t, func() bool { return balanced(owned(qs[1:]), n-1) }, "the others take a leaving process's share over")
		t.Logf("%d processes: graceful shutdown of one taken over in %v", n, time.Since(stopped).Round(time.Millisecond))
	}
}

// TestTeamJoinLeaveWhileFiring: workers join and leave (gracefully) while
// jobs fire. A partition handed over keeps its lease until the outcomes
// of the runs claimed under it are stored, so no job runs twice and none
// is lost; none runs early. The lateness of every run is logged.
func TestTeamJoinLeaveWhileFiring(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	rdb := srv.Client(t)
	const ns = "joinleave"
	producer, err := New(rdb, teamConfig(ns, ""))
	require.NoError(t, err)
	defer producer.Shutdown(context.Background())
	runs := &teamRuns{fires: map[string][]fire{}}

	h := newHistory()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { h.produce(t, producer, stop) })
	workers := []*Queue{runs.worker(t, rdb, ns, 0)}
	step := func(what string, f func()) {
		time.Sleep(time.Duration(300+rand.IntN(300)) * time.Millisecond) // pacing: jobs fire between the steps
		f()
		t.Log(what)
	}
	step("worker 1 joins", func() { workers = append(workers, runs.worker(t, rdb, ns, 1)) })
	step("worker 2 joins", func() { workers = append(workers, runs.worker(t, rdb, ns, 2)) })
	step("worker 0 leaves", func() { require.NoError(t, workers[0].Shutdown(context.Background())) })
	step("worker 3 joins", func() { workers = append(workers, runs.worker(t, rdb, ns, 3)) })
	step("worker 1 leaves", func() { require.NoError(t, workers[1].Shutdown(context.Background())) })
	step("worker 4 joins", func() { workers = append(workers, runs.worker(t, rdb, ns, 4)) })
	step("producing stops", func() { close(stop) })
	wg.Wait()
	waitDrained(t, rdb, producer)

	runs.mu.Lock()
	defer runs.mu.Unlock()
	dups := h.check(t, runs.fires)
	require.Zero(t, dups, "a graceful hand-over runs no job twice")
	p50, p99, most := lateness(runs.fires)
	t.Logf("%d jobs acknowledged, %d runs; lateness p50 %v p99 %v max %v across 4 joins and 2 leaves",
		len(h.acked), len(runs.fires), p50, p99, most)
}

// TestTeamKill9OneOfThree: one of three worker processes is killed with
// SIGKILL under load. Its partitions are taken over when its leases
// lapse (LeaseTTL): nothing acknowledged is lost, nothing runs early, and
// a job runs twice only if it was in flight in the killed process.
func TestTeamKill9OneOfThree(t *testing.T) {
	t.Parallel()
	tm := startTeam(t)
	cs, rdb := tm.children, tm.rdb
	h := newHistory()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { h.produce(t, tm.producer, stop) })
	time.Sleep(time.Second) // pacing: jobs in flight at the kill
	killed := time.Now()
	cs[0].kill()
	eventually(t, func() bool { return tm.balanced(2) }, "two processes take the killed one's share over")
	t.Logf("kill -9 of one of three: its partitions taken over %v after the kill (LeaseTTL 2s)", time.Since(killed).Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond) // pacing: load goes on after the take-over
	close(stop)
	wg.Wait()
	waitDrained(t, rdb, tm.producer)

	fires := readFires(t, tm.logPath)
	dups := h.check(t, fires)
	killedPid := cs[0].cmd.Process.Pid
	for id, fs := range fires {
		if len(fs) > 1 {
			require.Equal(t, killedPid, fs[0].proc, "job %s ran twice, the first time not in the killed process", id)
		}
	}
	p50, p99, most := lateness(fires)
	t.Logf("%d jobs acknowledged, %d duplicate runs (in flight at the kill); lateness p50 %v p99 %v max %v",
		len(h.acked), dups, p50, p99, most)
}

// TestTeamRollingRestart restarts three worker processes one by one, the
// way a deploy does (SIGTERM, wait for the exit, start the new version,
// wait until it has its share), while jobs fire: every job runs exactly
// once, none early; the lateness of every job during it is logged.
func TestTeamRollingRestart(t *testing.T) {
	t.Parallel()
	tm := startTeam(t)
	cs, rdb, logPath := tm.children, tm.rdb, tm.logPath
	h := newHistory()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { h.produce(t, tm.producer, stop) })
	for i := range cs {
		time.Sleep(300 * time.Millisecond) // pacing: jobs fire between restarts
		began := time.Now()
		cs[i].term(t)
		cs[i] = startTeamChild(t, tm.srv.Addr, logPath, "")
		t.Cleanup(cs[i].kill)
		eventually(t, func() bool { return tm.balanced(3) }, "the restarted process gets its share")
		t.Logf("process %d restarted and balanced in %v", i, time.Since(began).Round(time.Millisecond))
	}
	time.Sleep(300 * time.Millisecond) // pacing: load goes on after the last restart
	close(stop)
	wg.Wait()
	waitDrained(t, rdb, tm.producer)

	fires := readFires(t, tm.logPath)
	dups := h.check(t, fires)
	var twice []string
	for id, fs := range fires {
		if len(fs) > 1 {
			twice = append(twice, id)
		}
	}
	if dups > 0 {
		for _, id := range twice {
			t.Logf("%s ran %+v", id, fires[id])
		}
		teamLogs(t, tm.logPath)
	}
	require.Zero(t, dups, "a rolling restart runs no job twice: %s", strings.Join(twice, ", "))
	p50, p99, most := lateness(fires)
	t.Logf("rolling restart of 3: %d jobs acknowledged, all run once; lateness p50 %v p99 %v max %v", len(h.acked), p50, p99, most)
}

// TestStartGateDropsTasksOfReleasedPartitions: a claim whose epoch was
// read just after a hand-over began (the claimer had checked ownership
// and marked the job in flight just before) carries the new epoch while
// the partition is owned by no one here. The start gate used to put such
// a task in the wait for a lease renewal, where it stayed, in flight, for
// ever: the hand-over waited for it, and the partition's new owner never
// got the lease. It is dropped now (its claim mark is cleared by the new
// owner's take-over).
func TestStartGateDropsTasksOfReleasedPartitions(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	q, err := New(srv.Client(t), Config{Partitions: 2})
	require.NoError(t, err) // not started: no partition is owned
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	key := "t/x"
	p := q.store.PartitionOf(key)
	q.inflight.keys[key] = struct{}{}
	tk := q.newTask(key, nil, time.Now().Add(-time.Second), p, q.recov.Epoch(p), true)
	now, wall := time.Now(), time.Now()
	require.False(t, q.gate.mayStart(tk, now, wall))
	q.gate.mu.Lock()
	waiting := len(q.gate.leaseWait)
	q.gate.mu.Unlock()
	require.Zero(t, waiting, "a task of a partition not owned here waits for no renewal")
	require.False(t, sink{q}.Busy(p), "and is not in flight any more")
	require.EqualValues(t, 1, q.stats.dropped.Load())
}
