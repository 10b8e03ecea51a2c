package wheelqtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/internal/crashpoint"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/wheel"
)

// Point names a place in wheelq's engine where a crash can be armed.
type Point = crashpoint.Point

// The crash points, in the order a job meets them.
const (
	// AfterWrite: Schedule's write is stored in Redis, the job is not yet
	// armed in memory; Schedule returns an error wrapping ErrCrashed.
	AfterWrite = crashpoint.AfterWrite
	// AfterClaim: the job is claimed in Redis and its time has come; its
	// handler is not called.
	AfterClaim = crashpoint.AfterClaim
	// DuringRun: the process dies while the handler runs. The handler is
	// called with its context already cancelled (context.Cause is
	// ErrCrashed): what it does before it looks at its context is what a
	// run cut short did. Its outcome is never stored.
	DuringRun = crashpoint.DuringRun
	// AfterRun: the handler returned; its outcome (ack, retry, dead
	// letter) is never stored.
	AfterRun = crashpoint.AfterRun
	// MidReload: the recoverer is arming jobs it read from Redis (after
	// Start, a take-over, or a poll bringing jobs into the horizon): the
	// jobs before this one in its page are armed, the rest are not.
	MidReload = crashpoint.MidReload
	// AfterReserve: a job of a pulled topic (Options.Pull) is reserved in
	// Redis for a consumer, and the process dies before handing it over:
	// Reserve fails with ErrCrashed; the reservation lapses at its
	// deadline and the job comes back, one attempt counted.
	AfterReserve = crashpoint.AfterReserve
)

// Errors of the harness. Each is returned wrapped; test with errors.Is.
var (
	// ErrCrashed: the queue stopped at an armed crash point. Calls of the
	// crashed queue (Schedule at AfterWrite, for one) wrap it.
	ErrCrashed = crashpoint.ErrCrashed
	// ErrInvalidPoint: a Point that is not one of the named points.
	ErrInvalidPoint = errors.New("wheelqtest: invalid crash point")
	// ErrNotSettled: jobs that came due did not finish within
	// Options.Timeout.
	ErrNotSettled = errors.New("wheelqtest: due jobs did not settle")
	// ErrNotScheduled: ExpectScheduled found no such pending job, or one
	// that differs.
	ErrNotScheduled = errors.New("wheelqtest: job not scheduled as expected")
	// ErrViolation: Check found a broken promise in the history.
	ErrViolation = errors.New("wheelqtest: history violates a wheelq promise")
	// ErrNegative: Advance by a negative duration.
	ErrNegative = errors.New("wheelqtest: negative duration")
	// ErrClosed: the harness was closed.
	ErrClosed = errors.New("wheelqtest: harness closed")
)

// Options configures a Harness. The zero value is a queue with wheelq's
// defaults on an embedded Redis.
type Options struct {
	// Config is the queue's configuration. The harness sets Clock (its
	// fake clock) and Testing; it defaults Namespace to "wheelqtest",
	// Partitions to 4, InstanceID to "wheelqtest" (so that Restart takes
	// the leases over at once), and LeaseTTL to 1 hour (leases expire in
	// Redis by Redis's own clock, which the fake clock does not move: a
	// long TTL keeps a slow test from losing them).
	Config wheelq.Config
	// Redis is the server to run on, for instance a real redis-server; the
	// harness neither closes nor flushes it (give each test its own
	// Namespace on a shared server). Default: an embedded miniredis,
	// closed by Close.
	Redis redis.UniversalClient
	// Start is the fake clock's time at the start. Default
	// 2030-01-01T00:00:00Z.
	Start time.Time
	// Timeout bounds each wait for due jobs to settle, in real time.
	// Default 30s.
	Timeout time.Duration
	// SkipCheck, with New, leaves out the history check at cleanup.
	SkipCheck bool
	// Pull lists topics consumed by pulling (wheelq.Queue.Pull) in every
	// incarnation: consume them with Harness.Reserve, Ack and Nack. Their
	// due jobs wait in Redis for a consumer: Advance does not wait for
	// them.
	Pull []string
}

