package recovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/wheel"
)

// fakeStore is an in-memory Store with two partitions. It records the
// windows scanned and checks that every Poll comes after the in-memory
// announcement.
type fakeStore struct {
	mu      sync.Mutex
	t       *testing.T
	r       *Recoverer
	holder  map[int]string // partition -> lease token
	loaded  map[int]int64
	inbox   map[int][]persist.Entry
	pending map[int][]persist.Entry // sorted by due
	scans   [][3]int64              // partition, after, until
	fenced  map[int]bool
	renewOK bool
	// losePoll makes the next Poll apply and then fail, as a poll whose
	// reply was lost (or came after the caller's deadline) does.
	losePoll bool
	// others are the roster's members besides the callers of a beat;
	// version is the roster's version (setOthers changes it).
	others  []string
	version int64
	self    map[string]bool
	beats   int
	// renewErr, if set, fails every renewal as an unreachable node does.
	renewErr error
	// pollPages records each PollMany's page size and request count;
	// pollInbox each one's most inbox entries per partition.
	pollPages [][2]int
	pollInbox []int
}

// setOthers sets the roster's other members, as a member joining or
// leaving would.
func (f *fakeStore) setOthers(ms ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.others = ms
	f.version++
}

func (f *fakeStore) Members(_ context.Context, op persist.MemberOp, id string, _ time.Duration) (persist.Roster, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	left := false
	switch op {
	case persist.MemberBeat:
		f.beats++
		if !f.self[id] {
			f.self[id] = true
			f.version++
		}
	case persist.MemberLeave:
		left = f.self[id]
		if left {
			delete(f.self, id)
			f.version++
		}
	}
	ro := persist.Roster{Version: f.version, Left: left}
	if op == persist.MemberBeat {
		ro.Members = append(ro.Members, f.others...)
		for m := range f.self {
			ro.Members = append(ro.Members, m)
		}
		slices.Sort(ro.Members)
	}
	return ro, nil
}

func newFakeStore(t *testing.T) *fakeStore {
	return &fakeStore{t: t, holder: map[int]string{}, loaded: map[int]int64{}, inbox: map[int][]persist.Entry{},
		pending: map[int][]persist.Entry{}, fenced: map[int]bool{}, renewOK: true, self: map[string]bool{}}
}

func (f *fakeStore) Partitions() int { return 2 }

func (f *fakeStore) LeaseAll(_ context.Context, parts []int, op persist.LeaseOp, token string, _ time.Duration, dead ...string) ([]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if op == persist.LeaseRenew && f.renewErr != nil {
		return nil, f.renewErr
	}
	out := make([]bool, len(parts))
	for i, p := range parts {
		switch op {
		case persist.LeaseAcquire:
			if f.holder[p] == "" || slices.Contains(dead, f.holder[p]) {
				f.holder[p] = token
			}
			out[i] = f.holder[p] == token
		case persist.LeaseRenew:
			out[i] = f.renewOK && f.holder[p] == token
		case persist.LeaseRelease:
			out[i] = f.holder[p] == token
			if out[i] {
				delete(f.holder, p)
			}
		}
	}
	return out, nil
}

func (f *fakeStore) Poll(_ context.Context, p int, tok string, loaded int64, _ time.Duration, reset bool, maxInbox int) (persist.PollResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fenced[p] || f.holder[p] != tok {
		return persist.PollResult{}, persist.ErrFenced
	}
	// Announce, then scan: the in-memory announcement came first.
	require.GreaterOrEqual(f.t, f.r.LoadedUntil(p), loaded, "Poll before the in-memory announcement")
	prev, had := f.loaded[p]
	f.loaded[p] = max(prev, loaded)
	if f.losePoll {
		f.losePoll = false
		return persist.PollResult{}, errors.New("i/o timeout (injected: the poll applied, its reply was lost)")
	}
	res := persist.PollResult{Prev: prev, HavePrev: had && !reset}
	switch {
	case reset:
		f.inbox[p] = nil
	case len(f.inbox[p]) >= maxInbox: // as poll.lua's LPOP of maxInbox
		res.Inbox, f.inbox[p] = f.inbox[p][:maxInbox:maxInbox], f.inbox[p][maxInbox:]
		res.InboxMore = maxInbox > 0
	default:
		res.Inbox, f.inbox[p] = f.inbox[p], nil
	}
	return res, nil
}

