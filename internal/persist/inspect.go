package persist

// What the inspector reads and steers from outside the engine: pages of a
// partition's sets in a due window, the runs claimed, counts by topic,
// and the paused topics.

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq/internal/errs"
)

var (
	//go:embed lua/tally.lua
	tallyLua string
	//go:embed lua/running.lua
	runningLua string
)

// The inspector's scripts. They are read-only and run alone
// (Script.Run loads one on NOSCRIPT); a *redis.Script holds nothing but
// its text and hash.
var (
	tallyScript   = redis.NewScript(tallyLua)
	runningScript = redis.NewScript(runningLua)
)

// RangeWindow pages through partition p's pending set (dead: its dead
// set, scored by time of death) with after < score <= until, in (score,
// member) order, continuing from cur (zero to start). It is RangePending
// for either set.
func (s *Store) RangeWindow(ctx context.Context, p int, dead bool, after, until int64, cur Cursor, limit int) ([]Entry, Cursor, error) {
	key := s.parts[p].Pending
	if dead {
		key = s.parts[p].Dead
	}
	return s.rangeSet(ctx, key, after, until, cur, limit)
}

// Running returns the pending jobs of partition p whose run is claimed
// (marked running by claim.lua, not settled yet), with their due times,
// in one round trip. Their number is bounded by the runs in flight.
func (s *Store) Running(ctx context.Context, p int) ([]Entry, error) {
	k := s.parts[p]
	v, err := runningScript.Run(ctx, s.rdb, []string{k.Running, k.Pending}).Slice()
	if err != nil {
		return nil, wrap(err)
	}
	return entries(v)
}

// entries reads a flat member, score, ... reply.
func entries(v []any) ([]Entry, error) {
	out := make([]Entry, 0, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		k, ok := v[i].(string)
		if !ok {
			return nil, fmt.Errorf("%w: reply member %T", ErrCorrupt, v[i])
		}
		sc, err := scoreOf(v[i+1])
		if err != nil {
			return nil, err
		}
		out = append(out, Entry{Key: k, Due: sc})
	}
	return out, nil
}

// claimed reports whether a claim mark (the running HASH's value; ok
// false when there is none) names an owner with a run in flight: any but
// "!" alone (a run interrupted, none claimed now; see lib.lua's claimer).
func claimed(mark string, ok bool) bool {
	return ok && mark != "!"
}

// Mark is what a job's mark in its partition's running HASH says.
type Mark int8

// Marks.
const (
	MarkNone     Mark = iota // no run claimed (or only a "!": a run interrupted)
	MarkClaimed              // a run is claimed by a process
	MarkReserved             // a consumer holds a reservation ("~"; pulled topics)
)

// Details reads the records of keys (all of partition p; a missing one
// is nil) and each one's mark, in one round trip.
func (s *Store) Details(ctx context.Context, p int, keys []string) (recs [][]byte, marked []Mark, err error) {
	if len(keys) == 0 {
		return nil, nil, nil
	}
	k := s.parts[p]
	pipe := s.rdb.Pipeline()
	rc := pipe.HMGet(ctx, k.Jobs, keys...)
	mc := pipe.HMGet(ctx, k.Running, keys...)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, wrap(err)
	}
	recs, marked = make([][]byte, len(keys)), make([]Mark, len(keys))
	for i, v := range rc.Val() {
		if str, ok := v.(string); ok {
			recs[i] = []byte(str)
		}
	}
	for i, v := range mc.Val() {
		s, ok := v.(string)
		switch {
		case !claimed(s, ok):
		case strings.HasPrefix(s, ReservationMark):
			marked[i] = MarkReserved
		default:
			marked[i] = MarkClaimed
		}
	}
	return recs, marked, nil
}

// Tally is the count of one topic's members in a page of a set.
type Tally struct {
	Topic string
	N     int64 // members
	Below int64 // members scored below the score Tally was given
}