// Harness runs one queue (one process at a time) on a fake clock, with
// crash points, and records its history. It is safe for concurrent use,
// except that Advance, Restart, RunNow and Close must not run at once.
type Harness struct {
	opts  Options
	cfg   wheelq.Config
	clock *wheel.FakeClock
	rdb   redis.UniversalClient
	store *persist.Store // the harness's own reader of the namespace
	mini  *miniredis.Miniredis

	mu          sync.Mutex
	q           *wheelq.Queue             // guarded by mu
	hooks       *crashpoint.Hooks         // guarded by mu: the current incarnation's
	handlers    map[string]wheelq.Handler // guarded by mu
	arm         *armed                    // guarded by mu: the armed crash, if any
	incarnation int                       // guarded by mu
	active      int                       // guarded by mu: runs in progress
	seq         uint64                    // guarded by mu: orders the history
	runs        []Run                     // guarded by mu
	crashes     []Crash                   // guarded by mu
	events      []event                   // guarded by mu
	closed      bool                      // guarded by mu
	runsByKey   map[string][]int          // guarded by mu: indexes into runs
}

type armed struct {
	p   Point
	key string // "" for any job
}

// New starts a harness for the test t (see Start) and registers its
// cleanup: Check (unless Options.SkipCheck; a violation fails t) and
// Close. It fails t if the harness cannot start.
func New(t testing.TB, opts Options) *Harness {
	t.Helper()
	h, err := Start(opts)
	if err != nil {
		t.Fatalf("wheelqtest: %v", err)
	}
	t.Cleanup(func() {
		if !opts.SkipCheck {
			if err := h.Check(); err != nil {
				t.Errorf("%v", err)
			}
		}
		if err := h.Close(); err != nil {
			t.Errorf("wheelqtest: close: %v", err)
		}
	})
	return h
}

// Start starts a harness outside a test (an Example, say): a queue,
// started, with its jobs reloaded. Close it when done.
func Start(opts Options) (*Harness, error) {
	cfg := opts.Config
	if cfg.Clock != nil || cfg.Testing != nil {
		return nil, fmt.Errorf("%w: Config.Clock and Config.Testing are the harness's", wheelq.ErrInvalidOption)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "wheelqtest"
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 4
	}
	if cfg.InstanceID == "" {
		cfg.InstanceID = "wheelqtest"
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = time.Hour
	}
	if opts.Start.IsZero() {
		opts.Start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	h := &Harness{opts: opts, handlers: map[string]wheelq.Handler{}, runsByKey: map[string][]int{}}
	h.clock = wheel.NewFakeClock(opts.Start)
	cfg.Clock = h.clock
	h.cfg = cfg
	h.rdb = opts.Redis
	if h.rdb == nil {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return nil, fmt.Errorf("wheelqtest: start miniredis: %w", err)
		}
		h.mini = m
		h.rdb = redis.NewClient(&redis.Options{Addr: m.Addr()})
	}
	var err error
	h.store, err = persist.New(h.rdb, persist.Options{Namespace: cfg.Namespace, Partitions: cfg.Partitions})
	if err == nil {
		err = h.startQueue()
	}
	if err == nil {
		err = h.settle()
	}
	if err != nil {
		_ = h.Close()
		return nil, err
	}
	return h, nil
}

// startQueue starts a new incarnation of the queue.
func (h *Harness) startQueue() error {
	h.mu.Lock()
	h.incarnation++
	inc := h.incarnation
	hooks := crashpoint.New(h.at, h.observe)
	cfg := h.cfg
	cfg.Testing = hooks
	q, err := wheelq.New(h.rdb, cfg)
	if err != nil {
		h.mu.Unlock()
		return err
	}
	for topic, hd := range h.handlers {
		if err := q.Handle(topic, h.wrap(hd, hooks, inc)); err != nil {
			h.mu.Unlock()
			return err
		}
	}
	if err := q.Pull(h.opts.Pull...); err != nil {
		h.mu.Unlock()
		return err
	}
	h.q, h.hooks = q, hooks
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.Timeout)
	defer cancel()
	if err := q.Start(ctx); err != nil {
		hooks.Kill()
		return fmt.Errorf("wheelqtest: start queue: %w", err)
	}
	select {
	case <-q.Ready():
	case <-hooks.Crashed():
	case <-ctx.Done():
		return fmt.Errorf("%w: the queue did not reload within %v", ErrNotSettled, h.opts.Timeout)
	}
	return nil
}

