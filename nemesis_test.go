package wheelq

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	ossignal "os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/faultproxy"
	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/wheel"
)

// TestNemesis is a randomized soak in the spirit of Jepsen: three
// queue processes (children of the test binary, each reaching Redis through
// a fault proxy of its own) run the jobs that producers in the parent
// schedule, cancel and reschedule, while a nemesis injects the faults of the
// fault model at random: kill -9 of a child, SIGSTOP past its lease, a
// one-sided partition, slow and lost replies, kill -9 of Redis (AOF,
// appendfsync always), steps of a child's wall clock. A third of the jobs
// are of a pulled topic, reserved and acked by consumers in the children
// (a reservation counts as a run). Every handler start and every
// reservation is logged by the child; the history is then checked:
// nothing acknowledged lost, nothing early by the running process's own
// clock, nothing run after its Cancel returned nil, no duplicate run that
// no fault explains.
//
// A soak: go test -run 'TestNemesis$' -nemesis.duration 30m .
var nemesisDuration = flag.Duration("nemesis.duration", 45*time.Second,
	"how long TestNemesis produces jobs and injects faults (the test takes about 15 s more to settle and check)")

const (
	envNemAddr  = "WHEELQ_NEMESIS_CHILD_REDIS" // the child's proxy
	envNemLog   = "WHEELQ_NEMESIS_CHILD_LOG"
	envNemLease = "WHEELQ_NEMESIS_CHILD_LEASE"
	envNemSlot  = "WHEELQ_NEMESIS_CHILD_SLOT"
	envNemReady = "WHEELQ_NEMESIS_CHILD_READY" // a file the child creates once it handles the step signals

	nemTopic    = "n"
	nemPulled   = "np" // a third of the jobs: pulled by consumers in the children (Reserve, Ack)
	nemTTR      = 3 * time.Second
	nemChildren = 3
	nemStep     = 2 * time.Second // one wall-clock step (SIGUSR1: +, SIGUSR2: -)
	nemMaxSkew  = 4 * time.Second // the nemesis keeps a child's offset within ±this
)

// nemesisConfig is the configuration of every process of the test: short
// leases, so that take-overs happen within the faults' durations.
func nemesisConfig(lease time.Duration) Config {
	return Config{
		Namespace: "nemesis", Partitions: 8, LeaseTTL: lease,
		Horizon: 2 * time.Second, PollInterval: 20 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond,
		Backoff:      func(int, error) time.Duration { return 10 * time.Millisecond },
	}
}

// steppedClock is the real clock whose wall reading the parent steps with
// signals (SIGUSR1: +2 s, SIGUSR2: -2 s), as an administrator or a bad NTP
// server sets a system clock: Now (intervals, leases, the wheel) is not
// affected, Wall is.
type steppedClock struct {
	base wheel.Clock
	st   atomic.Pointer[stepState]
}

// stepState is the clock's offset, with the offset before the last step
// and when (real unix µs) that step was made, so that the checker can tell
// a run whose handler read the clock just after a step.
type stepState struct {
	off, prev time.Duration
	stepUs    int64
}

var (
	_ wheel.Clock     = (*steppedClock)(nil)
	_ wheel.WallClock = (*steppedClock)(nil)
)

func newSteppedClock() *steppedClock {
	c := &steppedClock{base: wheel.RealClock()}
	c.st.Store(&stepState{})
	return c
}

func (c *steppedClock) Now() time.Time            { return c.base.Now() }
func (c *steppedClock) NewSleeper() wheel.Sleeper { return c.base.NewSleeper() }
func (c *steppedClock) Wall() time.Time           { return time.Now().Round(0).Add(c.st.Load().off) }

// read returns the wall reading, the real time it was taken at, and the
// state it was taken in.
func (c *steppedClock) read() (wall, real time.Time, st *stepState) {
	st = c.st.Load()
	real = time.Now().Round(0)
	return real.Add(st.off), real, st
}

// step moves the wall reading by d. Only the signal goroutine calls it.
func (c *steppedClock) step(d time.Duration) {
	old := c.st.Load()
	c.st.Store(&stepState{off: old.off + d, prev: old.off, stepUs: time.Now().UnixMicro()})
}

