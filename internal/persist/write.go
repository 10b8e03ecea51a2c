package persist

// Writes of jobs: Schedule's write-ahead (schedule.lua or plain
// HSET + ZADD), cancels, reschedules, requeues, and the dead-lettering of
// corrupt records.

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// WriteResult is the outcome of one Write.
type WriteResult int8

// Outcomes of a Write.
const (
	Stored    WriteResult = 0  // a new job
	Replaced  WriteResult = 1  // an existing job was replaced
	Duplicate WriteResult = -1 // the key exists and Replace was false
)

// Write is one job to store.
type Write struct {
	Key    string
	Due    int64 // unix µs
	Record []byte
	// Replace overwrites an existing job (and revives a dead one). Without
	// it an existing key is a Duplicate and nothing changes. A caller that
	// knows its key is new (a random id) should set Replace: that path
	// needs no script.
	Replace bool
	// Fresh says the key is new for certain (a random id): a replacing
	// write then skips removing it from the dead set.
	Fresh bool
}

// Write stores jobs (the write-ahead step of Schedule) in one round trip.
// Rejecting writes run schedule.lua, one call per partition; outside a
// cluster, replacing writes are plain HSET + ZADD + ZREM in one MULTI/EXEC
// transaction, with the partitions' announced loaded-until times and
// leases read in the same pipeline, after the transaction. In a cluster
// (where a transaction may span one slot only, and a pipeline's MULTI
// could go to any node) replacing writes run schedule.lua too. Either way
// a write that fails leaves nothing behind: a write refused for want of
// memory (maxmemory with noeviction) refuses the whole transaction (or
// script call), never the record without the pending entry or the other
// way round. tokens[p] is the caller's lease token of partition p, if it
// owns it (a nil slice: none); a job due within the owner's loaded
// window, written by someone else, is put in the owner's inbox (for plain
// writes, in a second round trip that is needed only then).
func (s *Store) Write(ctx context.Context, tokens []string, ws []Write) ([]WriteResult, error) {
	args := make([][]any, len(s.parts))
	where := make([]int, len(ws)) // index within its partition's reply
	part, count := make([]int, len(ws)), make([]int, len(s.parts))
	s.partitionsOf(part, count, func(i int) string { return ws[i].Key })
	var plainWrites []int
	for i, w := range ws {
		p := part[i]
		mode := "r"
		if w.Replace {
			if !s.cluster {
				plainWrites = append(plainWrites, i)
				continue
			}
			mode = "p"
		}
		if args[p] == nil {
			args[p] = append(startCall(s.scheduleHead, p, 1+4*count[p]), token(tokens, p))
		}
		where[i] = (len(args[p]) - len(s.scheduleHead[p]) - 1) / 4
		args[p] = append(args[p], mode, w.Key, w.Due, w.Record)
	}
	// Plain writes go by partition: one HSET and one ZADD for all the fresh
	// jobs of a partition (whatever their number), all partitions in one
	// MULTI/EXEC; then one MGET of every partition's loaded-until time and
	// lease, read after the writes (announce, then scan). A replacing write
	// of a caller's id gets an HSET of its own, so that it can be told
	// Stored from Replaced, and a ZREM from the dead set.
	slices.SortStableFunc(plainWrites, func(i, j int) int { return part[i] - part[j] })
	// By write: where the reply of its HSET (shared within a fresh group)
	// is in EXEC's reply, and where its partition's loaded-until time and
	// lease are in the MGET's.
	hsetAt := make([]int, len(ws))
	stateAt := make([]int, len(ws))
	var exec *redis.Cmd
	var states *redis.SliceCmd
	addPlain := func(pipe redis.Pipeliner) {
		if len(plainWrites) == 0 {
			return
		}
		pipe.Do(ctx, "multi")
		queued := 0 // commands queued so far: the index of the next one's reply in EXEC's
		mget := []any{"mget"}
		for lo := 0; lo < len(plainWrites); {
			p := part[plainWrites[lo]]
			hi := lo + 1
			for hi < len(plainWrites) && part[plainWrites[hi]] == p {
				hi++
			}
			group := plainWrites[lo:hi]
			k := s.parts[p]
			fresh := make([]any, 2, 2+2*len(group))
			fresh[0], fresh[1] = "hset", k.Jobs
			zadd := make([]any, 2, 2+2*len(group))
			zadd[0], zadd[1] = "zadd", k.Pending
			freshAt := -1
			for _, i := range group {
				w := ws[i]
				key := any(w.Key) // boxed once for both commands
				if w.Fresh {
					fresh = append(fresh, key, w.Record)
					if freshAt < 0 {
						freshAt = queued
						queued++ // the HSET below, queued before the others
					}
					hsetAt[i] = freshAt
				} else {
					hsetAt[i] = -1 // set once the fresh HSET is placed
				}
				zadd = append(zadd, w.Due, key)
				stateAt[i] = len(mget) - 1
			}
			if freshAt >= 0 {
				pipe.Do(ctx, fresh...)
			}
			for _, i := range group {
				if hsetAt[i] < 0 {
					hsetAt[i] = queued
					pipe.Do(ctx, "hset", k.Jobs, ws[i].Key, ws[i].Record)
					pipe.Do(ctx, "zrem", k.Dead, ws[i].Key)
					queued += 2
				}
			}
			pipe.Do(ctx, zadd...)
			queued++
			mget = append(mget, k.Loaded, k.Lease)
			lo = hi
		}
		exec = pipe.Do(ctx, "exec")
		states = redis.NewSliceCmd(ctx, mget...)
		_ = pipe.Process(ctx, states)
	}
	replies, err := s.runWrites(ctx, args, addPlain)
	if err != nil {
		return nil, err
	}
	out := make([]WriteResult, len(ws))
	for i, w := range ws {
		if w.Replace && !s.cluster {
			continue
		}
		v, err := intAt(replies[part[i]], where[i])
		if err != nil {
			return nil, err
		}
		out[i] = WriteResult(v)
	}
	if len(plainWrites) == 0 {
		return out, nil
	}
	txReplies, err := exec.Slice()
	if err != nil {
		return nil, wrap(err)
	}
	st, err := states.Result()
	if err != nil {
		return nil, wrap(err)
	}
	var inbox redis.Pipeliner
	for _, i := range plainWrites {
		w := ws[i]
		if hsetAt[i] >= len(txReplies) {
			return nil, fmt.Errorf("%w: short transaction reply", ErrCorrupt)
		}
		var n int64
		switch v := txReplies[hsetAt[i]].(type) {
		case int64:
			n = v
		case error:
			return nil, wrap(v)
		default:
			return nil, fmt.Errorf("%w: unexpected HSET reply %T", ErrCorrupt, v)
		}
		out[i] = Stored
		if !w.Fresh && n == 0 {
			out[i] = Replaced
		}
		p := part[i]
		pst := st[stateAt[i]:]
		loadedStr, ok := pst[0].(string)
		if !ok {
			continue // nothing announced: the owner's next scan sees the job
		}
		loaded, err := strconv.ParseInt(loadedStr, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: loaded-until %q", ErrCorrupt, loadedStr)
		}
		if tok := token(tokens, p); tok != "" && pst[1] == tok {
			continue // the caller owns the partition and arms the job itself
		}
		if w.Due <= loaded {
			if inbox == nil {
				inbox = s.rdb.Pipeline()
			}
			inbox.RPush(ctx, s.parts[p].Inbox, w.Key)
		}
	}
	if inbox != nil {
		if _, err := inbox.Exec(ctx); err != nil {
			return nil, wrap(err)
		}
	}
	return out, nil
}