// Queue returns the current incarnation's queue: schedule, cancel and
// inspect through it. After Restart it is another queue.
func (h *Harness) Queue() *wheelq.Queue {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.q
}

// Clock returns the fake clock. Move it with Advance, which waits for
// what comes due; moving it directly does not.
func (h *Harness) Clock() *wheel.FakeClock { return h.clock }

// Now returns the fake clock's wall reading: the time due times are
// compared with.
func (h *Harness) Now() time.Time { return h.clock.Wall() }

// Redis returns the client the queue runs on.
func (h *Harness) Redis() redis.UniversalClient { return h.rdb }

// Handle registers the handler of a topic, on this queue and on every
// queue Restart brings up. Its runs are recorded (Runs, History).
func (h *Harness) Handle(topic string, hd wheelq.Handler) error {
	if hd == nil {
		return fmt.Errorf("%w: nil handler", wheelq.ErrInvalidOption)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	if err := h.q.Handle(topic, h.wrap(hd, h.hooks, h.incarnation)); err != nil {
		return err
	}
	h.handlers[topic] = hd
	return nil
}

// wrap records the runs of hd on the incarnation inc.
func (h *Harness) wrap(hd wheelq.Handler, hooks *crashpoint.Hooks, inc int) wheelq.Handler {
	return wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) (err error) {
		during := errors.Is(context.Cause(ctx), ErrCrashed)
		h.mu.Lock()
		h.seq++
		i := len(h.runs)
		key := persist.JobKey(j.Topic, j.ID)
		h.runs = append(h.runs, Run{
			Topic: j.Topic, ID: j.ID, Attempt: j.Attempt, Due: j.Due, Start: h.clock.Wall(),
			Payload: bytes.Clone(j.Payload), Incarnation: inc, startSeq: h.seq,
		})
		h.runsByKey[key] = append(h.runsByKey[key], i)
		h.active++
		h.mu.Unlock()
		defer func() {
			v := recover()
			h.mu.Lock()
			h.seq++
			r := &h.runs[i]
			r.End, r.endSeq, r.Err, r.Done = h.clock.Wall(), h.seq, err, true
			r.Crashed = during || hooks.Dead()
			if v != nil {
				r.Err = fmt.Errorf("panic: %v", v)
			}
			h.active--
			h.mu.Unlock()
			if v != nil {
				panic(v) // the engine turns it into the run's error
			}
		}()
		return hd.HandleJob(ctx, j)
	})
}

// at is the engine's crash-point hook: it fires the armed crash, once.
func (h *Harness) at(p Point, key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.arm
	if a == nil || a.p != p || (a.key != "" && a.key != key) {
		return false
	}
	h.arm = nil
	h.seq++
	c := Crash{Point: p, At: h.clock.Wall(), Incarnation: h.incarnation, seq: h.seq}
	c.Topic, c.ID, _ = persist.SplitJobKey(key)
	h.crashes = append(h.crashes, c)
	if p == AfterRun {
		// The handler has returned; its outcome will not be stored.
		if is := h.runsByKey[key]; len(is) > 0 {
			h.runs[is[len(is)-1]].Crashed = true
		}
	}
	return true
}

// observe records a change Redis applied.
func (h *Harness) observe(e crashpoint.Event) {
	h.mu.Lock()
	h.seq++
	h.events = append(h.events, event{Event: e, seq: h.seq})
	h.mu.Unlock()
}

// CrashAt arms a crash at point p for the next job that reaches it,
// replacing any crash armed before. It fires once.
func (h *Harness) CrashAt(p Point) error { return h.crashAt(p, "") }

// CrashAtJob arms a crash at point p for the job topic/id only, replacing
// any crash armed before. It fires once.
func (h *Harness) CrashAtJob(p Point, topic, id string) error {
	if topic == "" || id == "" {
		return fmt.Errorf("%w: empty topic or id", wheelq.ErrInvalidOption)
	}
	return h.crashAt(p, persist.JobKey(topic, id))
}

