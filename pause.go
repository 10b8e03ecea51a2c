package wheelq

// Pausing a topic: a paused topic's jobs stay pending in Redis and are not
// claimed (claim.lua answers "paused" for them, in every process, from a
// paused HASH kept in every partition). A job claimed as paused is parked
// here; when the topic is resumed (a message on a channel, or the
// watcher's periodic look at Redis), the parked jobs are armed again in
// due order. Parking is bounded (maxParked jobs): past it a topic's jobs
// are not kept, and its resume reads them again from the owned partitions
// in Redis. A restart loses nothing: the jobs were pending in Redis all
// along.

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wheelq/wheelq/internal/errs"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/recovery"
	"github.com/wheelq/wheelq/wheel"
)

// maxParked bounds the jobs of paused topics kept in memory.
const maxParked = 10000

// resumePage bounds the entries a resume past the parking bound holds in
// memory at once (see unparkFromRedis).
const resumePage = 2000

// pauseRecheck is how often the watcher reads the paused topics from
// Redis while jobs are parked: the fallback for a resume message missed
// (a subscription broken meanwhile).
const pauseRecheck = time.Second

// pauseDeps is what the pause stage reads and arms with, and the pull
// stage's steps its watcher takes (the namespace's events carry both).
type pauseDeps struct {
	store        engineStore
	leases       interface{ LoadedUntil(p int) int64 }
	clock        wheel.Clock
	log          *slog.Logger
	partitions   int
	writeTimeout time.Duration
	runWhileDown bool // Config.RunWhileRedisDown: keep the known-paused set
	// armAt arms a job of a resumed topic again.
	armAt func(key string, dueUs int64, now, wall time.Time)
	// announced wakes the Reserves of topics whose jobs were queued;
	// readTopicModes reads the namespace's pulled topics again.
	announced      func(topics ...string)
	readTopicModes func(ctx context.Context) error
}

// pauser is the pause stage: the jobs claimed while their topic was
// paused, parked until it is resumed, and the watcher that learns of
// pauses and resumes.
type pauser struct {
	pauseDeps
	mu     sync.Mutex
	parked map[string]map[string]int64 // guarded by mu: topic -> job key -> due (unix µs)
	n      int                         // guarded by mu: jobs in parked
	max    int                         // guarded by mu: bound of n (maxParked; tests lower it)
	page   int                         // guarded by mu: the most entries a resume past the bound holds (resumePage; tests lower it)
	// overflow holds the topics that had jobs not parked for want of
	// room: their resume reads them from Redis. Guarded by mu.
	overflow map[string]bool
	// known holds the topics this process knows to be paused, kept only
	// with RunWhileRedisDown: a claim that cannot reach Redis parks their
	// jobs instead of running them unverified (parkIfKnownPaused). It is
	// set by this process's Pause (before the write) and cleared by its
	// Resume (after it), by the subscription's messages both ways, and
	// replaced by every read of the paused topics from Redis (at Start
	// and by the watcher every pauseRecheck). At most the topics paused
	// in Redis, and those changed since the last read. Guarded by mu.
	known map[string]bool
	// knownGen counts the changes of known by a Pause, a Resume or a
	// message: a read of Redis sent before one of them (a reply that
	// may be older than the change) only adds to known. Guarded by mu.
	knownGen uint64
	resumed  chan string   // topics resumed, from the subscription
	topics   chan struct{} // a topic's mode changed (pull.go), from the subscription
	cancel   context.CancelFunc
	done     chan struct{} // closed when the watcher returned
}