// TestNemesisChild is a queue process of TestNemesis; it does nothing
// unless the parent set its environment. It appends one line per handler
// start to the log, with one write(2):
//
//	id due_us wall_us attempt pid real_us off_us prev_off_us step_us slot
//
// wall_us is the start by the process's own (stepped) wall clock, real_us
// by the unstepped one; off_us the clock's offset, prev_off_us the offset
// before its last step, made at step_us (0: none).
func TestNemesisChild(t *testing.T) {
	addr := os.Getenv(envNemAddr)
	if addr == "" {
		t.Skip("child process of TestNemesis")
	}
	clk := newSteppedClock()
	sigs := make(chan os.Signal, 16)
	ossignal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() { // until killed
		for s := range sigs {
			if s == syscall.SIGUSR1 {
				clk.step(nemStep)
			} else {
				clk.step(-nemStep)
			}
		}
	}()
	require.NoError(t, os.WriteFile(os.Getenv(envNemReady), nil, 0o644))
	lease, err := time.ParseDuration(os.Getenv(envNemLease))
	require.NoError(t, err)
	slot := os.Getenv(envNemSlot)
	f, err := os.OpenFile(os.Getenv(envNemLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	require.NoError(t, err)
	// Default retries, contexts honoured (so the queue's deadlines bound
	// every call, see docs/design.md).
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	cfg := nemesisConfig(lease)
	cfg.Clock = clk
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	q, err := New(rdb, cfg)
	require.NoError(t, err)
	pid := os.Getpid()
	require.NoError(t, q.Handle(nemTopic, HandlerFunc(func(_ context.Context, j *Job) error {
		wall, real, st := clk.read()
		line := fmt.Sprintf("%s %d %d %d %d %d %d %d %d %s\n", j.ID, j.Due.UnixMicro(), wall.UnixMicro(), j.Attempt, pid,
			real.UnixMicro(), st.off.Microseconds(), st.prev.Microseconds(), st.stepUs, slot)
		if _, err := f.WriteString(line); err != nil { // one write(2): survives SIGKILL
			return err
		}
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // be in flight sometimes
		return nil
	})))
	require.NoError(t, q.Pull(nemPulled))
	// Start fails while Redis cannot be reached (a restart into a fault):
	// try again until it works.
	for deadline := time.Now().Add(time.Minute); ; {
		err := q.Start(context.Background())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("start: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // retry pacing: Redis is not reachable yet
	}
	// Consumers of the pulled topic: each reservation is logged as a run
	// (the wall clock read when Reserve returned), then acked; an ack that
	// fails is left to lapse (the job comes back after nemTTR).
	for range 2 {
		go func() {
			for {
				rs, err := q.Reserve(context.Background(), ReserveOptions{Topics: []string{nemPulled}, Max: 5, TTR: nemTTR})
				if err != nil {
					time.Sleep(20 * time.Millisecond) // retry pacing after an error (a fault is on)
					continue
				}
				wall, real, st := clk.read()
				for _, r := range rs {
					line := fmt.Sprintf("%s %d %d %d %d %d %d %d %d %s\n", r.ID, r.Job.Due.UnixMicro(), wall.UnixMicro(), r.Job.Attempt, pid,
						real.UnixMicro(), st.off.Microseconds(), st.prev.Microseconds(), st.stepUs, slot)
					if _, err := f.WriteString(line); err != nil {
						continue // not logged: not acked either (it lapses and comes back)
					}
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // be in flight sometimes
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					_ = q.Ack(ctx, r.Receipt)
					cancel()
				}
			}
		}()
	}
	select {} // until killed
}

// nemProc is one child process.
type nemProc struct {
	slot    int
	pid     int
	cmd     *exec.Cmd
	errPath string
	started time.Time
	done    chan struct{} // closed when it exited

	ended  time.Time // guarded by nemesis.mu: when it was killed
	killed bool      // guarded by nemesis.mu
}

// nemFault is one fault the nemesis injected.
type nemFault struct {
	kind       string // kill, pause, partition, slow, lost, redis-kill, step
	slot       int    // the child slot, -1 for Redis
	pid        int    // the process at the start (a kill's or a pause's victim)
	start, end time.Time
	detail     string
}

// nemOp is one call of a producer.
type nemOp struct {
	kind      byte // 's' Schedule, 'c' Cancel, 'r' Reschedule
	call, ret int64
	dueUs     int64 // 's', 'r': the due time asked for, as stored (rounded up)
	res       nemRes
	err       string
}

type nemRes int

const (
	resOK       nemRes = iota // nil
	resNotFound               // ErrNotFound
	resRunning                // ErrRunning: cancelled or moved, a run goes on
	resDup                    // ErrDuplicate
	resMaybe                  // any other error: the outcome is unknown
)

func (r nemRes) String() string {
	return [...]string{"nil", "ErrNotFound", "ErrRunning", "ErrDuplicate", "unknown"}[r]
}

// nemJob is the history of one job: its calls in order (a job belongs to
// one producer goroutine, so its calls never overlap).
type nemJob struct {
	id    string
	topic string // nemTopic (a handler runs it) or nemPulled (a consumer reserves it)
	ops   []nemOp
}

// nemRun is one line of the run log.
type nemRun struct {
	id                    string
	dueUs, wallUs         int64
	attempt, pid, slot    int
	realUs, offUs, prevUs int64
	stepUs                int64
	gate                  int64 // the earliest real time its start gate may have passed
}

type nemesis struct {
	t       *testing.T
	srv     *redistest.Server
	dir     string
	logPath string
	lease   time.Duration
	t0      time.Time
	proxies [nemChildren]*faultproxy.Proxy

	mu        sync.Mutex
	procs     [nemChildren]*nemProc // the running process per slot (nil while down)
	all       []*nemProc
	faults    []nemFault
	offset    [nemChildren]time.Duration // the wall offset sent to the slot's process
	busyProc  [nemChildren]bool
	busyNet   [nemChildren]bool
	busyRedis bool
	spawned   int

	jobsMu sync.Mutex
	jobs   map[string]*nemJob
}

func nemDur(lo, hi time.Duration) time.Duration { return lo + rand.N(hi-lo) }

func (n *nemesis) rel(us int64) string {
	return fmt.Sprintf("%+.3fs", float64(us-n.t0.UnixMicro())/1e6)
}

// spawn starts a child in slot and makes it the slot's process.
func (n *nemesis) spawn(slot int) (*nemProc, error) {
	n.mu.Lock()
	n.spawned++
	k := n.spawned
	n.mu.Unlock()
	errPath := filepath.Join(n.dir, fmt.Sprintf("child-%d-%03d.err", slot, k))
	ef, err := os.Create(errPath)
	if err != nil {
		return nil, err
	}
	defer ef.Close() // the child has its own descriptor
	ready := filepath.Join(n.dir, fmt.Sprintf("ready-%03d", k))
	cmd := exec.Command(os.Args[0], "-test.run=^TestNemesisChild$", "-test.timeout=0")
	cmd.Env = append(os.Environ(),
		envNemAddr+"="+n.proxies[slot].Addr(), envNemLog+"="+n.logPath, envNemLease+"="+n.lease.String(),
		envNemSlot+"="+strconv.Itoa(slot), envNemReady+"="+ready)
	cmd.Stdout, cmd.Stderr = ef, ef
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &nemProc{slot: slot, pid: cmd.Process.Pid, cmd: cmd, errPath: errPath, started: time.Now(), done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		n.mu.Lock()
		killed := p.killed
		n.mu.Unlock()
		if !killed {
			b, _ := os.ReadFile(errPath)
			n.t.Errorf("nemesis: child %d (slot %d) exited on its own: %v\n%s", p.pid, slot, err, nemTail(b, 3000))
		}
		close(p.done)
	}()
	// Step signals only once it handles them (their default kills).
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
	}
	n.mu.Lock()
	n.procs[slot] = p
	n.all = append(n.all, p)
	n.offset[slot] = 0
	n.mu.Unlock()
	return p, nil
}

// kill kills p with SIGKILL (it may be stopped) and waits for it.
func (n *nemesis) kill(p *nemProc) {
	n.mu.Lock()
	p.killed = true
	if p.ended.IsZero() {
		p.ended = time.Now()
	}
	if n.procs[p.slot] == p {
		n.procs[p.slot] = nil
	}
	n.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		n.t.Errorf("nemesis: child %d did not die", p.pid)
	}
}

func (n *nemesis) record(f nemFault) {
	n.mu.Lock()
	n.faults = append(n.faults, f)
	n.mu.Unlock()
}

// pick chooses a fault whose target is free, reserves the target, and
// returns the fault to run (nil: none now).
func (n *nemesis) pick() func() {
	n.mu.Lock()
	defer n.mu.Unlock()
	slot := rand.IntN(nemChildren)
	r := rand.IntN(12)
	switch {
	case r < 2: // kill -9, restart after 0.2-1 s
		if n.busyProc[slot] || n.procs[slot] == nil {
			return nil
		}
		n.busyProc[slot] = true
		return func() {
			defer n.free(&n.busyProc[slot])
			n.faultKill(slot)
		}
	case r < 4: // SIGSTOP for 1-3 s
		if n.busyProc[slot] || n.procs[slot] == nil {
			return nil
		}
		n.busyProc[slot] = true
		return func() {
			defer n.free(&n.busyProc[slot])
			n.faultPause(slot)
		}
	case r < 6: // wall clock step
		if n.busyProc[slot] || n.procs[slot] == nil {
			return nil
		}
		n.busyProc[slot] = true
		return func() {
			defer n.free(&n.busyProc[slot])
			n.faultStep(slot)
		}
	case r < 11: // the child's link: partition, slow or lost replies
		if n.busyNet[slot] {
			return nil
		}
		n.busyNet[slot] = true
		kind := []string{"partition", "partition", "slow", "slow", "lost"}[r-6]
		return func() {
			defer n.free(&n.busyNet[slot])
			n.faultNet(slot, kind)
		}
	default: // kill -9 of Redis, restart from its AOF
		if n.busyRedis {
			return nil
		}
		n.busyRedis = true
		return func() {
			defer n.free(&n.busyRedis)
			n.faultRedis()
		}
	}
}

func (n *nemesis) free(b *bool) {
	n.mu.Lock()
	*b = false
	n.mu.Unlock()
}

func (n *nemesis) current(slot int) *nemProc {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.procs[slot]
}

func (n *nemesis) faultKill(slot int) {
	p := n.current(slot)
	start := time.Now()
	n.kill(p)
	time.Sleep(nemDur(200*time.Millisecond, time.Second)) // the fault: the slot stays dead this long
	np, err := n.spawn(slot)
	detail := "restart failed"
	if err != nil {
		n.t.Errorf("nemesis: restart of slot %d: %v", slot, err)
	} else {
		detail = fmt.Sprintf("restarted as %d", np.pid)
	}
	n.record(nemFault{kind: "kill", slot: slot, pid: p.pid, start: start, end: time.Now(), detail: detail})
}

func (n *nemesis) faultPause(slot int) {
	p := n.current(slot)
	d := nemDur(time.Second, 3*time.Second)
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(d) // the fault: stopped this long
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	n.record(nemFault{kind: "pause", slot: slot, pid: p.pid, start: start, end: time.Now(), detail: "SIGSTOP " + d.Round(time.Millisecond).String()})
}

func (n *nemesis) faultStep(slot int) {
	n.mu.Lock()
	p, off := n.procs[slot], n.offset[slot]
	d := nemStep
	if off >= nemMaxSkew || (off > -nemMaxSkew && rand.IntN(2) == 0) {
		d = -nemStep
	}
	n.offset[slot] = off + d
	n.mu.Unlock()
	sig := syscall.SIGUSR1
	if d < 0 {
		sig = syscall.SIGUSR2
	}
	now := time.Now()
	_ = p.cmd.Process.Signal(sig)
	n.record(nemFault{kind: "step", slot: slot, pid: p.pid, start: now, end: now, detail: fmt.Sprintf("%+v (offset now %+v)", d, off+d)})
	time.Sleep(nemDur(100*time.Millisecond, 500*time.Millisecond)) // pacing: let the step show before the next fault
}

func (n *nemesis) faultNet(slot int, kind string) {
	px := n.proxies[slot]
	pid := 0
	if p := n.current(slot); p != nil {
		pid = p.pid
	}
	var d time.Duration
	var detail string
	start := time.Now()
	switch kind {
	case "partition":
		d = nemDur(time.Second, 4*time.Second)
		px.Blackhole(true)
		time.Sleep(d) // the fault: partitioned this long
		px.Blackhole(false)
		detail = "blackhole " + d.Round(time.Millisecond).String()
	case "slow":
		delay := nemDur(200*time.Millisecond, 2*time.Second)
		d = nemDur(time.Second, 4*time.Second)
		px.SetReplyDelay(delay)
		time.Sleep(d) // the fault: slow this long
		px.SetReplyDelay(0)
		detail = fmt.Sprintf("replies %v late for %v", delay.Round(time.Millisecond), d.Round(time.Millisecond))
	case "lost":
		d = nemDur(100*time.Millisecond, 800*time.Millisecond)
		px.DropReplies(true)
		time.Sleep(d) // the fault: replies lost this long
		px.DropReplies(false)
		detail = "replies dropped " + d.Round(time.Millisecond).String()
	}
	n.record(nemFault{kind: kind, slot: slot, pid: pid, start: start, end: time.Now(), detail: detail})
}

func (n *nemesis) faultRedis() {
	start := time.Now()
	n.srv.Kill()
	time.Sleep(nemDur(200*time.Millisecond, time.Second)) // the fault: Redis down this long
	var err error
	for range 10 {
		if err = n.srv.Restart(); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // retry pacing before another restart
	}
	if err != nil {
		n.t.Errorf("nemesis: Redis restart: %v", err)
	}
	n.record(nemFault{kind: "redis-kill", slot: -1, start: start, end: time.Now(), detail: "kill -9, restart from the AOF"})
}

// nemDo runs one producer call and records its outcome.
func nemDo(kind byte, dueUs int64, f func(ctx context.Context) error) nemOp {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	op := nemOp{kind: kind, dueUs: dueUs, call: time.Now().UnixMicro()}
	err := f(ctx)
	op.ret = time.Now().UnixMicro()
	switch {
	case err == nil:
		op.res = resOK
	case errors.Is(err, ErrNotFound):
		op.res = resNotFound
	case errors.Is(err, ErrRunning):
		op.res = resRunning
	case errors.Is(err, ErrDuplicate):
		op.res = resDup
	default:
		op.res = resMaybe
	}
	if err != nil {
		op.err = err.Error()
	}
	return op
}

// produce schedules about 10 jobs a second due within 3 s, and cancels or
// reschedules some of its recent jobs that are not (long) due, until the
// deadline.
func (n *nemesis) produce(g int, q *Queue, until time.Time) {
	type pend struct {
		j   *nemJob
		due time.Time // as last asked for
	}
	var mine []pend // acknowledged, not yet cancelled, most recent last
	pick := func() int {
		var ks []int
		for k := range mine {
			if time.Until(mine[k].due) > -300*time.Millisecond { // some race with their runs
				ks = append(ks, k)
			}
		}
		if len(ks) == 0 {
			return -1
		}
		return ks[rand.IntN(len(ks))]
	}
	for i := 0; i < 1_000_000 && time.Now().Before(until); i++ {
		j := &nemJob{id: fmt.Sprintf("g%d-%05d", g, i), topic: nemTopic}
		if i%3 == 2 {
			j.topic = nemPulled
		}
		n.jobsMu.Lock()
		n.jobs[j.id] = j
		n.jobsMu.Unlock()
		due := time.Now().Add(nemDur(0, 3*time.Second))
		op := nemDo('s', ceilMicro(due), func(ctx context.Context) error {
			_, err := q.Schedule(ctx, j.topic, nil, ID(j.id), At(due))
			return err
		})
		j.ops = append(j.ops, op)
		if op.res == resOK {
			mine = append(mine, pend{j, due})
			if len(mine) > 40 {
				mine = slices.Delete(mine, 0, len(mine)-40)
			}
		}
		if k := pick(); k >= 0 && rand.IntN(100) < 15 {
			v := mine[k].j
			v.ops = append(v.ops, nemDo('c', 0, func(ctx context.Context) error { return q.Cancel(ctx, v.topic, v.id) }))
			mine = slices.Delete(mine, k, k+1) // never touched again
		}
		if k := pick(); k >= 0 && rand.IntN(100) < 20 {
			v := mine[k].j
			due := time.Now().Add(nemDur(0, 4*time.Second))
			v.ops = append(v.ops, nemDo('r', ceilMicro(due), func(ctx context.Context) error { return q.Reschedule(ctx, v.topic, v.id, due) }))
			mine[k].due = due
		}
		time.Sleep(nemDur(60*time.Millisecond, 140*time.Millisecond)) // pacing: the workload's rate
	}
}

func TestNemesis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AOF: true, Fsync: "always"})
	srv.RequireReal(t)
	n := &nemesis{
		t: t, srv: srv, dir: t.TempDir(), t0: time.Now(), jobs: map[string]*nemJob{},
		lease: time.Second + time.Duration(rand.IntN(11))*100*time.Millisecond,
	}
	n.logPath = filepath.Join(n.dir, "runs.log")
	for i := range n.proxies {
		n.proxies[i] = faultproxy.Start(t, srv.Addr)
	}
	// Registered after the proxies and Redis: runs before they close.
	t.Cleanup(func() {
		n.mu.Lock()
		all := slices.Clone(n.all)
		n.mu.Unlock()
		for _, p := range all {
			n.kill(p)
		}
	})
	// The producers' client goes straight to Redis: only Redis kills hit it.
	prdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = prdb.Close() })
	producer, err := New(prdb, nemesisConfig(n.lease))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = producer.Shutdown(ctx)
	})
	for slot := range nemChildren {
		_, err := n.spawn(slot)
		require.NoError(t, err)
	}

	until := time.Now().Add(*nemesisDuration)
	var prod sync.WaitGroup
	for g := range 3 {
		prod.Go(func() { n.produce(g, producer, until) })
	}
	var faults sync.WaitGroup
	var active atomic.Int32
	for i := 0; i < 1_000_000 && time.Now().Before(until); i++ {
		time.Sleep(nemDur(200*time.Millisecond, 1200*time.Millisecond)) // pacing: time between faults
		if active.Load() >= 2 || !time.Now().Before(until) {
			continue
		}
		if f := n.pick(); f != nil {
			active.Add(1)
			faults.Go(func() { defer active.Add(-1); f() })
		}
	}
	prod.Wait()
	faults.Wait()
	settled := time.Now()

	// Heal: every link clear, every child running (faults are over).
	for _, px := range n.proxies {
		px.Blackhole(false)
		px.DropReplies(false)
		px.SetReplyDelay(0)
	}
	for slot := range nemChildren {
		if n.current(slot) == nil {
			_, err := n.spawn(slot)
			require.NoError(t, err)
		}
	}
	rdb := srv.Client(t)
	drained := n.waitDrained(rdb, producer, 2*time.Minute)
	// Late runs (a stale owner) would show up within a lease or two.
	time.Sleep(2*n.lease + 500*time.Millisecond)
	n.mu.Lock()
	all := slices.Clone(n.all)
	n.mu.Unlock()
	for _, p := range all {
		n.kill(p)
	}
	t.Logf("nemesis: faults for %v, settled in %v (drained: %v), lease %v", *nemesisDuration, time.Since(settled).Round(time.Millisecond), drained, n.lease)
	n.checkChildLogs()
	n.check()
}

