package wheelq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/crashpoint"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/wheel"
)

// newYork is the time zone of the daylight-saving tests: in 2026 its
// clocks go from 02:00 EST to 03:00 EDT on March 8 and from 02:00 EDT
// back to 01:00 EST on November 1.
func newYork(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	return loc
}

// planOf compiles r on a queue that is never started.
func planOf(t *testing.T, q *Queue, r Recurring, now time.Time) *plan {
	t.Helper()
	p, err := q.compile(r, now)
	require.NoError(t, err)
	return p
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// slotsAfter returns the first n slots of p after t, in UTC.
func slotsAfter(p *plan, t time.Time, n int) []string {
	var out []string
	for len(out) < n {
		s := p.next(t)
		if s.IsZero() {
			break
		}
		out = append(out, s.UTC().Format(time.RFC3339))
		t = s
	}
	return out
}

// TestRecurringSlots: the slots of intervals and cron expressions, in UTC
// and across both daylight-saving transitions (the documented rule: a
// skipped local time runs at the first instant after the gap, once; a
// repeated one at its first occurrence only).
func TestRecurringSlots(t *testing.T) {
	t.Parallel()
	q, err := New(redistest.Start(t, redistest.Options{}).Client(t), Config{})
	require.NoError(t, err)
	newYork(t)
	base := utc("2026-03-01T00:00:00Z")
	for _, tc := range []struct {
		name string
		r    Recurring
		from string
		want []string
	}{
		{"every 1s from the epoch", Recurring{Every: time.Second}, "2026-03-07T10:00:00.5Z",
			[]string{"2026-03-07T10:00:01Z", "2026-03-07T10:00:02Z"}},
		{"every 90m from Start", Recurring{Every: 90 * time.Minute, Start: utc("2026-03-07T10:10:00Z")}, "2026-03-07T00:00:00Z",
			[]string{"2026-03-07T10:10:00Z", "2026-03-07T11:40:00Z"}},
		{"every with End", Recurring{Every: time.Hour, End: utc("2026-03-07T12:00:00Z")}, "2026-03-07T10:30:00Z",
			[]string{"2026-03-07T11:00:00Z", "2026-03-07T12:00:00Z"}},
		{"cron, five fields", Recurring{Cron: "*/15 * * * *"}, "2026-03-07T10:07:00Z",
			[]string{"2026-03-07T10:15:00Z", "2026-03-07T10:30:00Z"}},
		{"cron, six fields", Recurring{Cron: "30 * * * * *"}, "2026-03-07T10:07:00Z",
			[]string{"2026-03-07T10:07:30Z", "2026-03-07T10:08:30Z"}},
		{"@daily in New York", Recurring{Cron: "@daily", TimeZone: "America/New_York"}, "2026-03-07T10:00:00Z",
			[]string{"2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"}},
		// Spring forward: 02:30 does not exist on March 8; it runs at 03:00 EDT.
		{"a skipped time runs after the gap", Recurring{Cron: "30 2 * * *", TimeZone: "America/New_York"}, "2026-03-07T00:00:00Z",
			[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		// Every half hour through the gap: 02:00 and 02:30 both map to 03:00 EDT, which runs once.
		{"half hours through the gap", Recurring{Cron: "0,30 * * * *", TimeZone: "America/New_York"}, "2026-03-08T06:15:00Z",
			[]string{"2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"}},
		// Fall back: 01:30 happens twice on November 1; it runs at the first (EDT) only.
		{"a repeated time runs once", Recurring{Cron: "30 1 * * *", TimeZone: "America/New_York"}, "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"half hours through the repeated hour", Recurring{Cron: "0,30 * * * *", TimeZone: "America/New_York"}, "2026-11-01T04:45:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-01T07:00:00Z"}},
		// From within the repeated hour's second pass, the next slot is after it.
		{"from the second pass", Recurring{Cron: "0,30 * * * *", TimeZone: "America/New_York"}, "2026-11-01T06:10:00Z",
			[]string{"2026-11-01T07:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.r.Name, tc.r.Topic = "s", "t"
			from := utc(tc.from)
			p := planOf(t, q, tc.r, base)
			require.Equal(t, tc.want, slotsAfter(p, from, len(tc.want)))
		})
	}
}

// TestRecurringMissed: the slots a fill stores after a gap in which no
// process stored any, by policy; and the lookahead after it.
func TestRecurringMissed(t *testing.T) {
	t.Parallel()
	q, err := New(redistest.Start(t, redistest.Options{}).Client(t), Config{})
	require.NoError(t, err)
	now := utc("2026-03-07T10:00:00.5Z")
	wm := utc("2026-03-07T09:00:00Z").UnixMicro() // an hour of missed slots
	for _, tc := range []struct {
		missed MissedPolicy
		max    int
		want   int // missed slots stored
	}{{MissedLatest, 0, 1}, {MissedSkip, 0, 0}, {MissedEach, 5, 5}, {MissedEach, 0, 100}} {
		t.Run(fmt.Sprint(tc.missed, tc.max), func(t *testing.T) {
			p := planOf(t, q, Recurring{Name: "m", Topic: "t", Every: time.Second, Missed: tc.missed, MaxMissed: tc.max}, now)
			slots, floor := p.slots(wm, now, time.Hour, RecurringLookahead)
			var missed, coming []time.Time
			for _, s := range slots {
				if s.After(now) {
					coming = append(coming, s)
				} else {
					missed = append(missed, s)
				}
			}
			require.Len(t, missed, min(tc.want, maxRecurFill))
			if len(missed) > 0 {
				require.Equal(t, utc("2026-03-07T10:00:00Z"), missed[len(missed)-1].UTC(), "the latest missed slot")
				require.Equal(t, missed[0].UnixMicro()-1, floor)
			} else {
				require.Equal(t, now.UnixMicro(), floor)
			}
			if len(slots) < maxRecurFill {
				require.NotEmpty(t, coming)
				require.Equal(t, utc("2026-03-07T10:00:01Z"), coming[0].UTC())
				require.False(t, coming[len(coming)-1].After(now.Add(RecurringLookahead)))
			}
		})
	}
	// A daily schedule whose next slot is stored stores nothing more; one
	// whose next slot is not stores it, however far (within MaxDelay).
	p := planOf(t, q, Recurring{Name: "d", Topic: "t", Cron: "@daily"}, now)
	slots, _ := p.slots(utc("2026-03-08T00:00:00Z").UnixMicro(), now, 30*24*time.Hour, RecurringLookahead)
	require.Empty(t, slots)
	slots, _ = p.slots(utc("2026-03-07T00:00:00Z").UnixMicro(), now, 30*24*time.Hour, RecurringLookahead)
	require.Equal(t, []time.Time{utc("2026-03-08T00:00:00Z")}, utcAll(slots))
}

// TestRecurringBadInput: each bad field is a clear error naming it.
func TestRecurringBadInput(t *testing.T) {
	t.Parallel()
	q, err := New(redistest.Start(t, redistest.Options{}).Client(t), Config{MaxDelay: 24 * time.Hour})
	require.NoError(t, err)
	ctx := context.Background()
	ok := Recurring{Name: "n", Topic: "t", Every: time.Second}
	for _, tc := range []struct {
		name  string
		edit  func(r *Recurring)
		is    error
		field string
	}{
		{"invalid cron", func(r *Recurring) { r.Every, r.Cron = 0, "61 * * * *" }, ErrInvalidOption, "Recurring.Cron"},
		{"cron with TZ", func(r *Recurring) { r.Every, r.Cron = 0, "TZ=UTC 0 * * * *" }, ErrInvalidOption, "TimeZone"},
		{"cron and every", func(r *Recurring) { r.Cron = "@hourly" }, ErrInvalidOption, "Recurring.Cron"},
		{"neither", func(r *Recurring) { r.Every = 0 }, ErrInvalidOption, "set Cron or Every"},
		{"bad @every", func(r *Recurring) { r.Every, r.Cron = 0, "@every soon" }, ErrInvalidOption, "Recurring.Cron"},
		{"negative interval", func(r *Recurring) { r.Every = -time.Second }, ErrInvalidOption, "Recurring.Every"},
		{"interval under 10 ms", func(r *Recurring) { r.Every = 5 * time.Millisecond }, ErrInvalidOption, "Recurring.Every"},
		{"interval not in whole ms", func(r *Recurring) { r.Every = 10500 * time.Microsecond }, ErrInvalidOption, "Recurring.Every"},
		{"unknown time zone", func(r *Recurring) { r.TimeZone = "Mars/Olympus_Mons" }, ErrInvalidOption, "Recurring.TimeZone"},
		{"Local", func(r *Recurring) { r.TimeZone = "Local" }, ErrInvalidOption, "Recurring.TimeZone"},
		{"no name", func(r *Recurring) { r.Name = "" }, ErrInvalidOption, "Recurring.Name"},
		{"bad topic", func(r *Recurring) { r.Topic = "a/b" }, ErrInvalidTopic, "Recurring.Topic"},
		{"bad max attempts", func(r *Recurring) { r.MaxAttempts = -1 }, ErrInvalidOption, "Recurring.MaxAttempts"},
		{"bad policy", func(r *Recurring) { r.Missed = 7 }, ErrInvalidOption, "Recurring.Missed"},
		{"bad max missed", func(r *Recurring) { r.MaxMissed = -1 }, ErrInvalidOption, "Recurring.MaxMissed"},
		{"start in the year 1000", func(r *Recurring) { r.Start = time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC) }, ErrInvalidOption, "Recurring.Start"},
		{"end in the year 3000", func(r *Recurring) { r.End = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) }, ErrInvalidOption, "Recurring.End"},
		{"end before start", func(r *Recurring) { r.Start, r.End = time.Now().Add(time.Hour), time.Now() }, ErrInvalidOption, "Recurring.End"},
		{"every slot past", func(r *Recurring) { r.End = time.Now().Add(-time.Hour) }, ErrInvalidOption, "in the past"},
		{"never matches", func(r *Recurring) { r.Every, r.Cron = 0, "0 0 30 2 *" }, ErrInvalidOption, "no slot to come"},
		{"past MaxDelay", func(r *Recurring) { r.Start = time.Now().Add(48 * time.Hour) }, ErrTooFar, "MaxDelay"},
		{"payload too large", func(r *Recurring) { r.Payload = make([]byte, q.cfg.MaxPayload+1) }, ErrPayloadTooLarge, "Recurring.Payload"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.edit(&r)
			err := q.DeclareRecurring(ctx, r)
			require.ErrorIs(t, err, tc.is)
			require.ErrorContains(t, err, tc.field)
		})
	}
	require.ErrorIs(t, q.RemoveRecurring(ctx, ""), ErrInvalidOption)
	require.ErrorIs(t, q.RemoveRecurring(ctx, "none"), ErrNotFound)
}

// TestRecurringDeclare: declaring again is a no-op; a changed spec drops
// the old spec's stored slots to come and stores the new one's; Remove
// drops them all; and the listing shows the next slots and the last run.
// With -deploy.all on Sentinel and Cluster too (each recur.lua call
// touches one slot).
func TestRecurringDeclare(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) { testRecurringDeclare(t, d.bundle(t)) })
}

