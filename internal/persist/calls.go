package persist

// Call packing and round trips: the fixed heads of the batched script
// calls, the layout of a batch into one call per partition (packed
// arguments where a call carries many jobs), and the pipelines that run
// them (NOSCRIPT reloads, WAIT for replicas, one primary at a time in a
// cluster).

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq/internal/errs"
)

// callHeads returns, per partition, the fixed start of an EVALSHA of sc:
// the command, the script's hash, the number of keys and the keys, boxed
// once, so that a call copies them instead of building and boxing them
// again (a batch's garbage is mostly per-call overhead).
func callHeads(sc *redis.Script, parts []Keys, keys func(Keys) []string) [][]any {
	heads := make([][]any, len(parts))
	for p, k := range parts {
		ks := keys(k)
		h := make([]any, 0, 3+len(ks))
		h = append(h, "evalsha", sc.Hash(), len(ks))
		for _, key := range ks {
			h = append(h, key)
		}
		heads[p] = h
	}
	return heads
}

// startCall returns a new call of a script to partition p (heads from
// callHeads), with room for n more arguments.
func startCall(heads [][]any, p, n int) []any {
	a := make([]any, len(heads[p]), len(heads[p])+n)
	copy(a, heads[p])
	return a
}

// calls are the script calls of a batch of n items (claims, outcomes,
// cancels, moves), each item the job of one key: outside a cluster one call for
// all the partitions the keys fall in, in a cluster one per partition (a
// call may touch one slot only). A call is heads' EVALSHA, the number of
// keys and the keys of its partitions, the fixed arguments, then per
// partition its token, its count of items and room for them (per
// arguments each). layoutCalls fills all but the items; the caller puts
// them in with item, in order, and finds each one's result with reply.
type calls struct {
	args    [][]any  // by call
	bufs    []*[]any // by call: where args came from (see release)
	touched []int    // the partitions with items
	call    []int    // by partition: its call (-1: none)
	at      []int    // by partition: where its next item goes in its call
	next    []int    // by partition: its next item's index in its call's reply
	count   []int    // by partition: its items
	part    []int    // by item: its partition
	where   []int    // by item: its index in its call's reply
	order   []int    // scratch: items by call, then by index in it (see inOrder)
	base    []int    // scratch: by call, where its items begin in order
	per     int

	// packs are, by partition, its packed arguments (layoutPacked), kept
	// for reuse.
	packs []*callPack
}

// inOrder returns the items of the n laid out by call, each call's in the
// order of its reply: c.order[c.base[ci]:c.base[ci+1]] are call ci's.
func (c *calls) inOrder(n int) []int {
	c.base = resize(c.base, len(c.args)+1)
	clear(c.base)
	for i := range n {
		c.base[c.call[c.part[i]]+1]++
	}
	for ci := range len(c.args) {
		c.base[ci+1] += c.base[ci]
	}
	c.order = resize(c.order, n)
	for i := range n {
		c.order[c.base[c.call[c.part[i]]]+c.where[i]] = i
	}
	return c.order
}

// layoutCalls lays out the calls of a batch of n items whose keys key
// gives. The calls come from a pool; release gives them back.
func (s *Store) layoutCalls(heads [][]any, tokens []string, n int, key func(int) string, per int, fixed ...any) *calls {
	return s.layout(heads, tokens, n, key, per, 0, fixed)
}

// layoutPacked is layoutCalls for scripts that take a partition's items
// packed into a few arguments (claim.lua, settle.lua): per partition its
// token, then args arguments (see pack and packed), not a count and
// arguments per item. A batch's items then cost no boxing each.
func (s *Store) layoutPacked(heads [][]any, tokens []string, n int, key func(int) string, args int, fixed ...any) *calls {
	return s.layout(heads, tokens, n, key, 0, args, fixed)
}

