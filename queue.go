package wheelq

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq/internal/batch"
	"github.com/wheelq/wheelq/internal/errs"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/recovery"
	"github.com/wheelq/wheelq/internal/runctx"
	"github.com/wheelq/wheelq/wheel"
)

const (
	stateNew      = iota
	stateStarting // Start is making its round trips
	stateStarted
	stateClosing
	stateClosed
)

// Queue is a durable delayed-job queue. It is safe for concurrent use.
// Make one with New, register handlers with Handle, Start it to run jobs,
// and Shutdown it when done. A queue that is never started can still
// Schedule, Cancel and Reschedule (a producer), but runs nothing.
type Queue struct {
	cfg     Config
	store   engineStore
	clock   wheel.Clock
	log     *slog.Logger
	sched   *wheel.Scheduler // jobs, fired ClaimLead before their due time (arm.go)
	recov   *recovery.Recoverer
	cache   *recordCache
	writes  *batch.Batcher[persist.Write, persist.WriteResult]
	cancels *batch.Batcher[string, persist.Change]
	moves   *batch.Batcher[persist.Move, persist.Change] // reschedules
	// resolves are the consumers' acks, nacks and touches (pull.go);
	// resolving is partitionCalls' buffer for them (one flusher; a lone
	// request sent directly is never split).
	resolves  *batch.Batcher[persist.ResolveOp, byte]
	resolving []persist.ResolveOp
	// settle stores the outcomes of runs and dead-letters corrupt
	// records (settle.go).
	settle *settler
	fence  []string // our token for every partition: claims and settles are always fenced

	// startMu serializes Start and Shutdown's first step: Start holds it
	// across the namespace's round trips (its layout and its topics'
	// modes), so that a Shutdown during Start waits for them. It is taken
	// before mu, never under it.
	startMu sync.Mutex
	// mu guards the life cycle (state) and serializes Handle and Pull
	// with the steps of Start and Shutdown that change it; it is never
	// held across a round trip. A stage's lock may be taken under it
	// (Handle and Pull read pull's and the limits'), never the other way.
	mu    sync.Mutex
	state int // guarded by mu
	// handlers maps topics to their handlers: replaced whole under mu
	// (Handle), read without a lock (every run reads it).
	handlers atomic.Pointer[map[string]Handler]
	closed   chan struct{} // closed when Shutdown finished

	// The stages, each with the lock that guards its fields. No two of
	// these locks are held at once, and none across a round trip or a
	// send that may block.
	claims   *claimer    // claim.go: fired jobs waiting to be claimed
	gate     *startGate  // gate.go: claimed tasks waiting for their time
	inflight inflightSet // settle.go: jobs whose outcome is not yet stored
	limits   *limiter    // limits.go: per-topic limits
	pauses   *pauser     // pause.go: jobs of paused topics, parked
	pull     *pullStage  // pull.go: blocked Reserves, due jobs of pulled topics
	// lock is this process's lock file (lockfile_unix.go): set by Start
	// before the recoverer starts, released by Shutdown after it stopped.
	lock *lockFile

	work         chan *task    // tasks whose time came, for the workers
	tasks        sync.Pool     // of *task: recycled once their run is over (newTask, freeTask)
	stopDispatch chan struct{} // closed by Shutdown: claimers, starter and workers return
	dispatchers  sync.WaitGroup
	idRun        atomic.Uint64 // counts random ids (see Schedule)
	workers      sync.WaitGroup
	runs         *runctx.Set // the handlers' contexts, one slot per worker
	// current is, per worker, the run whose handler it is in (nil
	// between runs), for the stuck watcher (stuck.go).
	current []atomic.Pointer[jobRun]
	calls   *runctx.Set // the contexts of the engine's own round trips (see New)
	bursts  burstLeads

	isClosing atomic.Bool // set once Shutdown begins; read on the Schedule path
	reach     reach       // whether Redis was found unreachable (fail fast)
	running   atomic.Int64
	fireSlack time.Duration // the claims' wheel's SchedulerConfig.Slack
	member    string        // this process's id in the roster
	pstore    figureStore   // the workers' figures (figures.go)
	stuck     atomic.Int64  // handlers of abandoned runs that have not returned (stuck.go)
	// stuckWatch is the stuck watcher (stuck.go): started by Start,
	// stopped by Shutdown.
	stuckWatch struct {
		stop chan struct{}
		done chan struct{}
	}
	// recurLoop stores the coming slots of recurring schedules
	// (recurring.go): started by Start, stopped by Shutdown.
	recurLoop struct {
		stop chan struct{}
		done chan struct{}
		// unrun: the schedules (name -> spec) the loop did not fill as
		// their topic is not run here (Config.RefuseUnhandled), warned
		// of once each; the loop's goroutine only.
		unrun map[string]string
	}
	stats counters
	late  latency

	// layoutOK says the namespace's layout in Redis was found to be ours
	// (see checkLayout); layoutMu lets one caller check at a time.
	layoutOK atomic.Bool
	layoutMu sync.Mutex
}

