package persist

// Pulled topics: jobs that consumers reserve, ack, nack and touch instead
// of a handler running them. See due.lua, take.lua and resolve.lua.

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/due.lua
	dueLua string
	//go:embed lua/take.lua
	takeLua string
	//go:embed lua/resolve.lua
	resolveLua string
	//go:embed lua/topics.lua
	topicsLua string
)

// ReservationMark is the first byte of a reservation's mark in a
// partition's running HASH ("~" and the token). No lease token or
// InstanceID starts with it.
const ReservationMark = "~"

// ErrTopicMode is returned by DeclareTopics when a topic is declared
// consumed one way (a handler, or pulled) and recorded the other.
var ErrTopicMode = errors.New("wheelq: topic consumed another way")

// Topic modes, as DeclareTopics records them.
const (
	ModeHandler = "handler"
	ModePull    = "pull"
)

// ReadyKey returns the ready ZSET of topic in partition p: its due jobs
// queued for any consumer (job key -> due, unix µs).
func (s *Store) ReadyKey(p int, topic string) string { return s.parts[p].Ready + topic }

func topicsKey(ns string) string { return "wq:{" + ns + "}:topics" }

// DeclareTopics records how each topic of modes is consumed (ModeHandler
// or ModePull), in the namespace's topics HASH, and announces the change.
// A topic recorded with the other mode fails the whole call with
// ErrTopicMode, changing nothing.
func (s *Store) DeclareTopics(ctx context.Context, modes map[string]string) error {
	if len(modes) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(modes)+1)
	args = append(args, pausedChannel(s.ns))
	for t, m := range modes {
		args = append(args, t, m)
	}
	res, err := s.topics.Run(ctx, s.rdb, []string{topicsKey(s.ns)}, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return wrap(err)
	}
	if arr, ok := res.([]any); ok && len(arr) == 2 {
		t, _ := arr[0].(string)
		m, _ := arr[1].(string)
		return fmt.Errorf("%w: topic %q is consumed as %s in this namespace", ErrTopicMode, t, m)
	}
	return nil
}

// TopicModes returns the recorded modes of the namespace's topics.
func (s *Store) TopicModes(ctx context.Context) (map[string]string, error) {
	m, err := s.rdb.HGetAll(ctx, topicsKey(s.ns)).Result()
	if err != nil {
		return nil, wrap(err)
	}
	return m, nil
}

// DueJob is a job of a pulled topic whose time has come, for Due.
type DueJob struct {
	Key string
	// Nonce, if set, reserves the job: its token is its revision in hex
	// and Nonce, its deadline Deadline (unix µs). Else the job is queued
	// to its topic's ready ZSET.
	Nonce    string
	Deadline int64
}

// DueStatus is what Due did with a job.
type DueStatus byte

// Due's statuses (see due.lua).
const (
	DueGone     DueStatus = 'g'
	DueMoved    DueStatus = 'm' // Score is when to look again
	DuePaused   DueStatus = 'p'
	DueBusy     DueStatus = 'b'
	DueQueued   DueStatus = 'q'
	DueReserved DueStatus = 'r' // Record and Token are set
	// DueReplayed: reserved again, a reservation of this job's Nonce made
	// by a call whose reply was lost; Record and Token are set, Score is
	// the deadline it had (not the due time), the deadline now the
	// DueJob's.
	DueReplayed DueStatus = 'R'
	DueLapsed   DueStatus = 'l' // Record is set; the job is claimed by the caller
	DueCorrupt  DueStatus = 'x' // Record holds the raw bytes
	DueFenced   DueStatus = 'F' // the partition's lease is another's: nothing done
)

// DueResult is Due's answer for one job.
type DueResult struct {
	Status DueStatus
	Score  int64 // the job's score: its due time, or a reservation's deadline
	Record []byte
	Token  string // DueReserved: the reservation's token
}