// waitDrained waits until no job is pending (or d passed) and reports
// whether none is.
func (n *nemesis) waitDrained(rdb redis.UniversalClient, q *Queue, d time.Duration) bool {
	ctx := context.Background()
	count := func() (pending, running int64) {
		for p := range q.store.Partitions() {
			k := q.store.Keys(p)
			pc, err := rdb.ZCard(ctx, k.Pending).Result()
			rc, err2 := rdb.HLen(ctx, k.Running).Result()
			if err != nil || err2 != nil {
				return -1, -1
			}
			pending += pc
			running += rc
		}
		return pending, running
	}
	deadline := time.Now().Add(d)
	for {
		pending, running := count()
		if pending == 0 {
			if running != 0 {
				n.t.Logf("nemesis: pending set empty, %d claim marks left", running)
			}
			return true
		}
		if time.Now().After(deadline) {
			n.t.Errorf("nemesis: %d jobs still pending (%d claim marks) after %v", pending, running, d)
			for p := range q.store.Partitions() {
				k := q.store.Keys(p)
				pend, _ := rdb.ZRangeWithScores(ctx, k.Pending, 0, 5).Result()
				run, _ := rdb.HGetAll(ctx, k.Running).Result()
				n.t.Logf("partition %d: pending %v running %v lease %q", p, pend, run, rdb.Get(ctx, k.Lease).Val())
			}
			return false
		}
		time.Sleep(50 * time.Millisecond) // poll pacing (a deadline bounds it)
	}
}

