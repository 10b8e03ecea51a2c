package wheelq

// Pulled topics: instead of a Handler, consumers reserve due jobs
// (Reserve), and ack, nack or touch each reservation by its token. A job
// of a pulled topic goes through the claims' wheel and the start gate as
// any job, but unclaimed: the partition's owner reserves it for a
// consumer blocked in Reserve here ClaimLead before its time and hands it
// over at its exact due time, or at that time queues it to its topic's
// ready set in Redis (due.lua; handout.go), where a consumer of any
// process takes it, oldest first (take.lua), woken by the announcement of
// the queueing. A reservation lives in Redis (the job's mark "~" and its
// token; the job's score its deadline): its owner looks at it again at
// the deadline and, if it was neither acked nor nacked nor touched,
// stores the failed attempt, as for a handler that timed out. This file
// holds the API, the consumers' side and the stage's state.

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wheelq/wheelq/internal/batch"
	"github.com/wheelq/wheelq/internal/crashpoint"
	"github.com/wheelq/wheelq/internal/errs"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/wheel"
)

// Errors of pulled topics.
var (
	// ErrReservationLost is returned by Ack, Nack and Touch when the
	// reservation is no longer current: its time-to-run lapsed (the job
	// counts a failed attempt and is handed out again), or the job was
	// cancelled, rescheduled or replaced (it runs again at its new time),
	// or finished by another reservation, or the token is not one Reserve
	// gave. The message says which where it is known.
	ErrReservationLost = errors.New("wheelq: reservation lost")
	// ErrTopicMode is returned by Pull and Handle for a topic that this
	// queue consumes the other way, and by Start for a topic recorded in
	// Redis as consumed the other way in the namespace (by another
	// process; docs/operations.md says how to change a topic's mode); and,
	// with Config.RefuseUnhandled, by Schedule, ScheduleBatch,
	// DeclareRecurring, Requeue and RequeueWhere for a topic this queue
	// neither handles nor pulls.
	ErrTopicMode = persist.ErrTopicMode
	// ErrNotPulled is returned by Reserve for a topic this queue did not
	// declare with Pull.
	ErrNotPulled = errors.New("wheelq: topic not pulled by this queue")
	// ErrNotStarted is returned by Reserve before Start.
	ErrNotStarted = errors.New("wheelq: queue not started")
)

// Bounds of Reserve.
const (
	// DefaultTTR is a reservation's time-to-run when ReserveOptions.TTR is
	// zero.
	DefaultTTR = 30 * time.Second
	// MaxTTR is the longest time-to-run (of Reserve and Touch).
	MaxTTR = 24 * time.Hour
	// MinTTR is the shortest.
	MinTTR = 10 * time.Millisecond
	// MaxReserve is the most jobs one Reserve returns.
	MaxReserve = 1000
)

// ackLinger is how long an Ack (Nack, Touch) waits for others to share
// its round trip.
const ackLinger = 200 * time.Microsecond

// ackAllAlone is the fewest acks an AckAll sends in a round trip of its
// own rather than through the acks' batcher: enough to pay for the call
// alone. Through the batcher (one round trip in flight, lingering), the
// AckAlls of 8 consumers of 100 jobs each drained a backlog at 0.84x the
// rate of round trips of their own.
const ackAllAlone = 16

// pullTopicsRecheck is how often a started process reads the
// namespace's topic modes without an announcement.
const pullTopicsRecheck = 10 * time.Second

// pullRecheck is how often a blocked Reserve looks at the ready sets
// without an announcement (one may be lost with a broken subscription).
const pullRecheck = time.Second

// ReserveOptions says what Reserve takes.
type ReserveOptions struct {
	// Topics are the topics to take jobs of, each declared with Pull.
	Topics []string
	// Max is the most jobs to return, 1 to MaxReserve. Zero means 1.
	Max int
	// TTR is the reservations' time-to-run: unless touched, a reservation
	// not acked or nacked within it lapses, counts a failed attempt, and
	// the job is handed out again (after the topic's backoff). Zero means
	// DefaultTTR; else MinTTR to MaxTTR.
	TTR time.Duration
	// NoWait makes Reserve return at once with what is ready, possibly
	// nothing (and a nil error), instead of blocking until a job is due.
	// It reads the ready sets only when jobs were announced since its
	// last look here (or a second has passed), so polling an empty topic
	// costs no round trip. With Redis down, it returns ErrUnavailable
	// once a look has failed (within that second), every call until
	// Redis answers again. It never waits for another call's look at
	// Redis (with Redis silent, the look that probes whether it is back
	// lasts up to Config.WriteTimeout): with one in flight it returns
	// the reservations taken here already, if any; else ErrUnavailable
	// while Redis is known unreachable, or what its own look finds.
	NoWait bool
}

// Receipt names a reservation: the job and the token Reserve gave for it.
// It is all Ack, Nack and Touch need, so it may travel to another process
// (or another language, through the server).
type Receipt struct {
	Topic, ID, Token string
}

// Reservation is a job handed to a consumer by Reserve.
type Reservation struct {
	Receipt
	// Job is the job as a handler would get it: Attempt counts this
	// reservation.
	Job Job
	// Deadline is when the reservation lapses unless acked, nacked or
	// touched.
	Deadline time.Time
}

// NackOptions says what becomes of a job whose reservation is nacked.
type NackOptions struct {
	// Err is the failure, recorded as the job's LastError (nil: "nacked").
	Err error
	// RetryAfter, if above zero, is when the job is due again; zero uses
	// the backoff (Config.Backoff), as for a handler's error.
	RetryAfter time.Duration
	// Permanent dead-letters the job at once, whatever its attempts.
	Permanent bool
}