// Due hands the jobs of pulled topics whose time has come to consumers
// or to the ready sets (due.lua), in one round trip (outside a cluster
// one call for all the partitions; in a cluster a call per partition, in
// one pipeline). tokens[p] is the caller's lease token of
// partition p: the jobs of a partition whose lease is another's come
// back DueFenced, changing nothing there. now (unix µs, the caller's
// wall clock) bounds what is due; a job with a Nonce is reserved if due
// by ahead (>= now: reserved before its time, to be handed over at it).
func (s *Store) Due(ctx context.Context, tokens []string, now, ahead int64, jobs []DueJob) ([]DueResult, error) {
	args, order, err := s.dueArgs(tokens, now, ahead, jobs)
	if err != nil {
		return nil, err
	}
	replies, err := s.runCalls(ctx, args)
	if err != nil {
		return nil, err
	}
	out := make([]DueResult, len(jobs))
	for ci, idx := range order {
		arr, ok := replies[ci].([]any)
		if !ok || len(arr) < 2 {
			return nil, fmt.Errorf("%w: due reply %T", ErrCorrupt, replies[ci])
		}
		st, _ := arr[0].(string)
		scores, _ := arr[1].(string)
		recs := arr[2:]
		if len(st) != len(idx) {
			return nil, fmt.Errorf("%w: due reply of %d for %d jobs", ErrCorrupt, len(st), len(idx))
		}
		nrec := 0
		for w, i := range idx {
			score, rest, ok := strings.Cut(scores, ",")
			if !ok {
				return nil, fmt.Errorf("%w: short due reply", ErrCorrupt)
			}
			scores = rest
			r := &out[i]
			r.Status = DueStatus(st[w])
			if score != "" {
				if r.Score, err = scoreOf(score); err != nil {
					return nil, err
				}
			}
			switch r.Status {
			case DueReserved, DueReplayed, DueLapsed, DueCorrupt:
				if nrec >= len(recs) {
					return nil, fmt.Errorf("%w: short due reply", ErrCorrupt)
				}
				b, _ := recs[nrec].(string)
				nrec++
				r.Record = []byte(b)
				if r.Status == DueReserved || r.Status == DueReplayed {
					r.Token = RevHex(b) + jobs[i].Nonce
				}
			case DueGone, DueMoved, DuePaused, DueBusy, DueQueued, DueFenced:
			default:
				return nil, fmt.Errorf("%w: due status %q", ErrCorrupt, st[w])
			}
		}
	}
	return out, nil
}

// dueArgs is due.lua's calls for jobs (see Due): each call's EVALSHA
// arguments, and its jobs in the order of its reply. The jobs' keys,
// nonces and deadlines go as pointers into jobs (no boxing each), so jobs
// must not change until the calls are done.
func (s *Store) dueArgs(tokens []string, now, ahead int64, jobs []DueJob) (args [][]any, order [][]int, err error) {
	g, err := s.groupPulled(len(jobs), func(i int) string { return jobs[i].Key }, func(int) bool { return true })
	if err != nil {
		return nil, nil, err
	}
	fixed := []any{now, s.pausedChan, max(ahead, now)}
	args, order = g.build(s.due.Hash(), s.dueKeys, fixed, 3, 4, func(p int, a []any, nkeys int) []any {
		return append(a, token(tokens, p), nkeys, g.count[p])
	}, func(i, ready int, a []any) []any {
		j := &jobs[i]
		if j.Nonce == "" {
			return append(a, &j.Key, ready, "", "")
		}
		return append(a, &j.Key, ready, &j.Nonce, &j.Deadline)
	})
	return args, order, nil
}

// pulledCalls are the calls of due.lua or resolve.lua for a batch of
// items (groupPulled): per partition its fixed keys, then the ready ZSETs
// its items name, each once.
type pulledCalls struct {
	s       *Store
	touched []int    // partitions with items, in order
	items   []int    // the items by partition (touched's order), each partition's in order
	from    []int    // by partition: where its items begin in items
	count   []int    // by partition: its items
	topics  []string // by item: its topic when it names its ready ZSET, else ""
}

// groupPulled groups n items by partition (partitionsOf); named says
// whether item i names its topic's ready ZSET (its key's topic).
func (s *Store) groupPulled(n int, key func(int) string, named func(int) bool) (*pulledCalls, error) {
	np := len(s.parts)
	g := &pulledCalls{s: s, from: make([]int, np), count: make([]int, np), items: make([]int, n), topics: make([]string, n)}
	part := make([]int, n)
	s.partitionsOf(part, g.count, key)
	at := 0
	for p, c := range g.count {
		if c > 0 {
			g.touched = append(g.touched, p)
			g.from[p] = at
			at += c
		}
	}
	next := slices.Clone(g.from)
	for i, p := range part {
		g.items[next[p]] = i
		next[p]++
		if named(i) {
			topic, _, err := SplitJobKey(key(i))
			if err != nil {
				return nil, err
			}
			g.topics[i] = topic
		}
	}
	return g, nil
}