// checkChildLogs fails on a data race or a panic in a child.
func (n *nemesis) checkChildLogs() {
	for _, p := range n.all {
		b, err := os.ReadFile(p.errPath)
		if err != nil {
			continue
		}
		s := string(b)
		for _, bad := range []string{"DATA RACE", "panic:", "fatal error:"} {
			if i := strings.Index(s, bad); i >= 0 {
				n.t.Errorf("nemesis: child %d (slot %d) logged %q:\n%s", p.pid, p.slot, bad, nemTail([]byte(s[i:]), 6000))
				break
			}
		}
	}
}

func nemTail(b []byte, limit int) string {
	if len(b) > limit {
		b = b[:limit]
	}
	return string(b)
}

func (n *nemesis) readRuns() []nemRun {
	f, err := os.Open(n.logPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(n.t, err)
	defer f.Close()
	var out []nemRun
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 10 {
			continue // a line cut by a kill
		}
		var v [9]int64
		ok := true
		for i := range v {
			x, err := strconv.ParseInt(fs[i+1], 10, 64)
			ok = ok && err == nil
			v[i] = x
		}
		if !ok {
			continue
		}
		out = append(out, nemRun{id: fs[0], dueUs: v[0], wallUs: v[1], attempt: int(v[2]), pid: int(v[3]),
			realUs: v[4], offUs: v[5], prevUs: v[6], stepUs: v[7], slot: int(v[8])})
	}
	return out
}

