package persist

// Reads: a job and its run history, ranges of the pending and dead sets,
// records by key, counts and the census of overdue jobs.

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq/internal/errs"
)

// State is where a job stands in the store.
type State int8

// States of a job.
const (
	Missing      State = iota // not stored
	Pending                   // in the pending set
	DeadLettered              // in the dead-letter set
	Done                      // acked: in the run history only
	Cancelled                 // cancelled: in the run history only
	Running                   // in the pending set, and a run of it claimed (marked)
	Reserved                  // in the pending set, reserved by a consumer (marked "~"); Due is the reservation's deadline
)

// Get reads a job's record and state. The record's Due is its due time
// (pending) or time of death (dead). A missing job gives ErrNotFound; a
// record that cannot be decoded gives an error wrapping ErrCorrupt.
func (s *Store) Get(ctx context.Context, key string) (Record, State, error) {
	k := s.parts[s.PartitionOf(key)]
	pipe := s.rdb.Pipeline()
	rec := pipe.HGet(ctx, k.Jobs, key)
	pend := pipe.ZScore(ctx, k.Pending, key)
	dead := pipe.ZScore(ctx, k.Dead, key)
	mark := pipe.HGet(ctx, k.Running, key)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Record{}, Missing, wrap(err)
	}
	b, err := rec.Bytes()
	if errors.Is(err, redis.Nil) {
		return Record{}, Missing, ErrNotFound
	}
	r, err := DecodeRecord(b)
	if err != nil {
		return Record{}, Missing, fmt.Errorf("job %q: %w", key, err)
	}
	r.Topic, r.ID, err = SplitJobKey(key)
	if err != nil {
		return Record{}, Missing, err
	}
	state := Missing
	if v, err := pend.Result(); err == nil {
		state, r.Due = Pending, time.UnixMicro(int64(v))
		if m, err := mark.Result(); claimed(m, err == nil) {
			state = Running
			if strings.HasPrefix(m, ReservationMark) {
				state = Reserved
			}
		}
	} else if v, err := dead.Result(); err == nil {
		state, r.Due = DeadLettered, time.UnixMicro(int64(v))
	}
	return r, state, nil
}

// History reads a job's entry in the run history: its record without the
// payload, with Finished set, and its state: Done (acked) or Cancelled. A
// job not there (never finished, or past the retention) gives ErrNotFound.
// ranWhenCancelled says a run of a cancelled job had been claimed.
func (s *Store) History(ctx context.Context, key string) (r Record, st State, ranWhenCancelled bool, err error) {
	k := s.parts[s.PartitionOf(key)]
	pipe := s.rdb.Pipeline()
	entry := pipe.HGet(ctx, k.History, key)
	at := pipe.ZScore(ctx, k.HistoryIdx, key)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Record{}, Missing, false, wrap(err)
	}
	b, err := entry.Bytes()
	if errors.Is(err, redis.Nil) {
		return Record{}, Missing, false, ErrNotFound
	}
	if len(b) < 1 {
		return Record{}, Missing, false, fmt.Errorf("%w: empty history entry of %q", ErrCorrupt, key)
	}
	switch b[0] {
	case 'd':
		st = Done
	case 'c', 'C':
		st, ranWhenCancelled = Cancelled, b[0] == 'C'
	default:
		return Record{}, Missing, false, fmt.Errorf("%w: history entry of %q with outcome %q", ErrCorrupt, key, b[0])
	}
	if r, err = DecodeHeader(b[1:]); err != nil {
		return Record{}, Missing, false, fmt.Errorf("history of %q: %w", key, err)
	}
	if r.Topic, r.ID, err = SplitJobKey(key); err != nil {
		return Record{}, Missing, false, err
	}
	if v, err := at.Result(); err == nil {
		r.Finished = time.UnixMicro(int64(v))
	}
	return r, st, ranWhenCancelled, nil
}

// Entry is a job key with its score.
type Entry struct {
	Key string
	Due int64 // unix µs (for the dead set: time of death)
}

// Cursor pages through a sorted set in (score, member) order: the next
// page starts after the last member returned, wherever it now stands, so
// that members removed meanwhile (acked, cancelled) make no page skip one
// that was not read, and members that share a score are neither missed nor
// repeated. The zero Cursor starts a range.
type Cursor struct {
	Score  int64  // the last score returned
	Member string // the last member returned ("": none yet)
	Done   bool
}

// RangePending returns up to limit pending jobs of partition p with
// after < due <= until, in due order, continuing from cur (zero to start).
func (s *Store) RangePending(ctx context.Context, p int, after, until int64, cur Cursor, limit int) ([]Entry, Cursor, error) {
	return s.rangeSet(ctx, s.parts[p].Pending, after, until, cur, limit)
}

// RangeDead pages through partition p's dead set in order of death.
func (s *Store) RangeDead(ctx context.Context, p int, cur Cursor, limit int) ([]Entry, Cursor, error) {
	return s.rangeSet(ctx, s.parts[p].Dead, -1<<62, 1<<62, cur, limit)
}