// pullStage holds the consumers blocked in Reserve and the jobs of pulled
// topics whose time has come.
type pullStage struct {
	mu sync.Mutex
	// declared holds the topics this queue pulls (Pull): replaced whole,
	// under mu, never changed, so that Reserve and Schedule (with
	// Config.RefuseUnhandled) read it without mu.
	declared atomic.Pointer[map[string]bool]
	// known holds the namespace's pulled topics: declared here, or
	// recorded in Redis by another process (read at Start and every
	// pauseRecheck, and when announced). A job of one is never run by a
	// handler here. Replaced whole, never changed (read without mu on
	// every fired job).
	known atomic.Pointer[map[string]bool]
	// byTopic lists the waiters of each topic, in the order they came:
	// a job, an announcement or a take concerns only its topic's waiters,
	// however many wait on others (a server holds a long poll per idle
	// consumer). Guarded by mu.
	byTopic map[string][]*pullWaiter
	// blocked lists the waiters that would have read the ready sets while
	// another did (taking): they are woken when it is done. Guarded by mu.
	blocked []*pullWaiter
	// looked is when the ready sets of each topic were last read (a take):
	// a blocked Reserve's periodic look (pullRecheck) is skipped for a
	// topic looked at since. Guarded by mu.
	looked map[string]time.Time
	due    []*task // guarded by mu: jobs whose time came, for the pull loop
	// gen counts, per topic, the announcements that jobs were queued to
	// its ready sets; drained is gen as it was before the last take that
	// found none of the topic's jobs. A Reserve reads the
	// ready sets only while a topic may have some (gen != drained), or
	// every pullRecheck: a take costs a read of every partition, and at
	// thousands of Reserves a second they kept Redis from handing out the
	// jobs coming due. Guarded by mu.
	gen, drained map[string]uint64
	// spare holds jobs reserved for a Reserve that returned before they
	// were handed over (it returns at its first job): the next Reserve
	// here that wants them takes them with no round trip; those left
	// spareTTL are released to the ready sets (pullLoop). Releasing each
	// at once sent every consumer to read the ready sets again. Guarded
	// by mu.
	spare []spareJob
	// unsure holds, per job key, the nonce of a reservation due.lua was
	// asked to make by a call that failed (its reply lost, maybe after it
	// applied) and the latest ahead bound of such calls: the job's next
	// reservation here sends the same nonce, so that due.lua knows its own
	// reservation (DueReplayed) and the job is handed out rather than left
	// reserved for no one to lapse as a failed attempt. Dropped at the
	// key's next due.lua reply. Guarded by mu.
	unsure map[string]unsureRes
	// taking says a Reserve here is reading the ready sets for every
	// waiter like it (takeFor): the others wait for its result rather
	// than all reading at once. Guarded by mu.
	taking bool
	sig    chan struct{} // due has jobs
	done   chan struct{} // closed when the pull loop returned (made by Start)
	seq    uint64        // guarded by mu: nonces and the partition a take starts from
	// nonce starts the nonces of this process's reservations made at a
	// due time: random (made by New), so that no two processes' tokens
	// for one job at one revision can be alike (a prefix of the member
	// id was not: "worker-1" and "worker-2").
	nonce string
}

// unsureRes is a reservation asked of due.lua by a call that failed
// (see pullStage.unsure).
type unsureRes struct {
	nonce string
	until int64 // the ahead bound (unix µs): the job was due by it
}

// newPullStage returns an empty pull stage, its nonces' prefix drawn at
// random.
func newPullStage() *pullStage {
	var nb [6]byte
	binary.LittleEndian.PutUint32(nb[:], rand.Uint32())
	binary.LittleEndian.PutUint16(nb[4:], uint16(rand.Uint32()))
	ps := &pullStage{
		byTopic: map[string][]*pullWaiter{}, looked: map[string]time.Time{},
		gen: map[string]uint64{}, drained: map[string]uint64{},
		nonce: base64.RawURLEncoding.EncodeToString(nb[:]) + ".",
		sig:   make(chan struct{}, 1), done: make(chan struct{}),
	}
	ps.known.Store(&map[string]bool{})
	ps.declared.Store(&map[string]bool{})
	return ps
}

// pulledTopics returns topics sorted, without repeats, or an error: a
// topic this queue does not pull (ErrNotPulled, or ErrInvalidTopic for a
// name no topic may have). The declared topics change only before
// Start, so the answer holds while Reserve and Pop use it.
func (ps *pullStage) pulledTopics(topics []string) ([]string, error) {
	topics = slices.Compact(slices.Sorted(slices.Values(topics)))
	declared := *ps.declared.Load()
	for _, t := range topics {
		if !declared[t] {
			if err := validTopic(t); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %q", ErrNotPulled, t)
		}
	}
	return topics, nil
}

// isDeclared reports whether this queue pulls topic (Pull).
func (ps *pullStage) isDeclared(topic string) bool {
	return (*ps.declared.Load())[topic]
}

// spareJob is a reservation waiting here for a Reserve (see spare).
type spareJob struct {
	r   *Reservation
	ttr time.Duration
	at  time.Time // when it became spare
}

// spareTTL is how long a spare reservation waits for a Reserve here
// before it is released to the ready sets, for any process.
const spareTTL = 20 * time.Millisecond

// pullWaiter is a Reserve blocked until jobs come.
type pullWaiter struct {
	topics   []string
	max      int
	ttr      time.Duration
	got      []*Reservation // guarded by the stage's mu
	promised int            // guarded by mu: jobs being reserved for it (a due.lua call in flight)
	gone     bool           // guarded by mu: Reserve returned; what comes goes to another (deliver)
	sig      chan struct{}
}

func (w *pullWaiter) wants(topic string) bool {
	return !w.gone && w.max-len(w.got)-w.promised > 0 && slices.Contains(w.topics, topic)
}

