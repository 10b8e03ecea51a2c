package wheelq

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
)

var crashKills = flag.Int("crash.kills", 20, "SIGKILLs of the child in TestCrashKill9 (more for a soak)")

const (
	envChildRedis = "WHEELQ_CRASH_CHILD_REDIS"
	envChildLog   = "WHEELQ_CRASH_CHILD_LOG"
)

// crashConfig is the queue configuration of the crash tests: short leases
// so that a restarted child takes over quickly.
func crashConfig() Config {
	return Config{
		Namespace: "crash", Partitions: 4, LeaseTTL: time.Second,
		Horizon: 2 * time.Second, PollInterval: 20 * time.Millisecond,
		Backoff: func(int, error) time.Duration { return 10 * time.Millisecond },
	}
}

// TestCrashChild is the child process of TestCrashKill9; it does nothing
// unless the parent set its environment. It runs the queue and appends one
// line per handler start to the log: "id due_us start_us attempt pid rerun".
func TestCrashChild(t *testing.T) {
	addr := os.Getenv(envChildRedis)
	if addr == "" {
		t.Skip("child process of TestCrashKill9")
	}
	f, err := os.OpenFile(os.Getenv(envChildLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	require.NoError(t, err)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	q, err := New(rdb, crashConfig())
	require.NoError(t, err)
	require.NoError(t, q.Handle("c", fireLogger(f)))
	require.NoError(t, q.Start(context.Background()))
	select {} // until killed
}

// fireLogger is the child processes' handler: it appends one line per
// start to f, "id due_us start_us attempt pid rerun" (readFires reads
// them), and takes 0-2 ms, so that runs are in flight at a kill
// sometimes.
func fireLogger(f *os.File) Handler {
	var mu sync.Mutex
	return HandlerFunc(func(_ context.Context, j *Job) error {
		rerun := 0
		if j.Rerun {
			rerun = 1
		}
		line := fmt.Sprintf("%s %d %d %d %d %d\n", j.ID, j.Due.UnixMicro(), time.Now().UnixMicro(), j.Attempt, os.Getpid(), rerun)
		mu.Lock()
		_, err := f.WriteString(line) // one write(2): survives SIGKILL
		mu.Unlock()
		if err != nil {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // be in flight sometimes
		return nil
	})
}

type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startChild(t *testing.T, addr, logPath string) *child {
	t.Helper()
	return startTestChild(t, "TestCrashChild", envChildRedis+"="+addr, envChildLog+"="+logPath)
}

// startTestChild starts the test binary again, running only the test
// named test (a child entry that does nothing unless env sets it up),
// with env added to its environment. The child is killed if this process
// dies.
func startTestChild(t *testing.T, test string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.timeout=0")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()
	return c
}

func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

type fire struct {
	dueUs, startUs int64
	attempt        int
	proc           int  // pid of the child that ran it (0: not recorded)
	rerun          bool // Job.Rerun: an earlier run of it was interrupted
}

func readFires(t *testing.T, path string) map[string][]fire {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := map[string][]fire{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 6 {
			continue // a line cut by a kill
		}
		due, _ := strconv.ParseInt(fs[1], 10, 64)
		start, _ := strconv.ParseInt(fs[2], 10, 64)
		att, _ := strconv.Atoi(fs[3])
		proc, _ := strconv.Atoi(fs[4])
		out[fs[0]] = append(out[fs[0]], fire{due, start, att, proc, fs[5] == "1"})
	}
	return out
}

// history is what the parent knows for sure: jobs whose Schedule returned
// nil (with the due time asked for), and jobs whose Cancel returned nil.
type history struct {
	mu        sync.Mutex
	acked     map[string]time.Time
	cancelled map[string]bool
	// maybe holds jobs whose Cancel failed: it may have been carried out
	// with its reply lost (Redis died), so they may or may not run.
	maybe map[string]bool
}

func newHistory() *history {
	return &history{acked: map[string]time.Time{}, cancelled: map[string]bool{}, maybe: map[string]bool{}}
}

// produce schedules jobs (delays up to 1.5s) and cancels some, until stop.
func (h *history) produce(t *testing.T, q *Queue, stop <-chan struct{}) {
	ctx := context.Background()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		id := fmt.Sprintf("j%06d", i)
		due := time.Now().Add(time.Duration(rand.IntN(1500)) * time.Millisecond)
		if _, err := q.Schedule(ctx, "c", nil, ID(id), At(due)); err == nil {
			h.mu.Lock()
			h.acked[id] = due
			h.mu.Unlock()
		}
		if i%7 == 3 {
			victim := fmt.Sprintf("j%06d", i-rand.IntN(3))
			err := q.Cancel(ctx, "c", victim)
			h.mu.Lock()
			switch {
			case err == nil:
				h.cancelled[victim] = true
			case !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrRunning):
				h.maybe[victim] = true
			}
			h.mu.Unlock()
		}
		time.Sleep(2 * time.Millisecond) // pacing: a steady stream of jobs, not a burst
	}
}

// check verifies the whole history against the fire log.
func (h *history) check(t *testing.T, fires map[string][]fire) (duplicates int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, due := range h.acked {
		fs := fires[id]
		if h.cancelled[id] {
			require.Empty(t, fs, "job %s ran although its Cancel returned nil", id)
			continue
		}
		if h.maybe[id] && len(fs) == 0 {
			continue // its failed Cancel was carried out after all
		}
		require.NotEmpty(t, fs, "acknowledged job %s never ran", id)
		for _, f := range fs {
			require.GreaterOrEqual(t, f.startUs, due.UnixMicro(), "job %s ran early", id)
		}
		duplicates += len(fs) - 1
	}
	return duplicates
}

func waitDrained(t *testing.T, rdb redis.UniversalClient, q *Queue) {
	t.Helper()
	ok := assert.Eventually(t, func() bool {
		pending, _, err := q.store.Counts(context.Background())
		return err == nil && pending == 0
	}, 60*time.Second, 20*time.Millisecond, "all pending jobs run")
	if !ok {
		ctx := context.Background()
		for p := range q.store.Partitions() {
			k := q.store.Keys(p)
			pend, _ := rdb.ZRangeWithScores(ctx, k.Pending, 0, 5).Result()
			run, _ := rdb.HGetAll(ctx, k.Running).Result()
			t.Logf("partition %d: pending %v running %v lease %q", p, pend, run, rdb.Get(ctx, k.Lease).Val())
		}
		st, _ := q.Stats(ctx)
		t.Logf("stats %+v now %d", st, time.Now().UnixMicro())
		t.FailNow()
	}
}

// TestCrashKill9 kills the process running the queue with SIGKILL at random
// moments and restarts it, while another process schedules and cancels
// jobs. Every acknowledged job must run at least once, none early, and no
// job whose Cancel returned nil may run.
func TestCrashKill9(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	rdb := srv.Client(t)
	logPath := filepath.Join(t.TempDir(), "fires.log")
	producer, err := New(rdb, crashConfig())
	require.NoError(t, err)
	defer producer.Shutdown(context.Background())

	h := newHistory()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { h.produce(t, producer, stop) })

	c := startChild(t, srv.Addr, logPath)
	for range *crashKills {
		time.Sleep(time.Duration(100+rand.IntN(500)) * time.Millisecond) // pacing: kill at a random moment of the load
		c.kill()
		c = startChild(t, srv.Addr, logPath)
	}
	close(stop)
	wg.Wait()
	waitDrained(t, rdb, producer)
	c.kill()

	fires := readFires(t, logPath)
	dups := h.check(t, fires)
	// A duplicate is a run in flight at a kill, run again by the next
	// process: no process runs the same attempt of a job twice.
	for id, fs := range fires {
		seen := map[[2]int]bool{}
		for _, f := range fs {
			k := [2]int{f.proc, f.attempt}
			require.False(t, seen[k], "job %s: attempt %d ran twice in process %d", id, f.attempt, f.proc)
			seen[k] = true
		}
	}
	h.mu.Lock()
	t.Logf("%d kills, %d jobs acknowledged, %d cancels acknowledged, %d duplicate runs (runs in flight at a kill)",
		*crashKills, len(h.acked), len(h.cancelled), dups)
	h.mu.Unlock()
}

