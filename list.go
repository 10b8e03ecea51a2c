package wheelq

// Listing: jobs by topic, state and due window across the partitions,
// paged by a cursor, and counts by topic; from any process, started or
// not. (Steering them is in steer.go, one job's details in inspect.go.)

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wheelq/wheelq/internal/errs"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/wheel"
)

// ErrInvalidCursor is returned by List for a cursor that no List returned.
var ErrInvalidCursor = errors.New("wheelq: invalid cursor")

// JobFilter selects jobs for List, CancelWhere and RequeueWhere.
type JobFilter struct {
	// Topic selects one topic; "" selects every topic.
	Topic string
	// State is StatePending (which includes overdue and running jobs),
	// StateRunning or StateDead; 0 means StatePending.
	State JobState
	// Overdue selects only jobs more than OverdueAfter past their due
	// time (pending or running; as Stats and Counts count them).
	Overdue bool
	// DueAfter, if not zero, selects jobs due at or after it (dead jobs:
	// dead-lettered at or after it).
	DueAfter time.Time
	// DueBefore, if not zero, selects jobs due before it (dead jobs:
	// dead-lettered before it).
	DueBefore time.Time
}

// TopicCounts are the counts of one topic.
type TopicCounts struct {
	Topic string
	// Pending counts the pending jobs, overdue and running ones included.
	Pending int64
	// Overdue counts the pending jobs more than OverdueAfter past their
	// due time.
	Overdue int64
	// Running counts the pending jobs with a run claimed (in progress, or
	// about to start).
	Running int64
	// Dead counts the dead-lettered jobs.
	Dead int64
	// Paused says the topic is paused (see Pause).
	Paused bool
}

// Bounds of List.
const (
	// DefaultListLimit is the page size of a List given limit 0.
	DefaultListLimit = 100
	// MaxListLimit is the largest page of List.
	MaxListLimit = 1000
)

// listScanBudget bounds the set members one List reads from a partition
// for a filter by topic (which Redis cannot apply): past it, the page
// ends where the partition's reading stopped, maybe short of limit.
const listScanBudget = 5000

// query is a checked JobFilter.
type query struct {
	topic        string
	state        JobState
	after, until int64 // the window of scores: after < score <= until (unix µs)
}

func (q query) dead() bool { return q.state == StateDead }

// query checks f, as List takes it (op names the call in errors).
func (q *Queue) query(op string, f JobFilter) (query, error) {
	if f.Topic != "" {
		if err := validTopic(f.Topic); err != nil {
			return query{}, err
		}
	}
	st := cmp.Or(f.State, StatePending)
	switch {
	case st != StatePending && st != StateRunning && st != StateDead:
		return query{}, fmt.Errorf("%w: %s state %v: want pending, running or dead", ErrInvalidOption, op, st)
	case f.Overdue && st == StateDead:
		return query{}, fmt.Errorf("%w: %s: Overdue selects pending or running jobs, not dead ones", ErrInvalidOption, op)
	case !f.DueAfter.IsZero() && !f.DueBefore.IsZero() && f.DueAfter.After(f.DueBefore):
		return query{}, fmt.Errorf("%w: %s: DueAfter %v is after DueBefore %v", ErrInvalidOption, op,
			f.DueAfter.Format(time.RFC3339Nano), f.DueBefore.Format(time.RFC3339Nano))
	}
	qu := query{topic: f.Topic, state: st, after: math.MinInt64 / 2, until: math.MaxInt64 / 2}
	if !f.DueAfter.IsZero() {
		qu.after = ceilMicro(f.DueAfter) - 1
	}
	if !f.DueBefore.IsZero() {
		qu.until = ceilMicro(f.DueBefore) - 1
	}
	if f.Overdue {
		_, wall := wheel.Readings(q.clock)
		qu.until = min(qu.until, wall.Add(-OverdueAfter).UnixMicro()-1)
	}
	return qu, nil
}

// position is where a List page ended: the last job of the page in the
// order of all partitions' sets merged, by score, then by job key byte by
// byte (each set's own order).
type position struct {
	score int64
	key   string
}