// Pull declares topics consumed by pulling (Reserve) in this queue, not by
// a Handler. A topic has one way in a namespace: one with a Handler here
// is refused with ErrTopicMode (as is one with a Limit: its consumers
// decide how many jobs they take), and Start refuses a topic recorded in
// Redis the other way. Call it before Start.
func (q *Queue) Pull(topics ...string) error {
	for _, t := range topics {
		if err := validTopic(t); err != nil {
			return err
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != stateNew {
		return fmt.Errorf("%w: Pull after Start", ErrInvalidConfig)
	}
	for _, t := range topics {
		if (*q.handlers.Load())[t] != nil {
			return &TopicModeError{Topic: t, Reason: TopicHandled}
		}
		if q.limits.has(t) {
			return &TopicModeError{Topic: t, Reason: TopicLimited}
		}
	}
	ps := q.pull
	ps.mu.Lock()
	defer ps.mu.Unlock()
	known, declared := maps.Clone(*ps.known.Load()), maps.Clone(*ps.declared.Load())
	for _, t := range topics {
		declared[t], known[t] = true, true
		ps.gen[t] = 1 // jobs may be queued already: the first Reserve looks
	}
	ps.declared.Store(&declared)
	ps.known.Store(&known)
	return nil
}

// pulledKey reports whether the job key's topic is pulled in the
// namespace (as far as this process knows).
func (q *Queue) pulledKey(key string) bool {
	known := *q.pull.known.Load()
	if len(known) == 0 {
		return false
	}
	topic, _, _ := strings.Cut(key, persist.KeySep)
	return known[topic]
}

// declareTopics records, at Start, how this queue consumes its topics;
// a topic recorded the other way fails it. It then reads the namespace's
// pulled topics.
func (q *Queue) declareTopics(ctx context.Context) error {
	modes := map[string]string{}
	for t := range *q.handlers.Load() {
		modes[t] = persist.ModeHandler
	}
	for t := range *q.pull.declared.Load() {
		modes[t] = persist.ModePull
	}
	ctx, cancel := context.WithTimeout(ctx, q.cfg.WriteTimeout)
	defer cancel()
	if err := q.store.DeclareTopics(ctx, modes); err != nil {
		return err
	}
	return q.readTopicModes(ctx)
}

// readTopicModes reads the namespace's pulled topics from Redis, within
// WriteTimeout (a client may honour only a context's deadline).
func (q *Queue) readTopicModes(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, q.cfg.WriteTimeout)
	defer cancel()
	m, err := q.store.TopicModes(ctx)
	if err != nil {
		return err
	}
	ps := q.pull
	ps.mu.Lock()
	defer ps.mu.Unlock()
	known := maps.Clone(*ps.declared.Load())
	for t, mode := range m {
		if mode == persist.ModePull {
			known[t] = true
		}
	}
	ps.known.Store(&known)
	return nil
}

// announced wakes the blocked Reserves of this process: jobs of topics
// were queued to a ready set (here, or announced by another process).
func (q *Queue) announced(topics ...string) {
	ps := q.pull
	ps.mu.Lock()
	for _, t := range topics {
		ps.gen[t]++
	}
	var woken []*pullWaiter
	for _, t := range topics {
		woken = append(woken, ps.byTopic[t]...)
	}
	ps.mu.Unlock()
	for _, w := range woken {
		wake(w.sig)
	}
}

// Reserve returns up to opts.Max due jobs of opts.Topics, each reserved
// for this caller until its deadline (opts.TTR from now), oldest first,
// blocking until at least one is due or ctx ends (then ctx.Err(), with
// nothing reserved), or, with opts.NoWait, returning at once. A job
// whose time comes while Reserve is blocked is handed over at its due
// time, never before. Each reservation must be
// acked (Ack) or nacked (Nack) before its deadline, or touched (Touch) to
// extend it: one that lapses counts a failed attempt, and the job is
// handed out again after the topic's backoff (or dead-lettered after its
// last attempt). Delivery is at least once: a consumer that dies holding
// reservations loses nothing; their jobs come back after their
// deadlines.
//
// The queue must be started, and the topics declared with Pull
// (ErrNotPulled). A paused topic's jobs are not handed out until Resume;
// Reserve returns ErrPaused when it reads the ready sets and finds every
// topic paused (it reads them when jobs were announced, and every second).
// It returns ErrInvalidOption for a Max or TTR out of range, and ErrClosed
// once Shutdown began (a blocked Reserve returns then). Reservations of
// jobs that come for a Reserve after it returned (it returns at its first
// jobs) go to the next Reserve here, or back to the ready sets.
func (q *Queue) Reserve(ctx context.Context, opts ReserveOptions) ([]*Reservation, error) {
	if err := checkCtx(ctx, "Reserve"); err != nil {
		return nil, err
	}
	if opts.Max == 0 {
		opts.Max = 1
	}
	if opts.TTR == 0 {
		opts.TTR = DefaultTTR
	}
	switch {
	case len(opts.Topics) == 0:
		return nil, fmt.Errorf("%w: Reserve of no topic", ErrInvalidOption)
	case opts.Max < 1 || opts.Max > MaxReserve:
		return nil, fmt.Errorf("%w: Reserve of %d jobs: want 1 to %d", ErrInvalidOption, opts.Max, MaxReserve)
	case opts.TTR < MinTTR || opts.TTR > MaxTTR:
		return nil, fmt.Errorf("%w: time-to-run %v: want %v to %v", ErrInvalidOption, opts.TTR, MinTTR, MaxTTR)
	}
	if err := q.pullReady(); err != nil {
		return nil, err
	}
	topics, err := q.pull.pulledTopics(opts.Topics)
	if err != nil {
		return nil, err
	}
	ps := q.pull
	ps.mu.Lock()
	w := &pullWaiter{topics: topics, max: opts.Max, ttr: opts.TTR, sig: make(chan struct{}, 1)}
	for _, t := range topics {
		ps.byTopic[t] = append(ps.byTopic[t], w)
	}
	ps.mu.Unlock()
	defer q.unwait(w)
	recheck := time.NewTimer(pullRecheck)
	defer recheck.Stop()
	force, recheckDue := false, opts.NoWait
	for {
		ps.mu.Lock()
		ps.pickSpareLocked(w)
		got, want := len(w.got), w.max-len(w.got)-w.promised
		// While Redis is known unreachable, a NoWait Reserve looks
		// (failing fast, or probing) to say so rather than "nothing
		// ready"; a waiting one waits, to learn at its periodic look.
		may := force || opts.NoWait && !q.reach.b.Up()
		for _, t := range w.topics {
			may = may || ps.gen[t] != ps.drained[t]
			// The periodic look, unless a take read the topic since.
			may = may || recheckDue && q.clock.Now().Sub(ps.looked[t]) >= pullRecheck
		}
		// A NoWait Reserve holding spare jobs takes more too, if it may:
		// it will not wait for them.
		taker := (got == 0 || opts.NoWait) && want > 0 && may && !ps.taking
		// A NoWait Reserve never waits for another's look (with Redis
		// silent, the breaker's probe lasts up to WriteTimeout): with one
		// in flight it looks alone, unless Redis is known unreachable.
		alone := opts.NoWait && got == 0 && want > 0 && may && !taker
		if taker {
			ps.taking = true
		} else if !opts.NoWait && got == 0 && want > 0 && may && !slices.Contains(ps.blocked, w) {
			ps.blocked = append(ps.blocked, w) // woken when the taker is done
		}
		ps.mu.Unlock()
		force, recheckDue = false, false
		if got > 0 && !taker {
			return q.takeGot(w), nil
		}
		if opts.NoWait && !taker {
			// Nothing here, and the look in flight, if any, is another's:
			// with Redis known unreachable (that look is the probe, or
			// fails), say so at once; else look alone.
			if err := q.reach.down(q.clock); err != nil {
				return nil, errs.Errorf("wheelq: reserve: %w", err)
			}
			if !alone {
				// Nothing announced since the last look; or all it
				// wants is being taken for it by another's look (what
				// comes is spare, for the next Reserve here).
				return nil, nil
			}
		}
		if taker || alone {
			stale, err := q.takeFor(ctx, w, alone)
			if err != nil {
				if got := q.takeGot(w); len(got) > 0 {
					return got, nil
				}
				return nil, err
			}
			if got := q.takeGot(w); len(got) > 0 {
				return got, nil
			}
			if stale > 0 {
				force = true // stale entries were in the way: look again at once
				continue
			}
			if opts.NoWait {
				return nil, nil
			}
		}
		select {
		case <-w.sig:
		case <-recheck.C:
			recheck.Reset(pullRecheck)
			recheckDue = true // an announcement may have been missed
		case <-q.stopDispatch:
			if got := q.takeGot(w); len(got) > 0 {
				return got, nil
			}
			return nil, ErrClosed
		case <-ctx.Done():
			if got := q.takeGot(w); len(got) > 0 {
				return got, nil
			}
			return nil, ctx.Err()
		}
	}
}

// pullReady returns nil once the queue is started: ErrNotStarted before,
// ErrClosed once Shutdown began. While Start makes its round trips it
// waits for their outcome.
func (q *Queue) pullReady() error {
	q.mu.Lock()
	state := q.state
	q.mu.Unlock()
	if state == stateStarting {
		q.startMu.Lock()
		q.mu.Lock()
		state = q.state
		q.mu.Unlock()
		q.startMu.Unlock()
	}
	switch state {
	case stateNew:
		return ErrNotStarted
	case stateClosing, stateClosed:
		return ErrClosed
	}
	return nil
}

// takeGot returns what was handed to w, and empties it.
func (q *Queue) takeGot(w *pullWaiter) []*Reservation {
	q.pull.mu.Lock()
	defer q.pull.mu.Unlock()
	got := w.got
	w.got = nil
	return got
}

// unwait removes w from the waiters: a job still being reserved for it
// becomes spare (deliver) when it comes.
func (q *Queue) unwait(w *pullWaiter) {
	ps := q.pull
	ps.mu.Lock()
	w.gone = true
	for _, t := range w.topics {
		ws := ps.byTopic[t]
		if i := slices.Index(ws, w); i >= 0 {
			ws = slices.Delete(ws, i, i+1)
		}
		if len(ws) == 0 {
			delete(ps.byTopic, t)
		} else {
			ps.byTopic[t] = ws
		}
	}
	if i := slices.Index(ps.blocked, w); i >= 0 {
		ps.blocked = slices.Delete(ps.blocked, i, i+1)
	}
	left := w.got
	w.got = nil
	if len(left) > 0 && !q.closing() {
		// Handed over after Reserve decided to return: spare, for the
		// next Reserve here (the pull loop releases them after spareTTL).
		now := q.clock.Now()
		for _, r := range left {
			ps.spare = append(ps.spare, spareJob{r: r, ttr: w.ttr, at: now})
		}
		left = nil
		wake(ps.sig)
	}
	ps.mu.Unlock()
	if len(left) > 0 {
		// At Shutdown: back to the ready sets.
		ops := make([]persist.ResolveOp, len(left))
		for i, r := range left {
			ops[i] = releaseOp(r)
		}
		if _, err := q.resolveNow(context.Background(), "release", ops); err != nil {
			q.log.Warn("wheelq: releasing reservations; they lapse instead", "err", err, "jobs", len(ops))
		}
		q.announced(w.topics...)
	}
}

// dropSpare forgets key's spare reservation, if it waits here for a
// Reserve (cancelled or moved: it is handed to no one), and reports
// whether it did. Its token is spent with the change in Redis.
func (ps *pullStage) dropSpare(key string) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for i, sj := range ps.spare {
		if persist.JobKey(sj.r.Topic, sj.r.ID) == key {
			ps.spare = slices.Delete(ps.spare, i, i+1)
			return true
		}
	}
	return false
}

