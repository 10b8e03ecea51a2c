package persist

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq/internal/errs"
)

var (
	//go:embed lua/schedule.lua
	scheduleLua string
	//go:embed lua/settle.lua
	settleLua string
	//go:embed lua/lib.lua
	libLua string
	//go:embed lua/claim.lua
	claimLua string
	//go:embed lua/cancel.lua
	cancelLua string
	//go:embed lua/reschedule.lua
	rescheduleLua string
	//go:embed lua/requeue.lua
	requeueLua string
	//go:embed lua/lease.lua
	leaseLua string
	//go:embed lua/poll.lua
	pollLua string
	//go:embed lua/range.lua
	rangeLua string
	//go:embed lua/repair.lua
	repairLua string
	//go:embed lua/deadcorrupt.lua
	deadCorruptLua string
)

// Options configures a Store.
type Options struct {
	// Namespace separates independent queues on one Redis. Default
	// "default". It may not contain '{', '}' or ':'.
	Namespace string
	// Partitions is the number of partitions; every process of a
	// namespace must use the same. Default 16.
	Partitions int
	// ReplicaAcks, if above 0, makes every write of jobs (Write,
	// CancelMany, RescheduleMany, Requeue) wait, in the same round trip,
	// until that many replicas have it (WAIT): a write they did not all
	// acknowledge within ReplicaTimeout fails with ErrNotReplicated, though
	// the primary applied it. On a Cluster client each primary that took a
	// write gets its own WAIT, on the connection that carried the write
	// (see runOnPrimaries). Default 0.
	ReplicaAcks int
	// ReplicaTimeout bounds that wait. Default 1s.
	ReplicaTimeout time.Duration
	// HistoryCount and HistoryAge are the run history's retention: a job
	// acked or cancelled is kept in its partition's history (see History)
	// until HistoryAge after it finished, and while it is among the
	// partition's latest HistoryCount/Partitions (rounded up) finished
	// jobs. HistoryCount 0 keeps no history.
	HistoryCount int
	HistoryAge   time.Duration
}

// Store is the Redis side of wheelq. It holds no state of its own but the
// key names and scripts, and is safe for concurrent use. It never closes the
// client it was given.
type Store struct {
	rdb   redis.UniversalClient
	ns    string
	parts []Keys

	schedule, settle, claim, cancel, reschedule, requeue, lease, poll, rangeSc *redis.Script
	cluster                                                                    bool // keys of different partitions may not share a command

	// The pulled topics' scripts (pull.go): due, take and topics run
	// alone; resolve in pipelines.
	due, take, resolve, topics *redis.Script

	deadCorrupt *redis.Script // run alone (Script.Run loads it on NOSCRIPT)
	repair      *redis.Script // run alone
	recur       *redis.Script // recurring schedules (recur.go)
	limit       *redis.Script // per-topic limits (limit.go), run alone

	// pollHead is, per partition, its keys in a call of poll.lua, boxed
	// once (see PollMany).
	pollHead [][]any

	// Per partition, the fixed start of an EVALSHA of the batched scripts.
	scheduleHead, settleHead, claimHead, cancelHead, rescheduleHead, leaseHead, recurHead [][]any

	// argBufs holds the argument slices of the batched script calls
	// (claim, settle, cancel, reschedule) for reuse (*[]any): a fired job's
	// claim and settle would otherwise leave about 200 bytes of garbage in
	// them.
	argBufs sync.Pool
	// callsPool holds the bookkeeping of those calls (*calls).
	callsPool sync.Pool
	// maxClaimBytes is MaxClaimBytes (tests lower it), boxed once.
	maxClaimBytes any
	// acks and ackTimeout are Options.ReplicaAcks and ReplicaTimeout.
	acks       int
	ackTimeout time.Duration
	// histAge and histCount are the run history's retention per
	// partition (µs, entries), boxed once: settle.lua and cancel.lua take
	// them in every call.
	histAge, histCount any
}