// PollMany is Poll for each request, then the first page of its window
// as persist.Store.PollMany reads it (recorded as a scan).
func (f *fakeStore) PollMany(ctx context.Context, loaded int64, ttl time.Duration, maxInbox, pageSize int, reqs []persist.PollRequest, out []persist.PollReply) ([]persist.PollReply, error) {
	f.mu.Lock()
	f.pollPages = append(f.pollPages, [2]int{pageSize, len(reqs)})
	f.pollInbox = append(f.pollInbox, maxInbox)
	f.mu.Unlock()
	out = out[:0]
	for _, r := range reqs {
		res, err := f.Poll(ctx, r.P, r.Token, loaded, ttl, r.Reset, maxInbox)
		rep := persist.PollReply{PollResult: res, Err: err}
		after := int64(persist.PollFloor)
		if res.HavePrev {
			after = min(res.Prev, r.Scanned)
		}
		if err == nil && pageSize > 0 && after < loaded {
			rep.Page, rep.Cursor, rep.Err = f.RangePending(ctx, r.P, after, loaded, persist.Cursor{}, pageSize)
			rep.Read = true
		}
		out = append(out, rep)
	}
	return out, nil
}

func (f *fakeStore) Census(_ context.Context, before int64) (persist.Census, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := persist.Census{Overdue: make([]int64, 2), Oldest: make([]int64, 2), HaveOldest: make([]bool, 2)}
	for p, es := range f.pending {
		for _, e := range es {
			if e.Due < before {
				c.Overdue[p]++
			}
			if !c.HaveOldest[p] || e.Due < c.Oldest[p] {
				c.Oldest[p], c.HaveOldest[p] = e.Due, true
			}
		}
		c.Pending += int64(len(es))
	}
	return c, nil
}

func (f *fakeStore) Repair(_ context.Context, _ int, _ string, _ persist.RepairCursor, _ int, _ int64) (persist.RepairCursor, persist.RepairResult, error) {
	return persist.RepairCursor{Done: true}, persist.RepairResult{}, nil
}

func (f *fakeStore) RangePending(_ context.Context, p int, after, until int64, cur persist.Cursor, limit int) ([]persist.Entry, persist.Cursor, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur.Member == "" {
		f.scans = append(f.scans, [3]int64{int64(p), after, until})
		cur.Score = after
	}
	var out []persist.Entry
	for _, e := range f.pending[p] { // sorted by (due, key)
		if (e.Due > cur.Score || (e.Due == cur.Score && cur.Member != "" && e.Key > cur.Member)) && e.Due <= until {
			out = append(out, e)
		}
	}
	if len(out) > limit {
		out = out[:limit]
	}
	if len(out) > 0 {
		cur.Score, cur.Member = out[len(out)-1].Due, out[len(out)-1].Key
	}
	cur.Done = len(out) < limit
	return out, cur, nil
}

type fakeSink struct {
	mu       sync.Mutex
	armed    []string
	arms     []int // the size of each Arm call
	released []int
	renewals int
	busy     map[int]bool
}

func (s *fakeSink) Busy(p int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busy[p]
}

func (s *fakeSink) setBusy(p int, b bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy == nil {
		s.busy = map[int]bool{}
	}
	s.busy[p] = b
}

func (s *fakeSink) Arm(es []persist.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.arms = append(s.arms, len(es))
	for _, e := range es {
		s.armed = append(s.armed, e.Key)
	}
}

func (s *fakeSink) Release(p int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = append(s.released, p)
}

func (s *fakeSink) Renewed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.renewals++
}

func (s *fakeSink) snapshot() ([]string, []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.armed...), append([]int(nil), s.released...)
}

func setup(t *testing.T) (*Recoverer, *fakeStore, *fakeSink, *wheel.FakeClock, chan struct{}) {
	return setupWith(t, func(*Config) {})
}