// New returns a queue on the Redis client rdb: a *redis.Client
// (redis.NewClient for a standalone server, redis.NewFailoverClient for
// Sentinel) or a *redis.ClusterClient (redis.NewClusterClient, and
// redis.NewUniversalClient, which makes one of these). A *redis.Ring is
// refused with ErrUnsupportedClient: it shards keys by name over servers
// that know nothing of each other, and the calls that touch several
// partitions would go to one of them. The queue never closes rdb. New does
// no I/O; Start (or a producer's first call) checks the namespace.
func New(rdb redis.UniversalClient, cfg Config) (*Queue, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidConfig)
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	pstore, err := persist.New(rdb, persist.Options{Namespace: cfg.Namespace, Partitions: cfg.Partitions,
		ReplicaAcks: replicaAcksFor(rdb, cfg.ReplicaAcks), ReplicaTimeout: cfg.ReplicaTimeout,
		HistoryCount: max(cfg.History.Count, 0), HistoryAge: cfg.History.Age})
	if err != nil {
		return nil, err
	}
	var store engineStore = pstore
	var pst figureStore = pstore
	if cfg.Observer != nil {
		store = observeStore(store, cfg.Observer) // round trips timed (observe.go)
	}
	if cfg.test.wrapStore != nil {
		store = cfg.test.wrapStore(store)
	}
	if cfg.Testing != nil {
		store = newCrashStore(store, cfg.Testing) // refuses every call once crashed
	}
	cache, err := newRecordCache(cfg.CacheSize, int64(cfg.CacheBytes))
	if err != nil {
		return nil, err
	}
	var tok [12]byte
	binary.LittleEndian.PutUint64(tok[:], rand.Uint64())
	binary.LittleEndian.PutUint32(tok[8:], rand.Uint32())
	q := &Queue{
		cfg:          cfg,
		store:        store,
		clock:        cfg.Clock,
		log:          cfg.Logger,
		cache:        cache,
		closed:       make(chan struct{}),
		work:         make(chan *task, cfg.Concurrency),
		stopDispatch: make(chan struct{}),
	}
	q.inflight = inflightSet{keys: map[string]struct{}{}, left: q.releasePermit}
	q.pull = newPullStage()
	q.handlers.Store(&map[string]Handler{})
	if cfg.Testing != nil {
		cfg.Testing.Bind(q.crash)
	}
	token := base64.RawURLEncoding.EncodeToString(tok[:])
	if cfg.InstanceID != "" {
		// The lease script recognises leases of a former incarnation by
		// this prefix (see Config.InstanceID).
		token = cfg.InstanceID + "#" + token
	}
	q.fence = make([]string, cfg.Partitions)
	for i := range q.fence {
		q.fence[i] = token
	}
	q.runs = runctx.New(cfg.Concurrency, cfg.HandlerTimeout, false)
	q.current = make([]atomic.Pointer[jobRun], cfg.Concurrency)
	wc := wheel.SchedulerConfig{Clock: cfg.Clock, MaxDelay: max(2*cfg.Horizon, time.Hour)}
	// The claims' wheel needs no exact time: its entries go out ClaimLead
	// ahead of their jobs, and a wake hands out those due within a fifth of
	// the lead (1 ms at most) with them: at 10,000 jobs a second, about a
	// wake a millisecond instead of one per job (each a timerfd read and
	// goroutine hand-offs). The start gate keeps the exact time.
	fc := wc
	fc.Slack = min(cfg.ClaimLead/5, time.Millisecond)
	q.fireSlack = fc.Slack
	// The poller needs no precision: runtime timers cost it no file
	// descriptor.
	pollClock := cfg.Clock
	if pollClock == wheel.RealClock() {
		pollClock = wheel.RuntimeClock()
	}
	member := token
	if cfg.InstanceID != "" {
		// A restarted incarnation keeps its place in the roster, and so
		// its share of the partitions: a rolling restart moves nothing.
		member = cfg.InstanceID
	}
	q.member, q.pstore = member, pst
	q.recov, err = recovery.New(store, sink{q}, recovery.Config{
		Token:         token,
		Member:        member,
		Horizon:       cfg.Horizon,
		PollInterval:  cfg.PollInterval,
		LeaseTTL:      cfg.LeaseTTL,
		CallTimeout:   min(cfg.WriteTimeout, cfg.LeaseTTL/3),
		Clock:         pollClock,
		Logger:        cfg.Logger,
		SweepInterval: cfg.test.sweepInterval,
		PausedTopics:  func() []string { return q.pauses.pausedHere() },
		DeadTokens:    q.goneTokens,
	})
	if err != nil {
		return nil, err
	}
	// The round trips of the claimers, of the two retriers and of the
	// pull loop.
	q.calls = runctx.New(claimers+3, cfg.WriteTimeout, true)
	bc := batch.Config{MaxBatch: cfg.MaxBatch, Timeout: cfg.WriteTimeout}
	q.limits = newLimiter(batch.NewRetrier(bc, q.execReleases, func(err error, pending int) {
		q.log.Warn("wheelq: limits: permits not yet given back, retrying (they lapse a lease after the last renewal)", "err", err, "pending", pending)
	}))
	sd := stageDeps{store: store, fence: q.fence, clock: cfg.Clock, log: cfg.Logger, cache: cache, stats: &q.stats, inflight: &q.inflight}
	q.settle = newSettler(settleDeps{
		stageDeps: sd, leases: q.recov, backoff: cfg.Backoff, obs: cfg.Observer,
		arm:     func(key string, dueUs int64) { q.arm(key, dueUs, nil) },
		precise: q.jobsWaiting,
	}, bc, q.calls.Slot(claimers).Call, q.calls.Slot(claimers+1).Call)
	q.gate, err = newStartGate(gateDeps{
		clock: cfg.Clock, work: q.work, stop: q.stopDispatch, leases: q.recov,
		toPull: q.pullArrive, unclaim: q.settle.unclaim, drop: q.settle.drop, logDebug: q.log.Debug,
		dropAhead: q.unheldAhead,
		lookAfter: func(key string, due time.Time) {
			q.arm(key, due.Add(q.cfg.ClaimLead+time.Millisecond).UnixMicro(), nil)
		},
	}, wc)
	if err != nil {
		return nil, err
	}
	q.pauses = &pauser{pauseDeps: pauseDeps{
		store: store, leases: q.recov, clock: cfg.Clock, log: cfg.Logger, partitions: cfg.Partitions,
		writeTimeout: cfg.WriteTimeout, runWhileDown: cfg.RunWhileRedisDown,
		armAt: q.armAt, announced: q.announced, readTopicModes: q.readTopicModes,
	}}
	q.claims = newClaimer(claimDeps{
		stageDeps: sd, leases: q.recov, gate: q.gate, settle: q.settle, bursts: &q.bursts,
		lead: cfg.ClaimLead, slack: q.fireSlack, runWhileDown: cfg.RunWhileRedisDown, stop: q.stopDispatch,
		limited: q.limits.enabled, admit: q.admit, release: q.releasePermit,
		pulled: q.pulledKey, pullTask: q.newPullTask, pullAhead: q.pullAhead,
		park: q.pauses.park, parkIfKnownPaused: q.pauses.parkIfKnownPaused, arm: q.arm, newTask: q.newTask,
	})
	if q.sched, err = wheel.NewScheduler(fc, q.claims.fire); err != nil {
		return nil, err
	}
	q.writes = batch.NewBatcher(bc, func(ctx context.Context, ws []persist.Write) ([]persist.WriteResult, error) {
		return store.Write(ctx, q.recov.Tokens(), ws)
	})
	q.cancels = batch.NewBatcher(bc, store.CancelMany)
	q.moves = batch.NewBatcher(bc, func(ctx context.Context, ms []persist.Move) ([]persist.Change, error) {
		return store.RescheduleMany(ctx, q.recov.Tokens(), ms)
	})
	// Acks come one per consumer as jobs come due, and a call of a few
	// costs Redis about what a call of a hundred does (the run history's
	// upkeep per partition): they wait up to ackLinger for others, one
	// round trip in flight (at 10,000 jobs a second, 2.6 acks a call cost
	// Redis 38 µs per ack).
	rc := bc
	rc.Linger, rc.InFlight = ackLinger, 1
	q.resolves = batch.NewBatcher(rc, func(ctx context.Context, ops []persist.ResolveOp) ([]byte, error) {
		_, wall := wheel.Readings(q.clock)
		now := wall.UnixMicro()
		resolve := func(part []persist.ResolveOp) ([]byte, error) { return store.Resolve(ctx, now, part) }
		if !q.jobsWaiting() {
			return resolve(ops)
		}
		// As the settles' (storeOutcomes).
		return partitionCalls(ops, cfg.Partitions, func(o persist.ResolveOp) int { return store.PartitionOf(o.Key) }, &q.resolving, resolve)
	})
	return q, nil
}