// New returns a store on rdb: a *redis.Client (standalone or Sentinel) or
// a *redis.ClusterClient. A *redis.Ring is refused with
// ErrUnsupportedClient: it shards keys by name, and a call that touches
// several partitions would reach one shard only. So is a client that
// would wait for a reply forever (see checkTimeouts). New does no I/O.
func New(rdb redis.UniversalClient, opts Options) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("wheelq: nil redis client")
	}
	if _, ok := rdb.(*redis.Ring); ok {
		return nil, fmt.Errorf("%w: *redis.Ring shards keys over servers; use a *redis.Client or a *redis.ClusterClient", ErrUnsupportedClient)
	}
	if err := checkTimeouts(rdb); err != nil {
		return nil, err
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if strings.ContainsAny(opts.Namespace, "{}:") {
		return nil, errs.Errorf("wheelq: namespace %q may not contain '{', '}' or ':'", opts.Namespace)
	}
	if opts.Partitions == 0 {
		opts.Partitions = 16
	}
	if opts.ReplicaAcks < 0 || opts.ReplicaTimeout < 0 {
		return nil, errs.Errorf("wheelq: replica acks %d, timeout %v: want >= 0", opts.ReplicaAcks, opts.ReplicaTimeout)
	}
	if opts.ReplicaTimeout == 0 {
		opts.ReplicaTimeout = time.Second
	}
	if opts.Partitions < 1 || opts.Partitions > 4096 {
		return nil, errs.Errorf("wheelq: %d partitions, want 1 to 4096", opts.Partitions)
	}
	if opts.HistoryCount < 0 || opts.HistoryAge < 0 || (opts.HistoryCount > 0 && opts.HistoryAge == 0) {
		return nil, errs.Errorf("wheelq: history of %d jobs for %v: want >= 0, and an age > 0 with a count", opts.HistoryCount, opts.HistoryAge)
	}
	_, cluster := rdb.(*redis.ClusterClient)
	s := &Store{
		rdb:           rdb,
		cluster:       cluster,
		ns:            opts.Namespace,
		schedule:      redis.NewScript(scheduleLua),
		settle:        redis.NewScript(libLua + settleLua),
		claim:         redis.NewScript(libLua + claimLua),
		cancel:        redis.NewScript(libLua + cancelLua),
		reschedule:    redis.NewScript(libLua + rescheduleLua),
		requeue:       redis.NewScript(requeueLua),
		lease:         redis.NewScript(leaseLua),
		poll:          redis.NewScript(pollLua),
		rangeSc:       redis.NewScript(rangeLua),
		maxClaimBytes: MaxClaimBytes,
		acks:          opts.ReplicaAcks,
		ackTimeout:    opts.ReplicaTimeout,
		histAge:       opts.HistoryAge.Microseconds(),
		histCount:     (opts.HistoryCount + opts.Partitions - 1) / opts.Partitions,
	}
	s.due, s.take, s.topics = redis.NewScript(dueLua), redis.NewScript(takeLua), redis.NewScript(topicsLua)
	s.resolve = redis.NewScript(libLua + resolveLua)
	s.deadCorrupt = redis.NewScript(deadCorruptLua)
	s.repair = redis.NewScript(repairLua)
	s.recur = redis.NewScript(recurLua)
	s.limit = redis.NewScript(limitLua)
	for p := range opts.Partitions {
		s.parts = append(s.parts, partitionKeys(opts.Namespace, p))
	}
	s.scheduleHead = callHeads(s.schedule, s.parts, keysWrite)
	s.settleHead = callHeads(s.settle, s.parts, keysSettle)
	s.claimHead = callHeads(s.claim, s.parts, keysClaim)
	s.cancelHead = callHeads(s.cancel, s.parts, keysCancel)
	s.rescheduleHead = callHeads(s.reschedule, s.parts, keysReschedule)
	s.leaseHead = callHeads(s.lease, s.parts, func(k Keys) []string { return []string{k.Lease} })
	s.pollHead = pollHeads(s.parts)
	s.recurHead = callHeads(s.recur, s.parts, keysRecur)
	return s, nil
}