// gateOf returns the earliest real time at which r's start gate may have
// passed: the handler logs just after the gate, a margin (LeaseTTL/10, the
// design's drift margin) aside, unless the process was stopped in between.
func (n *nemesis) gateOf(r nemRun) int64 {
	slack := (n.lease / 10).Microseconds()
	g := r.realUs - slack
	for changed := true; changed; {
		changed = false
		for _, f := range n.faults {
			if f.kind != "pause" || f.pid != r.pid {
				continue
			}
			s, e := f.start.UnixMicro(), f.end.UnixMicro()
			if s < r.realUs && e >= g && s-slack < g {
				g, changed = s-slack, true
			}
		}
	}
	return g
}

// dues returns the due times that may have been the job's current one at
// some moment of [g, r]: the last one acknowledged before g, those of
// calls in flight then, and those of calls whose outcome is unknown (or that
// moved a job with a run going on) made before r.
func (j *nemJob) dues(g, r int64) []int64 {
	var last *nemOp
	for i := range j.ops {
		if o := &j.ops[i]; o.kind != 'c' && o.res == resOK && o.ret < g {
			last = o
		}
	}
	var out []int64
	if last != nil {
		out = append(out, last.dueUs)
	}
	for i := range j.ops {
		o := &j.ops[i]
		if o.kind == 'c' || o == last || o.call > r {
			continue
		}
		switch o.res {
		case resOK:
			if o.ret >= g {
				out = append(out, o.dueUs)
			}
		case resRunning, resDup, resMaybe:
			if last == nil || o.call > last.call || o.res == resMaybe {
				out = append(out, o.dueUs)
			}
		}
	}
	return out
}

