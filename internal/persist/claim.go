package persist

// Claims and settles: claim.lua marks due jobs running for their
// owner; settle.lua stores a run's outcome (ack, retry, dead letter,
// unclaim) and the run history.

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/wheelq/wheelq/internal/errs"
)

// Op is the outcome of a run.
type Op byte

// Outcomes of a run.
const (
	Ack   Op = 'a' // succeeded: remove the job
	Retry Op = 'r' // failed: store Record, due again at Due
	Dead  Op = 'd' // gave up: store Record, move to the dead set
	// Unclaim clears the claim of a job that was not run after all (at
	// shutdown); the job stays pending as it was.
	Unclaim Op = 'u'
)

// Outcome settles one run of a job.
type Outcome struct {
	Op     Op
	Key    string
	Rev    uint32 // the revision the run started from
	Due    int64  // unix µs, for Retry
	Record []byte // for Retry and Dead
}

// Settle records outcomes of runs in one round trip. tokens[p] is the
// caller's lease token of partition p ("" or a nil slice: unfenced). It
// reports per outcome whether it applied (false: the job was cancelled,
// replaced or rescheduled since it fired). Fails with ErrFenced when a
// partition's lease is held by another owner.
func (s *Store) Settle(ctx context.Context, tokens []string, now int64, os []Outcome) ([]bool, error) {
	c := s.layoutPacked(s.settleHead, tokens, len(os), func(i int) string { return os[i].Key }, 2, now, s.histAge, s.histCount)
	defer s.release(c) // once the replies are read
	// Each partition's buffer is grown once, to its size. A large record
	// is not copied in: it goes as an argument of its own (see below).
	large := 0
	for i, o := range os {
		n := 40 + len(o.Key)
		if len(o.Record) > maxPackedRecord {
			large++
		} else {
			n += len(o.Record)
		}
		c.packs[c.part[i]].need += n
	}
	c.packed(func(_ []any, _ int, pk *callPack) { pk.data.b = slices.Grow(pk.data.b, pk.need) })
	for i, o := range os {
		if len(o.Key) > math.MaxUint32 || len(o.Record) > math.MaxUint32 {
			return nil, errs.Errorf("wheelq: settle of a key of %d bytes, a record of %d", len(o.Key), len(o.Record))
		}
		// Per outcome (settle.lua): its op byte; its key, revision, due
		// time and record.
		pk := c.pack(i)
		pk.ops.b = append(pk.ops.b, byte(o.Op))
		d := &pk.data
		d.b = appendRevField(appendField(d.b, o.Key), o.Rev, true)
		d.b = appendIntField(d.b, o.Due, false)
		if len(o.Record) > maxPackedRecord {
			d.b = binary.BigEndian.AppendUint32(d.b, math.MaxUint32) // its own argument
		} else {
			d.b = appendField(d.b, o.Record)
		}
	}
	c.packed(func(a []any, j int, pk *callPack) {
		a[j], a[j+1] = &pk.ops, &pk.data
	})
	if large > 0 {
		// The large records, after each call's partitions, in the order
		// settle.lua decodes its outcomes (by partition, then in order).
		order := c.inOrder(len(os))
		for ci := range c.args {
			for _, i := range order[c.base[ci]:c.base[ci+1]] {
				if len(os[i].Record) > maxPackedRecord {
					c.args[ci] = append(c.args[ci], os[i].Record)
				}
			}
			*c.bufs[ci] = c.args[ci] // so that release clears it, if it moved
		}
	}
	replies, err := s.runCalls(ctx, c.args)
	if err != nil {
		return nil, err
	}
	// Each call's reply: a string of "1" (applied) or "0" per outcome.
	out := make([]bool, len(os))
	for i := range out {
		r, w := c.reply(replies, i)
		st, _ := r.(string)
		if w >= len(st) || (st[w] != '0' && st[w] != '1') {
			return nil, fmt.Errorf("%w: settle reply %q for outcome %d", ErrCorrupt, st, w)
		}
		out[i] = st[w] == '1'
	}
	return out, nil
}

// ClaimRequest asks whether a fired job is still pending.
type ClaimRequest struct {
	Key string
	// Rev is the revision of the record the caller holds; HaveRev false
	// asks for the record.
	Rev     uint32
	HaveRev bool
	// Due is the due time (unix µs) the caller expects the job at, as its
	// record says; 0 when it does not know. A job still pending at that
	// time costs the reply no score (see ClaimResult.Due).
	Due int64
}

