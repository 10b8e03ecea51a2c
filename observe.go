package wheelq

// The observer hook: Config.Observer is told of the engine's events (jobs
// scheduled, started, finished, cancelled; Redis round trips), for metrics
// without a dependency in this module (contrib/prometheus implements it).

import (
	"context"
	"time"

	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/recovery"
)

// Observer is told of a queue's events, for metrics (see Config.Observer;
// the module github.com/wheelq/wheelq/contrib/prometheus implements it).
//
// The queue calls it from the goroutine where the event happens: a
// Schedule or Cancel caller, a worker right before or after a handler, a
// claimer, the goroutine that stores outcomes. No lock of the queue is
// held during a call, but the calls sit on the path of every job: a method
// must return quickly, must not block (no I/O, no channel send that may
// wait), and must be safe for concurrent use. The arguments are never
// retained by the queue; a topic string may be kept.
//
// For a pulled topic (Queue.Pull), JobStarted is a reservation handed to a
// consumer, JobSucceeded an Ack and JobFailed a Nack or a reservation that
// lapsed, each with took 0 (the consumer's time is the consumer's); Ack
// and Nack are told by the process they were called in.
//
// Methods may be added to this interface in later versions: embed
// NopObserver in an implementation so that it keeps compiling.
type Observer interface {
	// JobScheduled: Schedule stored a job of topic (its nil return).
	JobScheduled(topic string)
	// JobStarted: a run of a job of topic starts now, lateness after its
	// due time (a wall-clock difference; 0 or more).
	JobStarted(topic string, lateness time.Duration)
	// JobSucceeded: a handler of topic returned nil after running for took.
	JobSucceeded(topic string, took time.Duration)
	// JobFailed: a handler of topic returned an error (or panicked) after
	// running for took. JobRetried or JobDead follows for the same run.
	JobFailed(topic string, took time.Duration, err error)
	// JobRetried: the failed run's job is to run again after delay. It is
	// told when the retry is decided, before it is stored: a job cancelled
	// or rescheduled during the run keeps that change instead (rare: the
	// outcome of a run is stored only if the job was not changed since it
	// fired), yet was counted here.
	JobRetried(topic string, delay time.Duration)
	// JobDead: a job of topic is dead-lettered, after a failed run or
	// because its record in Redis could not be decoded (then no JobFailed
	// came before, and topic is "" if even its key could not be read).
	// Told when decided, as JobRetried.
	JobDead(topic string)
	// JobCancelled: Cancel deleted a job of topic (its nil or ErrRunning
	// return).
	JobCancelled(topic string)
	// RoundTrip: one Redis round trip of kind op carried batch requests
	// (jobs written, claimed, settled, ...; jobs read for OpRange; 1 for a
	// call on one job or one partition; the partitions counted by an
	// OpCensus, polled by an OpPoll or leased by an OpLease), and
	// took that long; err is its error (nil on success). An op's round
	// trips to several Cluster nodes, pipelined, count as one.
	RoundTrip(op RoundTripOp, took time.Duration, batch int, err error)
}

// NopObserver is an Observer that does nothing: embed it in an Observer
// that implements only some methods, or to keep compiling when methods are
// added.
type NopObserver struct{}

// JobScheduled does nothing.
func (NopObserver) JobScheduled(string) {}

// JobStarted does nothing.
func (NopObserver) JobStarted(string, time.Duration) {}

// JobSucceeded does nothing.
func (NopObserver) JobSucceeded(string, time.Duration) {}

// JobFailed does nothing.
func (NopObserver) JobFailed(string, time.Duration, error) {}

// JobRetried does nothing.
func (NopObserver) JobRetried(string, time.Duration) {}

// JobDead does nothing.
func (NopObserver) JobDead(string) {}

// JobCancelled does nothing.
func (NopObserver) JobCancelled(string) {}

// RoundTrip does nothing.
func (NopObserver) RoundTrip(RoundTripOp, time.Duration, int, error) {}

var _ Observer = NopObserver{}

// RoundTripOp is the kind of a Redis round trip told to Observer.RoundTrip.
type RoundTripOp uint8