func testRecurringDeclare(t *testing.T, b *bundle) {
	clk := wheel.NewFakeClock(utc("2026-03-08T06:00:00Z"))
	q := b.newQueue(t, Config{Clock: clk, test: testHooks{recurClock: true}})
	ctx := b.ctx
	r := Recurring{Name: "tick", Topic: "t", Cron: "*/30 * * * *", TimeZone: "America/New_York", Payload: []byte("p")}
	newYork(t)
	require.NoError(t, q.DeclareRecurring(ctx, r))
	list, err := q.Recurrings(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	got := list[0]
	require.Equal(t, "tick", got.Name)
	// 01:30 EST, then 02:00 and 02:30 (skipped on this night) both at 03:00 EDT, once.
	require.Equal(t, []time.Time{utc("2026-03-08T06:30:00Z"), utc("2026-03-08T07:00:00Z"), utc("2026-03-08T07:30:00Z")}, utcAll(got.Next))
	require.Equal(t, utc("2026-03-08T06:30:00Z"), got.Stored.UTC(), "the next slot is stored, though past the lookahead")
	require.Nil(t, got.Last)
	pending := func() []string {
		jobs, _, err := q.List(ctx, JobFilter{Topic: "t"}, "", 100)
		require.NoError(t, err)
		var ids []string
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
		return ids
	}
	ids := pending()
	require.Len(t, ids, 1)
	require.True(t, strings.HasPrefix(ids[0], "tick@"+fmt.Sprint(utc("2026-03-08T06:30:00Z").UnixMilli())+"."), ids[0])

	// The same again: nothing changes.
	require.NoError(t, q.DeclareRecurring(ctx, r))
	require.Equal(t, ids, pending())

	// A changed spec replaces the stored slot with the new spec's.
	r.Cron = "*/20 * * * *"
	require.NoError(t, q.DeclareRecurring(ctx, r))
	again := pending()
	require.Len(t, again, 1)
	require.True(t, strings.HasPrefix(again[0], "tick@"+fmt.Sprint(utc("2026-03-08T06:20:00Z").UnixMilli())+"."), again[0])
	_, err = q.Lookup(ctx, "t", ids[0])
	require.ErrorIs(t, err, ErrNotFound, "the old spec's slot was dropped")

	// Time passes: the last slot came; the listing shows its job.
	clk.Advance(25 * time.Minute)
	require.NoError(t, q.DeclareRecurring(ctx, r)) // fills, as the loop of a started queue does
	list, err = q.Recurrings(ctx)
	require.NoError(t, err)
	require.NotNil(t, list[0].Last)
	require.Equal(t, again[0], list[0].Last.ID)
	require.Equal(t, utc("2026-03-08T06:40:00Z"), list[0].Next[0].UTC())

	require.NoError(t, q.RemoveRecurring(ctx, "tick"))
	require.ErrorIs(t, q.RemoveRecurring(ctx, "tick"), ErrNotFound)
	left := pending()
	require.Equal(t, []string{again[0]}, left, "the slot whose time came stays (it runs); the one to come is dropped")
	list, err = q.Recurrings(ctx)
	require.NoError(t, err)
	require.Empty(t, list)
}

func utcAll(ts []time.Time) []time.Time {
	out := make([]time.Time, len(ts))
	for i, t := range ts {
		out[i] = t.UTC()
	}
	return out
}

const envRecurChild = "WHEELQ_RECUR_CHILD_REDIS"

// recurConfig is the configuration of TestRecurringOncePerSlot's
// processes.
func recurConfig() Config {
	c := crashConfig()
	c.Namespace = "recur"
	return c
}

// beat is TestRecurringOncePerSlot's schedule.
var beat = Recurring{Name: "beat", Topic: "beat", Every: 100 * time.Millisecond}

// TestRecurringChild is the child process of TestRecurringOncePerSlot; it
// does nothing unless the parent set its environment. It declares the
// schedule, runs its jobs and logs each start as TestCrashChild does.
func TestRecurringChild(t *testing.T) {
	addr := os.Getenv(envRecurChild)
	if addr == "" {
		t.Skip("child process of TestRecurringOncePerSlot")
	}
	f, err := os.OpenFile(os.Getenv(envChildLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	require.NoError(t, err)
	q, err := New(redis.NewClient(&redis.Options{Addr: addr}), recurConfig())
	require.NoError(t, err)
	require.NoError(t, q.Handle("beat", fireLogger(f)))
	require.NoError(t, q.Start(context.Background()))
	require.NoError(t, q.DeclareRecurring(context.Background(), beat))
	select {} // until killed
}

// TestRecurringOncePerSlot: a schedule every 100 ms declared by three
// worker processes on one namespace, one of them killed with SIGKILL and
// another started in its place: each slot runs once (twice only if it was
// in flight in the killed process), none early, and no slot between the
// first and the removal of the schedule is missing.
func TestRecurringOncePerSlot(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	logPath := filepath.Join(t.TempDir(), "fires")
	start := func() *child {
		c := startTestChild(t, "TestRecurringChild", envRecurChild+"="+srv.Addr, envChildLog+"="+logPath)
		t.Cleanup(c.kill)
		return c
	}
	cs := []*child{start(), start(), start()}
	// Slots run before the kill (the children may be slow to start).
	eventually(t, func() bool {
		data, _ := os.ReadFile(logPath)
		return bytes.Count(data, []byte("\n")) >= 10
	}, "slots run")
	time.Sleep(500 * time.Millisecond) // pacing: slots go on running in all three
	cs[0].kill()
	killedPid := cs[0].cmd.Process.Pid
	cs[0] = start()
	time.Sleep(2500 * time.Millisecond) // pacing: the slots go on through the take-over and the new child's start
	q, err := New(srv.Client(t), recurConfig())
	require.NoError(t, err)
	removed := time.Now()
	require.NoError(t, q.RemoveRecurring(context.Background(), "beat"))
	// Every slot stored before the removal runs (none may be missing).
	eventually(t, func() bool {
		cs, err := q.Counts(context.Background())
		var pending int64
		for _, c := range cs {
			pending += c.Pending
		}
		return err == nil && pending == 0
	}, "the slots stored run")
	time.Sleep(time.Until(removed.Add(time.Second))) // a slot stored after the removal would run now
	for _, c := range cs {
		c.kill()
	}
	fires := readFires(t, logPath)
	var dues []int64
	for id, fs := range fires {
		if len(fs) > 1 {
			require.Equal(t, killedPid, fs[0].proc, "slot %s ran twice, the first time not in the killed process", id)
		}
		for _, f := range fs {
			require.GreaterOrEqual(t, f.startUs, f.dueUs, "slot %s ran early", id)
		}
		dues = append(dues, fs[0].dueUs)
	}
	slices.Sort(dues)
	require.GreaterOrEqual(t, len(dues), 30, "slots run")
	for i := 1; i < len(dues); i++ {
		require.Equal(t, int64(100_000), dues[i]-dues[i-1], "a slot is missing before %v", time.UnixMicro(dues[i]))
	}
	require.Less(t, time.UnixMicro(dues[len(dues)-1]).Sub(removed), time.Second, "the last slot came after the removal")
	t.Logf("%d slots ran once each over %v, through a kill -9", len(dues), time.Duration(dues[len(dues)-1]-dues[0])*time.Microsecond)
}

// TestRecurringClockAhead: a process whose clock is an hour ahead (a
// wrong or stepped clock) declares a schedule another process stores:
// the slots' times come from Redis's clock, so it neither takes the
// hour's slots for missed ones (skipping them for every process) nor
// stores slots an hour early. Seen failing before recurNow: the
// watermark jumped an hour ahead.
func TestRecurringClockAhead(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	right := b.newQueue(t, Config{})
	ahead := b.newQueue(t, Config{Clock: wheel.NewFakeClock(time.Now().Add(time.Hour))})
	r := Recurring{Name: "beat", Topic: "t", Every: time.Second}
	require.NoError(t, right.DeclareRecurring(b.ctx, r))
	require.NoError(t, ahead.DeclareRecurring(b.ctx, r))
	list, err := right.Recurrings(b.ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.WithinDuration(t, time.Now().Add(RecurringLookahead), list[0].Stored, 2*time.Second,
		"the latest slot stored is the lookahead's, by Redis's clock")
	jobs, _, err := right.List(b.ctx, JobFilter{Topic: "t"}, "", 100)
	require.NoError(t, err)
	require.NotEmpty(t, jobs)
	for _, j := range jobs {
		require.Less(t, time.Until(j.Due), RecurringLookahead+2*time.Second, "a slot stored an hour early: %s", j.ID)
	}
}

// TestRecurringOwnerDiesOnAnotherHost: the owner of a schedule's
// partition dies on another host (its own lock dir: its leases must
// lapse before anyone takes the partition over) with a LeaseTTL above
// RecurringLookahead; the slots due meanwhile were stored ahead, and run
// once another process takes over, none counted missed. (Found by an
// audit helper with LeaseTTL 20 s: 8 slots in a row never ran, with the
// rest of the team up, since the lookahead was 10 s whatever LeaseTTL.)
func TestRecurringOwnerDiesOnAnotherHost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background(), ns: "ownerdies"}
	const lease = 18 * time.Second // a lease renewed every 6 s lapses 12-18 s after the crash: past the 10 s lookahead
	var mu sync.Mutex
	ran := map[int64]int{} // slot (unix ms) -> runs
	start := func() *Queue {
		q := b.newQueue(t, Config{Partitions: 2, LeaseTTL: lease, LockDir: t.TempDir(), Testing: crashpoint.New(nil, nil)})
		require.NoError(t, q.Handle("beat", HandlerFunc(func(_ context.Context, j *Job) error {
			s, _, _ := strings.Cut(strings.TrimPrefix(j.ID, "beat@"), ".")
			ms, _ := strconv.ParseInt(s, 10, 64)
			mu.Lock()
			ran[ms]++
			mu.Unlock()
			return nil
		})))
		require.NoError(t, q.Start(b.ctx))
		<-q.Ready()
		return q
	}
	a := start()
	require.NoError(t, a.DeclareRecurring(b.ctx, Recurring{Name: "beat", Topic: "beat", Every: time.Second}))
	c := start()
	part := a.store.PartitionOf("beat")
	require.Eventually(t, func() bool { return len(a.Owned()) == 1 && len(c.Owned()) == 1 }, wait, 50*time.Millisecond)
	time.Sleep(2 * time.Second)
	owner, other := a, c
	if !slices.Contains(a.Owned(), part) {
		owner, other = c, a
	}
	owner.crash()
	require.Eventually(t, func() bool { return slices.Contains(other.Owned(), part) }, 3*lease, 50*time.Millisecond)
	time.Sleep(3 * time.Second)
	require.NoError(t, other.RemoveRecurring(b.ctx, "beat"))
	time.Sleep(time.Second) // the runs under way end
	mu.Lock()
	defer mu.Unlock()
	slots := slices.Sorted(maps.Keys(ran))
	var gaps []string
	for i := 1; i < len(slots); i++ {
		if d := slots[i] - slots[i-1]; d != 1000 {
			gaps = append(gaps, fmt.Sprintf("%d slots missing before %s", d/1000-1, time.UnixMilli(slots[i]).Format("15:04:05")))
		}
	}
	require.Empty(t, gaps, "slots never run while a process was up (%d slots ran)", len(slots))
	for s, n := range ran {
		require.Equal(t, 1, n, "slot %d ran %d times", s, n)
	}
}

// TestRecurringRedeclareRanSlot: a slot whose job already ran (early, by
// RunNow) is not stored again when its schedule is re-declared changed
// and the new spec has the same slot: each slot of a schedule runs once.
// A slot's job cancelled before it ran is likewise not brought back.
func TestRecurringRedeclareRanSlot(t *testing.T) {
	t.Parallel()
	b, q, runs := slotRuns(t, "rerun")
	start := time.Now().Add(4 * time.Second).Truncate(time.Millisecond)
	slotOf := func(s time.Time) string { return "beat@" + strconv.FormatInt(s.UnixMilli(), 10) }
	r := Recurring{Name: "beat", Topic: "beat", Every: time.Hour, Start: start, Payload: []byte("v1")}
	r2 := r
	r2.Name, r2.Start = "skip", start.Add(time.Millisecond)
	for _, r := range []Recurring{r, r2} {
		require.NoError(t, q.DeclareRecurring(b.ctx, r))
	}
	stored := func(name string) string { return storedSlot(t, b, q, "beat", name+"@") }
	id := stored("beat")
	require.True(t, strings.HasPrefix(id, slotOf(start)+"."), id)
	require.NoError(t, q.RunNow(b.ctx, "beat", id))
	require.Eventually(t, func() bool { return runs(slotOf(start)) == 1 }, wait, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		info, err := q.Lookup(b.ctx, "beat", id)
		return err == nil && info.State == StateDone
	}, wait, 10*time.Millisecond, "the run settled")
	skip := stored("skip")
	require.NotEmpty(t, skip)
	require.NoError(t, q.Cancel(b.ctx, "beat", skip))

	// Changed, with the same slots: the one that ran, and the one cancelled, stay done.
	r.Payload, r2.Payload = []byte("v2"), []byte("v2")
	for _, r := range []Recurring{r, r2} {
		require.NoError(t, q.DeclareRecurring(b.ctx, r))
	}
	require.Empty(t, stored("beat"), "the slot that ran was stored again")
	require.Empty(t, stored("skip"), "the slot cancelled was stored again")
	time.Sleep(time.Until(start.Add(time.Second)))
	require.Equal(t, 1, runs(slotOf(start)), "the slot ran again at its time")
	require.Zero(t, runs(slotOf(r2.Start)), "the cancelled slot ran")
	list, err := q.Recurrings(b.ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	for _, info := range list {
		want := start.Add(time.Hour).Add(map[string]time.Duration{"beat": 0, "skip": time.Millisecond}[info.Name])
		require.True(t, want.Equal(info.Next[0]), "%s: the next slot is %s, want the one after, %s", info.Name, info.Next[0], want)
		// Last is the slot's own job, as it became (RecurringInfo.Last):
		// the early run, the cancellation.
		require.NotNil(t, info.Last, info.Name)
		require.Equal(t, map[string]JobState{"beat": StateDone, "skip": StateCancelled}[info.Name], info.Last.State, info.Name)
		require.Equal(t, map[string]string{"beat": id, "skip": skip}[info.Name], info.Last.ID, info.Name)
	}
}

// TestRecurringIf: DeclareRecurringIf and RemoveRecurringIf call their
// check with the schedule as stored, and the check and the change are one
// step: a schedule declared by another caller while the check runs (here,
// from inside it) is read again and checked again, never replaced or
// removed unchecked.
func TestRecurringIf(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background(), ns: "recif"}
	q := b.newQueue(t, Config{})
	other := b.newQueue(t, Config{})
	errMine := errors.New("not mine")
	mine := func(topic string) func(*Recurring) error {
		return func(stored *Recurring) error {
			if stored != nil && stored.Topic != topic {
				return errMine
			}
			return nil
		}
	}
	ra := Recurring{Name: "beat", Topic: "a", Every: time.Hour}
	rb := Recurring{Name: "beat", Topic: "b", Every: time.Hour}
	topicOf := func() string {
		list, err := q.Recurrings(b.ctx)
		require.NoError(t, err)
		if len(list) == 0 {
			return ""
		}
		return list[0].Topic
	}
	require.ErrorIs(t, q.DeclareRecurringIf(b.ctx, ra, nil), ErrInvalidOption)
	require.ErrorIs(t, q.RemoveRecurringIf(b.ctx, "beat", nil), ErrInvalidOption)

	// b's owner declares it while a's declaration checks: a's check runs
	// again, sees b's, and refuses.
	var seen []string
	err := q.DeclareRecurringIf(b.ctx, ra, func(stored *Recurring) error {
		seen = append(seen, fmt.Sprint(stored != nil && stored.Topic == "b"))
		if stored == nil {
			require.NoError(t, other.DeclareRecurring(b.ctx, rb))
		}
		return mine("a")(stored)
	})
	require.ErrorIs(t, err, errMine)
	require.Equal(t, []string{"false", "true"}, seen, "checked again after the race")
	require.Equal(t, "b", topicOf())

	// A removal checked against b's schedule while it becomes a's is
	// checked again: b's owner may not remove a's.
	seen = nil
	err = q.RemoveRecurringIf(b.ctx, "beat", func(stored *Recurring) error {
		seen = append(seen, stored.Topic)
		if stored.Topic == "b" {
			require.NoError(t, other.DeclareRecurring(b.ctx, ra))
		}
		return mine("b")(stored)
	})
	require.ErrorIs(t, err, errMine)
	require.Equal(t, []string{"b", "a"}, seen)
	require.Equal(t, "a", topicOf())

	// Allowed: done.
	ra.Every = 2 * time.Hour
	require.NoError(t, q.DeclareRecurringIf(b.ctx, ra, mine("a")))
	require.NoError(t, q.RemoveRecurringIf(b.ctx, "beat", mine("a")))
	require.Empty(t, topicOf())
	require.ErrorIs(t, q.RemoveRecurringIf(b.ctx, "beat", mine("a")), ErrNotFound)
}

// TestRecurringRedeclareTwice: a slot that ran early stays done through
// two changes of its schedule: changed to a spec whose first slot comes
// after it (whose fill moves the watermark past it), then back to one
// that has it. (Found by a review helper: the second change stored it
// again, and it ran twice.)
func TestRecurringRedeclareTwice(t *testing.T) {
	t.Parallel()
	b, q, runs := slotRuns(t, "rerun2")
	start := time.Now().Add(4 * time.Second).Truncate(time.Millisecond)
	slot := "beat@" + strconv.FormatInt(start.UnixMilli(), 10)
	stored := func() []string {
		jobs, _, err := q.List(b.ctx, JobFilter{Topic: "beat"}, "", 100)
		require.NoError(t, err)
		var ids []string
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
		return ids
	}
	a := Recurring{Name: "beat", Topic: "beat", Every: time.Hour, Start: start, Payload: []byte("v1")}
	require.NoError(t, q.DeclareRecurring(b.ctx, a))
	ids := stored()
	require.Len(t, ids, 1)
	require.NoError(t, q.RunNow(b.ctx, "beat", ids[0]))
	require.Eventually(t, func() bool { return runs(slot) == 1 && len(stored()) == 0 }, wait, 10*time.Millisecond)

	later := a
	later.Start, later.Payload = start.Add(2*time.Second), []byte("b")
	require.NoError(t, q.DeclareRecurring(b.ctx, later))
	a.Payload = []byte("v2")
	require.NoError(t, q.DeclareRecurring(b.ctx, a))
	require.Empty(t, stored(), "the slot that ran was stored again")
	time.Sleep(time.Until(start.Add(time.Second)))
	require.Equal(t, 1, runs(slot), "the slot ran again at its time")
}

// slotRuns starts a queue on a Redis of its own whose handler of topic
// "beat" counts the runs of each slot: runs(slot) says how many jobs
// whose ID up to its "." is slot ran.
func slotRuns(t *testing.T, ns string) (*bundle, *Queue, func(slot string) int) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background(), ns: ns}
	var mu sync.Mutex
	ran := map[string]int{}
	q := b.newQueue(t, Config{})
	require.NoError(t, q.Handle("beat", HandlerFunc(func(_ context.Context, j *Job) error {
		slot, _, _ := strings.Cut(j.ID, ".")
		mu.Lock()
		ran[slot]++
		mu.Unlock()
		return nil
	})))
	require.NoError(t, q.Start(b.ctx))
	<-q.Ready()
	return b, q, func(slot string) int {
		mu.Lock()
		defer mu.Unlock()
		return ran[slot]
	}
}