// TallyTopics counts the members of partition p's pending set (dead: its
// dead set) with ranks start to start+size-1 by topic, and how many of
// each scored below before (unix µs). next is the next page's first rank,
// -1 when the set is done. Members that move between calls shift the
// ranks: a walk is not a snapshot.
func (s *Store) TallyTopics(ctx context.Context, p int, dead bool, start int64, size int, before int64) (ts []Tally, next int64, err error) {
	if size < 1 {
		return nil, -1, errs.Errorf("wheelq: tally size %d < 1", size)
	}
	key := s.parts[p].Pending
	if dead {
		key = s.parts[p].Dead
	}
	v, err := tallyScript.Run(ctx, s.rdb, []string{key}, start, size, before).Slice()
	if err != nil {
		return nil, -1, wrap(err)
	}
	if len(v) < 1 || (len(v)-1)%3 != 0 {
		return nil, -1, fmt.Errorf("%w: tally reply of %d values", ErrCorrupt, len(v))
	}
	next, _ = v[0].(int64)
	for i := 1; i+2 < len(v); i += 3 {
		topic, _ := v[i].(string)
		n, _ := v[i+1].(int64)
		below, _ := v[i+2].(int64)
		ts = append(ts, Tally{Topic: topic, N: n, Below: below})
	}
	return ts, next, nil
}

// pausedChannel is where SetPaused announces a change.
func pausedChannel(ns string) string { return "wq:{" + ns + "}:paused" }

// SetPaused pauses (or resumes) topic: it writes (or deletes) the topic in
// every partition's paused HASH, where claim.lua reads it, in one
// pipeline, then publishes the change so that running processes learn it
// at once. The partitions' hashes are separate keys (a cluster keeps them
// on different nodes): a call that fails may have changed some of them;
// calling again finishes it (it is idempotent).
func (s *Store) SetPaused(ctx context.Context, topic string, paused bool) error {
	pipe := s.rdb.Pipeline()
	for _, k := range s.parts {
		if paused {
			pipe.HSet(ctx, k.Paused, topic, "1")
		} else {
			pipe.HDel(ctx, k.Paused, topic)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return wrap(err)
	}
	msg := "resume " + topic
	if paused {
		msg = "pause " + topic
	}
	if err := s.rdb.Publish(ctx, pausedChannel(s.ns), msg).Err(); err != nil {
		return wrap(err)
	}
	return nil
}

// PausedTopics returns the paused topics, sorted: those in any
// partition's paused HASH (a pause or resume that failed half-way shows
// as paused), in one round trip.
func (s *Store) PausedTopics(ctx context.Context) ([]string, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(s.parts))
	for p, k := range s.parts {
		cmds[p] = pipe.HKeys(ctx, k.Paused)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, wrap(err)
	}
	var out []string
	for _, c := range cmds {
		out = append(out, c.Val()...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// WatchPaused calls changed with the topic whenever a topic is paused or
// resumed (by SetPaused, from any process), until ctx ends. It holds a
// subscription (one connection) meanwhile. Changes published while the
// subscription was broken are missed: a caller still reads PausedTopics
// now and then.
func (s *Store) WatchPaused(ctx context.Context, changed func(topic string, paused bool)) error {
	return s.WatchEvents(ctx, func(op, topic string) {
		if op == "pause" || op == "resume" {
			changed(topic, op == "pause")
		}
	})
}

// WatchEvents calls f with every event announced on the namespace's
// channel, until ctx ends: op "pause" or "resume" (SetPaused), "ready"
// (jobs of topic queued to its ready sets: due.lua, resolve.lua) or
// "topics" (a topic's mode recorded or forgotten; topic empty). It holds
// a subscription (one connection) meanwhile; events published while it
// was broken are missed.
func (s *Store) WatchEvents(ctx context.Context, f func(op, topic string)) error {
	return s.subscribe(ctx, pausedChannel(s.ns), func(msg string) {
		op, topic, _ := strings.Cut(msg, " ")
		f(op, topic)
	})
}

// subscribe calls f with every message published on channel until ctx
// ends, holding a subscription (one connection) meanwhile.
func (s *Store) subscribe(ctx context.Context, channel string, f func(msg string)) error {
	ps := s.rdb.Subscribe(ctx, channel)
	defer ps.Close()
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			f(m.Payload)
		}
	}
}