// hits reports whether fault f hit the process that ran r while [a, b]
// (real unix µs; a little slack either side).
func (n *nemesis) hits(f nemFault, r nemRun, a, b int64) bool {
	slack := (n.lease / 10).Microseconds()
	if f.start.UnixMicro() > b+slack || f.end.UnixMicro()+slack < a {
		return false
	}
	switch f.kind {
	case "redis-kill":
		return true
	case "kill", "pause":
		return f.pid == r.pid
	case "partition", "slow", "lost":
		if f.slot != r.slot {
			return false
		}
		for _, p := range n.all {
			if p.pid == r.pid {
				return !p.started.After(f.end) && (p.ended.IsZero() || !p.ended.Before(f.start))
			}
		}
	}
	return false
}

type nemViolation struct {
	what string
	job  *nemJob
	runs []nemRun
}

func (n *nemesis) check() {
	t := n.t
	runs := n.readRuns()
	byJob := map[string][]nemRun{}
	stepped := 0
	for i := range runs {
		if runs[i].offUs != 0 {
			stepped++
		}
		runs[i].gate = n.gateOf(runs[i])
		byJob[runs[i].id] = append(byJob[runs[i].id], runs[i])
	}
	var (
		viol                                 = map[string][]nemViolation{}
		acked, schedFailed                   int
		cancels, moves                       [resMaybe + 1]int
		allowedDups                          = map[string]int{}
		stepAmbiguous, cancelRunningNeverRan int
	)
	add := func(kind string, j *nemJob, rs []nemRun, what string) {
		viol[kind] = append(viol[kind], nemViolation{what: what, job: j, runs: rs})
	}
	for id, rs := range byJob {
		if n.jobs[id] == nil {
			add("unknown", &nemJob{id: id}, rs, "a run of a job no producer scheduled")
		}
	}
	for _, j := range n.jobs {
		rs := byJob[j.id]
		slices.SortFunc(rs, func(a, b nemRun) int { return cmp.Compare(a.gate, b.gate) })
		cancelledOK, cancelMaybe, cancelRunning := int64(0), false, false
		for _, o := range j.ops {
			switch o.kind {
			case 's':
				if o.res == resOK {
					acked++
				} else {
					schedFailed++
				}
				if o.res == resDup {
					add("wrong-answer", j, rs, "Schedule of a new id answered ErrDuplicate")
				}
			case 'c':
				cancels[o.res]++
				switch o.res {
				case resOK:
					cancelledOK = o.ret
				case resMaybe:
					cancelMaybe = true
				case resRunning:
					cancelRunning = true
				}
			case 'r':
				moves[o.res]++
			}
		}
		// lost
		if j.ops[0].res == resOK && cancelledOK == 0 && !cancelMaybe && !cancelRunning && len(rs) == 0 {
			add("lost", j, nil, "acknowledged, never cancelled, never ran")
		}
		if cancelRunning && len(rs) == 0 {
			cancelRunningNeverRan++
			if cancelRunningNeverRan <= 3 {
				t.Logf("nemesis: (known, scenario 9) job %s: Cancel answered ErrRunning but no run happened\n%s", j.id, n.timeline(j, rs, nil))
			}
		}
		// wrong answers: ErrNotFound for a job that was pending
		if j.ops[0].res == resOK {
			for _, o := range j.ops[1:] {
				if o.kind == 'c' && o.res != resNotFound {
					break // cancelled (or maybe): not pending after
				}
				if o.res != resNotFound || slices.ContainsFunc(rs, func(r nemRun) bool { return r.gate <= o.ret }) {
					continue
				}
				add("wrong-answer", j, rs, fmt.Sprintf("%s answered ErrNotFound at %s for a job that had not run",
					map[byte]string{'c': "Cancel", 'r': "Reschedule"}[o.kind], n.rel(o.ret)))
			}
		}
		for _, r := range rs {
			// cancelled-then-ran
			if cancelledOK != 0 && r.gate > cancelledOK {
				add("cancelled-then-ran", j, []nemRun{r}, fmt.Sprintf("started (at the earliest) %v after its Cancel returned nil",
					time.Duration(r.gate-cancelledOK)*time.Microsecond))
			}
			// early, by the running process's own clock
			ds := j.dues(r.gate, r.realUs)
			if len(ds) == 0 {
				add("early", j, []nemRun{r}, "ran when no due time of it was current (before its Schedule was called?)")
			} else if lo := slices.Min(ds); r.wallUs < lo {
				if r.stepUs >= r.gate && r.stepUs+r.prevUs >= lo {
					stepAmbiguous++ // the wall clock stepped back between the start gate and the handler's reading
				} else {
					add("early", j, []nemRun{r}, fmt.Sprintf("started %v before its due time by its own clock (due times current then: %v)",
						time.Duration(lo-r.wallUs)*time.Microsecond, ds))
				}
			}
			// stale: run at a due time a Reschedule (nil) had replaced before it started
			for i, o := range j.ops {
				if o.kind == 'c' || o.dueUs != r.dueUs || (o.res != resOK && o.res != resRunning) {
					continue
				}
				for _, o2 := range j.ops[i+1:] {
					if o2.kind == 'r' && o2.res == resOK && o2.ret < r.gate && o2.dueUs != r.dueUs {
						add("stale", j, []nemRun{r}, fmt.Sprintf("ran at due %s after a Reschedule to %s returned nil at %s",
							n.rel(r.dueUs), n.rel(o2.dueUs), n.rel(o2.ret)))
					}
				}
			}
		}
		// duplicates: more than one run at the same due time
		groups := map[int64][]nemRun{}
		for _, r := range rs {
			groups[r.dueUs] = append(groups[r.dueUs], r)
		}
		for _, g := range groups {
			for k := 1; k < len(g); k++ {
				why := ""
				for _, prev := range g[:k] {
					for _, f := range n.faults {
						if n.hits(f, prev, prev.gate, g[k].realUs) {
							why = f.kind
							break
						}
					}
					if why != "" {
						break
					}
				}
				if why == "" {
					for _, prev := range g[:k] {
						if n.reported(prev.pid, prev.gate, g[k].realUs) {
							why = "reported"
							break
						}
					}
				}
				if why != "" {
					allowedDups[why]++
				} else {
					add("duplicate", j, g[:k+1], "ran again with no fault on the process of an earlier run")
				}
			}
		}
	}
	faultKinds := map[string]int{}
	for _, f := range n.faults {
		faultKinds[f.kind]++
	}
	nAllowed := 0
	for _, c := range allowedDups {
		nAllowed += c
	}
	t.Logf("nemesis summary: %d jobs acknowledged (%d schedules failed), %d runs (%d by a stepped clock); cancels nil %d, ErrRunning %d, ErrNotFound %d, unknown %d; "+
		"reschedules nil %d, ErrRunning %d, ErrNotFound %d, unknown %d; faults %d %v; "+
		"lost %d, early %d, cancelled-then-ran %d, stale %d, unexplained duplicates %d, wrong answers %d, unknown runs %d; "+
		"allowed duplicates %d %v; early by a step between gate and handler (not counted) %d; ErrRunning cancels that never ran %d",
		acked, schedFailed, len(runs), stepped, cancels[resOK], cancels[resRunning], cancels[resNotFound], cancels[resMaybe],
		moves[resOK], moves[resRunning], moves[resNotFound], moves[resMaybe], len(n.faults), faultKinds,
		len(viol["lost"]), len(viol["early"]), len(viol["cancelled-then-ran"]), len(viol["stale"]), len(viol["duplicate"]),
		len(viol["wrong-answer"]), len(viol["unknown"]), nAllowed, allowedDups, stepAmbiguous, cancelRunningNeverRan)
	for _, kind := range []string{"lost", "early", "cancelled-then-ran", "stale", "duplicate", "wrong-answer", "unknown"} {
		vs := viol[kind]
		slices.SortFunc(vs, func(a, b nemViolation) int { return strings.Compare(a.job.id, b.job.id) })
		for i, v := range vs {
			if i == 10 {
				t.Errorf("nemesis: %s: %d more", kind, len(vs)-i)
				break
			}
			t.Errorf("nemesis: %s: job %s: %s\n%s", kind, v.job.id, v.what, n.timeline(v.job, byJob[v.job.id], v.runs))
		}
	}
}