// layout is layoutCalls (packed 0) and layoutPacked (packed > 0).
func (s *Store) layout(heads [][]any, tokens []string, n int, key func(int) string, per, packed int, fixed []any) *calls {
	c, _ := s.callsPool.Get().(*calls)
	if c == nil {
		c = &calls{}
	}
	np := len(s.parts)
	c.call, c.at, c.next, c.count = resize(c.call, np), resize(c.at, np), resize(c.next, np), resize(c.count, np)
	c.part, c.where, c.per = resize(c.part, n), resize(c.where, n), per
	if packed > 0 && len(c.packs) != np {
		c.packs = make([]*callPack, np)
	}
	s.partitionsOf(c.part, c.count, key)
	touched := c.touched[:0]
	for p, k := range c.count {
		c.call[p] = -1
		if k > 0 {
			touched = append(touched, p)
		}
	}
	c.touched = touched
	build := func(ps []int) {
		nkeys, size := 0, len(fixed)
		for _, p := range ps {
			nkeys += len(heads[p]) - 3
			if packed > 0 {
				size += 1 + packed
			} else {
				size += 2 + per*c.count[p]
			}
		}
		h := heads[ps[0]]
		buf := s.argBuf(3 + nkeys + size)
		a := (*buf)[:3]
		a[0], a[1], a[2] = h[0], h[1], nkeys
		for _, p := range ps {
			a = append(a, heads[p][3:]...)
		}
		a = append(a, fixed...)
		items := 0
		for _, p := range ps {
			c.call[p], c.next[p] = len(c.args), items
			if packed > 0 {
				pk := c.packs[p]
				if pk == nil {
					pk = &callPack{}
					c.packs[p] = pk
				}
				pk.tok = token(tokens, p)
				a = append(a, &pk.tok) // a *string: no boxing of the token each call
				c.at[p] = len(a)
				a = a[:len(a)+packed]
			} else {
				a = append(a, token(tokens, p), c.count[p])
				c.at[p] = len(a)
				a = a[:len(a)+per*c.count[p]]
			}
			items += c.count[p]
		}
		c.args = append(c.args, a)
		c.bufs = append(c.bufs, buf)
	}
	if s.cluster {
		for i := range touched {
			build(touched[i : i+1])
		}
	} else if len(touched) > 0 {
		build(touched)
	}
	return c
}

// item makes room for item i (items come in order: 0, 1, ...): it returns
// the arguments of its call and where its per arguments go in them.
func (c *calls) item(i int) ([]any, int) {
	p := c.part[i]
	j := c.at[p]
	c.at[p] += c.per
	c.where[i] = c.next[p]
	c.next[p]++
	return c.args[c.call[p]], j
}

// pack returns the packed arguments of item i's partition, for the item
// to append its arguments to (items come in order: 0, 1, ...; see
// layoutPacked).
func (c *calls) pack(i int) *callPack {
	p := c.part[i]
	c.where[i] = c.next[p]
	c.next[p]++
	return c.packs[p]
}

// packed returns, for each partition with items in turn, the arguments of
// its call, where its packed arguments go in them, and its packs: the
// caller puts them in once the items are packed.
func (c *calls) packed(f func(a []any, j int, pk *callPack)) {
	for _, p := range c.touched {
		f(c.args[c.call[p]], c.at[p], c.packs[p])
	}
}

// reply returns the reply of item i's call, of those runCalls returned,
// and the item's index in it.
func (c *calls) reply(replies []any, i int) (any, int) {
	return replies[c.call[c.part[i]]], c.where[i]
}

// intReplies reads the integer reply of each of the n items of c, as f
// makes it.
func intReplies[T any](c *calls, replies []any, n int, f func(int64) T) ([]T, error) {
	out := make([]T, n)
	for i := range out {
		v, err := intAt(c.reply(replies, i))
		if err != nil {
			return nil, err
		}
		out[i] = f(v)
	}
	return out, nil
}

// resize returns a of length n, reusing its array when it can.
func resize(a []int, n int) []int {
	if cap(a) < n {
		return make([]int, n)
	}
	return a[:n]
}

// argBuf returns a slice with room for n arguments, from argBufs.
func (s *Store) argBuf(n int) *[]any {
	if b, ok := s.argBufs.Get().(*[]any); ok && cap(*b) >= n {
		return b
	}
	b := make([]any, 0, max(n, 64))
	return &b
}

// maxArgBuf is the largest argument slice kept for reuse.
const maxArgBuf = 1 << 14

// maxPackBuf is the largest packed argument buffer kept for reuse.
const maxPackBuf = 1 << 16

// maxPackedRecord is the largest record Settle copies into a packed
// argument; a larger one goes as an argument of its own (copying it, and
// growing a buffer to hold it, cost more than its boxing saves).
const maxPackedRecord = 4 << 10