// build makes the calls: outside a cluster one for every partition, in a
// cluster one each. A call is EVALSHA hash, its keys (each partition's
// fixedKeys then its ready ZSETs), fixed, then per partition head's
// arguments (given its number of keys) and per item per arguments (item's:
// given the index among its partition's keys of its ready ZSET, 0 if it
// names none). heads and per size the arguments.
func (g *pulledCalls) build(hash string, fixedKeys [][]any, fixed []any, heads, per int,
	head func(p int, a []any, nkeys int) []any, item func(i, ready int, a []any) []any) (args [][]any, order [][]int) {
	var groups [][]int
	if g.s.cluster {
		for i := range g.touched {
			groups = append(groups, g.touched[i:i+1])
		}
	} else if len(g.touched) > 0 {
		groups = [][]int{g.touched}
	}
	args = make([][]any, len(groups))
	order = make([][]int, len(groups))
	var ready []string // scratch: a partition's ready topics, in order
	for gi, ps := range groups {
		nkeys, nargs, nitems := 0, len(fixed), 0
		for _, p := range ps {
			ready = g.readyTopics(p, ready[:0])
			nkeys += len(fixedKeys[p]) + len(ready)
			nargs += heads + per*g.count[p]
			nitems += g.count[p]
		}
		a := make([]any, 3, 3+nkeys+nargs)
		a[0], a[1], a[2] = "evalsha", hash, nkeys
		for _, p := range ps {
			a = append(a, fixedKeys[p]...)
			ready = g.readyTopics(p, ready[:0])
			for _, t := range ready {
				a = append(a, g.s.parts[p].Ready+t)
			}
		}
		a = append(a, fixed...)
		o := make([]int, 0, nitems)
		for _, p := range ps {
			ready = g.readyTopics(p, ready[:0])
			a = head(p, a, len(fixedKeys[p])+len(ready))
			for _, i := range g.items[g.from[p] : g.from[p]+g.count[p]] {
				n := 0
				if t := g.topics[i]; t != "" {
					n = len(fixedKeys[p]) + 1 + slices.Index(ready, t)
				}
				a = item(i, n, a)
				o = append(o, i)
			}
		}
		args[gi], order[gi] = a, o
	}
	return args, order
}

// readyTopics appends to ts the topics whose ready ZSETs partition p's
// items name, each once, in the order of their first item.
func (g *pulledCalls) readyTopics(p int, ts []string) []string {
	for _, i := range g.items[g.from[p] : g.from[p]+g.count[p]] {
		if t := g.topics[i]; t != "" && !slices.Contains(ts, t) {
			ts = append(ts, t)
		}
	}
	return ts
}

// evalArgs returns the arguments of an EVALSHA of sc with keys and argv,
// for runCalls (which loads the scripts and sends a call again on
// NOSCRIPT).
func evalArgs(sc *redis.Script, keys, argv []any) []any {
	a := make([]any, 0, 3+len(keys)+len(argv))
	a = append(a, "evalsha", sc.Hash(), len(keys))
	return append(append(a, keys...), argv...)
}

// RevHex returns the revision of an encoded record in hex, as the scripts
// write it at the head of a reservation's token ("" for a record too short
// to hold one).
func RevHex(rec string) string {
	if len(rec) < 5 {
		return ""
	}
	return fmt.Sprintf("%02x%02x%02x%02x", rec[1], rec[2], rec[3], rec[4])
}

// Taken is a job Take reserved.
type Taken struct {
	Key    string
	Token  string
	Due    int64 // its due time, unix µs
	Record []byte
}

// TakeResult is what Take found.
type TakeResult struct {
	Jobs []Taken
	// Paused lists the requested topics that are paused (their jobs were
	// not taken).
	Paused []string
	// Stale counts the ready entries removed because their jobs were
	// gone, moved or marked: they may have kept the take from max.
	Stale int
}

// Take reserves up to max due jobs of topics from the ready sets, oldest
// first (take.lua): outside a cluster in one round trip over every
// partition; in a cluster a look at every partition's oldest entries, then
// a call per partition for its share (two round trips). now (unix µs) bounds what is due;
// deadline is the reservations' (unix µs); nonce makes the tokens unique.
// tok is the caller's lease token ("" if none): the reservations of the
// partitions it holds are not pushed to their inbox (the caller arms
// their deadlines itself).
func (s *Store) Take(ctx context.Context, topics []string, max int, now, deadline int64, nonce, tok string, start int) (TakeResult, error) {
	return s.take1(ctx, topics, max, now, deadline, nonce, tok, start, "")
}