// setupWith is setup with the Config changed by edit first.
func setupWith(t *testing.T, edit func(*Config)) (*Recoverer, *fakeStore, *fakeSink, *wheel.FakeClock, chan struct{}) {
	clk := wheel.NewFakeClock(time.Unix(1_000_000, 0))
	store, sink := newFakeStore(t), &fakeSink{}
	passes := make(chan struct{}, 100)
	cfg := Config{Token: "me", Horizon: time.Minute, PollInterval: time.Second,
		LeaseTTL: 3 * time.Second, PageSize: 2, Clock: clk, OnPass: func() { passes <- struct{}{} }}
	edit(&cfg)
	r, err := New(store, sink, cfg)
	require.NoError(t, err)
	store.r = r
	return r, store, sink, clk, passes
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	store := newFakeStore(t)
	_, err := New(store, &fakeSink{}, Config{})
	require.Error(t, err, "empty token")
	_, err = New(store, &fakeSink{}, Config{Token: "x", Horizon: time.Second, PollInterval: time.Second})
	require.Error(t, err, "poll interval above half the horizon")
}

func TestReloadThenPollWindows(t *testing.T) {
	t.Parallel()
	r, store, sink, clk, passes := setup(t)
	now := clk.Now()
	us := func(d time.Duration) int64 { return now.Add(d).UnixMicro() }
	store.pending[0] = []persist.Entry{{Key: "a/old", Due: us(-time.Hour)}, {Key: "a/soon", Due: us(30 * time.Second)}, {Key: "a/later", Due: us(90 * time.Second)}}
	store.pending[1] = []persist.Entry{{Key: "b/old", Due: us(-2 * time.Hour)}, {Key: "b/x", Due: us(10 * time.Second)}, {Key: "b/y", Due: us(20 * time.Second)}}

	r.Start(context.Background())
	<-r.Ready()
	<-passes
	require.Equal(t, 2, r.Owned())
	require.Equal(t, []string{"me", "me"}, r.Tokens())
	armed, _ := sink.snapshot()
	// Pages of 2, one of each partition in turn, merged by due time.
	require.Equal(t, []string{"b/old", "a/old", "b/x", "a/soon", "b/y"}, armed)
	require.Equal(t, us(time.Minute), r.LoadedUntil(0))

	// The next pass scans (previous loaded-until, new] and arms the inbox.
	store.mu.Lock()
	store.inbox[1] = []persist.Entry{{Key: "b/inbox", Due: us(5 * time.Second)}}
	store.mu.Unlock()
	clk.BlockUntilSleeping()
	clk.Advance(time.Minute)
	<-passes
	armed, _ = sink.snapshot()
	// The pass (inbox, then the new window), then the sweep, due since the
	// clock moved past SweepInterval: the first page of each partition's
	// jobs overdue by more than SweepAge, merged by due time.
	require.Equal(t, []string{"b/inbox", "a/later", "b/old", "a/old", "b/x", "a/soon"}, armed[5:])
	store.mu.Lock()
	var windows [][3]int64
	for _, sc := range store.scans {
		if sc[2] == us(2*time.Minute) {
			windows = append(windows, sc)
		}
	}
	store.mu.Unlock()
	require.Len(t, windows, 2, "one window per partition")
	for _, w := range windows {
		require.Equal(t, us(time.Minute), w[1], "the window starts where the last one ended")
	}
	require.NoError(t, r.Stop(context.Background()))
	require.Empty(t, store.holder, "leases released on Stop")
}