// packedArg is a script argument written from a reused buffer. go-redis
// writes an encoding.BinaryMarshaler's bytes to the connection within the
// call that sends it (a pipeline's retries included) and keeps no copy,
// so the buffer is free again once runCalls returns; a pointer to it goes
// into an argument without an allocation, where a []byte would not.
type packedArg struct{ b []byte }

// MarshalBinary returns the packed bytes (go-redis writes them as they
// are).
func (p *packedArg) MarshalBinary() ([]byte, error) { return p.b, nil }

// callPack is a partition's packed arguments in a call (see layoutPacked):
// data its items' arguments, ops (settle.lua's) their op bytes, and tok
// its lease token (a *string argument, which go-redis writes as the
// string).
type callPack struct {
	ops, data packedArg
	tok       string
	need      int // scratch: the bytes its items will take (Settle)
}

// appendField appends a field of a packed argument: its length (4 bytes,
// big-endian) and its bytes (lib.lua's unpacked reads them).
func appendField[T string | []byte](b []byte, s T) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
}

// appendIntField appends v in decimal as a field (empty when omit).
func appendIntField(b []byte, v int64, omit bool) []byte {
	var num [20]byte
	if omit {
		return appendField(b, num[:0])
	}
	return appendField(b, strconv.AppendInt(num[:0], v, 10))
}

// appendRevField appends a revision as a field of 4 bytes (RevBytes'),
// or an empty one when !have.
func appendRevField(b []byte, rev uint32, have bool) []byte {
	if !have {
		return appendField(b, "")
	}
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(b, 4), rev)
}

// release gives the argument slices of c back for reuse. The calls must
// be done with: go-redis keeps a command's arguments only until its
// pipeline has run.
func (s *Store) release(c *calls) {
	for _, p := range c.touched {
		if p < len(c.packs) && c.packs[p] != nil {
			c.packs[p].ops.reset()
			c.packs[p].data.reset()
			c.packs[p].tok, c.packs[p].need = "", 0
		}
	}
	for i, b := range c.bufs {
		if cap(*b) > maxArgBuf {
			continue
		}
		clear(c.args[i]) // drop the keys and records
		*b = (*b)[:0]
		s.argBufs.Put(b)
	}
	clear(c.args)
	clear(c.bufs)
	c.args, c.bufs = c.args[:0], c.bufs[:0]
	s.callsPool.Put(c)
}

// reset empties p for reuse, dropping a large buffer.
func (p *packedArg) reset() {
	if cap(p.b) > maxPackBuf {
		p.b = nil
	}
	p.b = p.b[:0]
}

// runCalls sends script calls in a pipeline: calls[i] is a whole call
// (from startCall or layoutCalls; nil to skip). extra, if set, adds more
// commands to the same pipeline. It returns each call's reply (nil where
// skipped). A server that lost its script cache (a restart, a promoted
// replica: Redis does not replicate SCRIPT LOAD) answers NOSCRIPT to each
// script call and runs the rest: the scripts are loaded and only the calls
// that got NOSCRIPT are sent again, so that nothing that applied is sent
// twice.
func (s *Store) runCalls(ctx context.Context, calls [][]any, extra ...func(redis.Pipeliner)) ([]any, error) {
	if len(calls) == 1 && calls[0] != nil && len(extra) == 0 && !s.cluster {
		return s.runAlone(ctx, calls[0])
	}
	return s.run(ctx, calls, false, extra...)
}

// runAlone is runCalls of a lone call: sent by itself, not in a pipeline
// (whose own garbage was much of a small claim's), and sent again once the
// scripts are loaded if it got NOSCRIPT (it then did not run).
func (s *Store) runAlone(ctx context.Context, call []any) ([]any, error) {
	cmd := redis.NewCmd(ctx, call...)
	err := s.rdb.Process(ctx, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if lerr := s.loadScripts(ctx); lerr != nil {
			return nil, lerr
		}
		cmd = redis.NewCmd(ctx, call...)
		_ = s.rdb.Process(ctx, cmd)
	}
	v, err := cmd.Result()
	if err != nil {
		return nil, wrap(err)
	}
	return []any{v}, nil
}