// ClaimResult answers a ClaimRequest.
type ClaimResult struct {
	// Gone is true when the job is no longer pending.
	Gone bool
	// Busy is true when a run of the job is claimed already (the job was
	// armed twice, or rescheduled while running): do not run it now.
	Busy bool
	// Due is the job's current due time (unix µs).
	Due int64
	// Record is the current record, or nil when the caller's is current.
	Record []byte
	// Deferred is true when the job is still pending but was left
	// unclaimed because the call's records already filled its byte budget
	// (MaxClaimBytes): claim it again, in a call of its own.
	Deferred bool
	// Paused is true when the job is still pending but its topic is
	// paused (see SetPaused): it was not claimed.
	Paused bool
	// Rerun is true when the job was claimed and a run of it had been
	// claimed before by an owner that is gone before storing its outcome
	// (a crash, a hard stop): that run may have done some or all of its
	// work.
	Rerun bool
}

// MaxClaimBytes bounds the records one claim call returns: past it, jobs
// whose records the caller lacks are Deferred. The first record of a call
// is always returned, whatever its size. Bounded so that a claim's reply
// fits well within a read timeout even on a slow link (4 MiB: ~35 ms at
// 1 Gbit/s) and a batch of large payloads cannot be retried forever.
const MaxClaimBytes = 4 << 20

// Claim checks in one round trip that fired jobs are still pending, and
// returns the records the caller lacks. tokens are as for Settle: a
// partition whose lease the caller lost fails the claim with ErrFenced.
// The results are the i-th request's at i, in out's array when it has
// room (a caller claiming batch after batch reuses it).
func (s *Store) Claim(ctx context.Context, tokens []string, reqs []ClaimRequest, out []ClaimResult) ([]ClaimResult, error) {
	c := s.layoutPacked(s.claimHead, tokens, len(reqs), func(i int) string { return reqs[i].Key }, 1, s.maxClaimBytes)
	defer s.release(c) // once the replies are read
	for i, r := range reqs {
		if len(r.Key) > math.MaxUint32 {
			return nil, errs.Errorf("wheelq: claim of a key of %d bytes", len(r.Key))
		}
		// Per job (claim.lua): its key, its revision (or none), its
		// expected due time (or none).
		d := &c.pack(i).data
		d.b = appendRevField(appendField(d.b, r.Key), r.Rev, r.HaveRev)
		d.b = appendIntField(d.b, r.Due, r.Due == 0)
	}
	c.packed(func(a []any, j int, pk *callPack) { a[j] = &pk.data })
	replies, err := s.runCalls(ctx, c.args)
	if err != nil {
		return nil, err
	}
	// Each call's reply: the jobs' status bytes and their scores (empty
	// where the caller's expected due time is the score) in one string;
	// with records returned, an array of that string and the records (see
	// claim.lua). Its items come in order.
	out = slices.Grow(out[:0], len(reqs))[:len(reqs)]
	clear(out)
	order := c.inOrder(len(reqs))
	for ci, reply := range replies {
		head, ok := reply.(string)
		var recs []any
		if arr, isArr := reply.([]any); isArr && len(arr) > 0 {
			head, ok = arr[0].(string)
			recs = arr[1:]
		}
		// The items of call ci, in the order of its reply.
		items := order[c.base[ci]:c.base[ci+1]]
		if !ok || len(head) < len(items) {
			return nil, fmt.Errorf("%w: claim reply %T for %d jobs", ErrCorrupt, reply, len(items))
		}
		st, scores := head[:len(items)], head[len(items):]
		nrec := 0
		for w, i := range items {
			w++
			score, rest, ok := strings.Cut(scores, ",")
			if !ok {
				return nil, fmt.Errorf("%w: short claim reply", ErrCorrupt)
			}
			scores = rest
			if st[w-1] == 'g' {
				out[i].Gone = true
				continue
			}
			if score == "" && reqs[i].Due != 0 {
				out[i].Due = reqs[i].Due
			} else {
				due, err := parseScore(score)
				if err != nil {
					return nil, err
				}
				out[i].Due = due
			}
			switch st[w-1] {
			case 'b':
				out[i].Busy = true
			case 'd':
				out[i].Deferred = true
			case 'p':
				out[i].Paused = true
			case 'r', 'R':
				out[i].Rerun = st[w-1] == 'R'
				if nrec >= len(recs) {
					return nil, fmt.Errorf("%w: short claim reply", ErrCorrupt)
				}
				rec, _ := recs[nrec].(string)
				out[i].Record = []byte(rec)
				nrec++
			case 'c':
			case 'C':
				out[i].Rerun = true
			default:
				return nil, fmt.Errorf("%w: claim status %q", ErrCorrupt, st[w-1])
			}
		}
	}
	return out, nil
}

// parseScore reads a score as ZMSCORE writes it: a due time in unix µs is
// a whole number of at most 16 digits, read without allocating; anything
// else goes through strconv.
func parseScore(s string) (int64, error) {
	if n := len(s); n > 0 && n <= 16 {
		var v int64
		for i := 0; i < n; i++ {
			d := s[i] - '0'
			if d > 9 {
				return scoreOf(s)
			}
			v = v*10 + int64(d)
		}
		return v, nil
	}
	return scoreOf(s)
}