// TestReloadFirstCallReadsAboutAPage: the poll that reloads every
// partition reads the first pages of all of them in one call, which
// together hold about one page (PageSize shared among the partitions), so
// the oldest jobs are armed after one short call; the rest follow in whole
// pages, none lost. The passes after it read whole pages. With a whole page of each partition in that call, a
// reload of 16 partitions of 1M jobs ran its first overdue job 40-48 ms
// after Start instead of 11-18 ms (wheelq-bench -workload recovery).
func TestReloadFirstCallReadsAboutAPage(t *testing.T) {
	t.Parallel()
	clk := wheel.NewFakeClock(time.Unix(1_000_000, 0))
	store, sink := newFakeStore(t), &fakeSink{}
	passes := make(chan struct{}, 100)
	const page, each = 200, 300
	r, err := New(store, sink, Config{Token: "me", Horizon: time.Minute, PollInterval: time.Second,
		LeaseTTL: 3 * time.Second, PageSize: page, Clock: clk, OnPass: func() { passes <- struct{}{} }})
	require.NoError(t, err)
	store.r = r
	now := clk.Now()
	for p := range 2 {
		for i := range each { // overdue, oldest first; partition 1's the older
			store.pending[p] = append(store.pending[p], persist.Entry{Key: fmt.Sprintf("%d/%04d", p, i), Due: now.Add(time.Duration(i-each-p) * time.Second).UnixMicro()})
		}
	}
	r.Start(context.Background())
	defer func() { require.NoError(t, r.Stop(context.Background())) }()
	<-r.Ready()
	<-passes
	store.mu.Lock()
	first := store.pollPages[0]
	store.mu.Unlock()
	require.Equal(t, 2, first[1], "one call for both partitions")
	require.LessOrEqual(t, first[0]*first[1], page, "the first pages together hold about a page")
	armed, _ := sink.snapshot()
	require.Len(t, armed, 2*each, "every job armed once")
	seen := map[string]bool{}
	for _, k := range armed {
		require.False(t, seen[k], k)
		seen[k] = true
	}
	sink.mu.Lock()
	firstArm := sink.arms[0]
	sink.mu.Unlock()
	require.LessOrEqual(t, firstArm, page, "the first arming is of one page")
	require.Equal(t, "1/0000", armed[0], "the oldest first")

	// A pass of a poll interval's windows reads whole pages.
	clk.BlockUntilSleeping()
	clk.Advance(time.Second)
	<-passes
	store.mu.Lock()
	next := store.pollPages[1]
	store.mu.Unlock()
	require.Equal(t, [2]int{page, 2}, next)
}

// TestInboxTakenInShares: an inbox that others filled (a burst of
// Schedules by other processes) is taken by calls of about inboxPerCall
// entries in all, in the same pass (up to 10 pages a partition); every
// entry is armed once. One call took them all before: 5,000 entries held
// Redis 5.6 ms (BenchmarkPollInbox).
func TestInboxTakenInShares(t *testing.T) {
	t.Parallel()
	r, store, sink, clk, passes := setupWith(t, func(c *Config) { c.PageSize = 100 })
	r.Start(context.Background())
	defer func() { require.NoError(t, r.Stop(context.Background())) }()
	<-r.Ready()
	<-passes
	now := clk.Now()
	const n0, n1 = 1000, 300 // 10 pages of partition 0: the most a pass takes
	store.mu.Lock()
	for i := range n0 {
		store.inbox[0] = append(store.inbox[0], persist.Entry{Key: fmt.Sprintf("a/%04d", i), Due: now.Add(time.Second).UnixMicro()})
	}
	for i := range n1 {
		store.inbox[1] = append(store.inbox[1], persist.Entry{Key: fmt.Sprintf("b/%04d", i), Due: now.Add(time.Second).UnixMicro()})
	}
	store.pending[0] = []persist.Entry{{Key: "a/window", Due: now.Add(time.Minute + time.Second/2).UnixMicro()}}
	calls0 := len(store.pollInbox)
	armed0, _ := sink.snapshot()
	store.mu.Unlock()

	clk.BlockUntilSleeping()
	clk.Advance(time.Second)
	<-passes
	armed, _ := sink.snapshot()
	armed = armed[len(armed0):]
	require.Len(t, armed, n0+n1+1, "every entry armed once, and the window's job")
	seen := map[string]bool{}
	for _, k := range armed {
		require.False(t, seen[k], k)
		seen[k] = true
	}
	require.True(t, seen["a/window"])
	store.mu.Lock()
	calls := store.pollInbox[calls0:]
	reqs := store.pollPages[calls0:]
	store.mu.Unlock()
	require.Greater(t, len(calls), 2, "taken in shares")
	for i, m := range calls {
		require.LessOrEqual(t, m*reqs[i][1], inboxPerCall+minInboxShare, "call %d", i)
		if i > 0 {
			require.Zero(t, reqs[i][0], "call %d: the drain reads no window", i)
		}
	}
	require.Empty(t, store.inbox[0])
	require.Empty(t, store.inbox[1])
}

