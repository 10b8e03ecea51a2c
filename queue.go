package wheelq

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq/internal/crashpoint"
	"github.com/wheelq/wheelq/persist"
	"github.com/wheelq/wheelq/recovery"
	"github.com/wheelq/wheelq/wheel"
)

const (
	stateNew = iota
	stateStarted
	stateClosing
	stateClosed
)

// idRunLength is how many consecutive random ids share a partition.
const idRunLength = 64

// claimers is the number of goroutines that claim fired jobs.
const claimers = 2

// maxClaim is the most fired jobs claimed in one round trip.
const maxClaim = 1024

// settleLinger is how long outcomes (acks, retries) wait to be sent with
// others. Nothing waits on them, and at low rates batches of one or two
// cost a round trip and a kilobyte of garbage each, whose collections
// delay the jobs that are starting.
const settleLinger = time.Millisecond

// maxClaimLinger bounds how long fired jobs wait to be claimed with others
// (see claimLinger).
const maxClaimLinger = time.Millisecond

// busyRecheck is how soon a job found already claimed is looked at again.
const busyRecheck = 250 * time.Millisecond

// Queue is a durable delayed-job queue. It is safe for concurrent use.
// Make one with New, register handlers with Handle, Start it to run jobs,
// and Shutdown it when done. A queue that is never started can still
// Schedule, Cancel and Reschedule (a producer), but runs nothing.
type Queue struct {
	cfg     Config
	store   engineStore
	clock   wheel.Clock
	log     *slog.Logger
	sched   *wheel.Scheduler
	recov   *recovery.Recoverer
	cache   *lru.Cache[string, *persist.Record]
	writes  *persist.Batcher[persist.Write, persist.WriteResult]
	cancels *persist.Batcher[string, persist.Change]
	moves   *persist.Batcher[persist.Move, persist.Change] // reschedules
	settles *persist.Retrier[persist.Outcome]
	fence   []string // our token for every partition: claims and settles are always fenced

	mu       sync.Mutex
	state    int                // guarded by mu
	handlers map[string]Handler // guarded by mu
	closed   chan struct{}      // closed when Shutdown finished

	firedMu  sync.Mutex
	firedQ   []firedJob // guarded by firedMu
	claimSeq uint64     // guarded by firedMu: the turn of the next batch taken off firedQ

	// The claimers' batches may be in flight at once, and a later one's
	// claim may come back first; their tasks are held in turn, in the
	// order the batches were taken, so that overdue jobs start oldest
	// first. heldSeq is the turn whose tasks may be held now.
	turnMu  sync.Mutex
	turn    *sync.Cond // on turnMu
	heldSeq uint64     // guarded by turnMu

	// inflight holds the keys this process has claimed (or is claiming) and
	// whose outcome is not yet stored: such a job must not run again here,
	// whatever Redis says of it.
	inflightMu sync.Mutex
	inflight   map[string]struct{} // guarded by inflightMu

	firedSig     chan struct{}
	work         chan *task
	stopDispatch chan struct{}
	dispatchers  sync.WaitGroup
	idRun        atomic.Uint64 // counts random ids (see Schedule)
	starterDone  chan struct{}

	// held holds claimed tasks waiting in the wheel (under "/"+key) for
	// their exact due time; startQ the keys whose time has come.
	heldMu sync.Mutex
	held   map[string]*task // guarded by heldMu
	startQ []string         // guarded by heldMu
	// leaseWait holds tasks whose time came while their partition's lease
	// was owned but its validity had run out (a renewal late): they start
	// once a renewal confirms the lease (sink.Renewed), or are dropped
	// with the partition (sink.Release). Guarded by heldMu.
	leaseWait []*task
	// starterHolds says the starter has taken a task off startQ and is
	// handing it to a worker (guarded by heldMu): until then no task may
	// pass it, so that tasks start in the order their time came.
	starterHolds bool
	startSig     chan struct{}
	workers      sync.WaitGroup
	hardCtx      context.Context
	hardCancel   context.CancelFunc

	isClosing atomic.Bool // set once Shutdown begins; read on the Schedule path
	reach     reach       // whether Redis was found unreachable (fail fast)
	running   atomic.Int64
	stats     counters
	late      latency

	// layoutOK says the namespace's layout in Redis was found to be ours
	// (see checkLayout); layoutMu lets one caller check at a time.
	layoutOK atomic.Bool
	layoutMu sync.Mutex

	// corrupts dead-letters jobs whose records cannot be decoded (see
	// deadLetterCorrupt), retrying while Redis is down.
	corrupts *persist.Retrier[corruptJob]
}

// corruptJob is a job to dead-letter for a record that cannot be decoded:
// raw is the record as read, rec the dead record to store instead.
type corruptJob struct {
	key      string
	raw, rec []byte
}

type firedJob struct {
	key string
	due time.Time
}