// posOf returns where a set's entry stands in that order.
func posOf(e persist.Entry) position { return position{e.Due, e.Key} }

func (a position) compare(b position) int {
	return cmp.Or(cmp.Compare(a.score, b.score), strings.Compare(a.key, b.key))
}

// encode returns the position as an opaque cursor.
func (a position) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte("1:" + strconv.FormatInt(a.score, 10) + ":" + a.key))
}

func decodeCursor(s string) (position, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		v, rest, ok := strings.Cut(string(b), ":")
		sc, key, ok2 := strings.Cut(rest, ":")
		n, perr := strconv.ParseInt(sc, 10, 64)
		if ok && ok2 && v == "1" && perr == nil && key != "" {
			return position{score: n, key: key}, nil
		}
	}
	return position{}, fmt.Errorf("%w: %q is not a cursor List returned (start with \"\")", ErrInvalidCursor, s)
}

// partPage is what List read of one partition.
type partPage struct {
	es []persist.Entry // the matching jobs read, in order
	// more says the partition has jobs after end not read yet; end is
	// where its reading stopped.
	more bool
	end  position
}

// List returns a page of the jobs f selects, in due order across all
// partitions (dead jobs: in order of death), and the cursor of the next
// page: "" starts, and "" comes back with the last page. A page holds up
// to limit jobs (0: DefaultListLimit; at most MaxListLimit); fewer at the
// end, or when a filter by topic had to stop reading a partition (it
// reads at most a few thousand members of each per call). Continue while
// the cursor is not "": it is given only when a job follows the page as
// read, or when a filter by topic stopped reading a partition with
// members unread (the next page may then hold none of the topic's jobs,
// and give a cursor again); a full page that ends the listing comes back
// with "". Jobs that change between pages (run, cancelled, rescheduled)
// are seen where they stand when a page is read: a job moved past the
// cursor may be listed twice, one moved before it not at all, and the
// page after jobs that ended meanwhile may be short or empty.
//
// Each job's state is StatePending, StateRunning (a run claimed, its
// outcome not stored yet) or StateDead. A record that cannot be decoded
// is listed with the decoding error as LastError; a job that ended
// between the reading of its set and of its record is left out.
//
// Cost: a round trip per partition, then one per partition on the page:
// 2.7 ms for a page of 100 of 200,000 jobs in 16 partitions here
// (BenchmarkInspector). A filter by topic is applied here, not in Redis:
// up to listScanBudget (5000) members per partition, in pages of 500,
// 77 ms for a topic of 1% of those jobs. A filter by state running reads
// the claim marks of every partition (a few: bounded by the runs in
// flight; 0.4 ms).
func (q *Queue) List(ctx context.Context, f JobFilter, cursor string, limit int) (jobs []JobInfo, next string, err error) {
	if err := checkCtx(ctx, "List"); err != nil {
		return nil, "", err
	}
	if limit < 0 || limit > MaxListLimit {
		return nil, "", fmt.Errorf("%w: List limit %d: want 0 to %d", ErrInvalidOption, limit, MaxListLimit)
	}
	limit = cmp.Or(limit, DefaultListLimit)
	qu, err := q.query("List", f)
	if err != nil {
		return nil, "", err
	}
	var from *position
	if cursor != "" {
		pos, err := decodeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		from = &pos
	}
	if q.closing() {
		return nil, "", ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return nil, "", errs.Errorf("wheelq: list: %w", unreachable(err))
	}
	type found struct {
		e persist.Entry
		p int
	}
	var all []found
	var bound *position // where the earliest partition with more to read stopped
	for p := range q.cfg.Partitions {
		// One more than the page: a partition with exactly limit jobs
		// left is then read to its end (a reading of a set is known to be
		// done only when it comes back short), so it gives no cursor;
		// one with more gives limit+1 jobs, the page is full and the
		// cursor is its last job's, with a job after it.
		pg, err := q.readPart(ctx, qu, p, from, limit+1)
		if err != nil {
			return nil, "", errs.Errorf("wheelq: list: %w", unreachable(err))
		}
		for _, e := range pg.es {
			all = append(all, found{e, p})
		}
		if pg.more && (bound == nil || pg.end.compare(*bound) < 0) {
			bound = &pg.end
		}
	}
	// Only jobs up to bound are sure to be in order: a partition that has
	// more to read may have jobs before the others' later ones.
	if bound != nil {
		all = slices.DeleteFunc(all, func(f found) bool { return posOf(f.e).compare(*bound) > 0 })
	}
	slices.SortFunc(all, func(a, b found) int { return posOf(a.e).compare(posOf(b.e)) })
	switch {
	case len(all) > limit:
		all = all[:limit]
		next = posOf(all[limit-1].e).encode()
	case bound != nil:
		next = bound.encode()
	}
	// The records, a round trip per partition on the page.
	byPart := map[int][]int{}
	for i, f := range all {
		byPart[f.p] = append(byPart[f.p], i)
	}
	infos := make([]*JobInfo, len(all))
	for p, idx := range byPart {
		keys := make([]string, len(idx))
		for j, i := range idx {
			keys[j] = all[i].e.Key
		}
		recs, marked, err := q.store.Details(ctx, p, keys)
		if err != nil {
			return nil, "", errs.Errorf("wheelq: list: %w", unreachable(err))
		}
		for j, i := range idx {
			if recs[j] == nil {
				continue // ended meanwhile
			}
			info := jobInfo(all[i].e, recs[j], qu.dead())
			if marked[j] != persist.MarkNone && !qu.dead() {
				info.State = StateRunning
				info.Attempts++ // the run in progress, as Lookup counts it
				info.Reserved = marked[j] == persist.MarkReserved
			}
			infos[i] = &info
		}
	}
	jobs = make([]JobInfo, 0, len(all))
	for _, info := range infos {
		if info != nil {
			jobs = append(jobs, *info)
		}
	}
	return jobs, next, nil
}