func TestFencedAndLostLeasesAreReleased(t *testing.T) {
	t.Parallel()
	r, store, sink, clk, passes := setup(t)
	r.Start(context.Background())
	<-passes
	require.Equal(t, 2, r.Owned())

	store.mu.Lock()
	store.fenced[0] = true
	store.holder[0] = "other" // fenced: another process holds the lease
	store.mu.Unlock()
	clk.BlockUntilSleeping()
	clk.Advance(time.Second)
	<-passes
	_, released := sink.snapshot()
	require.Equal(t, []int{0}, released)
	require.Equal(t, int64(NotOwned), r.LoadedUntil(0))
	require.Equal(t, []string{"", "me"}, r.Tokens())

	// A renewal that says no releases the partition too.
	store.mu.Lock()
	store.renewOK = false
	store.holder[1] = "other"
	store.mu.Unlock()
	clk.BlockUntilSleeping()
	clk.Advance(time.Second) // LeaseTTL/3 has passed: renew
	<-passes
	_, released = sink.snapshot()
	require.Equal(t, []int{0, 1}, released)
	require.Zero(t, r.Owned())
	require.NoError(t, r.Stop(context.Background()))
	require.NoError(t, r.Stop(context.Background()), "idempotent")
}

// TestPollReplyLost: a poll applied in Redis (its
// window announced) but its reply was lost; the next poll took the new
// value as "previous", so that window was never scanned and a job in it
// ran only when the sweep found it, late. The window now starts where this
// process last scanned whole.
func TestPollReplyLost(t *testing.T) {
	t.Parallel()
	r, store, sink, clk, passes := setup(t)
	now := clk.Now()
	us := func(d time.Duration) int64 { return now.Add(d).UnixMicro() }
	store.pending[0] = []persist.Entry{{Key: "a/mid", Due: us(90 * time.Second)}}
	r.Start(context.Background())
	<-r.Ready()
	<-passes // scanned up to +1m: a/mid is beyond it

	store.mu.Lock()
	store.losePoll = true
	store.mu.Unlock()
	clk.BlockUntilSleeping()
	clk.Advance(40 * time.Second) // announces +1m40s; the reply is lost
	<-passes
	armed, _ := sink.snapshot()
	require.NotContains(t, armed, "a/mid")
	clk.BlockUntilSleeping()
	clk.Advance(time.Second)
	<-passes
	armed, _ = sink.snapshot()
	require.Contains(t, armed, "a/mid", "the window whose poll reply was lost is scanned")
	require.NoError(t, r.Stop(context.Background()))
}

// TestWaitingForLeaseIsLogged: a partition held by another process is
// waited for with a line in the log (a restarted process that owns
// nothing for a lease's time says why), and its take-over too.
func TestWaitingForLeaseIsLogged(t *testing.T) {
	t.Parallel()
	r, store, _, clk, passes, buf := setupLogged(t, func(store *fakeStore, _ time.Time) { store.holder[1] = "other" })
	r.Start(context.Background())
	<-passes
	require.Equal(t, 1, r.Owned())
	require.Contains(t, buf.String(), "partition assigned here is held by another process; waiting")
	require.Contains(t, buf.String(), "partition=1")
	require.Equal(t, 1, strings.Count(buf.String(), "waiting"), "said once, not at every try")

	store.mu.Lock()
	delete(store.holder, 1) // the other process's lease lapsed
	store.mu.Unlock()
	clk.BlockUntilSleeping()
	clk.Advance(time.Second) // the next pass tries again
	<-passes
	require.Equal(t, 2, r.Owned())
	require.Contains(t, buf.String(), "took a partition over")
	require.NoError(t, r.Stop(context.Background()))
}

// TestDeadTokensTakenOver: a partition held by a
// process known to be gone (DeadTokens) is taken at once, not after its
// lease lapses, and is logged (if it was in the roster); one held by
// another process still waits.
func TestDeadTokensTakenOver(t *testing.T) {
	t.Parallel()
	r, _, _, _, passes, buf := setupLogged(t, func(store *fakeStore, _ time.Time) {
		store.holder[0] = "gone"
		store.holder[1] = "alive"
		store.self["gone"] = true // it was in the roster
	}, func(c *Config) { c.DeadTokens = func() []string { return []string{"gone", "stranger"} } })
	r.Start(context.Background())
	<-passes
	require.True(t, r.Holds(0), "the dead process's partition is taken at once")
	require.False(t, r.Holds(1), "a live process's is not")
	require.Contains(t, buf.String(), "took over from a process that is gone")
	require.Contains(t, buf.String(), "token=gone")
	// A lock file of a process that was never in this roster (of another
	// Redis, in a shared lock dir) is not told of: a newcomer's -dev
	// server logged 28 such take-overs.
	require.NotContains(t, buf.String(), "token=stranger")
	require.NoError(t, r.Stop(context.Background()))
}