// The kinds of round trips. The hot path of a fired job is OpClaim and
// OpSettle (each shared by a batch of jobs); Schedule, Cancel and
// Reschedule are OpWrite, OpCancel and OpReschedule (shared by concurrent
// callers); the poller's are OpPoll, OpLease, OpRange and OpCensus (which
// Stats makes too).
const (
	OpWrite      RoundTripOp = iota + 1 // Schedule: jobs written
	OpCancel                            // Cancel: jobs cancelled
	OpReschedule                        // Reschedule: jobs moved
	OpClaim                             // fired jobs claimed before they start
	OpSettle                            // outcomes stored (acks, retries, dead-letters, unclaims)
	OpPoll                              // the poller's pass (batch: partitions): announcements, inboxes, first page of each window
	OpLease                             // leases taken, renewed or released (batch: partitions)
	OpRange                             // a page of pending jobs read at a reload or scan
	OpCensus                            // counts of pending, overdue and dead jobs (Stats, the sweep)
	OpDeadLetter                        // a corrupt record dead-lettered
)

// RoundTripOps lists every RoundTripOp, in order: a metrics exporter can
// make its series up front.
var RoundTripOps = [...]RoundTripOp{OpWrite, OpCancel, OpReschedule, OpClaim, OpSettle, OpPoll, OpLease, OpRange, OpCensus, OpDeadLetter}

var opNames = [...]string{"unknown", "write", "cancel", "reschedule", "claim", "settle", "poll", "lease", "range", "census", "dead_letter"}

// String returns the op's name in lower case ("write", "claim", ...), as
// metrics label it.
func (o RoundTripOp) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return opNames[0]
}

// observedStore is the store of a queue with an Observer: it times the
// round trips of the calls the engine makes on its own (on the paths of
// jobs and of the poller) and tells the observer. Without an Observer the
// engine uses the store as it is, so a nil Observer costs nothing here.
type observedStore struct {
	engineStore
	obs Observer
}

// observedWatchStore is an observedStore whose store also watches the
// roster (the recoverer looks for recovery.RosterWatcher).
type observedWatchStore struct {
	*observedStore
	w recovery.RosterWatcher
}

func (s observedWatchStore) WatchRoster(ctx context.Context, changed func()) error {
	return s.w.WatchRoster(ctx, changed)
}

// observeStore wraps s so that its round trips are told to obs.
func observeStore(s engineStore, obs Observer) engineStore {
	o := &observedStore{engineStore: s, obs: obs}
	if w, ok := s.(recovery.RosterWatcher); ok {
		return observedWatchStore{observedStore: o, w: w}
	}
	return o
}

func (s *observedStore) Write(ctx context.Context, tokens []string, ws []persist.Write) ([]persist.WriteResult, error) {
	t0 := time.Now()
	r, err := s.engineStore.Write(ctx, tokens, ws)
	s.obs.RoundTrip(OpWrite, time.Since(t0), len(ws), err)
	return r, err
}

func (s *observedStore) CancelMany(ctx context.Context, keys []string) ([]persist.Change, error) {
	t0 := time.Now()
	r, err := s.engineStore.CancelMany(ctx, keys)
	s.obs.RoundTrip(OpCancel, time.Since(t0), len(keys), err)
	return r, err
}

func (s *observedStore) Cancel(ctx context.Context, key string) (persist.Change, error) {
	t0 := time.Now()
	r, err := s.engineStore.Cancel(ctx, key)
	s.obs.RoundTrip(OpCancel, time.Since(t0), 1, err)
	return r, err
}

func (s *observedStore) RescheduleMany(ctx context.Context, tokens []string, ms []persist.Move) ([]persist.Change, error) {
	t0 := time.Now()
	r, err := s.engineStore.RescheduleMany(ctx, tokens, ms)
	s.obs.RoundTrip(OpReschedule, time.Since(t0), len(ms), err)
	return r, err
}

func (s *observedStore) Reschedule(ctx context.Context, tok, key string, due int64, rev uint32) (persist.Change, error) {
	t0 := time.Now()
	r, err := s.engineStore.Reschedule(ctx, tok, key, due, rev)
	s.obs.RoundTrip(OpReschedule, time.Since(t0), 1, err)
	return r, err
}