func (h *Harness) crashAt(p Point, key string) error {
	if !p.Valid() {
		return fmt.Errorf("%w: %d", ErrInvalidPoint, int(p))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.arm = &armed{p: p, key: key}
	return nil
}

// Disarm takes back an armed crash that has not fired.
func (h *Harness) Disarm() {
	h.mu.Lock()
	h.arm = nil
	h.mu.Unlock()
}

// Crashed reports whether the current queue crashed (and awaits Restart).
func (h *Harness) Crashed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hooks.Dead()
}

// Advance moves the fake clock forward by d, stopping at every due time
// of a pending job on the way (jobs that handlers schedule and retries
// included), and returns once every job due by then has run and its
// outcome is stored in Redis, or once an armed crash point was reached (the
// queue is then stopped; Restart starts the next one). On a crashed queue
// it only moves the clock: time passes while the process is down.
// Advance(0) runs what is due now (a job scheduled in the past, say). It
// returns ErrNotSettled if due jobs do not settle within Options.Timeout.
//
// The jobs of a paused topic (Queue.Pause) are not waited for, and
// Advance does not stop at their due times: they stay pending in Redis
// (Scheduled and ExpectScheduled see them at their due times) and do not
// run, as in production. After Resume, the next Advance (Advance(0) for
// the jobs already due) runs them, oldest first, at the present; a topic
// that a handler resumes within an Advance has its due jobs run at that
// step.
func (h *Harness) Advance(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: Advance(%v)", ErrNegative, d)
	}
	target := h.clock.Wall().Add(d)
	if err := h.settle(); err != nil {
		return err
	}
	for !h.Crashed() {
		next, ok, err := h.nextDue()
		if err != nil {
			return err
		}
		if !ok || next.After(target) {
			break
		}
		h.clock.Advance(next.Sub(h.clock.Wall()))
		if err := h.settle(); err != nil {
			return err
		}
	}
	if rest := target.Sub(h.clock.Wall()); rest > 0 {
		h.clock.Advance(rest)
	}
	return h.settle()
}

// Restart stops the current queue as a SIGKILL would (if a crash point has
// not stopped it already) and starts a new one on the same Redis and the
// same clock, with the same handlers; it returns once the new queue has
// reloaded and run what is due (see Advance; a paused topic's jobs stay
// pending, the pause being in Redis), or crashed again at an armed point.
func (h *Harness) Restart() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	hooks := h.hooks
	h.mu.Unlock()
	hooks.Kill()
	if err := h.startQueue(); err != nil {
		return err
	}
	return h.settle()
}

// settle waits until the queue is idle: its wheel and poller asleep, no
// handler running, and no pending job due by the fake clock left in Redis
// (every due job ran and its outcome is stored) but those of paused
// topics, which are not to run. If the queue crashed it kills it (stops
// every goroutine) and returns nil.
func (h *Harness) settle() error {
	deadline := time.Now().Add(h.opts.Timeout)
	h.mu.Lock()
	hooks := h.hooks
	h.mu.Unlock()
	for {
		if hooks.Dead() {
			hooks.Kill()
			return nil
		}
		quiet, err := h.quiet()
		if err != nil && !errors.Is(err, ErrCrashed) {
			return err
		}
		if quiet && err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w within %v (fake time %v)", ErrNotSettled, h.opts.Timeout, h.Now())
		}
		t := time.NewTimer(time.Millisecond)
		select {
		case <-hooks.Crashed():
		case <-t.C:
		}
		t.Stop()
	}
}

// quiet reports whether the queue is idle (see settle).
func (h *Harness) quiet() (bool, error) {
	if !h.clock.Idle() {
		return false, nil
	}
	h.mu.Lock()
	active := h.active
	h.mu.Unlock()
	if active > 0 {
		return false, nil
	}
	now := h.clock.Wall().UnixMicro()
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.Timeout)
	defer cancel()
	paused := pausedTopics{pulled: h.opts.Pull, rdb: h.rdb}
	for p := range h.cfg.Partitions {
		_, due, err := h.firstRunnable(ctx, p, minScore, now, &paused)
		if err != nil {
			return false, err
		}
		if due {
			return false, nil
		}
	}
	// Read after Redis: a change Redis applied has been noted.
	h.mu.Lock()
	hooks := h.hooks
	active = h.active
	h.mu.Unlock()
	return active == 0 && hooks.InFlight() == 0, nil
}