// contendedStore is the engine's store with another caller changing a
// recurring schedule right after each read of it (RecurOf), before the
// reader's compare-and-set: the race DeclareRecurring and RemoveRecurring
// retry, lost every time while contend is set.
type contendedStore struct {
	engineStore
	contend bool                    // the test goroutine's only
	change  func(name string) error // another caller's change of the schedule
	reads   int                     // RecurOf calls while contend was set
}

func (s *contendedStore) RecurOf(ctx context.Context, p int, name string) (persist.RecurState, error) {
	st, err := s.engineStore.RecurOf(ctx, p, name)
	if err == nil && s.contend {
		s.reads++
		if err := s.change(name); err != nil {
			return st, fmt.Errorf("contendedStore: the other caller's change: %w", err)
		}
	}
	return st, err
}

// TestRecurringContended: a declaration or removal that loses the race
// for the schedule at each of its tries (another caller changes it
// between each read and the change) gives up with ErrContended, which
// says the caller may retry, having changed nothing; once the others stop,
// the same call goes through. (Seen failing before ErrContended: the
// error wrapped only the store's unexported ErrSpecChanged, which the
// server answered 500 internal.)
func TestRecurringContended(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background(), ns: "contend"}
	other := b.newQueue(t, Config{})
	r := Recurring{Name: "beat", Topic: "t", Every: time.Hour}
	var cs *contendedStore
	q := b.newQueue(t, Config{test: testHooks{wrapStore: func(s engineStore) engineStore {
		n := 0
		cs = &contendedStore{engineStore: s, change: func(string) error {
			n++
			o := r
			o.Payload = []byte("other " + strconv.Itoa(n))
			return other.DeclareRecurring(b.ctx, o)
		}}
		return cs
	}}})
	payload := func() string {
		list, err := other.Recurrings(b.ctx)
		require.NoError(t, err)
		if len(list) == 0 {
			return ""
		}
		return string(list[0].Payload)
	}
	mine := r
	mine.Payload = []byte("mine")
	for name, call := range map[string]func() error{
		"DeclareRecurring":   func() error { return q.DeclareRecurring(b.ctx, mine) },
		"DeclareRecurringIf": func() error { return q.DeclareRecurringIf(b.ctx, mine, func(*Recurring) error { return nil }) },
		"RemoveRecurring":    func() error { return q.RemoveRecurring(b.ctx, "beat") },
		"RemoveRecurringIf":  func() error { return q.RemoveRecurringIf(b.ctx, "beat", func(*Recurring) error { return nil }) },
	} {
		if strings.HasPrefix(name, "Remove") && payload() == "" {
			require.NoError(t, other.DeclareRecurring(b.ctx, r))
		}
		cs.contend, cs.reads = true, 0
		err := call()
		require.ErrorIs(t, err, ErrContended, "%s", name)
		require.Equal(t, 5, cs.reads, "%s: tries", name)
		require.True(t, strings.HasPrefix(payload(), "other "), "%s: the other caller's schedule stays: %q", name, payload())
		cs.contend = false
	}
	require.NoError(t, q.DeclareRecurring(b.ctx, mine))
	require.Equal(t, "mine", payload())
	require.NoError(t, q.RemoveRecurring(b.ctx, "beat"))
	require.Empty(t, payload())
}