// reported says whether the child pid warned, between a and b (unix µs,
// with the hits slack), that its runs' outcomes may not be stored (a run
// then goes again, by design): it could not store them in time, or it let
// a partition's lease go, which fences them. An explanation of a
// duplicate by what the process saw of Redis (slow or lost replies on a
// loaded machine, after a fault the process lived through), where no
// injected fault overlaps the runs.
func (n *nemesis) reported(pid int, a, b int64) bool {
	slack := (n.lease / 10).Microseconds()
	found := false
	for _, p := range n.all {
		if p.pid != pid {
			continue
		}
		p.logLines(a-slack, b+slack, func(_ int64, line, _ string) bool {
			found = strings.Contains(line, "outcomes not yet stored") || strings.Contains(line, "lease not renewed in time")
			return !found
		})
	}
	return found
}

// logLines calls f with each line the child logged between from and to
// (unix µs), its time and what follows the time, until f returns false.
func (p *nemProc) logLines(from, to int64, f func(at int64, line, rest string) bool) {
	fh, err := os.Open(p.errPath)
	if err != nil {
		return
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || at.UnixMicro() < from || at.UnixMicro() > to {
			continue
		}
		if !f(at.UnixMicro(), line, line[min(len(line), len(ts)+6):]) {
			return
		}
	}
}