// Scores beyond which no due time is stored (Lua numbers are doubles).
const (
	minScore = -1 << 52
	maxScore = 1 << 52
)

// nextDue returns the earliest due time after the fake clock's wall
// reading of a pending job whose topic is not paused: a paused topic's
// jobs would not run there, so Advance does not stop for them.
func (h *Harness) nextDue() (time.Time, bool, error) {
	now := h.clock.Wall().UnixMicro()
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.Timeout)
	defer cancel()
	var paused pausedTopics
	best, ok := int64(0), false
	for p := range h.cfg.Partitions {
		e, found, err := h.firstRunnable(ctx, p, now, maxScore, &paused)
		if err != nil {
			return time.Time{}, false, err
		}
		if found && (!ok || e.Due < best) {
			best, ok = e.Due, true
		}
	}
	return time.UnixMicro(best), ok, nil
}

// pagePaused is how many pending jobs firstRunnable reads at once past
// the first, which it reads alone (most often the answer).
const pagePaused = 512

// firstRunnable returns the first pending job of partition p with
// after < due <= until whose topic is not paused, and whether there is
// one. It pages past the jobs of paused topics to the end of the range,
// bounded in time by ctx.
func (h *Harness) firstRunnable(ctx context.Context, p int, after, until int64, paused *pausedTopics) (persist.Entry, bool, error) {
	cur, limit := persist.Cursor{}, 1
	for !cur.Done {
		es, next, err := h.store.RangePending(ctx, p, after, until, cur, limit)
		if err != nil {
			return persist.Entry{}, false, err
		}
		for _, e := range es {
			held, err := paused.holds(ctx, h.store, e.Key)
			if err != nil {
				return persist.Entry{}, false, err
			}
			if !held {
				return e, true, nil
			}
		}
		cur, limit = next, pagePaused
	}
	return persist.Entry{}, false, nil
}

// pausedTopics reads the paused topics from Redis once, when first asked
// about a job: a call of quiet or nextDue that finds no pending job in
// its range costs no read of them.
type pausedTopics struct {
	read   bool
	topics []string              // sorted
	pulled []string              // Options.Pull
	rdb    redis.UniversalClient // reads the ready sets of pulled topics
}

// holds reports whether the job key's topic is paused, or is pulled and
// the job waits in its ready set for a consumer: either way the harness
// does not wait for it to run.
func (pt *pausedTopics) holds(ctx context.Context, s *persist.Store, key string) (bool, error) {
	if topic, _, _ := strings.Cut(key, persist.KeySep); slices.Contains(pt.pulled, topic) {
		_, err := pt.rdb.ZScore(ctx, s.ReadyKey(s.PartitionOf(key), topic), key).Result()
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, redis.Nil) {
			return false, err
		}
	}
	if !pt.read {
		ts, err := s.PausedTopics(ctx)
		if err != nil {
			return false, err
		}
		pt.read, pt.topics = true, ts
	}
	if len(pt.topics) == 0 {
		return false, nil
	}
	topic, _, _ := strings.Cut(key, persist.KeySep)
	_, ok := slices.BinarySearch(pt.topics, topic)
	return ok, nil
}

// Close stops the queue (gracefully if it did not crash: Shutdown) and the
// embedded Redis. Close after Close does nothing.
func (h *Harness) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	q, hooks := h.q, h.hooks
	h.mu.Unlock()
	var err error
	if q != nil {
		if hooks.Dead() {
			hooks.Kill()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), h.opts.Timeout)
			err = q.Shutdown(ctx)
			cancel()
			if err != nil {
				hooks.Kill() // handlers that ignored their context: wait for them
			}
		}
	}
	if h.mini != nil {
		_ = h.rdb.Close()
		h.mini.Close()
	}
	return err
}