type task struct {
	key      string
	rec      *persist.Record
	due      time.Time // the stored due time: a wall-clock reading
	part     int       // the job's partition
	epoch    uint64    // the partition's lease epoch before the claim was sent
	verified bool      // claimed in Redis (false: run from the cache while Redis was down; RunWhileRedisDown)
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
		return nil, errors.New("wheelq: nil redis client")
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	pstore, err := persist.New(rdb, persist.Options{Namespace: cfg.Namespace, Partitions: cfg.Partitions,
		ReplicaAcks: cfg.ReplicaAcks, ReplicaTimeout: cfg.ReplicaTimeout})
	if err != nil {
		return nil, err
	}
	var store engineStore = pstore
	if cfg.test.wrapStore != nil {
		store = cfg.test.wrapStore(store)
	}
	if cfg.Testing != nil {
		store = newCrashStore(store, cfg.Testing) // refuses every call once crashed
	}
	cache, err := lru.New[string, *persist.Record](cfg.CacheSize)
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
		handlers:     map[string]Handler{},
		inflight:     map[string]struct{}{},
		closed:       make(chan struct{}),
		firedSig:     make(chan struct{}, 1),
		work:         make(chan *task, cfg.Concurrency),
		stopDispatch: make(chan struct{}),
		starterDone:  make(chan struct{}),
		held:         map[string]*task{},
		startSig:     make(chan struct{}, 1),
	}
	q.turn = sync.NewCond(&q.turnMu)
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
	q.hardCtx, q.hardCancel = context.WithCancel(context.Background())
	q.sched, err = wheel.NewScheduler(wheel.SchedulerConfig{
		Clock:    cfg.Clock,
		MaxDelay: max(2*cfg.Horizon, time.Hour),
	}, q.onFire)
	if err != nil {
		return nil, err
	}
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
	q.recov, err = recovery.New(store, (*sink)(q), recovery.Config{
		Token:        token,
		Member:       member,
		Horizon:      cfg.Horizon,
		PollInterval: cfg.PollInterval,
		LeaseTTL:     cfg.LeaseTTL,
		CallTimeout:  min(cfg.WriteTimeout, cfg.LeaseTTL/3),
		Clock:        pollClock,
		Logger:       cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	bc := persist.BatchConfig{MaxBatch: cfg.MaxBatch, Timeout: cfg.WriteTimeout}
	q.writes = persist.NewBatcher(bc, func(ctx context.Context, ws []persist.Write) ([]persist.WriteResult, error) {
		return store.Write(ctx, q.recov.Tokens(), ws)
	})
	q.cancels = persist.NewBatcher(bc, store.CancelMany)
	q.moves = persist.NewBatcher(bc, func(ctx context.Context, ms []persist.Move) ([]persist.Change, error) {
		return store.RescheduleMany(ctx, q.recov.Tokens(), ms)
	})
	sc := bc
	sc.Linger = settleLinger
	q.settles = persist.NewRetrier(sc, q.execSettle, func(err error, pending int) {
		q.log.Warn("wheelq: outcomes not yet stored, retrying", "err", err, "pending", pending)
	})
	q.corrupts = persist.NewRetrier(bc, q.execCorrupt, func(err error, pending int) {
		q.log.Warn("wheelq: corrupt records not yet dead-lettered, retrying", "err", err, "pending", pending)
	})
	return q, nil
}

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
	q.handlers[topic] = h
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
	q.mu.Lock()
	defer q.mu.Unlock()
	switch q.state {
	case stateStarted:
		return nil
	case stateClosing, stateClosed:
		return ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return fmt.Errorf("wheelq: start: %w", err)
	}
	q.sched.Start()
	for range q.cfg.Concurrency {
		q.workers.Go(q.worker)
	}
	// Two claimers: one builds and reads its round trip while Redis runs
	// the other's, so a burst of due jobs keeps both busy.
	for range claimers {
		q.dispatchers.Go(q.dispatch)
	}
	go q.starter()
	q.recov.Start(ctx)
	q.state = stateStarted
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

// Schedule stores a job and returns its id once Redis has acknowledged the
// write; only then is the job armed in memory. It runs at its due time
// (given by At or After; default now) on the process that owns its
// partition. With ID it is idempotent: an existing id is an ErrDuplicate,
// or replaced with OnDuplicate(Replace).
//
// A nil error means the job is durable (as durable as the Redis
// persistence settings make an acknowledged write; see docs/operations.md).
// An error means it may or may not be stored (for instance when ctx ended
// while the write was in flight); scheduling again with the same ID is
// safe.
func (q *Queue) Schedule(ctx context.Context, topic string, payload []byte, opts ...Option) (string, error) {
	if err := validTopic(topic); err != nil {
		return "", err
	}
	var o scheduleOpts
	for _, opt := range opts {
		if opt == nil {
			return "", fmt.Errorf("%w: nil Option", ErrInvalidOption)
		}
		opt.apply(&o)
	}
	switch {
	case o.hasAt && o.hasAfter:
		return "", fmt.Errorf("%w: At and After together", ErrInvalidOption)
	case o.dup != Reject && o.dup != Replace:
		return "", fmt.Errorf("%w: OnDuplicate(%d)", ErrInvalidOption, int(o.dup))
	}
	_, now := wheel.Readings(q.clock) // due times are wall-clock readings
	due := now.Add(o.after)
	if o.hasAt {
		due = o.at
	}
	if d := due.Sub(now); d > q.cfg.MaxDelay {
		return "", fmt.Errorf("%w: %v ahead, at most %v", ErrTooFar, d.Round(time.Second), q.cfg.MaxDelay)
	}
	if len(payload) > q.cfg.MaxPayload {
		return "", fmt.Errorf("%w: %d bytes, at most %d", ErrPayloadTooLarge, len(payload), q.cfg.MaxPayload)
	}
	id, key := o.id, ""
	if !o.hasID {
		// New ids of consecutive calls share a partition, in runs about
		// as long as a batch: a batch then writes a few partitions with
		// one HSET and one ZADD each, instead of most of them.
		part := int(q.idRun.Add(1)/idRunLength) % q.cfg.Partitions
		key = persist.RandomKey(topic, part, q.cfg.Partitions, rand.Uint64) // the id is its tail: one allocation for both
		id = key[len(topic)+len(persist.KeySep):]
	} else if err := validID(id); err != nil {
		return "", err
	}
	maxAttempts := q.cfg.MaxAttempts
	if o.hasMax {
		if o.maxAttempts < 1 || o.maxAttempts > maxAttemptsLimit {
			return "", fmt.Errorf("%w: MaxAttempts(%d), want 1 to 2^31-1", ErrInvalidOption, o.maxAttempts)
		}
		maxAttempts = o.maxAttempts
	}
	if q.closing() {
		return "", ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return "", fmt.Errorf("wheelq: schedule: %w", err)
	}
	// The record keeps the caller's payload only until it is encoded; the
	// cache gets a copy, and only when the job is armed.
	rec := persist.Record{
		Topic: topic, ID: id, Rev: rand.Uint32(), MaxAttempts: maxAttempts,
		Created: now, Payload: payload,
	}
	if key == "" {
		key = persist.JobKey(topic, id)
	}
	dueUs := ceilMicro(due)
	// The round trip is bounded by WriteTimeout in the batcher; ctx bounds
	// the wait. A random id is new (66 random bits): it takes the plain write.
	probe, err := q.reach.admit(q.clock)
	if err != nil {
		return "", fmt.Errorf("wheelq: schedule %s: %w", key, err)
	}
	res, err := q.writes.Do(ctx, persist.Write{Key: key, Due: dueUs, Record: rec.Encode(), Replace: o.dup == Replace || !o.hasID, Fresh: !o.hasID})
	q.reach.note(err, probe, q.clock)
	if errors.Is(err, persist.ErrClosed) {
		return "", ErrClosed
	}
	if err != nil {
		// The write may have reached Redis with its reply lost. Arm it
		// anyway, uncached: the claim runs it only if Redis has it.
		q.arm(key, dueUs, nil)
		return "", fmt.Errorf("wheelq: schedule %s: %w", key, uncertain(err))
	}
	if res == persist.Duplicate {
		return "", fmt.Errorf("%w: %s", ErrDuplicate, key)
	}
	if q.crashAt(crashpoint.AfterWrite, key) {
		return "", fmt.Errorf("wheelq: schedule %s: %w", key, crashpoint.ErrCrashed)
	}
	q.stats.scheduled.Add(1)
	// Announce, then scan: read LoadedUntil only now, after the write.
	q.arm(key, dueUs, &rec)
	return id, nil
}

// arm puts a job in the wheel if this process owns its partition and the
// job is due within what the poller has announced; otherwise the poller
// (or the owner) will.
func (q *Queue) arm(key string, dueUs int64, rec *persist.Record) {
	p := q.store.PartitionOf(key)
	if dueUs > q.recov.LoadedUntil(p) {
		return
	}
	if rec != nil {
		c := *rec
		c.Payload = bytes.Clone(rec.Payload)
		q.cache.Add(key, &c)
	}
	now, wall := wheel.Readings(q.clock)
	q.armAt(key, dueUs, now, wall)
}

// armAt puts key in the wheel ClaimLead before its due time, so that the
// claim's round trip is done by then (see starter). The due time is a wall
// reading (stored, shared across hosts); the wheel runs on the monotonic
// clock, so it is converted with the clock's readings now and wall, taken
// at the moment of arming: a later step of the wall clock does not move the
// entry (the claim and the start gate check the wall clock again).
func (q *Queue) armAt(key string, dueUs int64, now, wall time.Time) {
	at := wheel.AtWall(now, wall, time.UnixMicro(dueUs)).Add(-q.cfg.ClaimLead)
	if _, err := q.sched.Add(key, at); err != nil && !errors.Is(err, wheel.ErrStopped) {
		q.log.Error("wheelq: arm", "key", key, "err", err)
	}
}

// startPrefix marks the wheel entry that starts a claimed task; no job key
// begins with it (topics are not empty and have no '/').
const startPrefix = "/"

// sink is the Queue as recovery sees it.
type sink Queue

func (s *sink) Arm(es []persist.Entry) {
	q := (*Queue)(s)
	now, wall := wheel.Readings(q.clock)
	for _, e := range es {
		if q.crashAt(crashpoint.MidReload, e.Key) {
			return
		}
		// A score before the epoch (stored by an older version) is
		// past: armed at the epoch, it runs at once.
		q.armAt(e.Key, max(e.Due, 0), now, wall)
	}
}

// Release drops the claimed tasks of a lost partition that have not
// started: held for their time, or waiting for a renewal. The new owner
// runs those jobs (a take-over clears the claim marks). Jobs of the
// partition still in the wheel stay there until they fire and are dropped
// then (the dispatcher checks ownership), which costs memory for up to a
// horizon but no Redis traffic.
func (s *sink) Release(p int) {
	q := (*Queue)(s)
	var drop []*task
	q.heldMu.Lock()
	for k, t := range q.held {
		if t.part == p {
			delete(q.held, k)
			drop = append(drop, t)
		}
	}
	keep := q.leaseWait[:0]
	for _, t := range q.leaseWait {
		if t.part == p {
			drop = append(drop, t)
		} else {
			keep = append(keep, t)
		}
	}
	clear(q.leaseWait[len(keep):])
	q.leaseWait = keep
	q.heldMu.Unlock()
	for _, t := range drop {
		q.sched.Cancel(startPrefix + t.key)
		q.dropTask(t)
	}
	if len(drop) > 0 {
		q.log.Info("wheelq: partition released; its claimed jobs that had not started go to its next owner", "partition", p, "jobs", len(drop))
	}
}

// Busy: a job of partition p claimed here (or being claimed) has an
// outcome not yet stored.
func (s *sink) Busy(p int) bool {
	q := (*Queue)(s)
	q.inflightMu.Lock()
	defer q.inflightMu.Unlock()
	for k := range q.inflight {
		if q.store.PartitionOf(k) == p {
			return true
		}
	}
	return false
}

// Renewed: tasks that waited for a renewal go through the start gate
// again.
func (s *sink) Renewed() {
	q := (*Queue)(s)
	q.heldMu.Lock()
	waiting := q.leaseWait
	q.leaseWait = nil
	q.heldMu.Unlock()
	if len(waiting) == 0 {
		return
	}
	now, wall := wheel.Readings(q.clock)
	for _, t := range waiting {
		q.hold(t, now, wall)
	}
}

// Cancel deletes a job, pending or dead-lettered. After Cancel returns nil
// the job never starts. If a run of it had already been claimed (it is
// starting or running, here or in another process), Cancel still deletes
// it, so it will not be retried, and returns ErrRunning: that run goes on.
// A job that does not exist gives ErrNotFound. Concurrent cancels share
// Redis round trips; if ctx ends first, Cancel returns its error and the
// cancel may still be carried out. Once Shutdown has begun, Cancel returns
// ErrClosed and changes nothing.
func (q *Queue) Cancel(ctx context.Context, topic, id string) error {
	if err := validTopic(topic); err != nil {
		return err
	}
	if err := validID(id); err != nil {
		return err
	}
	if q.closing() {
		return ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return fmt.Errorf("wheelq: cancel: %w", err)
	}
	key := persist.JobKey(topic, id)
	// Concurrent cancels share a round trip, as Schedule calls do.
	probe, err := q.reach.admit(q.clock)
	if err != nil {
		return fmt.Errorf("wheelq: cancel %s: %w", key, err)
	}
	ch, err := q.cancels.Do(ctx, key)
	q.reach.note(err, probe, q.clock)
	if errors.Is(err, persist.ErrClosed) {
		return ErrClosed
	}
	if err != nil {
		return fmt.Errorf("wheelq: cancel %s: %w", key, uncertain(err))
	}
	q.sched.Cancel(key)
	q.cache.Remove(key)
	if t, ok := q.unhold(key); ok {
		// Claimed here but not started: it never will.
		q.unclaim(t)
		if ch == persist.ChangedWhileRunning {
			ch = persist.Changed
		}
	}
	switch ch {
	case persist.NotFound:
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	case persist.ChangedWhileRunning:
		q.stats.cancelled.Add(1)
		return fmt.Errorf("%w: %s", ErrRunning, key)
	}
	q.stats.cancelled.Add(1)
	return nil
}

// Reschedule moves a pending job to a new due time, durably first. A job
// that is not pending (unknown, done or dead-lettered) gives ErrNotFound;
// one with a run in progress is moved, and ErrRunning says that run goes
// on (it will run again at the new time). Concurrent reschedules share
// Redis round trips; if ctx ends first, Reschedule returns its error and
// the move may still be carried out (the job is armed at the new time
// either way; a claim finds where it really is). Once Shutdown has begun,
// Reschedule returns ErrClosed and changes nothing.
func (q *Queue) Reschedule(ctx context.Context, topic, id string, due time.Time) error {
	key, err := q.moveTo(ctx, "reschedule", topic, id, due)
	if err != nil {
		return err
	}
	p := q.store.PartitionOf(key)
	rev := rand.Uint32()
	dueUs := ceilMicro(due)
	// Concurrent reschedules share a round trip, as cancels do.
	probe, err := q.reach.admit(q.clock)
	if err != nil {
		return fmt.Errorf("wheelq: reschedule %s: %w", key, err)
	}
	ch, err := q.moves.Do(ctx, persist.Move{Key: key, Due: dueUs, Rev: rev})
	q.reach.note(err, probe, q.clock)
	if errors.Is(err, persist.ErrClosed) {
		return ErrClosed
	}
	if err != nil {
		// It may have moved: be armed at the new time too; the claim
		// re-arms it at its stored time if it did not.
		q.arm(key, dueUs, nil)
		return fmt.Errorf("wheelq: reschedule %s: %w", key, uncertain(err))
	}
	if ch == persist.NotFound {
		q.sched.Cancel(key)
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if old, ok := q.cache.Peek(key); ok {
		r := *old
		r.Rev = rev
		q.cache.Add(key, &r)
	}
	if t, ok := q.unhold(key); ok {
		q.unclaim(t) // claimed here but not started: it runs at the new time
		if ch == persist.ChangedWhileRunning {
			ch = persist.Changed
		}
	}
	if dueUs <= q.recov.LoadedUntil(p) {
		q.arm(key, dueUs, nil)
	} else {
		q.sched.Cancel(key)
	}
	if ch == persist.ChangedWhileRunning {
		return fmt.Errorf("%w: %s", ErrRunning, key)
	}
	return nil
}

// moveTo checks a call (op) that moves an existing job to a due time
// (Reschedule, Requeue): a valid topic and id, a due time within MaxDelay
// by the wall clock, a queue not shutting down, the namespace's layout. It
// returns the job's key.
func (q *Queue) moveTo(ctx context.Context, op, topic, id string, due time.Time) (string, error) {
	if err := validTopic(topic); err != nil {
		return "", err
	}
	if err := validID(id); err != nil {
		return "", err
	}
	if _, wall := wheel.Readings(q.clock); due.Sub(wall) > q.cfg.MaxDelay {
		return "", fmt.Errorf("%w: %v ahead, at most %v", ErrTooFar, due.Sub(wall).Round(time.Second), q.cfg.MaxDelay)
	}
	if q.closing() {
		return "", ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return "", fmt.Errorf("wheelq: %s: %w", op, err)
	}
	return persist.JobKey(topic, id), nil
}

func (q *Queue) closing() bool { return q.isClosing.Load() }

// onFire is the wheel's callback: it only queues, never blocks.
func (q *Queue) onFire(batch []wheel.Fired) {
	starts := false
	q.firedMu.Lock()
	for _, f := range batch {
		if key, ok := strings.CutPrefix(f.ID, startPrefix); ok {
			q.heldMu.Lock()
			if t, held := q.held[key]; held {
				if q.startNowLocked(t) { // room for it: no hop through the starter
					delete(q.held, key)
				} else {
					q.startQ = append(q.startQ, key)
					starts = true
				}
			}
			q.heldMu.Unlock()
			continue
		}
		q.firedQ = append(q.firedQ, firedJob{key: f.ID, due: f.Due.Add(q.cfg.ClaimLead)})
	}
	q.firedMu.Unlock()
	wake(q.firedSig)
	if starts {
		wake(q.startSig)
	}
}

// claimBufs are a dispatcher's slices for claiming a batch, reused from
// batch to batch (at most maxClaim long) so that a claim leaves little
// garbage. Nothing of them is kept after claimAndRun returns.
type claimBufs struct {
	batch, owned []firedJob
	reqs         []persist.ClaimRequest
	cached       []*persist.Record
	epochs       []uint64
}

// reset empties the slices for the next batch, dropping what they point to.
func (b *claimBufs) reset() {
	clear(b.batch)
	clear(b.owned)
	clear(b.reqs)
	clear(b.cached)
	b.batch, b.owned, b.reqs, b.cached, b.epochs = b.batch[:0], b.owned[:0], b.reqs[:0], b.cached[:0], b.epochs[:0]
}

// dispatch claims fired jobs in Redis and hands them to the workers.
func (q *Queue) dispatch() {
	var bufs claimBufs
	var retry []firedJob
	backoff := 10 * time.Millisecond
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	for {
		select {
		case <-q.firedSig:
			if d := q.claimLinger(); d > 0 {
				linger.Reset(d)
				select {
				case <-linger.C:
				case <-q.stopDispatch:
					return
				}
			}
		case <-timer.C:
		case <-q.stopDispatch:
			return
		}
		for {
			q.firedMu.Lock()
			n := min(len(q.firedQ), maxClaim-len(retry))
			batch := append(append(bufs.batch[:0], retry...), q.firedQ[:n]...)
			all := q.firedQ
			clear(all[:n])
			q.firedQ = all[n:]
			if len(q.firedQ) == 0 {
				q.firedQ = nil // let a large backlog's array go
				if cap(all) <= maxClaim {
					q.firedQ = all[:0] // a small one is reused
				}
			}
			more := len(q.firedQ) > 0
			var seq uint64
			if len(batch) > 0 {
				seq = q.claimSeq
				q.claimSeq++
			}
			q.firedMu.Unlock()
			if len(batch) == 0 {
				break
			}
			if more {
				wake(q.firedSig) // the other claimer takes the next batch
			}
			bufs.batch = batch
			retry = q.claimAndRun(batch, &bufs, seq)
			bufs.reset()
			if len(retry) > 0 {
				timer.Reset(backoff)
				backoff = min(2*backoff, time.Second)
				break
			}
			backoff = 10 * time.Millisecond
			if !more {
				break
			}
		}
	}
}

// claimLinger returns how long the dispatcher may wait for more fired jobs
// before it claims the queued ones: up to maxClaimLinger, while the earliest
// queued job is still more than half the claim lead away from its due time.
// Small claim batches cost a round trip each and a kilobyte of garbage per
// job, and the collections of that garbage delay jobs that are starting.
func (q *Queue) claimLinger() time.Duration {
	q.firedMu.Lock()
	if len(q.firedQ) == 0 || len(q.firedQ) >= maxClaim/4 {
		q.firedMu.Unlock()
		return 0
	}
	first := q.firedQ[0].due
	q.firedMu.Unlock()
	d := min(maxClaimLinger, first.Sub(q.clock.Now())-q.cfg.ClaimLead/2)
	if d < 50*time.Microsecond {
		return 0
	}
	return d
}

// claimAndRun claims a batch of fired jobs and holds the claimed ones until
// their due time, in the batch's turn seq (see turn). It returns the jobs
// to claim again later (Redis errors), in a slice of their own. It keeps
// its slices in bufs, the dispatcher's, which resets them after.
func (q *Queue) claimAndRun(batch []firedJob, bufs *claimBufs, seq uint64) (retry []firedJob) {
	var toHold []task // one allocation for the batch's tasks
	defer func() {    // on every return: the next batch waits for this one
		q.awaitTurn(seq)
		now, wall := wheel.Readings(q.clock)
		for i := range toHold {
			q.hold(&toHold[i], now, wall)
		}
		q.passTurn()
	}()
	owned := bufs.owned[:0]
	var busy []firedJob
	q.inflightMu.Lock()
	for _, f := range batch {
		if q.recov.LoadedUntil(q.store.PartitionOf(f.key)) == recovery.NotOwned {
			continue
		}
		if _, running := q.inflight[f.key]; running {
			busy = append(busy, f)
			continue
		}
		q.inflight[f.key] = struct{}{}
		owned = append(owned, f)
	}
	q.inflightMu.Unlock()
	bufs.owned = owned
	_, wall := wheel.Readings(q.clock)
	recheckUs := wall.Add(busyRecheck).UnixMicro()
	for _, f := range busy {
		// Armed again while a run of it is in progress here: look again
		// once that run has settled.
		q.stats.skipped.Add(1)
		q.arm(f.key, recheckUs, nil)
	}
	if len(owned) == 0 {
		return nil
	}
	notRun := func(key string) {
		q.inflightMu.Lock()
		delete(q.inflight, key)
		q.inflightMu.Unlock()
	}
	reqs := slices.Grow(bufs.reqs[:0], len(owned))[:len(owned)]
	cached := slices.Grow(bufs.cached[:0], len(owned))[:len(owned)]
	bufs.reqs, bufs.cached = reqs, cached
	for i, f := range owned {
		reqs[i].Key = f.key
		if rec, ok := q.cache.Peek(f.key); ok {
			cached[i] = rec
			reqs[i].Rev, reqs[i].HaveRev = rec.Rev, true
		}
	}
	// The lease epochs before the claim is sent: a task starts only in the
	// epoch its claim was made in (see mayStart).
	epochs := bufs.epochs[:0]
	for _, f := range owned {
		epochs = append(epochs, q.recov.Epoch(q.store.PartitionOf(f.key)))
	}
	bufs.epochs = epochs
	ctx, cancel := context.WithTimeout(context.Background(), q.cfg.WriteTimeout)
	res, err := q.store.Claim(ctx, q.fence, reqs)
	cancel()
	if errors.Is(err, persist.ErrFenced) {
		// A partition was lost; the recoverer will release it, and its jobs
		// are dropped above on the next try.
		for _, f := range owned {
			notRun(f.key)
		}
		return slices.Clone(owned)
	}
	if err != nil {
		q.stats.redisErrors.Add(1)
		if !q.cfg.RunWhileRedisDown {
			// No start without a confirmed claim: claim them again later.
			q.log.Warn("wheelq: claim failed; claiming again", "err", err, "jobs", len(owned))
			for _, f := range owned {
				notRun(f.key)
			}
			return slices.Clone(owned)
		}
		q.log.Warn("wheelq: claim failed; running cached jobs unverified (RunWhileRedisDown)", "err", err, "jobs", len(owned))
		now, wall := wheel.Readings(q.clock)
		for i, f := range owned {
			if cached[i] == nil {
				notRun(f.key)
				retry = append(retry, f)
				continue
			}
			p := q.store.PartitionOf(f.key)
			due := wall.Add(f.due.Sub(now)) // f.due is on the wheel's timeline
			toHold = append(toHold, task{key: f.key, rec: cached[i], due: due, part: p, epoch: epochs[i]})
		}
		return retry
	}
	_, wall = wheel.Readings(q.clock)
	// A job whose stored due time is more than the claim lead away is not
	// due: it was rescheduled since it was armed, or the wall clock stepped
	// back since. It is armed again at its stored time.
	notDueUs := wall.Add(q.cfg.ClaimLead).UnixMicro()
	var unclaim []persist.Outcome
	var deferred []firedJob
	tasks := make([]task, 0, len(owned))
	for i, f := range owned {
		r := res[i]
		if r.Gone || r.Busy || r.Deferred {
			notRun(f.key)
		}
		if r.Deferred {
			// Past the claim's byte budget: claimed in a call of its own.
			deferred = append(deferred, f)
			continue
		}
		if r.Gone {
			q.stats.skipped.Add(1)
			q.cache.Remove(f.key)
			continue
		}
		if r.Busy {
			// Claimed already: armed twice (by Schedule and by a scan), or
			// rescheduled while running. Look again shortly: by then the
			// run has settled, and the job is gone or due anew.
			q.stats.skipped.Add(1)
			q.arm(f.key, max(r.Due, recheckUs), nil)
			continue
		}
		if r.Due > notDueUs {
			unclaim = append(unclaim, persist.Outcome{Op: persist.Unclaim, Key: f.key})
			q.arm(f.key, r.Due, nil)
			continue
		}
		rec := cached[i]
		if r.Record != nil {
			dec, err := persist.DecodeRecord(r.Record)
			if err != nil {
				q.deadLetterCorrupt(f.key, r.Record, err) // leaves inflight once stored
				continue
			}
			dec.Topic, dec.ID, _ = persist.SplitJobKey(f.key)
			rec = &dec
			q.cache.Add(f.key, rec)
		}
		p := q.store.PartitionOf(f.key)
		tasks = append(tasks, task{key: f.key, rec: rec, due: time.UnixMicro(r.Due), part: p, epoch: epochs[i], verified: true})
	}
	if len(unclaim) > 0 {
		_ = q.settles.Add(unclaim...)
	}
	if len(deferred) > 0 {
		q.refire(deferred)
	}
	toHold = tasks
	return nil
}

// refire puts fired jobs back at the front of the fired queue, to be
// claimed at once (they are older than the jobs queued behind them).
func (q *Queue) refire(fs []firedJob) {
	q.firedMu.Lock()
	q.firedQ = append(slices.Clone(fs), q.firedQ...)
	q.firedMu.Unlock()
	wake(q.firedSig)
}

// awaitTurn waits until the tasks of the batch taken in turn seq may be
// held: those of every batch taken before it are.
func (q *Queue) awaitTurn(seq uint64) {
	q.turnMu.Lock()
	for q.heldSeq != seq {
		q.turn.Wait()
	}
	q.turnMu.Unlock()
}

// passTurn lets the next batch's tasks be held.
func (q *Queue) passTurn() {
	q.turnMu.Lock()
	q.heldSeq++
	q.turnMu.Unlock()
	q.turn.Broadcast()
}

// hold keeps a claimed task until its exact due time, when the wheel
// fires its start entry. A task due already (a backlog, or a claim that
// came late) starts at once, as onFire would start it, without a round
// through the wheel. now and wall are the caller's readings of the clock
// (wheel.Readings), taken once for a batch: they only ever trail the clock,
// so no task starts early.
func (q *Queue) hold(t *task, now, wall time.Time) {
	q.heldMu.Lock()
	if !t.due.After(wall) {
		if q.startNowLocked(t) {
			q.heldMu.Unlock()
			return
		}
		q.held[t.key] = t
		q.startQ = append(q.startQ, t.key)
		q.heldMu.Unlock()
		wake(q.startSig)
		return
	}
	q.held[t.key] = t
	q.heldMu.Unlock()
	if _, err := q.sched.Add(startPrefix+t.key, wheel.AtWall(now, wall, t.due)); err != nil {
		// Stopped: the task is unclaimed at shutdown with the others.
		q.log.Debug("wheelq: hold", "key", t.key, "err", err)
	}
}

// unhold takes back a held task that has not started, if there is one.
func (q *Queue) unhold(key string) (*task, bool) {
	q.heldMu.Lock()
	t, ok := q.held[key]
	delete(q.held, key)
	q.heldMu.Unlock()
	if ok {
		q.sched.Cancel(startPrefix + key)
	}
	return t, ok
}

// startNowLocked hands t to an idle worker if one can take it without
// passing a task whose time came earlier; it reports whether it did. The
// caller holds heldMu.
func (q *Queue) startNowLocked(t *task) bool {
	if len(q.startQ) > 0 || q.starterHolds {
		return false
	}
	select {
	case q.work <- t:
		return true
	default:
		return false
	}
}

// starter hands held tasks to the workers when their time comes and no
// worker could take them at once. (Workers that finish a run take such
// tasks themselves; the starter wakes idle ones.)
func (q *Queue) starter() {
	defer close(q.starterDone)
	for {
		select {
		case <-q.startSig:
		case <-q.stopDispatch:
			return
		}
		for {
			q.heldMu.Lock()
			t := q.popStartLocked()
			q.starterHolds = t != nil
			q.heldMu.Unlock()
			if t == nil {
				break
			}
			select {
			case q.work <- t:
			case <-q.stopDispatch:
				q.unclaim(t)
				return
			}
			q.heldMu.Lock()
			q.starterHolds = false
			q.heldMu.Unlock()
		}
	}
}

// nextStart gives a free worker the task whose time came first: one in
// the work channel, else the first of the start queue. While the starter
// hands a task over it gives none (the worker then receives that one from
// the work channel, in order). Under heldMu, with the starter idle, no one
// else can send on the channel, so what is in it is older than the queue.
func (q *Queue) nextStart() *task {
	q.heldMu.Lock()
	defer q.heldMu.Unlock()
	if q.starterHolds {
		return nil
	}
	select {
	case t := <-q.work:
		return t
	default:
	}
	return q.popStartLocked()
}

// popStartLocked takes the first task of the start queue, if there is
// one. The caller holds heldMu.
func (q *Queue) popStartLocked() *task {
	for len(q.startQ) > 0 {
		key := q.startQ[0]
		q.startQ[0] = ""
		q.startQ = q.startQ[1:]
		if len(q.startQ) == 0 {
			q.startQ = nil // let a large backlog's array go
		}
		if t, ok := q.held[key]; ok {
			delete(q.held, key)
			return t
		}
		// cancelled or rescheduled while held
	}
	return nil
}

// unclaim gives back the claim of a task that will not run here.
func (q *Queue) unclaim(t *task) {
	if !t.verified {
		q.inflightMu.Lock()
		delete(q.inflight, t.key)
		q.inflightMu.Unlock()
		return
	}
	_ = q.settles.Add(persist.Outcome{Op: persist.Unclaim, Key: t.key})
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// deadLetterCorrupt moves a job whose record cannot be decoded to the
// dead-letter set, keeping the raw bytes as its payload and the cause as
// its last error. The move is guarded by the whole raw record (which may be
// too short to hold a revision), and leaves inflight once stored.
func (q *Queue) deadLetterCorrupt(key string, raw []byte, cause error) {
	q.log.Error("wheelq: corrupt job record, dead-lettering it", "key", key, "err", cause)
	rec := persist.Record{Rev: rand.Uint32(), LastError: cause.Error(), Payload: raw}
	_ = q.corrupts.Add(corruptJob{key: key, raw: raw, rec: rec.Encode()})
	q.stats.dead.Add(1)
}

// execCorrupt stores a batch of deadLetterCorrupt's jobs, one script call
// each (corrupt records are rare). A job of a partition lost to another
// owner is left to that owner, whose claim finds it corrupt too.
func (q *Queue) execCorrupt(ctx context.Context, cs []corruptJob) error {
	_, wall := wheel.Readings(q.clock) // the dead set's score: a wall reading
	now := wall.UnixMicro()
	for _, c := range cs {
		p := q.store.PartitionOf(c.key)
		if q.recov.Holds(p) {
			_, err := q.store.DeadLetterCorrupt(ctx, q.fence[p], c.key, c.raw, c.rec, now)
			if err != nil && !errors.Is(err, persist.ErrFenced) {
				// The batch is retried whole; the ones done already find
				// their record changed and are left alone.
				q.stats.redisErrors.Add(1)
				return err
			}
		}
		q.inflightMu.Lock()
		delete(q.inflight, c.key)
		q.inflightMu.Unlock()
	}
	return nil
}

func (q *Queue) worker() {
	for {
		// Stop first: a task still buffered at shutdown is unclaimed.
		select {
		case <-q.stopDispatch:
			return
		default:
		}
		// A worker that just finished a run takes its next task without
		// parking.
		if t := q.nextStart(); t != nil {
			q.run(t)
			continue
		}
		select {
		case t := <-q.work:
			q.run(t)
		case <-q.stopDispatch:
			return
		}
	}
}

// mayStart is the start gate, passed by every task just before its
// handler is called. A task starts only when the wall clock has reached its
// due time (it stepped back since the task was held: hold it again), and
// only while this process owns the partition by its own conservative
// clock, in the lease epoch its claim was made in. A task of a lost
// partition (or of an epoch gone by) is dropped: the partition's owner runs
// the job. A task whose partition is owned but whose lease validity has run
// out (a renewal is late: a pause, a slow Redis, a cut network) waits for a
// renewal and is dropped with the partition if none comes.
func (q *Queue) mayStart(t *task, now, wall time.Time) bool {
	if wall.Before(t.due) {
		q.hold(t, now, wall)
		return false
	}
	if q.recov.Epoch(t.part) != t.epoch || q.recov.LoadedUntil(t.part) == recovery.NotOwned {
		// Another epoch, or released: a claim whose epoch was read just
		// after a hand-over began has the new epoch but no owner here;
		// waiting for a renewal would keep the hand-over waiting for it.
		q.dropTask(t)
		return false
	}
	if q.recov.Owns(t.part, now) {
		return true
	}
	q.heldMu.Lock()
	q.leaseWait = append(q.leaseWait, t)
	q.heldMu.Unlock()
	// A renewal may have come between the check and the wait: look again.
	if q.recov.Owns(t.part, q.clock.Now()) {
		(*sink)(q).Renewed()
	}
	return false
}

// dropTask forgets a claimed task that will not start here because its
// partition is no longer (surely) this process's. Nothing is sent to
// Redis: the partition's next owner clears the claim marks when it takes
// the partition over.
func (q *Queue) dropTask(t *task) {
	q.stats.dropped.Add(1)
	q.inflightMu.Lock()
	delete(q.inflight, t.key)
	q.inflightMu.Unlock()
}

func (q *Queue) run(t *task) {
	now, wall := wheel.Readings(q.clock)
	if !q.mayStart(t, now, wall) {
		return
	}
	if q.crashAt(crashpoint.AfterClaim, t.key) {
		return
	}
	q.running.Add(1)
	defer q.running.Add(-1)
	q.late.record(wall.Sub(t.due))
	q.stats.fired.Add(1)
	attempt := t.rec.Attempt + 1
	job := &Job{
		Topic: t.rec.Topic, ID: t.rec.ID, Payload: t.rec.Payload, Attempt: attempt,
		MaxAttempts: t.rec.MaxAttempts, Due: t.due, Created: t.rec.Created, LastError: t.rec.LastError,
	}
	q.mu.Lock()
	h := q.handlers[job.Topic]
	q.mu.Unlock()
	var err error
	if h == nil {
		err = fmt.Errorf("%w %q", ErrNoHandler, job.Topic)
	} else {
		ctx, cancel := context.WithTimeout(q.hardCtx, q.cfg.HandlerTimeout)
		if q.crashAt(crashpoint.DuringRun, t.key) {
			ctx = abandoned(ctx)
		}
		err = call(ctx, h, job)
		cancel()
	}
	if q.crashAt(crashpoint.AfterRun, t.key) {
		return
	}
	q.settle(t, attempt, err)
}

func call(ctx context.Context, h Handler, job *Job) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h.HandleJob(ctx, job)
}

// settle queues the outcome of a run; the Retrier stores it, retrying
// while Redis is down.
func (q *Queue) settle(t *task, attempt int, err error) {
	o := persist.Outcome{Key: t.key, Rev: t.rec.Rev}
	var perm *PermanentError
	var retryErr *RetryError
	switch {
	case err == nil:
		o.Op = persist.Ack
		q.cache.Remove(t.key)
		q.stats.succeeded.Add(1)
	case errors.As(err, &perm) || attempt >= t.rec.MaxAttempts:
		o.Op = persist.Dead
		rec := *t.rec
		rec.Rev, rec.Attempt, rec.LastError = rand.Uint32(), attempt, truncate(err.Error(), 2048)
		o.Record = rec.Encode()
		q.cache.Remove(t.key)
		q.stats.dead.Add(1)
		q.log.Warn("wheelq: job dead-lettered", "topic", t.rec.Topic, "id", t.rec.ID, "attempt", attempt,
			"max_attempts", t.rec.MaxAttempts, "err", err)
	default:
		delay := q.cfg.Backoff(attempt, err)
		if errors.As(err, &retryErr) {
			delay = retryErr.Delay
		}
		o.Op = persist.Retry
		rec := *t.rec
		rec.Rev, rec.Attempt, rec.LastError = rand.Uint32(), attempt, truncate(err.Error(), 2048)
		o.Record = rec.Encode()
		_, wall := wheel.Readings(q.clock)
		o.Due = ceilMicro(wall.Add(delay))
		q.cache.Add(t.key, &rec)
		q.stats.retried.Add(1)
		q.log.Warn("wheelq: job failed; retrying", "topic", t.rec.Topic, "id", t.rec.ID, "attempt", attempt,
			"max_attempts", t.rec.MaxAttempts, "retry_in", delay, "err", err)
	}
	if aerr := q.settles.Add(o); aerr != nil {
		// Only after a hard shutdown: the job stays pending and runs again.
		q.log.Warn("wheelq: outcome dropped after shutdown; the job will run again", "key", t.key)
	}
}

// execSettle stores a batch of outcomes; retries are armed once stored.
func (q *Queue) execSettle(ctx context.Context, os []persist.Outcome) error {
	// Outcomes of partitions lost to another owner are dropped: that owner
	// runs those jobs again (at-least-once). Shutdown stores the outcomes
	// before it releases the leases, and a partition handed over keeps its
	// lease until they are stored (Holds).
	kept := os
	for i, o := range os {
		if !q.recov.Holds(q.store.PartitionOf(o.Key)) {
			kept = slices.Clip(os[:i:i]) // copy on the first drop
			for _, o := range os[i+1:] {
				if q.recov.Holds(q.store.PartitionOf(o.Key)) {
					kept = append(kept, o)
				}
			}
			break
		}
	}
	var applied []bool
	if len(kept) > 0 {
		var err error
		_, wall := wheel.Readings(q.clock)
		applied, err = q.store.Settle(ctx, q.fence, wall.UnixMicro(), kept)
		if err != nil {
			q.stats.redisErrors.Add(1)
			return err
		}
	}
	q.inflightMu.Lock()
	for _, o := range os {
		delete(q.inflight, o.Key)
	}
	q.inflightMu.Unlock()
	for i, o := range kept {
		if applied[i] && o.Op == persist.Retry {
			q.arm(o.Key, o.Due, nil)
		}
	}
	return nil
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
	q.mu.Lock()
	prev := q.state
	if prev >= stateClosing {
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
	defer close(q.closed)

	var errs []error
	q.writes.Close()
	q.cancels.Close()
	q.moves.Close()
	q.sched.Stop()
	if prev == stateStarted {
		close(q.stopDispatch)
		q.dispatchers.Wait()
		<-q.starterDone
		q.heldMu.Lock()
		held := q.held
		q.held = map[string]*task{}
		waiting := q.leaseWait
		q.leaseWait = nil
		q.heldMu.Unlock()
		for _, t := range held {
			q.unclaim(t)
		}
		for _, t := range waiting {
			q.unclaim(t)
		}
		// The wheel and the claimers are stopped: nothing sends on work
		// any more. (A worker may still take a task; so never block.)
	drain:
		for {
			select {
			case t := <-q.work:
				q.unclaim(t)
			default:
				break drain
			}
		}
		done := make(chan struct{})
		go func() { q.workers.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			// Hard stop: handlers are told to return; one that ignores its
			// context finishes on its own, and its outcome is dropped (the
			// job stays pending and runs again).
			q.hardCancel()
			errs = append(errs, ctx.Err())
		}
	}
	if err := q.corrupts.Close(ctx); err != nil && len(errs) == 0 {
		errs = append(errs, err)
	}
	if err := q.settles.Close(ctx); err != nil && len(errs) == 0 {
		errs = append(errs, err)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	if err := q.recov.Stop(rctx); err != nil {
		q.log.Warn("wheelq: releasing leases", "err", err)
	}
	cancel()
	q.hardCancel()
	q.mu.Lock()
	q.state = stateClosed
	q.mu.Unlock()
	return errors.Join(errs...)
}

// ceilMicro returns t in unix microseconds, rounded up, so that a stored
// due time is never before the requested one. A time before the Unix
// epoch (the zero time.Time, say) gives 0: it is past, and runs at once
// all the same, while the wheel's time of every stored due time stays
// within a time.Duration of the clock.
func ceilMicro(t time.Time) int64 {
	us := t.UnixMicro()
	if t.Nanosecond()%1000 != 0 {
		us++
	}
	return max(us, 0)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