// pausedHere returns the topics this process knows to be paused (sorted):
// those whose jobs it parked or left in Redis for want of room, and those
// it keeps track of with RunWhileRedisDown.
func (ps *pauser) pausedHere() []string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []string
	for _, set := range []map[string]bool{ps.overflow, ps.known} {
		for t, on := range set {
			if on && !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	for t := range ps.parked {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// Pause pauses a topic in every process of the namespace, durably: its
// jobs that come due stay pending (none is lost) and do not start until
// Resume; jobs of other topics run as before. A run claimed before the
// pause reached Redis goes on (a job is claimed ClaimLead before its due
// time). Jobs may still be scheduled, cancelled and rescheduled. Pausing a
// paused topic does nothing. Pause returns once every partition has the
// pause; an error means some may not: call it again. With
// Config.RunWhileRedisDown, a process that cannot reach Redis holds the
// topic's jobs only if it knew of the pause (it made it, got its message
// or read it; see that field): one made by another process just before
// Redis became unreachable from there may not hold there.
func (q *Queue) Pause(ctx context.Context, topic string) error {
	if err := checkCtx(ctx, "Pause"); err != nil {
		return err
	}
	return q.setPaused(ctx, "pause", topic, true)
}

// Resume resumes a paused topic in every process: its jobs that came due
// while it was paused run, oldest first, and the others at their time.
// Running processes learn it at once (a message), or within about a
// second when they missed the message. Resuming a topic that is not
// paused does nothing.
func (q *Queue) Resume(ctx context.Context, topic string) error {
	if err := checkCtx(ctx, "Resume"); err != nil {
		return err
	}
	return q.setPaused(ctx, "resume", topic, false)
}

func (q *Queue) setPaused(ctx context.Context, op, topic string, paused bool) error {
	if err := validTopic(topic); err != nil {
		return err
	}
	if q.closing() {
		return ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return errs.Errorf("wheelq: %s: %w", op, unreachable(err))
	}
	if paused {
		// Known here at once, whatever the write's outcome: a pause
		// that failed half-way holds here while Redis is unreachable,
		// until a read of Redis says otherwise.
		q.pauses.notePaused(topic, true)
	}
	ctx, cancel := context.WithTimeout(ctx, q.cfg.WriteTimeout)
	defer cancel()
	if err := q.store.SetPaused(ctx, topic, paused); err != nil {
		return errs.Errorf("wheelq: %s %s: %w", op, topic, uncertain(err))
	}
	if !paused {
		q.pauses.notePaused(topic, false)
		q.announced(topic) // its ready jobs are to be had again (pulled topics)
	}
	return nil
}

// notePaused records that topic was paused or resumed (by this process,
// or by a message from another) in the known-paused set, with
// RunWhileRedisDown (see pauser.known).
func (ps *pauser) notePaused(topic string, paused bool) {
	if !ps.runWhileDown {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.knownGen++
	if !paused {
		delete(ps.known, topic)
		return
	}
	if ps.known == nil {
		ps.known = map[string]bool{}
	}
	ps.known[topic] = true
}

// readPaused reads the paused topics from Redis (sorted) and, with
// RunWhileRedisDown, makes them the known-paused set: the whole of it,
// unless a Pause, a Resume or a message changed it while the read was on
// its way (then the read only adds to it; the next read settles it).
func (ps *pauser) readPaused(ctx context.Context) ([]string, error) {
	ps.mu.Lock()
	gen := ps.knownGen
	ps.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, ps.writeTimeout)
	paused, err := ps.store.PausedTopics(ctx)
	cancel()
	if err != nil || !ps.runWhileDown {
		return paused, err
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.knownGen == gen {
		clear(ps.known)
	}
	if ps.known == nil && len(paused) > 0 {
		ps.known = map[string]bool{}
	}
	for _, t := range paused {
		ps.known[t] = true
	}
	return paused, nil
}

// parkIfKnownPaused parks a job whose claim could not reach Redis (with
// RunWhileRedisDown, which would run it from the cache unverified) when
// its topic is known here to be paused, or has jobs parked here, and
// reports whether it did. due is the job's due time (unix µs). Like any
// parked job it is armed again when the topic is resumed, which this
// process learns once Redis is reachable again.
func (ps *pauser) parkIfKnownPaused(key string, due int64) bool {
	topic, _, _ := strings.Cut(key, persist.KeySep)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if !ps.known[topic] && ps.parked[topic] == nil && !ps.overflow[topic] {
		return false
	}
	ps.parkLocked(topic, key, due)
	return true
}

// Paused returns the paused topics, sorted.
func (q *Queue) Paused(ctx context.Context) ([]string, error) {
	if err := checkCtx(ctx, "Paused"); err != nil {
		return nil, err
	}
	if q.closing() {
		return nil, ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return nil, errs.Errorf("wheelq: paused: %w", unreachable(err))
	}
	ts, err := q.store.PausedTopics(ctx)
	if err != nil {
		return nil, errs.Errorf("wheelq: paused: %w", unreachable(err))
	}
	return ts, nil
}

// park keeps a job that was claimed while its topic was paused (due: its
// stored due time, unix µs), to arm it again on resume.
func (ps *pauser) park(key string, due int64) {
	topic, _, _ := strings.Cut(key, persist.KeySep)
	ps.mu.Lock()
	ps.parkLocked(topic, key, due)
	ps.mu.Unlock()
}

// parkIfPaused parks a job being armed (by the reload, the poller or the
// sweep) when its topic has jobs parked here already, that is, was paused
// at their claims, and reports whether it did: such a job would only be
// claimed to be parked, a round trip for nothing (and the sweep would arm
// every overdue job of a long pause again every pass). A topic resumed
// since is unparked by the watcher, with this job.
func (ps *pauser) parkIfPaused(key string, due int64) bool {
	topic, _, _ := strings.Cut(key, persist.KeySep)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.parked[topic] == nil && !ps.overflow[topic] {
		return false
	}
	ps.parkLocked(topic, key, due)
	return true
}

// parkLocked keeps key (of topic, due at due) parked, or notes the topic's
// overflow when the bound is reached. ps.mu is held.
func (ps *pauser) parkLocked(topic, key string, due int64) {
	if ps.parked == nil {
		ps.parked, ps.overflow = map[string]map[string]int64{}, map[string]bool{}
	}
	m := ps.parked[topic]
	if _, ok := m[key]; !ok {
		if ps.n >= cmp.Or(ps.max, maxParked) {
			ps.overflow[topic] = true
			return
		}
		if m == nil {
			m = map[string]int64{}
			ps.parked[topic] = m
		}
		ps.n++
	}
	m[key] = due
}

// start starts the watcher, the goroutine that re-arms parked jobs on
// resume (Start calls it; stop stops it).
func (ps *pauser) start() {
	ps.resumed = make(chan string, 64)
	ps.topics = make(chan struct{}, 1)
	ps.done = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	ps.cancel = cancel
	go func() {
		defer close(ps.done)
		ps.watch(ctx)
	}()
}

// stop stops the watcher and waits for it.
func (ps *pauser) stop() {
	if ps.cancel != nil {
		ps.cancel()
		<-ps.done
	}
}

// watch runs until ctx ends: it subscribes to pause changes (again
// after a broken subscription), and re-arms the parked jobs of a topic
// resumed, told by the subscription or, every pauseRecheck while jobs are
// parked, by the paused topics read from Redis. With RunWhileRedisDown it
// also keeps the known-paused set: from the messages (both ways), and
// from a read of Redis every pauseRecheck whether jobs are parked or not.
func (ps *pauser) watch(ctx context.Context) {
	var subs sync.WaitGroup
	defer subs.Wait()
	subs.Go(func() {
		for ctx.Err() == nil {
			err := ps.store.WatchEvents(ctx, func(op, topic string) {
				switch op {
				case "ready": // jobs of a pulled topic queued (pull.go)
					ps.announced(topic)
					return
				case "topics": // a topic's mode recorded or forgotten
					select {
					case ps.topics <- struct{}{}:
					default:
					}
					return
				case "pause", "resume":
				default:
					return
				}
				paused := op == "pause"
				ps.notePaused(topic, paused)
				if !paused {
					// A pulled topic's ready jobs were held back while it
					// was paused: a Reserve or Pop looks again at once.
					ps.announced(topic)
					select {
					case ps.resumed <- topic:
					default: // full: the recheck finds it
					}
				}
			})
			if err != nil && ctx.Err() == nil {
				ps.log.Warn("wheelq: pause subscription broken; resubscribing", "err", err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(pauseRecheck):
			}
		}
	})
	modesRead := time.Now() // Start read them
	tick := time.NewTicker(pauseRecheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case topic := <-ps.resumed:
			ps.unpark(ctx, topic)
		case <-ps.topics:
			if ps.readTopicModes(ctx) == nil {
				modesRead = time.Now()
			}
		case <-tick.C:
			// The namespace's pulled topics, now and then (a message may
			// be missed, and a mode deleted by hand announces nothing).
			if time.Since(modesRead) >= pullTopicsRecheck && ps.readTopicModes(ctx) == nil {
				modesRead = time.Now()
			}
			topics := ps.parkedTopics()
			if len(topics) == 0 && !ps.runWhileDown {
				continue // with RunWhileRedisDown, the read keeps the known-paused set
			}
			paused, err := ps.readPaused(ctx)
			if err != nil {
				continue // Redis unreachable: parked jobs wait, the next tick looks again
			}
			for _, t := range topics {
				if _, still := slices.BinarySearch(paused, t); !still {
					ps.unpark(ctx, t)
				}
			}
		}
	}
}

// parkedTopics returns the topics with jobs parked (or not parked for
// want of room).
func (ps *pauser) parkedTopics() []string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []string
	for t := range ps.parked {
		out = append(out, t)
	}
	for t := range ps.overflow {
		if ps.parked[t] == nil {
			out = append(out, t)
		}
	}
	return out
}

// unpark arms the parked jobs of a resumed topic again, in due order; if
// some were not parked for want of room, it reads the topic's jobs due
// within the loaded window of every owned partition from Redis instead
// (unparkFromRedis). A job of a topic paused again meanwhile is parked
// again by its claim.
func (ps *pauser) unpark(ctx context.Context, topic string) {
	ps.mu.Lock()
	m, over := ps.parked[topic], ps.overflow[topic]
	delete(ps.parked, topic)
	delete(ps.overflow, topic)
	ps.n -= len(m)
	page := cmp.Or(ps.page, resumePage)
	ps.mu.Unlock()
	if over {
		// The parked ones are pending in Redis too, and read with the rest.
		ps.unparkFromRedis(ctx, topic, page)
		return
	}
	es := make([]persist.Entry, 0, len(m))
	for k, due := range m {
		es = append(es, persist.Entry{Key: k, Due: due})
	}
	slices.SortFunc(es, func(a, b persist.Entry) int { return posOf(a).compare(posOf(b)) })
	for _, e := range es {
		ps.armUnparked(e)
	}
}

// resumeScan is one owned partition's window being read by
// unparkFromRedis.
type resumeScan struct {
	p     int
	until int64          // the end of the window: the partition's loaded time when the resume began
	cur   persist.Cursor // where the next read goes on
	buf   []persist.Entry
}

// unparkFromRedis arms the jobs of topic due within the loaded window of
// every owned partition, read from Redis, in due order over all of them
// (so that the topic's overdue jobs run oldest first, as parked ones do),
// holding at most page entries at once (one per owned partition, if they
// are more): the partitions' windows are merged, each read page/(owned
// partitions) entries at a time, and each entry armed as the merge
// reaches it. Armed a page of a partition at a time instead, overdue jobs
// would run partition by partition: each page's fire at once, before the
// next partition's is read. A partition whose read fails is left out
// (the sweep re-arms its overdue jobs in a while).
func (ps *pauser) unparkFromRedis(ctx context.Context, topic string, page int) {
	var scans []*resumeScan
	for p := range ps.partitions {
		if until := ps.leases.LoadedUntil(p); until != recovery.NotOwned {
			scans = append(scans, &resumeScan{p: p, until: until})
		}
	}
	if len(scans) == 0 {
		return
	}
	chunk := max(page/len(scans), 1)
	prefix := topic + persist.KeySep
	for ctx.Err() == nil {
		var first *resumeScan
		live := scans[:0]
		for _, s := range scans {
			if !ps.refill(ctx, s, prefix, chunk) {
				continue // read whole, or failed
			}
			live = append(live, s)
			if first == nil || posOf(s.buf[0]).compare(posOf(first.buf[0])) < 0 {
				first = s
			}
		}
		scans = live
		if first == nil {
			return
		}
		ps.armUnparked(first.buf[0])
		first.buf = first.buf[1:]
	}
}

// refill reads s's next entries whose key begins with prefix, chunk
// entries at a time, when it has none left, until some are found or the
// window is read whole; it reports whether s has entries left.
func (ps *pauser) refill(ctx context.Context, s *resumeScan, prefix string, chunk int) bool {
	for len(s.buf) == 0 && !s.cur.Done && ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, ps.writeTimeout)
		es, next, err := ps.store.RangeWindow(cctx, s.p, false, -1<<62, s.until, s.cur, chunk)
		cancel()
		if err != nil {
			// The sweep re-arms overdue jobs in a while anyway.
			ps.log.Warn("wheelq: resume: reading a paused topic's jobs", "topic", strings.TrimSuffix(prefix, persist.KeySep), "partition", s.p, "err", err)
			return false
		}
		s.buf = slices.DeleteFunc(es, func(e persist.Entry) bool { return !strings.HasPrefix(e.Key, prefix) })
		s.cur = next
	}
	return len(s.buf) > 0
}

// armUnparked arms a job of a resumed topic, if its partition is still
// owned here and the job due within its loaded window.
func (ps *pauser) armUnparked(e persist.Entry) {
	if ps.leases.LoadedUntil(ps.store.PartitionOf(e.Key)) >= e.Due {
		now, wall := wheel.Readings(ps.clock)
		ps.armAt(e.Key, max(e.Due, 0), now, wall)
	}
}