func (s *observedStore) Claim(ctx context.Context, tokens []string, reqs []persist.ClaimRequest, out []persist.ClaimResult) ([]persist.ClaimResult, error) {
	t0 := time.Now()
	r, err := s.engineStore.Claim(ctx, tokens, reqs, out)
	s.obs.RoundTrip(OpClaim, time.Since(t0), len(reqs), err)
	return r, err
}

func (s *observedStore) Settle(ctx context.Context, tokens []string, now int64, os []persist.Outcome) ([]bool, error) {
	t0 := time.Now()
	r, err := s.engineStore.Settle(ctx, tokens, now, os)
	s.obs.RoundTrip(OpSettle, time.Since(t0), len(os), err)
	return r, err
}

func (s *observedStore) DeadLetterCorrupt(ctx context.Context, tok, key string, raw, rec []byte, now int64) (bool, error) {
	t0 := time.Now()
	r, err := s.engineStore.DeadLetterCorrupt(ctx, tok, key, raw, rec, now)
	s.obs.RoundTrip(OpDeadLetter, time.Since(t0), 1, err)
	return r, err
}

func (s *observedStore) PollMany(ctx context.Context, loaded int64, ttl time.Duration, maxInbox, pageSize int, reqs []persist.PollRequest, out []persist.PollReply) ([]persist.PollReply, error) {
	t0 := time.Now()
	r, err := s.engineStore.PollMany(ctx, loaded, ttl, maxInbox, pageSize, reqs, out)
	if err == nil {
		for i := range r {
			if r[i].Err != nil {
				err = r[i].Err // a partition's failure is the round trip's
				break
			}
		}
	}
	s.obs.RoundTrip(OpPoll, time.Since(t0), len(reqs), err)
	return r, err
}

func (s *observedStore) LeaseAll(ctx context.Context, parts []int, op persist.LeaseOp, token string, ttl time.Duration, dead ...string) ([]bool, error) {
	t0 := time.Now()
	r, err := s.engineStore.LeaseAll(ctx, parts, op, token, ttl, dead...)
	s.obs.RoundTrip(OpLease, time.Since(t0), len(parts), err)
	return r, err
}

func (s *observedStore) RangePending(ctx context.Context, p int, after, until int64, cur persist.Cursor, limit int) ([]persist.Entry, persist.Cursor, error) {
	t0 := time.Now()
	r, c, err := s.engineStore.RangePending(ctx, p, after, until, cur, limit)
	s.obs.RoundTrip(OpRange, time.Since(t0), len(r), err)
	return r, c, err
}

func (s *observedStore) Census(ctx context.Context, before int64) (persist.Census, error) {
	t0 := time.Now()
	r, err := s.engineStore.Census(ctx, before)
	s.obs.RoundTrip(OpCensus, time.Since(t0), s.Partitions(), err)
	return r, err
}

// The engine's events, told to the Observer if there is one.

func (q *Queue) observeScheduled(topic string) {
	if q.cfg.Observer != nil {
		q.cfg.Observer.JobScheduled(topic)
	}
}

func (q *Queue) observeCancelled(topic string) {
	if q.cfg.Observer != nil {
		q.cfg.Observer.JobCancelled(topic)
	}
}

func (q *Queue) observeRetried(topic string, delay time.Duration) {
	if q.cfg.Observer != nil {
		q.cfg.Observer.JobRetried(topic, delay)
	}
}

func (q *Queue) observeDead(topic string) {
	if q.cfg.Observer != nil {
		q.cfg.Observer.JobDead(topic)
	}
}

// observeRun tells obs how a run that began at began (zero: no handler
// ran) ended.
func observeRun(obs Observer, topic string, began time.Time, err error) {
	var took time.Duration
	if !began.IsZero() {
		took = time.Since(began)
	}
	if err == nil {
		obs.JobSucceeded(topic, took)
	} else {
		obs.JobFailed(topic, took, err)
	}
}