// ScheduledJob is a pending job as stored in Redis.
type ScheduledJob struct {
	Topic, ID string
	Due       time.Time
	Payload   []byte
	// Attempt counts the runs started so far.
	Attempt int
}

// Scheduled lists the pending jobs of topic (every topic if ""), in due
// order, read from Redis: those of paused topics too.
func (h *Harness) Scheduled(topic string) ([]ScheduledJob, error) {
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.Timeout)
	defer cancel()
	var out []ScheduledJob
	for p := range h.cfg.Partitions {
		var cur persist.Cursor
		for !cur.Done {
			es, next, err := h.store.RangePending(ctx, p, minScore, maxScore, cur, 1000)
			if err != nil {
				return nil, err
			}
			cur = next
			var keys []string
			for _, e := range es {
				if t, _, err := persist.SplitJobKey(e.Key); err == nil && (topic == "" || t == topic) {
					keys = append(keys, e.Key)
				}
			}
			recs, err := h.store.Records(ctx, p, keys)
			if err != nil {
				return nil, err
			}
			byKey := map[string]int64{}
			for _, e := range es {
				byKey[e.Key] = e.Due
			}
			for i, k := range keys {
				t, id, _ := persist.SplitJobKey(k)
				j := ScheduledJob{Topic: t, ID: id, Due: time.UnixMicro(byKey[k]).UTC()}
				if recs[i] != nil {
					if r, err := persist.DecodeRecord(recs[i]); err == nil {
						j.Payload, j.Attempt = r.Payload, r.Attempt
					}
				}
				out = append(out, j)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b ScheduledJob) int { return a.Due.Compare(b.Due) })
	return out, nil
}

// ExpectScheduled returns nil if the job topic/id is pending in Redis, due
// within tolerance of due, with payload (nil: any payload); otherwise an
// error wrapping ErrNotScheduled that says what differs.
func (h *Harness) ExpectScheduled(topic, id string, due time.Time, tolerance time.Duration, payload []byte) error {
	if topic == "" || id == "" || tolerance < 0 {
		return fmt.Errorf("%w: empty topic or id, or negative tolerance", wheelq.ErrInvalidOption)
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.Timeout)
	defer cancel()
	rec, st, err := h.store.Get(ctx, persist.JobKey(topic, id))
	if err != nil && !errors.Is(err, persist.ErrNotFound) {
		return err
	}
	if st != persist.Pending && st != persist.Running && st != persist.Reserved {
		return fmt.Errorf("%w: %s/%s is not pending", ErrNotScheduled, topic, id)
	}
	jobs, err := h.Scheduled(topic)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		if j.ID != id {
			continue
		}
		if diff := j.Due.Sub(due); diff > tolerance || -diff > tolerance {
			return fmt.Errorf("%w: %s/%s is due %v, want %v ± %v", ErrNotScheduled, topic, id, j.Due, due.UTC(), tolerance)
		}
		if payload != nil && !bytes.Equal(rec.Payload, payload) {
			return fmt.Errorf("%w: %s/%s has payload %q, want %q", ErrNotScheduled, topic, id, rec.Payload, payload)
		}
		return nil
	}
	return fmt.Errorf("%w: %s/%s is not pending", ErrNotScheduled, topic, id)
}

// RunNow runs the pending jobs of topic now, whatever their due times: it
// moves each to the fake clock's present (wheelq's Reschedule) and waits
// as Advance does. It returns the runs that started meanwhile. Other
// topics' jobs do not move. The jobs of a paused topic are moved but do
// not run (none of its runs is returned) until Resume and an Advance.
func (h *Harness) RunNow(topic string) ([]Run, error) {
	jobs, err := h.Scheduled(topic)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	from := len(h.runs)
	q := h.q
	h.mu.Unlock()
	now := h.Now()
	for _, j := range jobs {
		ctx, cancel := context.WithTimeout(context.Background(), h.opts.Timeout)
		err := q.Reschedule(ctx, j.Topic, j.ID, now)
		cancel()
		if err != nil && !errors.Is(err, wheelq.ErrNotFound) {
			return nil, err
		}
	}
	if err := h.settle(); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.runs[from:]), nil
}