// checkTimeouts refuses a client that would wait for a reply forever: one
// that sets no read deadline at all (ReadTimeout -2), or one with no read
// timeout (ReadTimeout -1) that also ignores contexts' deadlines
// (ContextTimeoutEnabled false, go-redis's default). A call to a Redis that
// stopped answering would then never return, and a background loop (the
// poller, the claimers) would hang with it. go-redis applies a context's
// deadline to a read only with ContextTimeoutEnabled; without it, a call is
// bounded by ReadTimeout alone. The options read here are the client's own,
// normalised by go-redis: -1 has become 0, and -2 has become -1.
func checkTimeouts(rdb redis.UniversalClient) error {
	var read time.Duration
	var ctxDeadlines bool
	switch c := rdb.(type) {
	case *redis.Client:
		o := c.Options()
		read, ctxDeadlines = o.ReadTimeout, o.ContextTimeoutEnabled
	case *redis.ClusterClient:
		o := c.Options()
		read, ctxDeadlines = o.ReadTimeout, o.ContextTimeoutEnabled
	default:
		return nil
	}
	if read < 0 || (read == 0 && !ctxDeadlines) {
		return fmt.Errorf("%w: a client with no read timeout and no context deadlines waits for a reply forever; set ReadTimeout > 0, or ContextTimeoutEnabled with ReadTimeout -1", ErrUnsupportedClient)
	}
	return nil
}

// Namespace returns the store's namespace.
func (s *Store) Namespace() string { return s.ns }

// Partitions returns the number of partitions.
func (s *Store) Partitions() int { return len(s.parts) }

// Keys returns the keys of partition p.
func (s *Store) Keys(p int) Keys { return s.parts[p] }

// PartitionOf returns the partition of a job key.
func (s *Store) PartitionOf(key string) int { return partitionOf(key, len(s.parts)) }

// partitionsOf hashes the keys of a batch once, key(i) for every i of
// part: it sets part[i] to key i's partition and count[p] to how many keys
// partition p has (count holds one entry per partition).
func (s *Store) partitionsOf(part, count []int, key func(int) string) {
	clear(count)
	for i := range part {
		part[i] = s.PartitionOf(key(i))
		count[part[i]]++
	}
}

// Init checks (or, on first use, records) the namespace's partition count,
// and loads the scripts so that pipelines can use EVALSHA.
func (s *Store) Init(ctx context.Context) error {
	mk := metaKey(s.ns)
	n := strconv.Itoa(len(s.parts))
	if err := s.rdb.HSetNX(ctx, mk, "partitions", n).Err(); err != nil {
		return errs.Errorf("wheelq: init: %w", err)
	}
	got, err := s.rdb.HGet(ctx, mk, "partitions").Result()
	if err != nil {
		return errs.Errorf("wheelq: init: %w", err)
	}
	if got != n {
		return fmt.Errorf("%w: namespace %q has %s partitions, this store %s", ErrLayout, s.ns, got, n)
	}
	return s.loadScripts(ctx)
}

func (s *Store) loadScripts(ctx context.Context) error { return s.loadScriptsOn(ctx, s.rdb) }

// loadScriptsOn loads the batched scripts on c (the store's client, or
// one primary of a cluster).
func (s *Store) loadScriptsOn(ctx context.Context, c redis.Scripter) error {
	for _, sc := range append([]*redis.Script{s.schedule, s.settle, s.claim, s.cancel, s.reschedule, s.requeue, s.lease, s.poll, s.rangeSc, s.recur}, s.pullScripts()...) {
		if err := sc.Load(ctx, c).Err(); err != nil {
			return errs.Errorf("wheelq: load scripts: %w", err)
		}
	}
	return nil
}

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

// Counts returns the number of pending and dead jobs over all partitions.
func (s *Store) Counts(ctx context.Context) (pending, dead int64, err error) {
	c, err := s.Census(ctx, math.MinInt64/2)
	return c.Pending, c.Dead, err
}

// RepairCursor is where Repair's walk of a partition stands; the zero
// value starts one.
type RepairCursor struct {
	// The SCAN cursors of the pending set, the jobs hash and the claim
	// marks: "" not started, "done" walked whole.
	Pending, Jobs, Running string
	// Done is true when all three walks are done.
	Done bool
}

// RepairResult is what one step of Repair fixed.
type RepairResult struct {
	PendingWithoutRecord int      // pending entries removed: no record
	RecordsInNoSet       int      // records dead-lettered: in neither set
	StaleMarks           int      // claim marks cleared
	Keys                 []string // the job keys fixed
}