// Change is what Cancel or Reschedule did.
type Change int8

// Results of Cancel and Reschedule.
const (
	// NotFound: the job is not there (for Reschedule: not pending).
	NotFound Change = 0
	// Changed: done.
	Changed Change = 1
	// ChangedWhileRunning: done, but a run of the job had been claimed;
	// that run goes on and its outcome will not apply.
	ChangedWhileRunning Change = 2
)

// Cancel deletes a job, pending or dead.
func (s *Store) Cancel(ctx context.Context, key string) (Change, error) {
	chs, err := s.CancelMany(ctx, []string{key})
	if err != nil {
		return NotFound, err
	}
	return chs[0], nil
}

// CancelMany deletes jobs, pending or dead, in one round trip (outside a
// cluster; one per partition in it). The i-th Change is keys[i]'s; a key
// given twice is NotFound the second time, as if cancelled one by one.
func (s *Store) CancelMany(ctx context.Context, keys []string) ([]Change, error) {
	// The call's token: a replay of this very call (the client sent it
	// again after its reply was lost) finds the tombstones it left.
	c := s.layoutCalls(s.cancelHead, nil, len(keys), func(i int) string { return keys[i] }, 1, callToken(), s.histAge, s.histCount)
	defer s.release(c) // once the replies are read
	for i, key := range keys {
		a, j := c.item(i)
		a[j] = key
	}
	replies, err := s.runWrites(ctx, c.args)
	if err != nil {
		return nil, err
	}
	return intReplies(c, replies, len(keys), func(v int64) Change { return Change(v) })
}