// jobsWaiting reports whether claimed jobs wait in the start gate for
// their time: then outcomes and acks are stored in calls of whole
// partitions (partitionCalls), so that no call holds Redis long while
// they come due.
func (q *Queue) jobsWaiting() bool { return q.gate.len() > 0 }

// Handle registers the handler of a topic, replacing any earlier one. It
// may be called before or after Start.
func (q *Queue) Handle(topic string, h Handler) error {
	if err := validTopic(topic); err != nil {
		return err
	}
	if h == nil {
		return errors.New("wheelq: nil handler")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pull.isDeclared(topic) {
		return &TopicModeError{Topic: topic, Reason: TopicPulled}
	}
	hs := maps.Clone(*q.handlers.Load())
	hs[topic] = h
	q.handlers.Store(&hs)
	return nil
}

// Start checks the namespace in Redis, takes the leases of the partitions
// no other live process holds, reloads their pending jobs and starts
// running them; jobs that came due while no process ran fire at once,
// oldest first, through the same bounded pool of handlers (a batch of them
// whose claim in Redis fails is run after the batches behind it). The reload goes
// on in the background; see Ready. Start after Start does nothing; Start
// after Shutdown returns ErrClosed.
func (q *Queue) Start(ctx context.Context) error {
	if err := checkCtx(ctx, "Start"); err != nil {
		return err
	}
	q.startMu.Lock()
	defer q.startMu.Unlock()
	q.mu.Lock()
	state := q.state
	if state == stateNew {
		q.state = stateStarting // Pull is refused from now on
	}
	q.mu.Unlock()
	switch state {
	case stateStarted:
		return nil
	case stateClosing, stateClosed:
		return ErrClosed
	}
	started := false
	defer func() {
		q.mu.Lock()
		if started {
			q.state = stateStarted
		} else {
			q.state = stateNew // a failed Start may be tried again
		}
		q.mu.Unlock()
	}()
	if err := q.checkLayout(ctx); err != nil {
		return errs.Errorf("wheelq: start: %w", err)
	}
	// The topics' modes: a Handle from here on is not recorded in Redis,
	// as after Start.
	if err := q.declareTopics(ctx); err != nil {
		return errs.Errorf("wheelq: start: %w", err)
	}
	if q.cfg.RunWhileRedisDown {
		// The paused topics, known before any job is armed: a claim that
		// cannot reach Redis parks their jobs (pause.go).
		if _, err := q.pauses.readPaused(ctx); err != nil {
			q.log.Warn("wheelq: start: reading the paused topics; the watcher reads them again", "err", err)
		}
	}
	q.takeLock()
	q.pauses.start()
	q.sched.Start()
	q.gate.wheel.Start()
	q.runs.Start()
	for i := range q.cfg.Concurrency {
		q.workers.Go(func() { q.worker(i) })
	}
	// Two claimers: one builds and reads its round trip while Redis runs
	// the other's, so a burst of due jobs keeps both busy.
	for i := range claimers {
		q.dispatchers.Go(func() { q.claims.dispatch(q.calls.Slot(i)) })
	}
	go q.gate.starter()
	go q.pullLoop(q.calls.Slot(claimers + 2))
	q.startStuckWatch()
	q.startRecurring()
	q.startLimits()
	q.recov.Start(ctx)
	started = true
	return nil
}

// checkLayout checks, until it succeeds once, that the namespace in Redis
// has this queue's number of partitions (and records it if the namespace
// is new), so that no process writes a job where no worker looks, nor
// looks where none was written. Start and the first call that reads or
// writes jobs by partition run it; a success is kept, so later calls cost
// an atomic load. A failure (ErrLayout, or a Redis error) fails the call,
// and the next call checks again.
func (q *Queue) checkLayout(ctx context.Context) error {
	if q.layoutOK.Load() {
		return nil
	}
	q.layoutMu.Lock()
	defer q.layoutMu.Unlock()
	if q.layoutOK.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, q.cfg.WriteTimeout)
	defer cancel()
	if err := q.store.Init(ctx); err != nil {
		return err
	}
	q.layoutOK.Store(true)
	return nil
}