// TestRedisKill9WithAOF kills Redis itself (appendonly yes, appendfsync
// always) while jobs are scheduled and run, and restarts it from its AOF:
// no acknowledged job is lost.
func TestRedisKill9WithAOF(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AOF: true, Fsync: "always"})
	srv.RequireReal(t)
	rdb := srv.Client(t)
	cfg := crashConfig()
	cfg.WriteTimeout = 500 * time.Millisecond
	q, err := New(rdb, cfg)
	require.NoError(t, err)
	defer q.Shutdown(context.Background())
	var mu sync.Mutex
	ran := map[string][]time.Time{}
	require.NoError(t, q.Handle("c", HandlerFunc(func(_ context.Context, j *Job) error {
		mu.Lock()
		ran[j.ID] = append(ran[j.ID], time.Now())
		mu.Unlock()
		return nil
	})))
	require.NoError(t, q.Start(context.Background()))
	<-q.Ready()

	h := newHistory()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { h.produce(t, q, stop) })
	for range 3 {
		time.Sleep(time.Duration(200+rand.IntN(400)) * time.Millisecond) // pacing: Redis up under load for a while
		srv.Kill()
		time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond) // the outage's length
		require.NoError(t, srv.Restart())
	}
	close(stop)
	wg.Wait()
	waitDrained(t, rdb, q)

	mu.Lock()
	fires := map[string][]fire{}
	for id, ts := range ran {
		for _, ts := range ts {
			fires[id] = append(fires[id], fire{startUs: ts.UnixMicro()})
		}
	}
	mu.Unlock()
	// A job cancelled while Redis was being killed may have run (its
	// Cancel could not tell); only nil-returning cancels are checked.
	dups := h.check(t, fires)
	t.Logf("%d jobs acknowledged across 3 Redis kills, %d duplicate runs, %d cancels whose outcome was unknown", len(h.acked), dups, len(h.maybe))
	require.Eventually(t, func() bool {
		st, err := q.Stats(context.Background())
		return err == nil && st.UnstoredOutcomes == 0
	}, 30*time.Second, 10*time.Millisecond, "every outcome reaches Redis once it is back")
}