// lastOf returns the listing's Last of schedule name (nil if none).
func lastOf(t *testing.T, q *Queue, name string) *JobInfo {
	t.Helper()
	list, err := q.Recurrings(context.Background())
	require.NoError(t, err)
	for _, ri := range list {
		if ri.Name == name {
			return ri.Last
		}
	}
	t.Fatalf("no schedule %q listed", name)
	return nil
}

// TestRecurringLastOfFrequent: a schedule with more slots in the
// lookahead than the recent-slot list keeps (8) still lists the job of
// its latest slot whose time came. (Seen failing before the listing
// looked at the schedule's own slots: Last was nil for good, the slots
// listed as recent being all still to come.)
func TestRecurringLastOfFrequent(t *testing.T) {
	t.Parallel()
	b, q, runs := slotRuns(t, "lastfreq")
	start := time.Now().Add(time.Second).Truncate(time.Millisecond)
	require.NoError(t, q.DeclareRecurring(b.ctx, Recurring{Name: "beat", Topic: "beat", Every: time.Second, Start: start}))
	second := "beat@" + strconv.FormatInt(start.Add(time.Second).UnixMilli(), 10)
	require.Eventually(t, func() bool { return runs(second) == 1 }, wait, 10*time.Millisecond, "slots run")
	require.Eventually(t, func() bool {
		last := lastOf(t, q, "beat")
		return last != nil && last.State == StateDone && last.ID >= second
	}, 3*time.Second, 50*time.Millisecond, "Last: %+v", lastOf(t, q, "beat"))
}