// pickSpareLocked moves spare reservations w wants into w.got. The
// caller holds ps.mu.
func (ps *pullStage) pickSpareLocked(w *pullWaiter) {
	if len(ps.spare) == 0 {
		return
	}
	keep := ps.spare[:0]
	for _, sj := range ps.spare {
		if sj.ttr == w.ttr && w.wants(sj.r.Topic) {
			w.got = append(w.got, sj.r)
			continue
		}
		keep = append(keep, sj)
	}
	clear(ps.spare[len(keep):])
	ps.spare = keep
}

// takeFor reads the ready sets (take.lua) for w and for every waiter
// like it (the same topics and time-to-run), in one round trip, and hands
// each its share; the caller set ps.taking, which takeFor clears. Alone,
// it reads them for w only, beside the take in flight (ps.taking is that
// one's): a NoWait Reserve does not wait for another's. It returns how
// many stale ready entries the take removed.
func (q *Queue) takeFor(ctx context.Context, w *pullWaiter, alone bool) (int, error) {
	ps := q.pull
	type share struct {
		w *pullWaiter
		n int
	}
	var shares []share
	total := 0
	ps.mu.Lock()
	for _, o := range ps.byTopic[w.topics[0]] {
		if o != w && (alone || o.ttr != w.ttr || !slices.Equal(o.topics, w.topics)) {
			continue
		}
		n := min(o.max-len(o.got)-o.promised, MaxReserve-total)
		if n > 0 {
			o.promised += n
			shares = append(shares, share{o, n})
			total += n
		}
	}
	// w may want nothing by now (a job was reserved ahead for it since it
	// chose to take, or those before it in line want a take's most
	// between them): the take is then the others', whose shares are
	// counted as promised above and given back below. (Dropping the
	// shares here left those promises in place: the others wanted
	// nothing more, and got nothing until their contexts ended.)
	ps.mu.Unlock()
	var taken []*Reservation
	stale := 0
	var err error
	if total > 0 {
		taken, stale, err = q.take(ctx, w, total)
	}
	ps.mu.Lock()
	if !alone {
		ps.taking = false
	}
	var woken []*pullWaiter
	for _, sh := range shares {
		sh.w.promised -= sh.n
		k := min(sh.n, len(taken))
		if sh.w.gone {
			k = 0
		}
		if k > 0 {
			sh.w.got = append(sh.w.got, taken[:k]...)
			taken = taken[k:]
			woken = append(woken, sh.w)
		}
	}
	for _, r := range taken { // their waiters left meanwhile
		ps.spare = append(ps.spare, spareJob{r: r, ttr: w.ttr, at: q.clock.Now()})
	}
	// The other waiters of these topics look again: at what they got, or
	// at the ready sets (a take that stopped at its byte budget leaves jobs
	// there); so do those that waited for this take to end. (Those wait
	// for the take in flight beside one alone, and it wakes them.)
	now := q.clock.Now()
	for _, t := range w.topics {
		ps.looked[t] = now
	}
	if !alone {
		for _, t := range w.topics {
			for _, o := range ps.byTopic[t] {
				if !slices.Contains(woken, o) {
					woken = append(woken, o)
				}
			}
		}
		for _, o := range ps.blocked {
			if !slices.Contains(woken, o) {
				woken = append(woken, o)
			}
		}
		ps.blocked = ps.blocked[:0]
	}
	ps.mu.Unlock()
	for _, o := range woken {
		wake(o.sig)
	}
	if len(taken) > 0 {
		wake(ps.sig)
	}
	return stale, err
}