// jobInfo describes a listed job from its set entry and its raw record.
func jobInfo(e persist.Entry, rec []byte, dead bool) JobInfo {
	topic, id, _ := persist.SplitJobKey(e.Key)
	st := persist.Pending
	info := JobInfo{Topic: topic, ID: id, State: StatePending, Due: time.UnixMicro(e.Due)}
	if dead {
		st, info.State, info.Finished = persist.DeadLettered, StateDead, info.Due
	}
	r, err := persist.DecodeRecord(rec)
	if err != nil {
		info.LastError = err.Error()
		return info
	}
	r.Topic, r.ID, r.Due = topic, id, info.Due
	return infoOf(r, st)
}

// readPart reads partition p's jobs that qu selects after from (nil: from
// the start of the window): up to limit of them, or what a scan of
// listScanBudget members found. The page says more when the reading
// stopped before the set's end: with limit jobs read (maybe the last ones:
// a reading that comes back full is not known to be done) or at the
// budget.
func (q *Queue) readPart(ctx context.Context, qu query, p int, from *position, limit int) (partPage, error) {
	after := func(e persist.Entry) bool { return from == nil || posOf(e).compare(*from) > 0 }
	match := func(e persist.Entry) bool {
		return e.Due > qu.after && e.Due <= qu.until && after(e) && (qu.topic == "" || strings.HasPrefix(e.Key, qu.topic+persist.KeySep))
	}
	if qu.state == StateRunning {
		es, err := q.store.Running(ctx, p)
		if err != nil {
			return partPage{}, err
		}
		es = slices.DeleteFunc(es, func(e persist.Entry) bool { return !match(e) })
		slices.SortFunc(es, func(a, b persist.Entry) int { return posOf(a).compare(posOf(b)) })
		return partPage{es: es}, nil
	}
	var cur persist.Cursor
	if from != nil && from.score > qu.after {
		cur = persist.Cursor{Score: from.score, Member: from.key}
	}
	size := limit
	if qu.topic != "" {
		size = max(limit, 500)
	}
	var pg partPage
	for scanned := 0; ; {
		es, next, err := q.store.RangeWindow(ctx, p, qu.dead(), qu.after, qu.until, cur, size)
		if err != nil {
			return partPage{}, err
		}
		scanned += len(es)
		for _, e := range es {
			if match(e) {
				pg.es = append(pg.es, e)
			}
		}
		cur = next
		if next.Done {
			return pg, nil
		}
		if len(pg.es) >= limit || scanned >= listScanBudget {
			pg.more, pg.end = true, position{next.Score, next.Member}
			return pg, nil
		}
	}
}