func (s *Store) rangeSet(ctx context.Context, key string, after, until int64, cur Cursor, limit int) ([]Entry, Cursor, error) {
	if limit < 1 {
		return nil, cur, errs.Errorf("wheelq: range limit %d < 1", limit)
	}
	if cur.Member == "" {
		cur.Score = after
	}
	v, err := s.rangeSc.Run(ctx, s.rdb, []string{key}, cur.Score, cur.Member, until, limit).Slice()
	if err != nil {
		return nil, cur, wrap(err)
	}
	out := make([]Entry, 0, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		k, ok := v[i].(string)
		if !ok {
			return nil, cur, fmt.Errorf("%w: range reply member %T", ErrCorrupt, v[i])
		}
		sc, err := scoreOf(v[i+1])
		if err != nil {
			return nil, cur, err
		}
		out = append(out, Entry{Key: k, Due: sc})
		cur.Score, cur.Member = sc, k
	}
	cur.Done = len(out) < limit
	return out, cur, nil
}

// Records reads the records of keys (all of partition p) in one round trip;
// a missing record is nil.
func (s *Store) Records(ctx context.Context, p int, keys []string) ([][]byte, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	vals, err := s.rdb.HMGet(ctx, s.parts[p].Jobs, keys...).Result()
	if err != nil {
		return nil, wrap(err)
	}
	out := make([][]byte, len(vals))
	for i, v := range vals {
		if str, ok := v.(string); ok {
			out[i] = []byte(str)
		}
	}
	return out, nil
}

// Ping checks that Redis answers (a PING; on a Cluster, to one of its
// nodes).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return wrap(err)
	}
	if s.acks <= 0 {
		return nil
	}
	// Writes wait for s.acks replicas: are there that many, caught up?
	// WAIT returns at once when they are, else after the timeout with
	// how many are (a replica down: fewer; every write would then fail).
	wait := min(s.ackTimeout, 500*time.Millisecond)
	check := func(ctx context.Context, c interface {
		Do(context.Context, ...any) *redis.Cmd
	}) error {
		n, err := c.Do(ctx, "WAIT", s.acks, wait.Milliseconds()).Int64()
		if err != nil {
			return wrap(err)
		}
		if n < int64(s.acks) {
			return fmt.Errorf("%w: %d of %d replicas acknowledge within %v", ErrNotReplicated, n, s.acks, wait)
		}
		return nil
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return check(ctx, c) })
	}
	return check(ctx, s.rdb)
}

// Counts returns the number of pending and dead jobs over all partitions.
func (s *Store) Counts(ctx context.Context) (pending, dead int64, err error) {
	c, err := s.Census(ctx, math.MinInt64/2)
	return c.Pending, c.Dead, err
}

// Census is what Census reads of the namespace.
type Census struct {
	Pending, Dead int64 // over all partitions
	// Overdue is, per partition, the number of pending jobs due before
	// the time Census was given.
	Overdue []int64
	// Oldest is, per partition, the due time (unix µs) of its earliest
	// pending job; HaveOldest says whether it has one.
	Oldest     []int64
	HaveOldest []bool
}

// Census reads, in one round trip, the pending and dead counts of every
// partition, how many pending jobs of each are due before before (unix
// µs), and each one's earliest due time.
func (s *Store) Census(ctx context.Context, before int64) (Census, error) {
	n := len(s.parts)
	pipe := s.rdb.Pipeline()
	cards := make([]*redis.IntCmd, 0, 3*n)
	oldest := make([]*redis.ZSliceCmd, n)
	max := strconv.FormatInt(before, 10)
	for p, k := range s.parts {
		cards = append(cards, pipe.ZCard(ctx, k.Pending), pipe.ZCard(ctx, k.Dead), pipe.ZCount(ctx, k.Pending, "-inf", "("+max))
		oldest[p] = pipe.ZRangeWithScores(ctx, k.Pending, 0, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return Census{}, wrap(err)
	}
	c := Census{Overdue: make([]int64, n), Oldest: make([]int64, n), HaveOldest: make([]bool, n)}
	for p := range n {
		c.Pending += cards[3*p].Val()
		c.Dead += cards[3*p+1].Val()
		c.Overdue[p] = cards[3*p+2].Val()
		if zs := oldest[p].Val(); len(zs) > 0 {
			c.Oldest[p], c.HaveOldest[p] = int64(zs[0].Score), true
		}
	}
	return c, nil
}

func intAt(reply any, i int) (int64, error) {
	arr, ok := reply.([]any)
	if !ok || i >= len(arr) {
		return 0, fmt.Errorf("%w: unexpected script reply %T", ErrCorrupt, reply)
	}
	v, ok := arr[i].(int64)
	if !ok {
		return 0, fmt.Errorf("%w: unexpected script reply element %T", ErrCorrupt, arr[i])
	}
	return v, nil
}

func scoreOf(v any) (int64, error) {
	str, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("%w: score %T", ErrCorrupt, v)
	}
	f, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: score %q", ErrCorrupt, str)
	}
	return int64(f), nil
}