// take reserves up to n jobs of w's topics, with w's time-to-run, from
// the ready sets (take.lua).
func (q *Queue) take(ctx context.Context, w *pullWaiter, n int) ([]*Reservation, int, error) {
	ps := q.pull
	ps.mu.Lock()
	ps.seq++
	seq := ps.seq
	gens := make([]uint64, len(w.topics))
	for i, t := range w.topics {
		gens[i] = ps.gen[t]
	}
	ps.mu.Unlock()
	var b [9]byte
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	nonce := base64.RawURLEncoding.EncodeToString(b[:]) + "."
	_, wall := wheel.Readings(q.clock)
	deadline := wall.Add(w.ttr)
	res, err := q.readReady(ctx, "reserve", w.topics, gens, func(ctx context.Context) (persist.TakeResult, error) {
		return q.store.Take(ctx, w.topics, n, wall.UnixMicro(), deadline.UnixMicro(), nonce, q.fence[0], int(seq%uint64(q.cfg.Partitions)))
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([]*Reservation, 0, len(res.Jobs))
	_, after := wheel.Readings(q.clock)
	for _, j := range res.Jobs {
		if q.crashAt(crashpoint.AfterReserve, j.Key) {
			// Dead: the reservations lapse at their deadline.
			return nil, 0, errs.Errorf("wheelq: reserve: %w", crashpoint.ErrCrashed)
		}
		rec, err := persist.DecodeRecord(j.Record)
		if err != nil {
			// take.lua hands out only records that hold a revision; one
			// that does not decode goes to the dead set.
			q.settle.deadLetterCorrupt(j.Key, j.Record, err)
			continue
		}
		rec.Topic, rec.ID, _ = persist.SplitJobKey(j.Key)
		// The owner looks at it at its deadline: here, if this process
		// owns its partition (take.lua pushed it to the inbox otherwise).
		q.arm(j.Key, deadline.UnixMicro(), nil)
		r := q.reservation(j.Key, j.Token, &rec, time.UnixMicro(j.Due), deadline, false)
		q.delivered(r, after)
		out = append(out, r)
	}
	return out, res.Stale, nil
}

// Pop takes up to max due jobs of topics, oldest first, and finishes
// them in the same Redis call that takes them: each leaves the queue for
// the run history as done, as an acked job does, before Pop returns it.
// Delivery is at most once: a job popped is never handed out again,
// whatever becomes of the caller (one that dies before it used the jobs
// loses them); Reserve and Ack deliver at least once. A reserved job is
// not popped, nor a paused topic's. Pop does not wait: with nothing due it
// returns no jobs and a nil error, and it reads Redis only when jobs were
// announced since the last look here (or a second has passed), as a
// NoWait Reserve does. The queue must be started and the topics pulled;
// errors are Reserve's. Pop returns jobs only once Redis (and, with
// Config.ReplicaAcks, its replicas: so a failover cannot hand them out
// again) has them finished; an error wrapping ErrOutcomeUnknown (a reply
// lost, replicas late) may have finished jobs it did not return, and
// they are not handed out again. A job whose stored record cannot be
// decoded is finished too: Pop then returns the others with an error
// wrapping ErrCorrupt that names it.
func (q *Queue) Pop(ctx context.Context, topics []string, max int) ([]Job, error) {
	if err := checkCtx(ctx, "Pop"); err != nil {
		return nil, err
	}
	switch {
	case len(topics) == 0:
		return nil, fmt.Errorf("%w: Pop of no topic", ErrInvalidOption)
	case max < 1 || max > MaxReserve:
		return nil, fmt.Errorf("%w: Pop of %d jobs: want 1 to %d", ErrInvalidOption, max, MaxReserve)
	}
	if err := q.pullReady(); err != nil {
		return nil, err
	}
	topics, err := q.pull.pulledTopics(topics)
	if err != nil {
		return nil, err
	}
	ps := q.pull
	ps.mu.Lock()
	may := false
	gens := make([]uint64, len(topics))
	for i, t := range topics {
		gens[i] = ps.gen[t]
		may = may || ps.gen[t] != ps.drained[t] || q.clock.Now().Sub(ps.looked[t]) >= pullRecheck
	}
	ps.seq++
	seq := ps.seq
	ps.mu.Unlock()
	if !may {
		return nil, nil
	}
	var out []Job
	var corrupt []string
	// Stale ready entries (cancelled or moved jobs) may keep a pop from
	// max: it looks again, a few times at most.
	for range 3 {
		_, wall := wheel.Readings(q.clock)
		res, err := q.readReady(ctx, "pop", topics, gens, func(ctx context.Context) (persist.TakeResult, error) {
			return q.store.Pop(ctx, topics, max-len(out), wall.UnixMicro(), int(seq%uint64(q.cfg.Partitions)))
		})
		if errors.Is(err, ErrPaused) && len(out) > 0 {
			break // paused since the jobs popped already
		}
		if err != nil {
			return out, err
		}
		now := q.clock.Now()
		ps.mu.Lock()
		for _, t := range topics {
			ps.looked[t] = now
		}
		ps.mu.Unlock()
		for _, j := range res.Jobs {
			rec, err := persist.DecodeRecord(j.Record)
			if err != nil {
				q.log.Error("wheelq: pop: a corrupt job record was finished", "key", j.Key, "err", err)
				corrupt = append(corrupt, j.Key)
				continue
			}
			rec.Topic, rec.ID, _ = persist.SplitJobKey(j.Key)
			q.cache.Remove(j.Key)
			q.stats.succeeded.Add(1)
			if obs := q.cfg.Observer; obs != nil {
				obs.JobSucceeded(rec.Topic, 0)
			}
			out = append(out, q.reservation(j.Key, "", &rec, time.UnixMicro(j.Due), time.Time{}, false).Job)
		}
		if res.Stale == 0 || len(out)+len(corrupt) >= max {
			break
		}
	}
	if len(corrupt) > 0 {
		return out, fmt.Errorf("%w: popped records that cannot be decoded: %v", ErrCorrupt, corrupt)
	}
	return out, nil
}

// readReady makes a round trip to the ready sets of topics (call: a take
// or a pop, given a context bounded by WriteTimeout), fails fast while
// Redis is known unreachable, and notes the outcome: when every ready set
// was empty, the topics are drained as of gens (their announcement counts
// when the call began), so that the next look waits for an announcement.
// A call that found every topic paused, and took nothing, is ErrPaused.
func (q *Queue) readReady(ctx context.Context, op string, topics []string, gens []uint64,
	call func(ctx context.Context) (persist.TakeResult, error)) (persist.TakeResult, error) {
	probe, err := q.reach.admit(q.clock)
	if err != nil {
		return persist.TakeResult{}, errs.Errorf("wheelq: %s: %w", op, err)
	}
	cctx, cancel := context.WithTimeout(ctx, q.cfg.WriteTimeout)
	res, err := call(cctx)
	cancel()
	q.reach.note(ctx, err, probe, q.clock)
	if err != nil {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, errs.Errorf("wheelq: %s: %w", op, uncertain(err))
	}
	if len(res.Jobs) == 0 && res.Stale == 0 {
		// (A call that found fewer than it asked for may have stopped at
		// its byte budget: not drained.)
		ps := q.pull
		ps.mu.Lock()
		for i, t := range topics {
			ps.drained[t] = gens[i]
		}
		ps.mu.Unlock()
	}
	if len(res.Jobs) == 0 && len(res.Paused) == len(topics) {
		return res, fmt.Errorf("%w: %v", ErrPaused, res.Paused)
	}
	return res, nil
}

// Ack says the reserved job is done: it leaves the queue, into the run
// history. It returns ErrReservationLost when the reservation is not
// current (lapsed, cancelled, or finished by another reservation); an Ack
// sent again after it applied (its reply lost) returns nil, as long as the
// run history keeps the job.
func (q *Queue) Ack(ctx context.Context, r Receipt) error {
	return q.resolve(ctx, r, persist.ResolveOp{Op: 'a'})
}

// Nack says the reserved job failed: it is retried after opts.RetryAfter
// (or the backoff), or dead-lettered when opts.Permanent or after its last
// attempt (Job.MaxAttempts). A Reservation holding only a Receipt
// (&Reservation{Receipt: r}, as a consumer in another process or language
// has it) is accepted: the job's record is then read from Redis first, one
// more round trip. Errors as Ack's.
func (q *Queue) Nack(ctx context.Context, res *Reservation, opts NackOptions) error {
	if err := checkCtx(ctx, "nack"); err != nil {
		return err // before a receipt's reservation is read with it
	}
	if res == nil {
		return fmt.Errorf("%w: nil reservation", ErrInvalidOption)
	}
	if opts.RetryAfter < 0 || opts.RetryAfter > q.cfg.MaxDelay {
		return fmt.Errorf("%w: retry after %v: want 0 to %v", ErrInvalidOption, opts.RetryAfter, q.cfg.MaxDelay)
	}
	cause := opts.Err
	if cause == nil {
		cause = errors.New("nacked")
	}
	if res.Job.Topic == "" {
		// Built from a Receipt alone: the job is read from Redis. Should
		// it have changed since, its reservation did too, and resolve
		// refuses the token.
		full, err := q.receiptReservation(ctx, res.Receipt)
		if err != nil {
			return err
		}
		res = full
	}
	j := &res.Job
	rec := persist.Record{Rev: rand.Uint32(), Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Created: j.Created,
		LastError: truncate(cause.Error(), 2048), Headers: j.Headers, Payload: j.Payload}
	op := persist.ResolveOp{Op: 'r', Record: rec.Encode()}
	if opts.Permanent || j.Attempt >= j.MaxAttempts {
		op.Op = 'd'
	} else {
		delay := opts.RetryAfter
		if delay == 0 {
			delay = q.cfg.Backoff(j.Attempt, cause)
		}
		_, wall := wheel.Readings(q.clock)
		op.Score = ceilMicro(wall.Add(delay))
	}
	err := q.resolve(ctx, res.Receipt, op)
	if err == nil {
		if obs := q.cfg.Observer; obs != nil {
			obs.JobFailed(j.Topic, 0, cause)
		}
		switch op.Op {
		case 'd':
			q.stats.dead.Add(1)
			q.observeDead(j.Topic)
		default:
			q.stats.retried.Add(1)
			q.observeRetried(j.Topic, time.Until(time.UnixMicro(op.Score)))
			// Armed here if this process owns the job's partition (the
			// owner of another drains the inbox resolve.lua pushed to).
			q.arm(persist.JobKey(j.Topic, j.ID), op.Score, nil)
		}
	}
	return err
}

// Release hands reservations back without counting an attempt: each job
// goes back to its topic's ready set at its due time, to be taken at once
// by the next Reserve (here or in any process), oldest first, as if it had
// never been handed out. It is for a consumer that took jobs it will not
// process: a server whose client went away before the reply reached it.
// Released tokens are spent. It returns ErrReservationLost (naming the
// jobs) for those whose reservation was no longer current; the others are
// released. One round trip for all.
func (q *Queue) Release(ctx context.Context, rs ...*Reservation) error {
	if err := checkCtx(ctx, "release"); err != nil {
		return err
	}
	if len(rs) == 0 {
		return nil
	}
	ops := make([]persist.ResolveOp, len(rs))
	for i, r := range rs {
		if r == nil || r.Job.Due.IsZero() {
			return fmt.Errorf("%w: release of a reservation Reserve did not give", ErrInvalidOption)
		}
		if err := validTopic(r.Topic); err != nil {
			return err
		}
		if err := validID(r.ID); err != nil {
			return err
		}
		ops[i] = releaseOp(r)
	}
	if q.closing() {
		return ErrClosed
	}
	res, err := q.resolveNow(ctx, "release", ops)
	if err != nil {
		return err
	}
	var lost []string
	topics := map[string]bool{}
	for i, b := range res {
		if b == persist.Resolved {
			topics[rs[i].Topic] = true
		} else {
			lost = append(lost, ops[i].Key)
		}
	}
	q.announced(slices.Sorted(maps.Keys(topics))...)
	if len(lost) > 0 {
		return fmt.Errorf("%w: not released, the reservation was not current: %s", ErrReservationLost, strings.Join(lost, ", "))
	}
	return nil
}

// releaseOp is resolve.lua's release of r: back to its ready set at its
// due time.
func releaseOp(r *Reservation) persist.ResolveOp {
	return persist.ResolveOp{Op: 'u', Key: persist.JobKey(r.Topic, r.ID), Token: r.Token, Score: r.Job.Due.UnixMicro()}
}

// resolveNow runs ops (resolve.lua's) in one round trip, not through the
// batcher; what names them in errors.
func (q *Queue) resolveNow(ctx context.Context, what string, ops []persist.ResolveOp) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, q.cfg.WriteTimeout)
	defer cancel()
	probe, err := q.reach.admit(q.clock)
	if err != nil {
		return nil, errs.Errorf("wheelq: %s: %w", what, err)
	}
	_, wall := wheel.Readings(q.clock)
	res, err := q.store.Resolve(cctx, wall.UnixMicro(), ops)
	q.reach.note(ctx, err, probe, q.clock)
	if err != nil {
		return nil, errs.Errorf("wheelq: %s: %w", what, uncertain(err))
	}
	return res, nil
}