// Repair takes one step (about count elements of each structure) of a
// walk of partition p that fixes inconsistent state (see repair.lua):
// pending entries without a record, records in neither set, stale claim
// marks. tok must hold p's lease (ErrFenced otherwise); now (unix µs) is the
// dead-letter score. Call again with the returned cursor until Done.
func (s *Store) Repair(ctx context.Context, p int, tok string, cur RepairCursor, count int, now int64) (RepairCursor, RepairResult, error) {
	arg := func(c string) string {
		if c == "" {
			return "0"
		}
		return c
	}
	k := s.parts[p]
	v, err := s.repair.Run(ctx, s.rdb, []string{k.Pending, k.Jobs, k.Dead, k.Lease, k.Running},
		tok, arg(cur.Pending), arg(cur.Jobs), arg(cur.Running), count, now).Slice()
	if err != nil {
		return cur, RepairResult{}, wrap(err)
	}
	if len(v) < 6 {
		return cur, RepairResult{}, fmt.Errorf("%w: short repair reply", ErrCorrupt)
	}
	next := func(sent string, got any) string {
		g, _ := got.(string)
		if sent == "done" || g == "0" {
			return "done"
		}
		return g
	}
	cur.Pending, cur.Jobs, cur.Running = next(cur.Pending, v[0]), next(cur.Jobs, v[1]), next(cur.Running, v[2])
	cur.Done = cur.Pending == "done" && cur.Jobs == "done" && cur.Running == "done"
	var res RepairResult
	for i, dst := range []*int{&res.PendingWithoutRecord, &res.RecordsInNoSet, &res.StaleMarks} {
		n, _ := v[3+i].(int64)
		*dst = int(n)
	}
	for _, key := range v[6:] {
		if k, ok := key.(string); ok {
			res.Keys = append(res.Keys, k)
		}
	}
	return cur, res, nil
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

// PollResult is what Poll hands back.
type PollResult struct {
	// Prev is the loaded-until time announced before this poll (unix µs);
	// HavePrev is false on a reset or when none was announced (or it
	// lapsed), and the caller must then scan from the beginning.
	Prev     int64
	HavePrev bool
	// Inbox holds jobs scheduled by others into the loaded window.
	Inbox []Entry
}

// Poll announces partition p's new loaded-until time (unix µs) for the
// lease holder tok, and takes up to maxInbox entries from its inbox. With
// reset (on taking the partition over) the inbox is dropped instead: the
// caller scans everything up to loaded. The announcement lapses after ttl
// unless renewed. It fails with ErrFenced when tok does not hold the lease.
// It is PollMany for one partition, reading no page.
func (s *Store) Poll(ctx context.Context, p int, tok string, loaded int64, ttl time.Duration, reset bool, maxInbox int) (PollResult, error) {
	var out [1]PollReply
	if _, err := s.PollMany(ctx, loaded, ttl, maxInbox, 0, []PollRequest{{P: p, Token: tok, Reset: reset}}, out[:0]); err != nil {
		return PollResult{}, err
	}
	return out[0].PollResult, out[0].Err
}

// PollFloor is the start of a window that has no previous announcement
// (PollMany): below every due time.
const PollFloor = math.MinInt64 / 2

// PollRequest is one partition's part of a PollMany call.
type PollRequest struct {
	P     int    // the partition
	Token string // the caller's lease token
	// Reset is set on taking the partition over: its inbox and the claim
	// markers of the previous owner's runs are dropped, and its window
	// starts at PollFloor.
	Reset bool
	// Scanned is where the caller's last window of P scanned whole ended
	// (unix µs; PollFloor for none): the window starts at the earlier of it
	// and the previous announcement.
	Scanned int64
}

// PollReply is what PollMany hands back for one partition.
type PollReply struct {
	PollResult
	// Read says whether the window's first page was read: the window
	// (start, loaded] is not empty and PollMany was asked for pages. Page
	// holds its jobs in due order, and Cursor continues the window with
	// RangePending (Done when it was read whole).
	Read   bool
	Page   []Entry
	Cursor Cursor
	// Err is the partition's failure, and the rest of its reply is then
	// void: ErrFenced when the caller does not hold its lease, else the
	// error of its step or of the round trip that carried it.
	Err error
}

// PollMany is the poller's step for the partitions of reqs, in one round
// trip outside a Cluster (in a Cluster, one call per partition, pipelined):
// for each, it announces its new loaded-until time loaded (unix µs), which
// lapses after ttl unless renewed, takes up to maxInbox entries from its
// inbox (a reset drops them: see PollRequest), and reads up to pageSize
// pending jobs (none if 0) of its window: after the earlier of the
// previous announcement and the request's Scanned (PollFloor when there
// is no previous announcement), up to loaded. Each partition is done on its
// own: one that fails or is fenced leaves the others as they are, and its
// reply's Err says why. out[:0] is reused for the replies, one per
// request, in order. The error is for bad arguments only.
func (s *Store) PollMany(ctx context.Context, loaded int64, ttl time.Duration, maxInbox, pageSize int, reqs []PollRequest, out []PollReply) ([]PollReply, error) {
	if maxInbox < 0 || pageSize < 0 {
		return out[:0], errs.Errorf("wheelq: poll with inbox %d, page %d: want >= 0", maxInbox, pageSize)
	}
	for _, r := range reqs {
		if r.P < 0 || r.P >= len(s.parts) {
			return out[:0], errs.Errorf("wheelq: poll of partition %d of %d", r.P, len(s.parts))
		}
	}
	out = slices.Grow(out[:0], len(reqs))[:len(reqs)]
	clear(out)
	if len(reqs) == 0 {
		return out, nil
	}
	fixed := [...]any{loaded, ttl.Milliseconds(), maxInbox, pageSize, PollFloor}
	per := 1
	if !s.cluster {
		per = len(reqs)
	}
	n := (len(reqs) + per - 1) / per
	calls, bufs := make([][]any, 0, n), make([]*[]any, 0, n)
	defer func() {
		for _, b := range bufs {
			s.putArgBuf(b)
		}
	}()
	for i := 0; i < len(reqs); i += per {
		b := s.pollCall(reqs[i:min(i+per, len(reqs))], fixed[:])
		calls, bufs = append(calls, *b), append(bufs, b)
	}
	replies, errs := s.runPolls(ctx, calls)
	for ci := range calls {
		first := ci * per
		part := out[first:min(first+per, len(out))]
		if errs[ci] != nil {
			for i := range part {
				part[i].Err = errs[ci]
			}
			continue
		}
		if err := parsePoll(replies[ci], reqs[first:first+len(part)], part, pageSize); err != nil {
			for i := range part {
				part[i] = PollReply{Err: err}
			}
		}
	}
	return out, nil
}

// pollHeads returns, per partition, its keys in a call of poll.lua, boxed.
func pollHeads(parts []Keys) [][]any {
	heads := make([][]any, len(parts))
	for p, k := range parts {
		heads[p] = []any{k.Lease, k.Loaded, k.Inbox, k.Pending, k.Running}
	}
	return heads
}

// pollCall returns a call of poll.lua for reqs, in a slice from argBufs
// (putArgBuf gives it back). A token or a Scanned that is the previous
// request's is boxed once.
func (s *Store) pollCall(reqs []PollRequest, fixed []any) *[]any {
	nkeys := 0
	for _, r := range reqs {
		nkeys += len(s.pollHead[r.P])
	}
	buf := s.argBuf(3 + nkeys + len(fixed) + 3*len(reqs))
	a := (*buf)[:0]
	a = append(a, "evalsha", s.poll.Hash(), nkeys)
	for _, r := range reqs {
		a = append(a, s.pollHead[r.P]...)
	}
	a = append(a, fixed...)
	var tok, scanned any
	for i, r := range reqs {
		if i == 0 || r.Token != reqs[i-1].Token {
			tok = r.Token
		}
		if i == 0 || r.Scanned != reqs[i-1].Scanned {
			scanned = r.Scanned
		}
		mode := ""
		if r.Reset {
			mode = "reset"
		}
		a = append(a, tok, mode, scanned)
	}
	*buf = a
	return buf
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

// runPolls sends the calls of poll.lua, one command alone or several in
// a pipeline, and returns each one's reply or error. A call that finds
// the script missing from its server's cache (NOSCRIPT) is sent again as
// EVAL, as Script.Run does: each server loads it for itself, so a server
// that cannot be reached fails only its own calls.
func (s *Store) runPolls(ctx context.Context, calls [][]any) ([]any, []error) {
	replies, errs := make([]any, len(calls)), make([]error, len(calls))
	send := func(idx []int) {
		if len(idx) == 1 {
			replies[idx[0]], errs[idx[0]] = s.rdb.Do(ctx, calls[idx[0]]...).Result()
			return
		}
		cmds := make([]*redis.Cmd, len(idx))
		pipe := s.rdb.Pipeline()
		for j, ci := range idx {
			cmds[j] = pipe.Do(ctx, calls[ci]...)
		}
		_, _ = pipe.Exec(ctx) // each command's error is its own
		for j, ci := range idx {
			replies[ci], errs[ci] = cmds[j].Result()
		}
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	send(all)
	var again []int
	for ci, err := range errs {
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			calls[ci][0], calls[ci][1] = "eval", pollLua
			again = append(again, ci)
		}
	}
	if len(again) > 0 {
		send(again)
	}
	for ci, err := range errs {
		if err != nil {
			errs[ci] = wrap(err)
		}
	}
	return replies, errs
}

// parsePoll reads a reply of poll.lua to reqs into their replies (see
// the script for its layout).
func parsePoll(reply any, reqs []PollRequest, out []PollReply, pageSize int) error {
	v, ok := reply.([]any)
	if !ok || len(v) == 0 {
		return fmt.Errorf("%w: poll reply %T", ErrCorrupt, reply)
	}
	head, ok := v[0].(string)
	if !ok {
		return fmt.Errorf("%w: poll reply head %T", ErrCorrupt, v[0])
	}
	items := v[1:]
	entries := func(n int) ([]Entry, error) {
		if n < 0 || 2*n > len(items) {
			return nil, fmt.Errorf("%w: poll reply of %d items, %d entries due", ErrCorrupt, len(items), n)
		}
		if n == 0 {
			return nil, nil
		}
		es := make([]Entry, n)
		for j := range es {
			key, ok := items[2*j].(string)
			if !ok {
				return nil, fmt.Errorf("%w: poll reply key %T", ErrCorrupt, items[2*j])
			}
			due, err := scoreOf(items[2*j+1])
			if err != nil {
				return nil, err
			}
			es[j] = Entry{Key: key, Due: due}
		}
		items = items[2*n:]
		return es, nil
	}
	for i := range out {
		var field string
		var found bool
		field, head, found = strings.Cut(head, "|")
		if !found && i < len(out)-1 {
			return fmt.Errorf("%w: poll reply for %d partitions, %d asked", ErrCorrupt, i+1, len(out))
		}
		r := &out[i]
		switch field {
		case "F":
			r.Err = fmt.Errorf("%w (partition lease is held by another owner)", ErrFenced)
			continue
		case "E":
			if len(items) == 0 {
				return fmt.Errorf("%w: poll reply without its error", ErrCorrupt)
			}
			r.Err = errs.Errorf("wheelq: poll: %v", items[0])
			items = items[1:]
			continue
		}
		prev, rest, ok1 := strings.Cut(field, ",")
		nin, npage, ok2 := strings.Cut(rest, ",")
		in, err1 := strconv.Atoi(nin)
		pg, err2 := strconv.Atoi(npage)
		if !ok1 || !ok2 || err1 != nil || err2 != nil {
			return fmt.Errorf("%w: poll reply field %q", ErrCorrupt, field)
		}
		switch prev {
		case "":
		case "=":
			r.Prev, r.HavePrev = reqs[i].Scanned, true
		default:
			var err error
			if r.Prev, err = strconv.ParseInt(prev, 10, 64); err != nil {
				r.Err = fmt.Errorf("%w: loaded-until %q", ErrCorrupt, prev)
			}
			r.HavePrev = true
		}
		var err error
		if r.Inbox, err = entries(in); err != nil {
			return err
		}
		if pg >= 0 {
			if r.Page, err = entries(pg); err != nil {
				return err
			}
			r.Read = true
			r.Cursor.Done = pg < pageSize
			if pg > 0 {
				last := r.Page[pg-1]
				r.Cursor.Score, r.Cursor.Member = last.Due, last.Key
			}
		}
	}
	if head != "" || len(items) > 0 {
		return fmt.Errorf("%w: poll reply longer than asked", ErrCorrupt)
	}
	return nil
}

// waitCmd queues WAIT acks timeout on pipe: how many replicas have every
// write of the connection so far.
func waitCmd(ctx context.Context, pipe redis.Pipeliner, acks int, timeout time.Duration) *redis.IntCmd {
	cmd := redis.NewIntCmd(ctx, "wait", acks, timeout.Milliseconds())
	_ = pipe.Process(ctx, cmd)
	return cmd
}