// TestOverdueIsLogged: a job far past its due time in a
// partition that another process holds (and does not run) is named in a
// warning by every sweep, by a process that does not own it either.
func TestOverdueIsLogged(t *testing.T) {
	t.Parallel()
	r, _, _, clk, passes, buf := setupLogged(t, func(store *fakeStore, now time.Time) {
		store.holder[1] = "stuck"
		store.pending[1] = []persist.Entry{{Key: "b/late", Due: now.Add(-2 * time.Minute).UnixMicro()}}
		store.pending[0] = []persist.Entry{{Key: "a/fine", Due: now.Add(-time.Second).UnixMicro()}}
	})
	r.Start(context.Background())
	<-passes
	require.NotContains(t, buf.String(), "jobs overdue", "no sweep yet")
	clk.BlockUntilSleeping()
	clk.Advance(10 * time.Second) // SweepInterval
	<-passes
	out := buf.String()
	require.Contains(t, out, "jobs overdue")
	require.Contains(t, out, "partitions=[1]")
	require.Contains(t, out, "owned_here=0")
	require.NoError(t, r.Stop(context.Background()))
}

// TestOverdueWarningOncePerMinute: pausing a topic
// flooded the log with a warning per partition per sweep (283 lines in 4
// minutes), naming neither the topic nor the pause. Overdue jobs are one
// line for all partitions, repeated at most once a minute while they stay
// overdue, naming the paused topics (whose jobs wait for Resume).
func TestOverdueWarningOncePerMinute(t *testing.T) {
	t.Parallel()
	r, _, _, clk, passes, buf := setupLogged(t, func(store *fakeStore, now time.Time) {
		store.pending[0] = []persist.Entry{{Key: "hook/a", Due: now.Add(-2 * time.Minute).UnixMicro()}}
		store.pending[1] = []persist.Entry{{Key: "hook/b", Due: now.Add(-3 * time.Minute).UnixMicro()}}
	}, func(c *Config) { c.PausedTopics = func() []string { return []string{"hook"} } })
	r.Start(context.Background())
	<-passes
	for range 7 { // 70 s of sweeps
		clk.BlockUntilSleeping()
		clk.Advance(10 * time.Second)
		<-passes
	}
	out := buf.String()
	require.Equal(t, 2, strings.Count(out, "jobs overdue"), "at the first sweep, then a minute later:\n%s", out)
	require.Contains(t, out, "overdue=2")
	require.Contains(t, out, "partitions=\"[0 1]\"")
	require.Contains(t, out, "paused_topics=[hook]")
	require.NoError(t, r.Stop(context.Background()))
}