// Touch extends a reservation: its deadline becomes ttr from now (if that
// is later than the current one; MinTTR to MaxTTR). It returns the new
// deadline. Errors as Ack's.
func (q *Queue) Touch(ctx context.Context, r Receipt, ttr time.Duration) (time.Time, error) {
	if ttr < MinTTR || ttr > MaxTTR {
		return time.Time{}, fmt.Errorf("%w: time-to-run %v: want %v to %v", ErrInvalidOption, ttr, MinTTR, MaxTTR)
	}
	_, wall := wheel.Readings(q.clock)
	deadline := time.UnixMicro(ceilMicro(wall.Add(ttr)))
	err := q.resolve(ctx, r, persist.ResolveOp{Op: 't', Score: deadline.UnixMicro()})
	if errors.Is(err, errKept) {
		// Its deadline is later already, and stays: return it.
		rec, err := q.reservedRecord(ctx, r, "touch")
		if err != nil {
			return time.Time{}, err
		}
		return rec.Due, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return deadline, nil
}

// errKept is resolved's answer to a touch that left a later deadline as
// it was (Touch reads it).
var errKept = errors.New("wheelq: touch: the later deadline is kept")

// receiptReservation reads the reserved job r names, for a Nack given a
// Receipt alone. A job that is gone, or not reserved, is
// ErrReservationLost.
func (q *Queue) receiptReservation(ctx context.Context, r Receipt) (*Reservation, error) {
	if err := validTopic(r.Topic); err != nil {
		return nil, err
	}
	if err := validID(r.ID); err != nil {
		return nil, err
	}
	rec, err := q.reservedRecord(ctx, r, "nack")
	if err != nil {
		return nil, err
	}
	rec.Topic, rec.ID = r.Topic, r.ID
	return q.reservation(persist.JobKey(r.Topic, r.ID), r.Token, &rec, rec.Due, rec.Due, false), nil
}

// reservedRecord reads the job r names, for op on its reservation: a job
// that is gone, or not reserved, is ErrReservationLost. Its Due is the
// reservation's deadline.
func (q *Queue) reservedRecord(ctx context.Context, r Receipt, op string) (persist.Record, error) {
	key := persist.JobKey(r.Topic, r.ID)
	cctx, cancel := context.WithTimeout(ctx, q.cfg.WriteTimeout)
	defer cancel()
	rec, st, err := q.store.Get(cctx, key)
	switch {
	case errors.Is(err, persist.ErrNotFound):
		return rec, fmt.Errorf("%w: %s is gone", ErrReservationLost, key)
	case err != nil:
		return rec, errs.Errorf("wheelq: %s %s: %w", op, key, uncertain(err))
	case st != persist.Reserved:
		return rec, fmt.Errorf("%w: %s is not reserved", ErrReservationLost, key)
	}
	return rec, nil
}

// opName names resolve's op in errors.
func opName(op byte) string {
	switch op {
	case 'a':
		return "ack"
	case 't':
		return "touch"
	}
	return "nack"
}

// resolve runs op on the reservation r (resolve.lua).
func (q *Queue) resolve(ctx context.Context, r Receipt, op persist.ResolveOp) error {
	if err := checkCtx(ctx, opName(op.Op)); err != nil {
		return err
	}
	if err := checkReceipt(r); err != nil {
		return err
	}
	if q.closing() {
		return ErrClosed
	}
	op.Key, op.Token = persist.JobKey(r.Topic, r.ID), r.Token
	probe, err := q.reach.admit(q.clock)
	if err != nil {
		return errs.Errorf("wheelq: %s %s: %w", opName(op.Op), op.Key, err)
	}
	// Concurrent calls share round trips, as Schedule calls do.
	res, err := q.resolves.Do(ctx, op)
	q.reach.note(ctx, err, probe, q.clock)
	if errors.Is(err, batch.ErrClosed) {
		return ErrClosed
	}
	if err != nil {
		return errs.Errorf("wheelq: %s %s: %w", opName(op.Op), op.Key, uncertain(err))
	}
	return q.resolved(r, op, res)
}

// checkReceipt refuses a receipt Reserve cannot have given.
func checkReceipt(r Receipt) error {
	if err := validTopic(r.Topic); err != nil {
		return err
	}
	if err := validID(r.ID); err != nil {
		return err
	}
	if len(r.Token) < 9 || len(r.Token) > 128 {
		return fmt.Errorf("%w: token %q is not one Reserve gave", ErrReservationLost, r.Token)
	}
	return nil
}

// resolved is the outcome of op on r, given resolve.lua's answer, and
// counts an ack.
func (q *Queue) resolved(r Receipt, op persist.ResolveOp, res byte) error {
	switch res {
	case persist.Resolved:
		if op.Op == 'a' {
			q.stats.succeeded.Add(1)
			q.cache.Remove(op.Key)
			if obs := q.cfg.Observer; obs != nil {
				obs.JobSucceeded(r.Topic, 0) // how long the consumer took is the consumer's
			}
		}
		return nil
	case persist.ResolveKept:
		return errKept
	case persist.ResolveGone:
		return fmt.Errorf("%w: job %s/%s was cancelled", ErrReservationLost, r.Topic, r.ID)
	default:
		return fmt.Errorf("%w: job %s/%s: the reservation lapsed, or the job was handed out again or is gone", ErrReservationLost, r.Topic, r.ID)
	}
}

// AckAll acks many reservations at once, as Ack would each, in one round
// trip (on a Redis Cluster, one per partition, pipelined; a few acks
// share it with other consumers' acks): for a consumer that finished a
// batch of jobs. The i-th error is rs[i]'s outcome, nil when acked (or
// acked already: an ack sent again after it applied); when a round trip
// fails, every ack it carried gets that error.
func (q *Queue) AckAll(ctx context.Context, rs ...Receipt) []error {
	out := make([]error, len(rs))
	fail := func(err error) []error {
		for i := range out {
			if out[i] == nil {
				out[i] = err
			}
		}
		return out
	}
	if err := checkCtx(ctx, "ack"); err != nil {
		return fail(err)
	}
	ops := make([]persist.ResolveOp, 0, len(rs))
	idx := make([]int, 0, len(rs))
	for i, r := range rs {
		if out[i] = checkReceipt(r); out[i] == nil {
			ops = append(ops, persist.ResolveOp{Op: 'a', Key: persist.JobKey(r.Topic, r.ID), Token: r.Token})
			idx = append(idx, i)
		}
	}
	if len(ops) == 0 {
		return out
	}
	if q.closing() {
		return fail(ErrClosed)
	}
	if len(ops) >= ackAllAlone {
		res, err := q.resolveNow(ctx, "ack", ops)
		if err != nil {
			return fail(err)
		}
		for k, i := range idx {
			out[i] = q.resolved(rs[i], ops[k], res[k])
		}
		return out
	}
	probe, err := q.reach.admit(q.clock)
	if err != nil {
		return fail(errs.Errorf("wheelq: ack: %w", err))
	}
	// A few acks go through the acks' batcher, with every other
	// consumer's: a call costs Redis a fixed price per partition (the run
	// history's upkeep), and a server's clients each ack a few jobs at a
	// time.
	res, failed := q.resolves.DoAll(ctx, ops)
	var first error // what the round trips said of Redis's reach
	for _, err := range failed {
		if err != nil {
			first = err
			break
		}
	}
	q.reach.note(ctx, first, probe, q.clock)
	for k, i := range idx {
		switch err := failed[k]; {
		case errors.Is(err, batch.ErrClosed):
			out[i] = ErrClosed
		case err != nil:
			out[i] = errs.Errorf("wheelq: ack %s: %w", ops[k].Key, uncertain(err))
		default:
			out[i] = q.resolved(rs[i], ops[k], res[k])
		}
	}
	return out
}