// runWrites is runCalls for the writes of jobs: with Options.ReplicaAcks,
// the pipeline ends with a WAIT for the replicas (on a cluster, one per
// primary: see runOnPrimaries), and a write they did not acknowledge fails
// with ErrNotReplicated.
func (s *Store) runWrites(ctx context.Context, calls [][]any, extra ...func(redis.Pipeliner)) ([]any, error) {
	return s.run(ctx, calls, s.acks > 0, extra...)
}

func (s *Store) run(ctx context.Context, calls [][]any, wait bool, extra ...func(redis.Pipeliner)) ([]any, error) {
	if wait && s.cluster {
		return s.runOnPrimaries(ctx, calls, extra...)
	}
	cmds := make([]*redis.Cmd, len(calls))
	pipe := s.rdb.Pipeline()
	for p, a := range calls {
		if a != nil {
			cmds[p] = pipe.Do(ctx, a...)
		}
	}
	for _, f := range extra {
		f(pipe)
	}
	var acked *redis.IntCmd
	if wait {
		acked = waitCmd(ctx, pipe, s.acks, s.ackTimeout)
	}
	all, err := pipe.Exec(ctx)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Exec reports the first failure; look at each command.
		err = nil
		var again []int
		for _, c := range all {
			cerr := c.Err()
			if cerr == nil || errors.Is(cerr, redis.Nil) {
				continue
			}
			if !redis.HasErrorPrefix(cerr, "NOSCRIPT") {
				err = cmp.Or(err, cerr)
			}
		}
		for p, c := range cmds {
			if c != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
				again = append(again, p)
			}
		}
		if lerr := s.loadScripts(ctx); lerr != nil {
			return nil, lerr
		}
		retry := s.rdb.Pipeline()
		for _, p := range again {
			cmds[p] = retry.Do(ctx, calls[p]...)
		}
		if wait {
			acked = waitCmd(ctx, retry, s.acks, s.ackTimeout)
		}
		if _, rerr := retry.Exec(ctx); err == nil {
			err = rerr
		}
	}
	out := make([]any, len(calls))
	for p, c := range cmds {
		if c == nil {
			continue
		}
		v, cerr := c.Result()
		if cerr != nil {
			return nil, wrap(cerr)
		}
		out[p] = v
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, wrap(err)
	}
	if acked != nil {
		if n, err := acked.Result(); err != nil || n < int64(s.acks) {
			return nil, fmt.Errorf("%w: %d of %d within %v (%v)", ErrNotReplicated, n, s.acks, s.ackTimeout, err)
		}
	}
	return out, nil
}

func wrap(err error) error {
	if redis.HasErrorPrefix(err, "WHEELQ_FENCED") {
		return fmt.Errorf("%w (%v)", ErrFenced, err)
	}
	return errs.Errorf("wheelq: %w", err)
}

func keysSettle(k Keys) []string {
	return []string{k.Pending, k.Jobs, k.Dead, k.Lease, k.Running, k.HistoryIdx, k.History}
}
func keysWrite(k Keys) []string {
	return []string{k.Pending, k.Jobs, k.Dead, k.Lease, k.Loaded, k.Inbox}
}
func keysClaim(k Keys) []string { return []string{k.Pending, k.Jobs, k.Lease, k.Running, k.Paused} }
func keysCancel(k Keys) []string {
	return []string{k.Pending, k.Jobs, k.Dead, k.Running, k.Cancelled[0], k.Cancelled[1], k.HistoryIdx, k.History}
}
func keysReschedule(k Keys) []string {
	return []string{k.Pending, k.Jobs, k.Lease, k.Loaded, k.Inbox, k.Running}
}

// token returns tokens[p], or "" for a nil slice.
func token(tokens []string, p int) string {
	if tokens == nil {
		return ""
	}
	return tokens[p]
}

// putArgBuf gives an argument slice from argBuf back for reuse. Its call
// must be done with (see release).
func (s *Store) putArgBuf(b *[]any) {
	if cap(*b) > maxArgBuf {
		return
	}
	clear(*b)
	*b = (*b)[:0]
	s.argBufs.Put(b)
}

// waitCmd queues WAIT acks timeout on pipe: how many replicas have every
// write of the connection so far.
func waitCmd(ctx context.Context, pipe redis.Pipeliner, acks int, timeout time.Duration) *redis.IntCmd {
	cmd := redis.NewIntCmd(ctx, "wait", acks, timeout.Milliseconds())
	_ = pipe.Process(ctx, cmd)
	return cmd
}