// Pop takes up to max due jobs of topics from the ready sets, oldest
// first, as Take does, and finishes them in the same call: each leaves
// the queue for the run history as done, as an ack leaves it, and its
// Taken has no token. A job popped is never handed out again, whatever
// becomes of the caller (at most once). With Options.ReplicaAcks it
// returns them only once replicas acknowledged the call, else fails with
// ErrNotReplicated (the jobs may be finished all the same).
func (s *Store) Pop(ctx context.Context, topics []string, max int, now int64, start int) (TakeResult, error) {
	return s.take1(ctx, topics, max, now, 0, "", "", start, "p")
}

// take1 is Take, or Pop with mode "p".
func (s *Store) take1(ctx context.Context, topics []string, max int, now, deadline int64, nonce, tok string, start int, mode string) (TakeResult, error) {
	var res TakeResult
	parts := make([]int, 0, len(s.parts))
	for i := range s.parts {
		parts = append(parts, (start+i)%len(s.parts))
	}
	calls := []takeCall{{parts, max}}
	if s.cluster {
		// A call per partition: first a look at each one's oldest ready
		// entries (one pipeline), so that each takes its share of the
		// oldest max over all of them, as one call outside a cluster does.
		var err error
		if calls, err = s.peekReady(ctx, parts, topics, max, now); err != nil {
			return res, err
		}
	}
	args := make([][]any, len(calls))
	for g, c := range calls {
		keys := make([]any, 0, len(c.parts)*(8+len(topics)))
		for _, p := range c.parts {
			k := s.parts[p]
			keys = append(keys, k.Pending, k.Jobs, k.Running, k.Paused, k.Lease, k.Inbox, k.HistoryIdx, k.History)
			for _, t := range topics {
				keys = append(keys, k.Ready+t)
			}
		}
		args[g] = evalArgs(s.take, keys, []any{now, c.max, deadline, nonce + strconv.Itoa(g) + ".", MaxClaimBytes, len(topics), tok,
			mode, s.histAge, s.histCount})
	}
	run := s.runCalls
	if mode == "p" {
		// A pop finishes its jobs: they are returned only once replicas
		// have the finish (Options.ReplicaAcks), as a write's, so that a
		// failover cannot hand them out again. Not acknowledged in time,
		// it fails with ErrNotReplicated: the jobs may be finished all the
		// same (at most once).
		run = s.runWrites
	}
	replies, err := run(ctx, args)
	if err != nil {
		return res, err
	}
	paused := make([]bool, len(topics))
	for _, v := range replies {
		arr, ok := v.([]any)
		if !ok || len(arr) < 1 || (len(arr)-1)%4 != 0 {
			return res, fmt.Errorf("%w: take reply %T", ErrCorrupt, v)
		}
		head, _ := arr[0].(string)
		flags, staleN, _ := strings.Cut(head, ",")
		if n, _ := strconv.Atoi(staleN); n > 0 {
			res.Stale += n
		}
		for i := range topics {
			if i < len(flags) && flags[i] == '1' {
				paused[i] = true
			}
		}
		for i := 1; i < len(arr); i += 4 {
			key, _ := arr[i].(string)
			tok, _ := arr[i+1].(string)
			due, err := scoreOf(fmt.Sprint(arr[i+2]))
			if err != nil {
				return res, err
			}
			rec, _ := arr[i+3].(string)
			res.Jobs = append(res.Jobs, Taken{Key: key, Token: tok, Due: due, Record: []byte(rec)})
		}
	}
	if len(calls) > 1 {
		slices.SortFunc(res.Jobs, func(a, b Taken) int {
			return cmp.Or(cmp.Compare(a.Due, b.Due), strings.Compare(a.Key, b.Key))
		})
	}
	for i, t := range topics {
		if paused[i] {
			res.Paused = append(res.Paused, t)
		}
	}
	return res, nil
}

// takeCall is a call of take.lua: its partitions, and the most jobs it
// takes.
type takeCall struct {
	parts []int
	max   int
}

// peekReady reads the oldest max ready entries of topics in each of
// parts (one pipeline) and returns, per partition among the oldest max of
// them all, a take call for its share.
func (s *Store) peekReady(ctx context.Context, parts []int, topics []string, max int, now int64) ([]takeCall, error) {
	type entry struct {
		score float64
		key   string
		p     int
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, 0, len(parts)*len(topics))
	owner := make([]int, 0, cap(cmds))
	for _, p := range parts {
		for _, t := range topics {
			cmds = append(cmds, pipe.ZRangeByScoreWithScores(ctx, s.parts[p].Ready+t, &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now, 10), Count: int64(max)}))
			owner = append(owner, p)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, wrap(err)
	}
	var es []entry
	for i, c := range cmds {
		for _, z := range c.Val() {
			key, _ := z.Member.(string)
			es = append(es, entry{z.Score, key, owner[i]})
		}
	}
	slices.SortFunc(es, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.score, b.score), strings.Compare(a.key, b.key))
	})
	share := map[int]int{}
	for _, e := range es[:min(max, len(es))] {
		share[e.p]++
	}
	var out []takeCall
	for _, p := range parts {
		if share[p] > 0 {
			out = append(out, takeCall{[]int{p}, share[p]})
		}
	}
	if len(out) == 0 {
		// Nothing ready: one call still says which topics are paused.
		out = append(out, takeCall{[]int{parts[0]}, max})
	}
	return out, nil
}