// TestRecurringLastAfterDrop: once the time has come of a slot that a
// redeclaration dropped before it ran, the listing's Last is nil (the
// latest slot's job never was), not the older slot that did run: only
// the latest slot is looked up.
func TestRecurringLastAfterDrop(t *testing.T) {
	t.Parallel()
	b, q, runs := slotRuns(t, "lastdrop")
	start := time.Now().Add(time.Second).Truncate(time.Millisecond)
	r := Recurring{Name: "beat", Topic: "beat", Every: 4 * time.Second, Start: start}
	require.NoError(t, q.DeclareRecurring(b.ctx, r))
	first := "beat@" + strconv.FormatInt(start.UnixMilli(), 10)
	require.Eventually(t, func() bool { return runs(first) == 1 }, wait, 10*time.Millisecond, "the first slot runs")
	last := lastOf(t, q, "beat")
	require.NotNil(t, last, "the first slot's job is the latest")
	require.True(t, strings.HasPrefix(last.ID, first+"."), last.ID)
	r.Start = start.Add(6 * time.Second) // its slot at start+4s is dropped
	require.NoError(t, q.DeclareRecurring(b.ctx, r))
	time.Sleep(time.Until(start.Add(4500 * time.Millisecond)))
	require.Nil(t, lastOf(t, q, "beat"), "the latest slot's job never was")
}