// Ready is closed once the jobs of the partitions taken at Start are
// loaded (or the queue stopped). It does not mean that this process runs
// anything: where other processes run on the namespace, the partitions
// assigned to this one may still be handed over (see Owned).
func (q *Queue) Ready() <-chan struct{} { return q.recov.Ready() }

// Owned returns the partitions whose jobs this process runs now, in
// order. The processes started on a namespace share its partitions out
// evenly by a roster of live workers kept in Redis, so a process may own
// none: before Start, while its share is being handed over by the
// process that had it, while the former owner's lease has not yet lapsed
// (after a crash, at most Config.LeaseTTL), or when there are more
// processes than partitions. A health check can use it with Ready.
func (q *Queue) Owned() []int {
	var out []int
	for p, tok := range q.recov.Tokens() {
		if tok != "" {
			out = append(out, p)
		}
	}
	return out
}

func (q *Queue) closing() bool { return q.isClosing.Load() }

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Shutdown stops the queue gracefully: Schedule and the other calls fail
// with ErrClosed (see ErrClosed), the poller and the wheel stop, no new
// run starts, running handlers are
// waited for until ctx ends (then their contexts are cancelled), their
// outcomes are flushed to Redis, and the partition leases are released so
// that another process takes over at once. Jobs not run stay pending in
// Redis. It returns ctx.Err() if ctx ended first. The queue cannot be
// started again; Shutdown after Shutdown waits for the first and returns
// nil. The Redis client is not closed.
func (q *Queue) Shutdown(ctx context.Context) error {
	if err := checkCtx(ctx, "Shutdown"); err != nil {
		return err
	}
	q.startMu.Lock()
	q.mu.Lock()
	prev := q.state
	if prev >= stateClosing {
		q.startMu.Unlock()
		q.mu.Unlock()
		select {
		case <-q.closed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	q.state = stateClosing
	q.isClosing.Store(true)
	q.mu.Unlock()
	q.startMu.Unlock()
	defer close(q.closed)

	// The stages stop in the order a job passes them, each once nothing
	// can reach it any more:
	var errs []error
	// 1. Intake: calls fail with ErrClosed; the batchers flush what they
	//    have and stop.
	q.stopRecurring()
	q.stopLimits()
	q.writes.Stop()
	q.cancels.Stop()
	q.moves.Stop()
	q.resolves.Stop()
	// 2. Arming: the wheel stops firing (nothing more is claimed or
	//    started from it).
	q.sched.Stop()
	q.gate.wheel.Stop()
	if prev == stateStarted {
		// 3. Claiming and the start gate: the claimers and the starter
		//    return; tasks held for their time, or waiting for a lease
		//    renewal, are unclaimed (queued to settling).
		close(q.stopDispatch)
		q.dispatchers.Wait()
		q.pauses.stop()
		q.pull.waitStopped() // the pull loop holds tasks in the gate: it goes first
		held, waiting := q.gate.empty()
		var release []persist.ResolveOp
		// Spare reservations left after the pull loop's last release
		// (a claimer's due.lua reply that came for a Reserve gone
		// meanwhile): back to the ready sets too, not left to lapse.
		release = append(release, q.pull.takeSpare()...)
		for _, t := range held {
			if t.res != nil {
				// Reserved ahead for a consumer here: back to the ready
				// set for the consumers of other processes.
				release = append(release, releaseOp(t.res))
				continue
			}
			q.settle.unclaim(t)
		}
		if len(release) > 0 {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_, wall := wheel.Readings(q.clock)
			if _, err := q.store.Resolve(rctx, wall.UnixMicro(), release); err != nil {
				q.log.Warn("wheelq: releasing reservations made ahead; they lapse instead", "err", err, "jobs", len(release))
			}
			cancel()
		}
		for _, t := range waiting {
			q.settle.unclaim(t)
		}
		// 4. Workers: nothing sends on work any more (a worker may still
		//    take a task; so never block); tasks left in it are unclaimed,
		//    and running handlers are waited for until ctx ends.
	drain:
		for {
			select {
			case t := <-q.work:
				q.settle.unclaim(t)
			default:
				break drain
			}
		}
		//    A handler that ignores its context is not waited for past
		//    HandlerTimeout and its grace: its run is abandoned (stuck.go),
		//    and once only such handlers are left, Shutdown goes on.
		done := make(chan struct{})
		go func() { q.workers.Wait(); close(done) }()
		tick := time.NewTicker(20 * time.Millisecond)
	wait:
		for {
			select {
			case <-done:
				break wait
			case <-tick.C:
				if q.running.Load() == 0 && q.stuck.Load() > 0 && len(q.work) == 0 {
					break wait // only abandoned runs' handlers are left
				}
			case <-ctx.Done():
				// Hard stop: handlers are told to return; one that ignores
				// its context finishes on its own, and its outcome is
				// dropped (the job stays pending and runs again).
				q.runs.CancelAll()
				errs = append(errs, ctx.Err())
				break wait
			}
		}
		tick.Stop()
		if left := q.stuckRuns(); len(left) > 0 {
			errs = append(errs, &StuckRunsError{Runs: left})
		}
	}
	// 5. Settling: the outcomes are stored (while the leases are still
	//    held: they are fenced by them).
	if err := q.settle.stop(ctx); err != nil && len(errs) == 0 {
		errs = append(errs, err)
	}
	if err := q.limits.stop(ctx); err != nil && len(errs) == 0 {
		errs = append(errs, err)
	}
	// 6. Leases: released, and the roster left, so that another process
	//    takes the partitions over at once.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	if err := q.recov.Stop(rctx); err != nil {
		q.log.Warn("wheelq: releasing leases", "err", err)
	}
	cancel()
	// 7. Contexts: every handler's context ends; the watchdogs stop; this
	//    process's figures go with its place in the roster.
	q.stopStuckWatch()
	crashed := q.cfg.Testing != nil && q.cfg.Testing.Dead() // a simulated kill -9 (crashsim.go)
	if prev == stateStarted && !crashed {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = q.pstore.DropFigures(fctx, q.member)
		cancel()
	}
	q.runs.CancelAll()
	q.runs.Stop()
	q.calls.Stop()
	// 8. The lock file: this process no longer acts on the namespace.
	if crashed {
		q.lock.abandon() // as the kernel does for a killed process
	} else if err := q.lock.release(); err != nil {
		q.log.Warn("wheelq: removing the lock file", "err", err)
	}
	q.mu.Lock()
	q.state = stateClosed
	q.mu.Unlock()
	return errors.Join(errs...)
}

// takeLock makes and locks this process's lock file (see lockfile_unix.go).
// Not with an InstanceID (a former
// incarnation's leases are taken over by that) or LockDir "-". Start
// calls it, with startMu held, before the recoverer starts.
func (q *Queue) takeLock() {
	if q.cfg.InstanceID != "" || q.cfg.LockDir == "-" {
		return
	}
	f, err := takeLock(q.cfg.LockDir, q.cfg.Namespace, q.fence[0])
	if err != nil {
		q.log.Warn("wheelq: no lock file: a restart of this process will wait up to LeaseTTL for its leases to lapse (set Config.LockDir, or InstanceID)",
			"dir", q.cfg.LockDir, "err", err)
		return
	}
	q.lock = f
}

// goneTokens is the recoverer's DeadTokens: the tokens of the processes of
// the namespace on this host that are gone (their lock files are free).
func (q *Queue) goneTokens() []string {
	if q.lock == nil {
		return nil
	}
	return q.lock.gone()
}