// ResolveOp is one op on a reservation (see resolve.lua).
type ResolveOp struct {
	Op     byte // 'a' ack, 'r' retry, 'd' dead, 't' touch, 'u' release
	Key    string
	Token  string
	Score  int64  // retry: the new due time; touch: the new deadline; release: the due time
	Record []byte // retry, dead
}

// Resolve's answers, per op.
const (
	Resolved    = '1' // applied (or applied before: a replay)
	ResolveLost = 'x' // the reservation is not current
	ResolveGone = 'c' // the job was cancelled
	ResolveKept = 'k' // a touch that asked for an earlier deadline than the reservation's: it keeps its own
)

// Resolve applies ops on reservations, in order, in one round trip
// (outside a cluster one call; in a cluster a call per partition,
// pipelined), and returns one answer byte per op:
// Resolved, ResolveLost, ResolveGone or ResolveKept. now (unix µs) is an ack's finish
// time and a dead job's score.
func (s *Store) Resolve(ctx context.Context, now int64, ops []ResolveOp) ([]byte, error) {
	args, order, err := s.resolveArgs(now, ops)
	if err != nil {
		return nil, err
	}
	replies, err := s.runWrites(ctx, args)
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(ops))
	for ci, idx := range order {
		r, _ := replies[ci].(string)
		if len(r) != len(idx) {
			return nil, fmt.Errorf("%w: resolve reply %q for %d ops", ErrCorrupt, r, len(idx))
		}
		for w, i := range idx {
			out[i] = r[w]
		}
	}
	return out, nil
}

// resolveArgs is resolve.lua's calls for ops (see Resolve): each call's
// EVALSHA arguments, and its ops in the order of its reply. The ops' keys
// and tokens go as pointers into ops (no boxing each), so ops must not
// change until the calls are done.
func (s *Store) resolveArgs(now int64, ops []ResolveOp) (args [][]any, order [][]int, err error) {
	g, err := s.groupPulled(len(ops), func(i int) string { return ops[i].Key }, func(i int) bool { return ops[i].Op == 'u' })
	if err != nil {
		return nil, nil, err
	}
	fixed := []any{now, s.histAge, s.histCount, s.pausedChan}
	args, order = g.build(s.resolve.Hash(), s.resolveKeys, fixed, 2, 7, func(p int, a []any, nkeys int) []any {
		return append(a, nkeys, g.count[p])
	}, func(i, ready int, a []any) []any {
		o := &ops[i]
		var ri any = ""
		if ready > 0 {
			ri = ready
		}
		var rec any = "" // resolve.lua reads no record of an ack, a touch or a release
		if o.Record != nil {
			rec = o.Record
		}
		var score any = 0
		if o.Score != 0 {
			score = &o.Score
		}
		return append(a, opArg(o.Op), &o.Key, &o.Token, tokenRev(o.Token), score, rec, ri)
	})
	return args, order, nil
}

// opArg is op as resolve.lua's argument: a constant, so that it costs no
// allocation.
func opArg(op byte) any {
	switch op {
	case 'a':
		return "a"
	case 'r':
		return "r"
	case 'd':
		return "d"
	case 't':
		return "t"
	case 'u':
		return "u"
	}
	return string(op)
}

// tokenRev is the revision a reservation's token starts with (8 hex
// characters) as a record's 4 bytes hold it, for resolve.lua to compare
// without formatting each record's; "" when the token does not start so.
func tokenRev(token string) string {
	if len(token) < 8 {
		return ""
	}
	var b [4]byte
	if _, err := hex.Decode(b[:], []byte(token[:8])); err != nil {
		return ""
	}
	return string(b[:])
}

// pullScripts are the pulled topics' scripts, for loadScriptsOn.
func (s *Store) pullScripts() []*redis.Script {
	return []*redis.Script{s.due, s.take, s.resolve, s.topics}
}
