package persist

// Recurring schedules: their specs and watermarks, kept in the partition
// of each schedule's slot jobs (see recur.lua), so that storing a slot's
// job and moving the watermark past it is one script call on one slot.

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/recur.lua
var recurLua string

// ErrSpecChanged is returned by DeclareRecur, RemoveRecur and FillRecur
// when the stored spec of the schedule is not the one the caller read: it
// was changed (or removed) meanwhile; read it again.
var ErrSpecChanged = errors.New("wheelq: recurring schedule changed meanwhile")

func keysRecur(k Keys) []string {
	return []string{k.Pending, k.Jobs, k.Lease, k.Loaded, k.Inbox, k.Running, k.Recur, k.RecurState}
}

// RecurState is a schedule as stored: its spec, the latest slot whose job
// was stored (the watermark, unix µs; 0 for none) and the latest slots
// stored (or passed over by a fill as done), in the order the fills
// reached them (up to 8; a redeclaration keeps them, so the old spec's
// slots, dropped or not, may come before the new one's earlier slots).
type RecurState struct {
	Partition int
	Name      string
	Spec      string
	Watermark int64
	Recent    []int64
}

// Recurs returns the stored schedules of partitions parts (nil: every
// partition), in one round trip.
func (s *Store) Recurs(ctx context.Context, parts []int) ([]RecurState, error) {
	if parts == nil {
		parts = make([]int, len(s.parts))
		for p := range parts {
			parts[p] = p
		}
	}
	pipe := s.rdb.Pipeline()
	specs := make([]*redis.MapStringStringCmd, len(parts))
	states := make([]*redis.MapStringStringCmd, len(parts))
	for i, p := range parts {
		specs[i] = pipe.HGetAll(ctx, s.parts[p].Recur)
		states[i] = pipe.HGetAll(ctx, s.parts[p].RecurState)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, wrap(err)
	}
	var out []RecurState
	for i, p := range parts {
		st := states[i].Val()
		for name, spec := range specs[i].Val() {
			r := RecurState{Partition: p, Name: name, Spec: spec}
			if v, ok := st[name]; ok {
				wm, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%w: watermark of %q: %q", ErrCorrupt, name, v)
				}
				r.Watermark = wm
			}
			for f := range strings.SplitSeq(st[name+"\x00r"], ",") {
				if f == "" {
					continue
				}
				v, err := strconv.ParseInt(f, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%w: recent slots of %q: %q", ErrCorrupt, name, f)
				}
				r.Recent = append(r.Recent, v)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// RecurOf returns schedule name of partition p as stored (Spec "" if
// there is none), in one round trip.
func (s *Store) RecurOf(ctx context.Context, p int, name string) (RecurState, error) {
	k := s.parts[p]
	pipe := s.rdb.Pipeline()
	spec := pipe.HGet(ctx, k.Recur, name)
	wm := pipe.HGet(ctx, k.RecurState, name)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return RecurState{}, wrap(err)
	}
	st := RecurState{Partition: p, Name: name, Spec: spec.Val()}
	if v := wm.Val(); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return RecurState{}, fmt.Errorf("%w: watermark of %q: %q", ErrCorrupt, name, v)
		}
		st.Watermark = n
	}
	return st, nil
}

// DeclareRecur stores spec as schedule name of partition p, if the stored
// one is still old ("" for none) and its watermark still read (the
// slots drop was computed from: a fill storing more meanwhile makes it
// ErrSpecChanged, to read again): changed reports whether it differed. A
// changed spec's watermark becomes watermark (its slots after it are the
// new spec's), and the pending jobs of drop (the old spec's slots still to
// come: Due and Key, no Record) are deleted, unless a run of one is
// claimed. A slot of drop whose run is claimed, or whose job is gone (it
// ran early, or was cancelled), is not stored again by the new spec.
func (s *Store) DeclareRecur(ctx context.Context, p int, name, spec, old string, read, watermark int64, drop []Slot) (changed bool, err error) {
	args := []any{"declare", name, spec, old, watermark, read}
	for _, sl := range drop {
		args = append(args, sl.Due, sl.Key)
	}
	return recurDone(s.runRecur(ctx, p, args))
}

// RemoveRecur removes schedule name of partition p, if its stored spec is
// still spec and its watermark still read, and deletes the pending jobs
// of drop (as DeclareRecur). ok
// is false if there was no such schedule.
func (s *Store) RemoveRecur(ctx context.Context, p int, name, spec string, read int64, drop []string) (ok bool, err error) {
	args := []any{"remove", name, spec, read}
	for _, k := range drop {
		args = append(args, k)
	}
	return recurDone(s.runRecur(ctx, p, args))
}

// recurDone reads recur.lua's reply to a declare or a remove: 1 done, 0
// nothing to do, -1 the spec changed meanwhile.
func recurDone(v any, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	switch n, _ := v.(int64); n {
	case 0:
		return false, nil
	case -1:
		return false, ErrSpecChanged
	case 1:
		return true, nil
	}
	return false, fmt.Errorf("%w: recur.lua replied %v", ErrCorrupt, v)
}

// Slot is one slot's job for FillRecur.
type Slot struct {
	Due    int64 // unix µs
	Key    string
	Record []byte
}

// FillRecur stores the jobs of slots (ascending, all of partition p) of
// schedule name, whose stored spec must still be spec, each unless it is
// at or before the schedule's watermark; floor first raises the watermark.
// It returns the keys of the jobs it stored. A job due within the owner's
// loaded window goes to its inbox, unless tok is the owner's token.
func (s *Store) FillRecur(ctx context.Context, p int, tok, name, spec string, floor int64, slots []Slot) ([]string, error) {
	args := []any{"fill", tok, name, spec, floor}
	for _, sl := range slots {
		args = append(args, sl.Due, sl.Key, sl.Record)
	}
	v, err := s.runRecur(ctx, p, args)
	if err != nil {
		return nil, err
	}
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return nil, fmt.Errorf("%w: recur.lua fill replied %T", ErrCorrupt, v)
	}
	if n, _ := arr[0].(int64); n < 0 {
		return nil, ErrSpecChanged
	}
	keys := make([]string, 0, len(arr)-1)
	for _, k := range arr[1:] {
		ks, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("%w: recur.lua fill replied a %T key", ErrCorrupt, k)
		}
		keys = append(keys, ks)
	}
	return keys, nil
}

// runRecur runs one call of recur.lua on partition p, as a write (with
// Options.ReplicaAcks, acknowledged by the replicas).
func (s *Store) runRecur(ctx context.Context, p int, args []any) (any, error) {
	call := startCall(s.recurHead, p, len(args))
	call = append(call, args...)
	calls := make([][]any, len(s.parts))
	calls[p] = call
	replies, err := s.runWrites(ctx, calls)
	if err != nil {
		return nil, err
	}
	return replies[p], nil
}

// Time returns Redis's clock: the one clock every process of a namespace
// reads alike, so that a process whose own clock is off (or was stepped)
// neither skips a recurring schedule's slots as missed nor stores them
// early. (In a cluster, one node's, as go-redis picks it.)
func (s *Store) Time(ctx context.Context) (time.Time, error) {
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, wrap(err)
	}
	return t, nil
}