// tallyPage is how many members of a set one round trip of Counts counts.
const tallyPage = 5000

// Counts returns the counts of every topic that has pending or dead jobs
// or is paused, sorted by topic. Overdue is as Stats counts it (more than
// OverdueAfter past due).
//
// Cost: it reads every member of every partition's pending and dead sets
// once, tallied by topic in Redis a page of 5000 members per round trip
// (Redis does O(page) work per call and sends back a few numbers per
// topic), so about (pending+dead)/5000 + 3×partitions round trips:
// 53 ms for 200,000 jobs in 16 partitions here (BenchmarkInspector; about
// a quarter of a second per million jobs), each call holding Redis for
// about 1.4 ms. The counts are not a snapshot:
// a job that moves while they are read may be counted twice or not at all.
func (q *Queue) Counts(ctx context.Context) ([]TopicCounts, error) {
	if err := checkCtx(ctx, "Counts"); err != nil {
		return nil, err
	}
	if q.closing() {
		return nil, ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return nil, errs.Errorf("wheelq: counts: %w", unreachable(err))
	}
	_, wall := wheel.Readings(q.clock)
	before := wall.Add(-OverdueAfter).UnixMicro()
	byTopic := map[string]*TopicCounts{}
	of := func(topic string) *TopicCounts {
		c := byTopic[topic]
		if c == nil {
			c = &TopicCounts{Topic: topic}
			byTopic[topic] = c
		}
		return c
	}
	for p := range q.cfg.Partitions {
		for _, dead := range []bool{false, true} {
			for start := int64(0); start >= 0; {
				ts, next, err := q.store.TallyTopics(ctx, p, dead, start, tallyPage, before)
				if err != nil {
					return nil, errs.Errorf("wheelq: counts: %w", unreachable(err))
				}
				for _, t := range ts {
					c := of(t.Topic)
					if dead {
						c.Dead += t.N
					} else {
						c.Pending += t.N
						c.Overdue += t.Below
					}
				}
				start = next
			}
		}
		es, err := q.store.Running(ctx, p)
		if err != nil {
			return nil, errs.Errorf("wheelq: counts: %w", unreachable(err))
		}
		for _, e := range es {
			topic, _, _ := strings.Cut(e.Key, persist.KeySep)
			of(topic).Running++
		}
	}
	paused, err := q.store.PausedTopics(ctx)
	if err != nil {
		return nil, errs.Errorf("wheelq: counts: %w", unreachable(err))
	}
	for _, t := range paused {
		of(t).Paused = true
	}
	out := make([]TopicCounts, 0, len(byTopic))
	for _, c := range byTopic {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b TopicCounts) int { return strings.Compare(a.Topic, b.Topic) })
	return out, nil
}

// inspectorStore is what the inspector needs of the store (persist.Store's
// inspect.go), besides the engine's calls.
type inspectorStore interface {
	RangeWindow(ctx context.Context, p int, dead bool, after, until int64, cur persist.Cursor, limit int) ([]persist.Entry, persist.Cursor, error)
	Running(ctx context.Context, p int) ([]persist.Entry, error)
	Details(ctx context.Context, p int, keys []string) (recs [][]byte, marked []persist.Mark, err error)
	TallyTopics(ctx context.Context, p int, dead bool, start int64, size int, before int64) ([]persist.Tally, int64, error)
	SetPaused(ctx context.Context, topic string, paused bool) error
	PausedTopics(ctx context.Context) ([]string, error)
	WatchPaused(ctx context.Context, changed func(topic string, paused bool)) error
	WatchEvents(ctx context.Context, f func(op, topic string)) error
}