// TestRecurringLastNotAnOlderDeadSlot: when the latest slot's job ran
// and is forgotten (no run history here), Last is nil, not an older
// slot's job still in the dead set. (Seen failing on a listing that went
// on past slots whose job was not known: Last stayed the first slot's
// dead job.)
func TestRecurringLastNotAnOlderDeadSlot(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t)
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background(), ns: "lastdead"}
	q := b.newQueue(t, Config{History: HistoryRetention{Count: -1}})
	var mu sync.Mutex
	ran := map[string]bool{}
	start := time.Now().Add(time.Second).Truncate(time.Millisecond)
	first := "beat@" + strconv.FormatInt(start.UnixMilli(), 10)
	second := "beat@" + strconv.FormatInt(start.Add(2*time.Second).UnixMilli(), 10)
	require.NoError(t, q.Handle("beat", HandlerFunc(func(_ context.Context, j *Job) error {
		slot, _, _ := strings.Cut(j.ID, ".")
		mu.Lock()
		ran[slot] = true
		mu.Unlock()
		if slot == first {
			return Permanent(errors.New("the first slot fails"))
		}
		return nil
	})))
	require.NoError(t, q.Start(b.ctx))
	<-q.Ready()
	// Two slots only: no third comes while Last is looked at.
	require.NoError(t, q.DeclareRecurring(b.ctx, Recurring{Name: "beat", Topic: "beat", Every: 2 * time.Second,
		Start: start, End: start.Add(3 * time.Second)}))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ran[second]
	}, wait, 10*time.Millisecond, "the second slot runs")
	// Once the second slot's run is over (and forgotten), no slot's job
	// is known but the first's, dead: Last is nil, not that.
	require.Eventually(t, func() bool { return lastOf(t, q, "beat") == nil },
		wait, 10*time.Millisecond, "Last once the later slot's run is forgotten: %+v", lastOf(t, q, "beat"))
	dead, err := q.DeadJobs(b.ctx, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1, "the first slot is dead")
}

// storedSlot returns the id of a stored job of topic whose id starts with
// prefix ("" if none), among the topic's first 100.
func storedSlot(t *testing.T, b *bundle, q *Queue, topic, prefix string) string {
	t.Helper()
	jobs, _, err := q.List(b.ctx, JobFilter{Topic: topic}, "", 100)
	require.NoError(t, err)
	for _, j := range jobs {
		if strings.HasPrefix(j.ID, prefix) {
			return j.ID
		}
	}
	return ""
}