// callToken returns a new random token for one call of a script whose
// replay must be told from a new call.
func callToken() string {
	var b [9]byte
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	b[8] = byte(rand.Uint32())
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Reschedule moves a pending job to due (unix µs) and gives it revision
// rev. tok is the caller's lease token of the job's partition, or "".
func (s *Store) Reschedule(ctx context.Context, tok, key string, due int64, rev uint32) (Change, error) {
	tokens := make([]string, len(s.parts))
	tokens[s.PartitionOf(key)] = tok
	chs, err := s.RescheduleMany(ctx, tokens, []Move{{Key: key, Due: due, Rev: rev}})
	if err != nil {
		return NotFound, err
	}
	return chs[0], nil
}

// Move asks for a pending job to be moved to Due (unix µs), with revision
// Rev.
type Move struct {
	Key string
	Due int64
	Rev uint32
}

// RescheduleMany moves pending jobs in one round trip (outside a cluster;
// one per partition in it), in order; the i-th Change is ms[i]'s. tokens
// are the caller's lease tokens by partition ("" or a nil slice: none):
// not a fence here, they tell whether the caller arms a moved job itself
// or the job goes to its owner's inbox.
func (s *Store) RescheduleMany(ctx context.Context, tokens []string, ms []Move) ([]Change, error) {
	c := s.layoutCalls(s.rescheduleHead, tokens, len(ms), func(i int) string { return ms[i].Key }, 3)
	defer s.release(c) // once the replies are read
	for i, m := range ms {
		a, j := c.item(i)
		a[j], a[j+1], a[j+2] = m.Key, m.Due, RevBytes(m.Rev)
	}
	replies, err := s.runWrites(ctx, c.args)
	if err != nil {
		return nil, err
	}
	return intReplies(c, replies, len(ms), func(v int64) Change { return Change(v) })
}

// Requeue moves a dead job back to pending at due (unix µs) with the given
// record; rev is the revision of the dead record the caller read. It
// reports whether the job was requeued. tok is as for Reschedule.
func (s *Store) Requeue(ctx context.Context, tok, key string, rev uint32, due int64, rec []byte) (bool, error) {
	keys := keysWrite(s.parts[s.PartitionOf(key)])
	call := []any{"evalsha", s.requeue.Hash(), len(keys)}
	for _, k := range keys {
		call = append(call, k)
	}
	replies, err := s.runWrites(ctx, [][]any{append(call, tok, key, RevBytes(rev), due, rec)})
	if err != nil {
		return false, err
	}
	n, _ := replies[0].(int64)
	return n == 1, nil
}

// DeadLetterCorrupt moves a pending job whose record cannot be decoded to
// the dead set, stored with rec (a record that keeps the raw bytes as its
// payload), if its stored record is still raw byte for byte (a corrupt
// record may be too short to hold a revision to check). It reports
// whether it moved the job. The job's claim marker is cleared either way.
// now (unix µs) is the dead-letter score. tok is the caller's lease token
// of the job's partition ("" skips the check); it fails with ErrFenced
// when another owner holds the lease.
func (s *Store) DeadLetterCorrupt(ctx context.Context, tok, key string, raw, rec []byte, now int64) (bool, error) {
	k := s.parts[s.PartitionOf(key)]
	n, err := s.deadCorrupt.Run(ctx, s.rdb, []string{k.Pending, k.Jobs, k.Dead, k.Lease, k.Running}, tok, key, raw, rec, now).Int()
	if err != nil {
		return false, wrap(err)
	}
	return n == 1, nil
}
