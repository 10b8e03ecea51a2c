package persist

// The store's setup: its options, its scripts and the per-partition heads
// of their calls (New), and the namespace's first check (Init). The
// operations are in files of their own, beside their Lua scripts.

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
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
	// jobs, trimmed in steps of a 64th of that (lib.lua's finished()).
	// HistoryCount 0 keeps no history.
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
	// dueKeys and resolveKeys are, by partition, the fixed keys of
	// due.lua's and resolve.lua's calls, boxed once; pausedChan is the
	// pause announcements' channel, boxed once.
	dueKeys, resolveKeys [][]any
	pausedChan           any
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
		poll:          redis.NewScript(libLua + pollLua),
		rangeSc:       redis.NewScript(rangeLua),
		maxClaimBytes: MaxClaimBytes,
		acks:          opts.ReplicaAcks,
		ackTimeout:    opts.ReplicaTimeout,
		histAge:       opts.HistoryAge.Microseconds(),
		histCount:     (opts.HistoryCount + opts.Partitions - 1) / opts.Partitions,
	}
	s.due, s.take, s.topics = redis.NewScript(dueLua), redis.NewScript(libLua+takeLua), redis.NewScript(topicsLua)
	s.resolve = redis.NewScript(libLua + resolveLua)
	s.deadCorrupt = redis.NewScript(deadCorruptLua)
	s.repair = redis.NewScript(repairLua)
	s.recur = redis.NewScript(recurLua)
	s.limit = redis.NewScript(limitLua)
	for p := range opts.Partitions {
		s.parts = append(s.parts, partitionKeys(opts.Namespace, p))
	}
	for _, k := range s.parts {
		s.dueKeys = append(s.dueKeys, []any{k.Pending, k.Jobs, k.Lease, k.Running, k.Paused})
		s.resolveKeys = append(s.resolveKeys, []any{k.Pending, k.Jobs, k.Running, k.Dead, k.HistoryIdx, k.History, k.Loaded, k.Inbox})
	}
	s.pausedChan = pausedChannel(opts.Namespace)
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