// timeline prints what happened to a job, with the faults and the child
// warnings around it. Times are seconds since the test began.
func (n *nemesis) timeline(j *nemJob, rs, marked []nemRun) string {
	var b strings.Builder
	lo, hi := int64(1<<62), int64(0)
	for _, o := range j.ops {
		lo, hi = min(lo, o.call), max(hi, o.ret)
		fmt.Fprintf(&b, "  call %s..%s %s", n.rel(o.call), n.rel(o.ret), map[byte]string{'s': "Schedule", 'c': "Cancel", 'r': "Reschedule"}[o.kind])
		if o.kind != 'c' {
			fmt.Fprintf(&b, " due %s", n.rel(o.dueUs))
		}
		fmt.Fprintf(&b, " -> %v %s\n", o.res, o.err)
	}
	pids := map[int]bool{}
	for _, r := range rs {
		lo, hi = min(lo, r.gate), max(hi, r.realUs)
		pids[r.pid] = true
		mark := " "
		for _, m := range marked {
			if m == r {
				mark = "*"
			}
		}
		fmt.Fprintf(&b, " %s run  %s (gate >= %s) pid %d slot %d attempt %d due %s, own clock %s (offset %+.1fs; before step at %s: %+.1fs)\n",
			mark, n.rel(r.realUs), n.rel(r.gate), r.pid, r.slot, r.attempt, n.rel(r.dueUs), n.rel(r.wallUs),
			float64(r.offUs)/1e6, nemStepAt(n, r.stepUs), float64(r.prevUs)/1e6)
	}
	from, to := lo-3_000_000, hi+1_000_000
	for _, f := range n.faults {
		if f.end.UnixMicro() < from || f.start.UnixMicro() > to {
			continue
		}
		fmt.Fprintf(&b, "  fault %s..%s %s slot %d pid %d: %s\n", n.rel(f.start.UnixMicro()), n.rel(f.end.UnixMicro()), f.kind, f.slot, f.pid, f.detail)
	}
	for _, p := range n.all {
		if !pids[p.pid] {
			continue
		}
		fmt.Fprintf(&b, "  pid %d slot %d lived %s..%s\n", p.pid, p.slot, n.rel(p.started.UnixMicro()), n.rel(p.ended.UnixMicro()))
		shown := 0
		p.logLines(from, to, func(at int64, _, rest string) bool {
			fmt.Fprintf(&b, "    pid %d %s %s\n", p.pid, n.rel(at), rest)
			shown++
			return shown < 20
		})
	}
	return b.String()
}

func nemStepAt(n *nemesis, us int64) string {
	if us == 0 {
		return "never"
	}
	return n.rel(us)
}