// setupLogged is setup with the Recoverer's log kept in a buffer; prepare
// fills the store before New (now is the clock's start).
func setupLogged(t *testing.T, prepare func(store *fakeStore, now time.Time), opts ...func(*Config)) (*Recoverer, *fakeStore, *fakeSink, *wheel.FakeClock, chan struct{}, *syncBuffer) {
	clk := wheel.NewFakeClock(time.Unix(1_000_000, 0))
	store, sink := newFakeStore(t), &fakeSink{}
	prepare(store, clk.Now())
	buf := &syncBuffer{}
	passes := make(chan struct{}, 100)
	cfg := Config{Token: "me", Horizon: time.Minute, PollInterval: time.Second,
		LeaseTTL: 3 * time.Second, Clock: clk, Logger: slog.New(slog.NewTextHandler(buf, nil)),
		OnPass: func() { passes <- struct{}{} }}
	for _, o := range opts {
		o(&cfg)
	}
	r, err := New(store, sink, cfg)
	require.NoError(t, err)
	store.r = r
	return r, store, sink, clk, passes, buf
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHandOver: a member joining the roster gets its share of
// the partitions. The owner stops starting the jobs of a partition it hands
// over at once, but keeps its lease until the outcomes of the runs it
// claimed there are stored (Sink.Busy), so that they are stored under the
// lease they were claimed under; then it releases it. A member leaving
// gives its share back.
func TestHandOver(t *testing.T) {
	t.Parallel()
	r, store, sink, clk, passes := setup(t)
	r.Start(context.Background())
	<-passes
	require.Equal(t, 2, r.Owned(), "alone in the roster: every partition")
	require.Equal(t, 1, r.Members())

	owner := Assign([]string{"me", "other"}, 2)
	give := 0 // the partition the roster {me, other} assigns to other
	if owner[0] == 0 {
		give = 1
	}
	sink.setBusy(give, true) // a run of it claimed here is not settled yet
	store.setOthers("other")
	clk.BlockUntilSleeping()
	clk.Advance(time.Second)
	<-passes
	require.Equal(t, 2, r.Members())
	require.Equal(t, 1, r.Owned())
	require.Equal(t, int64(NotOwned), r.LoadedUntil(give), "no job of it starts here any more")
	require.True(t, r.Holds(give), "its lease is kept while an outcome is not stored")
	_, released := sink.snapshot()
	require.Equal(t, []int{give}, released)
	store.mu.Lock()
	require.Equal(t, "me", store.holder[give])
	store.mu.Unlock()

	sink.setBusy(give, false)
	clk.BlockUntilSleeping()
	clk.Advance(time.Second)
	<-passes
	require.False(t, r.Holds(give))
	store.mu.Lock()
	require.Empty(t, store.holder[give], "released once settled")
	store.mu.Unlock()

	store.setOthers() // the other member left
	clk.BlockUntilSleeping()
	clk.Advance(time.Second)
	<-passes
	require.Equal(t, 2, r.Owned(), "its share comes back")
	require.NoError(t, r.Stop(context.Background()))
	store.mu.Lock()
	require.Empty(t, store.self, "left the roster")
	store.mu.Unlock()
}

// TestNoBeatWithoutLeases: a process whose renewals fail (it reaches the
// roster's key but not its partitions, say a Cluster node cut off) stops
// renewing its roster entry, so that it drops out and the others take its
// share; once renewals work again it beats again.
func TestNoBeatWithoutLeases(t *testing.T) {
	t.Parallel()
	r, store, _, clk, passes := setup(t)
	r.Start(context.Background())
	<-passes
	beats := func() int { store.mu.Lock(); defer store.mu.Unlock(); return store.beats }
	before := beats()
	store.mu.Lock()
	store.renewErr = errors.New("i/o timeout (injected)")
	store.mu.Unlock()
	clk.BlockUntilSleeping()
	clk.Advance(time.Second) // LeaseTTL/3: a lease round
	<-passes
	require.Equal(t, before, beats(), "no beat after a failed renewal")
	store.mu.Lock()
	store.renewErr = nil
	store.mu.Unlock()
	clk.BlockUntilSleeping()
	clk.Advance(time.Second)
	<-passes
	require.Equal(t, before+1, beats(), "beats again once renewals work")
	require.NoError(t, r.Stop(context.Background()))
}

// TestSweepWalksOnPastAFullPage: each sweep reads a page of a partition's
// jobs overdue by more than SweepAge, going on from where the last one
// stopped and starting over after the last page. Every sweep read the
// oldest page before: jobs beyond it (behind a paused topic's overdue
// jobs, which are parked, not run) were never armed by a sweep.
func TestSweepWalksOnPastAFullPage(t *testing.T) {
	t.Parallel()
	r, store, sink, clk, passes := setup(t) // pages of 2
	now := clk.Now()
	us := func(d time.Duration) int64 { return now.Add(d).UnixMicro() }
	for i := range 5 {
		store.pending[0] = append(store.pending[0], persist.Entry{Key: fmt.Sprintf("a/%d", i), Due: us(-time.Hour + time.Duration(i)*time.Second)})
	}
	r.Start(context.Background())
	<-r.Ready()
	<-passes
	armed, _ := sink.snapshot()
	require.Len(t, armed, 5, "the reload arms them all")
	var sweeps [][]string
	for range 4 {
		clk.BlockUntilSleeping()
		clk.Advance(10 * time.Second) // SweepInterval
		<-passes
		now, _ := sink.snapshot()
		sweeps = append(sweeps, now[len(armed):])
		armed = now
	}
	require.Equal(t, [][]string{{"a/0", "a/1"}, {"a/2", "a/3"}, {"a/4"}, {"a/0", "a/1"}}, sweeps)
	require.NoError(t, r.Stop(context.Background()))
}
