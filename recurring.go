package wheelq

// Recurring schedules: a named cron expression or interval that makes a
// job at each of its slots. The schedule is stored in Redis, in the
// partition its slot jobs are steered to; a slot's job is stored ahead of
// its time by recur.lua, which moves the schedule's watermark past it in
// the same call, so that each slot's job is stored once, whichever
// processes fill it, however often they restart. The job then fires from
// the wheel like any other.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/wheelq/wheelq/internal/errs"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/wheel"
)

// MissedPolicy says what a recurring schedule does with the slots that
// came while no process stored their jobs (every process was down longer
// than the lookahead, RecurringLookahead).
type MissedPolicy int

// Missed-slot policies.
const (
	// MissedLatest runs the latest missed slot once, at once. The default.
	MissedLatest MissedPolicy = iota
	// MissedSkip runs none of them.
	MissedSkip
	// MissedEach runs each of them, at once, oldest first: the latest
	// MaxMissed of them.
	MissedEach
)

// String returns "latest", "skip" or "each".
func (m MissedPolicy) String() string {
	switch m {
	case MissedLatest:
		return "latest"
	case MissedSkip:
		return "skip"
	case MissedEach:
		return "each"
	}
	return "MissedPolicy(" + strconv.Itoa(int(m)) + ")"
}

// RecurringLookahead is how far ahead of its time a recurring schedule's
// slot job is stored (and at least the next slot's is, within MaxDelay);
// longer with a LeaseTTL above it: LeaseTTL and 2 s, up to a minute, so
// that the slots due while a dead owner's partition waits for its lease
// to lapse are stored already and run when another process takes it over.
// Slot jobs already stored when every process went down run late when one
// comes back, as any job does; the MissedPolicy applies to the slots after
// them.
const RecurringLookahead = 10 * time.Second

// maxRecurLookahead bounds the lookahead a long LeaseTTL asks for.
const maxRecurLookahead = time.Minute

// recurLookahead is how far ahead this queue stores slots (see
// RecurringLookahead).
func (q *Queue) recurLookahead() time.Duration {
	return min(max(RecurringLookahead, q.cfg.LeaseTTL+2*recurFillEvery), maxRecurLookahead)
}

// recurFillEvery is how often a started queue stores the coming slots of
// the schedules of its partitions.
const recurFillEvery = time.Second

// maxRecurFill bounds the slot jobs stored in one call for one schedule:
// RecurringLookahead's worth of the shortest interval (minEvery).
const maxRecurFill = int(RecurringLookahead / minEvery)

// minEvery is the shortest interval a schedule may have.
const minEvery = 10 * time.Millisecond

// Recurring is a schedule that makes a job at each of its slots, the
// times given by Cron or Every.
//
// Cron fields are local wall-clock times in TimeZone: each local time
// the expression names runs once. A local time that a daylight-saving
// jump forward skips runs at the first instant after the gap (02:30 on a
// night the clocks go from 02:00 to 03:00 runs at 03:00); a local time
// that a jump back repeats runs at its first occurrence only. Every is an
// absolute interval, whatever the time zone: its slots are Start + k ×
// Every (the Unix epoch + k × Every without a Start).
type Recurring struct {
	// Name names the schedule in its namespace: 1 to 200 bytes of UTF-8
	// without control characters. Declaring a name again with the same
	// fields does nothing; with other fields, it replaces the schedule.
	Name string
	// Cron is a cron expression: five fields (minute, hour, day of month,
	// month, day of week), or six with seconds first; or a descriptor:
	// @yearly, @monthly, @weekly, @daily, @hourly, or @every with a Go
	// duration ("@every 90s", which sets Every). Set Cron or Every.
	Cron string
	// Every is a fixed interval: a whole number of milliseconds, at
	// least 10.
	Every time.Duration
	// TimeZone is the IANA name of Cron's time zone ("Europe/Paris");
	// default UTC. It needs the system's time zone database (or a
	// program that imports time/tzdata).
	TimeZone string
	// Topic, Payload, Headers and MaxAttempts are those of each slot's
	// job, as Schedule takes them (MaxAttempts 0: Config.MaxAttempts).
	Topic       string
	Payload     []byte
	Headers     map[string]string
	MaxAttempts int
	// Start and End bound the slots (both optional; End inclusive).
	Start, End time.Time
	// Missed is what to do with missed slots. MaxMissed bounds MissedEach
	// (default 100, at most 1,000).
	Missed    MissedPolicy
	MaxMissed int
}

// RecurringInfo is a stored schedule, as Recurrings lists it.
type RecurringInfo struct {
	Recurring
	// Next holds the schedule's next slots after now (up to 3; none once
	// End has passed).
	Next []time.Time
	// Stored is the latest slot whose job was stored (zero: none yet).
	Stored time.Time
	// Last is the job of the latest slot whose time has come and whose
	// job is known, as Lookup gives it (its state and run history), or
	// nil if there was none or none is known any more (finished longer
	// ago than the run history keeps). It is the slot's own job, whatever
	// became of it: a slot whose job was cancelled shows StateCancelled,
	// and one whose job ran early (RunNow) shows that run, also when a
	// redeclaration of the schedule marked the slot done so as not to
	// store it again. That is intended: the listing says what happened to
	// the latest slot, which a run of an older slot would hide. Only the
	// latest slot is looked at: if its job never was (dropped by a
	// redeclaration before it ran, or skipped by the missed-slot policy),
	// Last is nil until a later slot's time comes. Slots are looked up
	// under the current Topic: after a change of Topic, the slots stored
	// under the old one are not known.
	Last *JobInfo
}

// recurSpec is a Recurring as stored: canonical JSON, so that declaring
// the same schedule again gives the same bytes.
type recurSpec struct {
	Name        string            `json:"name"`
	Cron        string            `json:"cron,omitempty"`
	EveryMs     int64             `json:"every_ms,omitempty"`
	TimeZone    string            `json:"tz,omitempty"`
	Topic       string            `json:"topic"`
	Payload     []byte            `json:"payload,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	MaxAttempts int               `json:"max_attempts,omitempty"`
	StartUs     int64             `json:"start_us,omitempty"`
	EndUs       int64             `json:"end_us,omitempty"`
	Missed      MissedPolicy      `json:"missed,omitempty"`
	MaxMissed   int               `json:"max_missed,omitempty"`
}

// plan is a checked schedule: it computes slots.
type plan struct {
	r        Recurring
	loc      *time.Location
	cron     *cron.SpecSchedule // in naive local time (fields read in UTC)
	every    time.Duration
	start    time.Time // zero: none
	end      time.Time // zero: none
	spec     string    // the recurSpec's JSON
	part     int       // the partition of its slot jobs and of its state
	maxMiss  int
	maxAttem int
}

// cronParser takes five fields, or six with seconds, and descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// compile checks r and returns its plan. Its errors wrap ErrInvalidOption
// (or ErrInvalidTopic, ErrPayloadTooLarge, ErrTooFar) and name the field.
func (q *Queue) compile(r Recurring, now time.Time) (*plan, error) {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: Recurring.%s: %s", ErrInvalidOption, field, fmt.Sprintf(format, a...))
	}
	if r.Name == "" || len(r.Name) > 200 || !printable(r.Name) {
		return nil, bad("Name", "%q: want 1 to 200 bytes of UTF-8 without control characters", r.Name)
	}
	if err := q.runsTopic(r.Topic); err != nil {
		return nil, fmt.Errorf("Recurring.Topic: %w", err)
	}
	if len(r.Payload) > q.cfg.MaxPayload {
		return nil, fmt.Errorf("%w: Recurring.Payload: %d bytes, at most %d", ErrPayloadTooLarge, len(r.Payload), q.cfg.MaxPayload)
	}
	if len(r.Headers) > 0 {
		if err := checkHeaders(r.Headers); err != nil {
			return nil, fmt.Errorf("Recurring.Headers: %w", err)
		}
		r.Headers = maps.Clone(r.Headers)
	}
	p := &plan{r: r, maxAttem: q.cfg.MaxAttempts}
	if r.MaxAttempts != 0 {
		if r.MaxAttempts < 1 || r.MaxAttempts > maxAttemptsLimit {
			return nil, bad("MaxAttempts", "%d: want 1 to 2^31-1 (0: the default)", r.MaxAttempts)
		}
		p.maxAttem = r.MaxAttempts
	}
	expr := strings.TrimSpace(r.Cron)
	if d, ok := strings.CutPrefix(expr, "@every "); ok {
		if r.Every != 0 {
			return nil, bad("Cron", "%q and Every %v: set one", r.Cron, r.Every)
		}
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return nil, bad("Cron", "%q: %v", r.Cron, err)
		}
		r.Every, expr, r.Cron = every, "", ""
		p.r = r
	}
	switch {
	case expr == "" && r.Every == 0:
		return nil, bad("Cron", "set Cron or Every")
	case expr != "" && r.Every != 0:
		return nil, bad("Cron", "%q and Every %v: set one", r.Cron, r.Every)
	case r.Every != 0:
		if r.Every < minEvery || r.Every%time.Millisecond != 0 {
			return nil, bad("Every", "%v: want a whole number of milliseconds, at least %v", r.Every, minEvery)
		}
		p.every = r.Every
	default:
		if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
			return nil, bad("Cron", "%q: set the time zone in TimeZone", r.Cron)
		}
		c, err := parseCron(expr)
		if err != nil {
			return nil, bad("Cron", "%q: %v", r.Cron, err)
		}
		p.cron = c
	}
	p.loc = time.UTC
	if r.TimeZone != "" {
		loc, err := time.LoadLocation(r.TimeZone)
		if err != nil || r.TimeZone == "Local" {
			return nil, bad("TimeZone", "%q: not an IANA time zone name (%v)", r.TimeZone, err)
		}
		p.loc = loc
	}
	switch {
	case r.Missed < MissedLatest || r.Missed > MissedEach:
		return nil, bad("Missed", "%v", r.Missed)
	case r.MaxMissed < 0 || r.MaxMissed > 1000:
		return nil, bad("MaxMissed", "%d: want 0 to 1000 (0: 100)", r.MaxMissed)
	case !r.Start.IsZero() && !within(r.Start, now, maxRecurSpan):
		return nil, bad("Start", "%v: want a time within 100 years of now", r.Start)
	case !r.End.IsZero() && !within(r.End, now, maxRecurSpan):
		return nil, bad("End", "%v: want a time within 100 years of now", r.End)
	case !r.Start.IsZero() && !r.End.IsZero() && r.End.Before(r.Start):
		return nil, bad("End", "%v is before Start %v", r.End, r.Start)
	}
	p.maxMiss = cmp.Or(r.MaxMissed, defaultMaxMissed)
	p.start, p.end = r.Start, r.End
	first := p.next(maxTime(now, p.start.Add(-time.Nanosecond)))
	switch {
	case first.IsZero() && !p.end.IsZero() && !p.end.After(now):
		return nil, bad("End", "%v has passed: every slot lies in the past", r.End)
	case first.IsZero():
		return nil, bad("Cron", "%q: no slot to come", r.Cron)
	case first.Sub(now) > q.cfg.MaxDelay:
		return nil, fmt.Errorf("%w: Recurring: its first slot (%v) is %v ahead, at most %v (MaxDelay)", ErrTooFar, first, first.Sub(now).Round(time.Second), q.cfg.MaxDelay)
	}
	rs := recurSpec{Name: r.Name, Cron: expr, EveryMs: r.Every.Milliseconds(), TimeZone: r.TimeZone, Topic: r.Topic,
		Payload: r.Payload, Headers: r.Headers, MaxAttempts: r.MaxAttempts, Missed: r.Missed, MaxMissed: r.MaxMissed}
	if !r.Start.IsZero() {
		rs.StartUs = r.Start.UnixMicro()
	}
	if !r.End.IsZero() {
		rs.EndUs = r.End.UnixMicro()
	}
	b, err := json.Marshal(rs)
	if err != nil {
		return nil, bad("Headers", "%v", err)
	}
	p.spec = string(b)
	p.part = q.store.PartitionOf(r.Name)
	return p, nil
}

// maxRecurSpan bounds how far from now a schedule's Start and End may
// lie: the slots are reckoned in time.Duration from them, which saturates
// past 292 years (a Start in the year 1000 had every slot reckoned wrong
// and none ever stored).
const maxRecurSpan = 100 * 365 * 24 * time.Hour

// within says whether t lies within span of now, either side.
func within(t, now time.Time, span time.Duration) bool {
	return !t.Before(now.Add(-span)) && !t.After(now.Add(span))
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// decodePlan compiles a stored spec again (for the fill, the listing and
// a replaced schedule's old slots). A stored spec that no longer compiles
// (a time zone this host does not know) is an error.
func (q *Queue) decodePlan(spec string) (*plan, error) {
	r, rs, err := decodeSpec(spec)
	if err != nil {
		return nil, err
	}
	p := &plan{r: r, loc: time.UTC, every: r.Every, start: r.Start, end: r.End, spec: spec,
		maxMiss: cmp.Or(r.MaxMissed, defaultMaxMissed), maxAttem: cmp.Or(r.MaxAttempts, q.cfg.MaxAttempts)}
	if r.TimeZone != "" {
		loc, err := time.LoadLocation(r.TimeZone)
		if err != nil {
			return nil, fmt.Errorf("wheelq: recurring %q: time zone: %w", r.Name, err)
		}
		p.loc = loc
	}
	if rs.Cron != "" {
		c, err := parseCron(rs.Cron)
		if err != nil {
			return nil, fmt.Errorf("%w: recurring %q: %q: %v", persist.ErrCorrupt, r.Name, rs.Cron, err)
		}
		p.cron = c
	} else if p.every <= 0 {
		return nil, fmt.Errorf("%w: recurring %q: no cron and no interval", persist.ErrCorrupt, r.Name)
	}
	p.part = q.store.PartitionOf(r.Name)
	return p, nil
}

// decodeSpec reads a stored spec's fields.
func decodeSpec(spec string) (Recurring, recurSpec, error) {
	var rs recurSpec
	if err := json.Unmarshal([]byte(spec), &rs); err != nil {
		return Recurring{}, rs, fmt.Errorf("%w: recurring spec: %v", persist.ErrCorrupt, err)
	}
	r := Recurring{Name: rs.Name, Cron: rs.Cron, Every: time.Duration(rs.EveryMs) * time.Millisecond, TimeZone: rs.TimeZone,
		Topic: rs.Topic, Payload: rs.Payload, Headers: rs.Headers, MaxAttempts: rs.MaxAttempts, Missed: rs.Missed, MaxMissed: rs.MaxMissed}
	if rs.StartUs != 0 {
		r.Start = time.UnixMicro(rs.StartUs).UTC()
	}
	if rs.EndUs != 0 {
		r.End = time.UnixMicro(rs.EndUs).UTC()
	}
	return r, rs, nil
}

// checkStored calls check (if any) with the schedule stored as spec (nil
// for none), for DeclareRecurringIf and RemoveRecurringIf.
func checkStored(check func(stored *Recurring) error, spec string) error {
	if check == nil {
		return nil
	}
	if spec == "" {
		return check(nil)
	}
	r, _, err := decodeSpec(spec)
	if err != nil {
		return err
	}
	return check(&r)
}

// parseCron parses a cron expression into a schedule that runs on the
// naive local time (its fields read in UTC: see nextCron).
func parseCron(expr string) (*cron.SpecSchedule, error) {
	s, err := cronParser.Parse(expr)
	if err != nil {
		return nil, err
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, errors.New("not a calendar expression")
	}
	c := *spec
	c.Location = time.UTC
	return &c, nil
}

// defaultMaxMissed is Recurring.MaxMissed's default.
const defaultMaxMissed = 100

// next returns the schedule's first slot after t, or the zero time if
// there is none (past End; a cron expression that matches nothing within
// five years).
func (p *plan) next(t time.Time) time.Time {
	var s time.Time
	if p.every > 0 {
		anchor := time.Unix(0, 0)
		if !p.start.IsZero() {
			anchor = p.start
		}
		if t.Before(anchor) {
			s = anchor
		} else {
			k := t.Sub(anchor) / p.every // t - anchor < 292 years
			s = anchor.Add((k + 1) * p.every)
		}
	} else {
		s = p.nextCron(t)
	}
	if s.IsZero() || (!p.end.IsZero() && s.After(p.end)) {
		return time.Time{}
	}
	if !p.start.IsZero() && s.Before(p.start) {
		return p.next(p.start.Add(-time.Nanosecond))
	}
	return s
}

// nextCron is next for a cron expression: the expression runs on the
// naive local time (the local fields read as if in UTC), and each naive
// slot is mapped to an instant by local (see Recurring).
func (p *plan) nextCron(t time.Time) time.Time {
	n := naive(t.In(p.loc))
	for range 1000 {
		n = p.cron.Next(n)
		if n.IsZero() {
			return time.Time{}
		}
		if s := local(n, p.loc); s.After(t) {
			return s
		}
		// A slot of a repeated hour's second pass maps to its first
		// occurrence, before t, as do all the repeated times after it:
		// go on from the end of the repeated range (walked a slot at a
		// time, an expression with seconds ran out of tries within it,
		// and a schedule declared then had no slot to come).
		if end := repeatEnd(t, p.loc); end.After(n) {
			n = end.Add(-time.Nanosecond)
		}
	}
	return time.Time{}
}

// repeatEnd returns, for t in the second pass of local times that a jump
// back repeats, the naive local time at which the repeated range ends
// (02:00 for 01:10 EST on the night New York goes from 02:00 EDT back to
// 01:00 EST); else the zero time.
func repeatEnd(t time.Time, loc *time.Location) time.Time {
	tl := t.In(loc)
	start, _ := tl.ZoneBounds()
	if start.IsZero() {
		return time.Time{}
	}
	_, off := tl.Zone()
	_, prevOff := start.Add(-time.Nanosecond).Zone()
	if prevOff <= off {
		return time.Time{}
	}
	return naive(start.In(time.FixedZone("", prevOff)))
}

// naive returns t's local fields as a time in UTC.
func naive(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// local returns the instant of the naive local time n in loc: in a gap
// (a jump forward), the instant the gap ends; in a repeated hour (a jump
// back), the first occurrence.
func local(n time.Time, loc *time.Location) time.Time {
	t := time.Date(n.Year(), n.Month(), n.Day(), n.Hour(), n.Minute(), n.Second(), n.Nanosecond(), loc)
	switch got := naive(t); {
	case got.Before(n): // before the gap: it ends where t's zone does
		_, end := t.ZoneBounds()
		return end
	case got.After(n): // after the gap: it ended where t's zone began
		start, _ := t.ZoneBounds()
		return start
	}
	start, _ := t.ZoneBounds()
	if start.IsZero() {
		return t
	}
	_, off := t.Zone()
	_, prevOff := start.Add(-time.Nanosecond).Zone()
	if prevOff > off {
		if u := t.Add(-time.Duration(prevOff-off) * time.Second); u.Before(start) && naive(u.In(loc)).Equal(n) {
			return u // the first pass of a repeated time
		}
	}
	return t
}

// slotKey returns the job key of the slot at s: the schedule's name and
// the slot's time in unix milliseconds, steered to the schedule's
// partition.
func (p *plan) slotKey(s time.Time, partitions int) string {
	return persist.SteerKey(persist.JobKey(p.r.Topic, p.r.Name+"@"+strconv.FormatInt(s.UnixMilli(), 10)), p.part, partitions)
}

// slots returns the slots a fill stores, given the watermark wm (unix µs,
// 0 for none) and now: the missed ones in (wm, now] that the policy keeps
// (latest last, at most maxMiss), then the ones to come within the
// lookahead (and at least the next), at most maxRecurFill in all (and the
// next beyond that, when the missed ones took the room: DeclareRecurring
// promises it stored) and none past maxDelay; and the floor to raise the
// watermark to first.
func (p *plan) slots(wm int64, now time.Time, maxDelay, lookahead time.Duration) (out []time.Time, floor int64) {
	from := now
	if wm > 0 {
		from = time.UnixMicro(wm)
	}
	if from.Before(now) {
		keep := 0
		switch p.r.Missed {
		case MissedLatest:
			keep = 1
		case MissedEach:
			keep = p.maxMiss
		}
		missed := p.lastSlots(from, now, keep)
		floor = now.UnixMicro()
		if len(missed) > 0 {
			floor = missed[0].UnixMicro() - 1
		}
		out = append(out, missed...)
		from = now
	}
	horizon := now.Add(lookahead)
	stored := wm > now.UnixMicro() // the next slot's job is stored
	for t := from; len(out) < maxRecurFill || !stored; {
		s := p.next(t)
		if s.IsZero() || s.Sub(now) > maxDelay || (s.After(horizon) && stored) {
			break
		}
		out = append(out, s)
		stored = stored || s.After(now)
		t = s
	}
	return out, floor
}

// lastSlots returns the last (up to) keep slots in (from, to], oldest
// first. It looks back from to over growing windows, so that a long gap
// of frequent slots is not walked from its start.
func (p *plan) lastSlots(from, to time.Time, keep int) []time.Time {
	if keep == 0 {
		return nil
	}
	window := time.Minute
	for {
		lo := to.Add(-window)
		if !lo.After(from) {
			lo = from
		}
		var got []time.Time
		for t, n := lo, 0; n < 1_000_000; n++ {
			s := p.next(t)
			if s.IsZero() || s.After(to) {
				break
			}
			got = append(got, s)
			if len(got) > keep {
				got = got[1:]
			}
			t = s
		}
		if len(got) >= keep || lo.Equal(from) {
			return got
		}
		window *= 16
	}
}

// DeclareRecurring stores a recurring schedule, or replaces the one of
// the same name, and stores its coming slots' jobs: when it returns nil,
// the next slot's job is in Redis (within MaxDelay). Declaring the same
// schedule again changes nothing, so every process may declare its
// schedules at start. A replaced schedule's stored slots still to come
// are deleted (unless a run of one has started); the new one's first slot
// is its first after now, except a slot of the replaced schedule that
// already ran (early, by RunNow, say) or was cancelled: each slot runs
// once. A started queue stores the coming slots of the
// schedules of its partitions every second (RecurringLookahead ahead);
// a slot's job runs like any job of its topic (a paused topic holds it).
//
// Bad fields give an error naming the field (ErrInvalidOption,
// ErrInvalidTopic, ErrPayloadTooLarge, or ErrTooFar when the first slot
// lies past MaxDelay). A schedule that others change at each of its tries
// gives ErrContended (nothing changed: retry).
func (q *Queue) DeclareRecurring(ctx context.Context, r Recurring) error {
	return q.declareRecurring(ctx, r, nil)
}

// DeclareRecurringIf is DeclareRecurring, done only if check, called with
// the schedule of that name as stored (nil if there is none), returns
// nil; else nothing changes and its error is returned as it is. The check
// and the declaration are one step: should another caller declare,
// replace or remove the schedule in between, the declaration reads it
// again and calls check again. A server uses it so that a client may not
// take over another tenant's schedule by its name.
func (q *Queue) DeclareRecurringIf(ctx context.Context, r Recurring, check func(stored *Recurring) error) error {
	if check == nil {
		return fmt.Errorf("%w: DeclareRecurringIf with a nil check", ErrInvalidOption)
	}
	return q.declareRecurring(ctx, r, check)
}

func (q *Queue) declareRecurring(ctx context.Context, r Recurring, check func(stored *Recurring) error) error {
	if err := checkCtx(ctx, "DeclareRecurring"); err != nil {
		return err
	}
	_, now := wheel.Readings(q.clock)
	p, err := q.compile(r, now)
	if err != nil {
		return err
	}
	if q.closing() {
		return ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return errs.Errorf("wheelq: declare recurring: %w", unreachable(err))
	}
	if now, err = q.recurNow(ctx); err != nil {
		return errs.Errorf("wheelq: declare recurring %q: %w", r.Name, unreachable(err))
	}
	for range 5 {
		old, err := q.store.RecurOf(ctx, p.part, r.Name)
		if err != nil {
			return errs.Errorf("wheelq: declare recurring %q: %w", r.Name, unreachable(err))
		}
		if err := checkStored(check, old.Spec); err != nil {
			return err
		}
		if old.Spec == p.spec {
			return q.fillRecur(ctx, p, old.Watermark, now)
		}
		drop, err := q.comingSlots(old, now)
		if err != nil {
			return errs.Errorf("wheelq: declare recurring %q: %w", r.Name, unreachable(err))
		}
		changed, err := q.store.DeclareRecur(ctx, p.part, r.Name, p.spec, old.Spec, old.Watermark, now.UnixMicro(), drop)
		if errors.Is(err, persist.ErrSpecChanged) {
			continue // declared meanwhile by another process: read again
		}
		if err != nil {
			return errs.Errorf("wheelq: declare recurring %q: %w", r.Name, uncertain(err))
		}
		for _, sl := range drop {
			q.sched.Cancel(sl.Key)
			q.cache.Remove(sl.Key)
			q.dropStart(sl.Key)
		}
		wm := old.Watermark
		if changed && old.Spec != "" {
			wm = now.UnixMicro()
		}
		return q.fillRecur(ctx, p, wm, now)
	}
	return errs.Errorf("wheelq: declare recurring %q: %w", r.Name, ErrContended)
}

// comingSlots returns the stored slot jobs of st still to come after now
// (those up to its watermark: their due times and keys), to be dropped
// when st is replaced or removed.
func (q *Queue) comingSlots(st persist.RecurState, now time.Time) ([]persist.Slot, error) {
	if st.Spec == "" || st.Watermark <= now.UnixMicro() {
		return nil, nil
	}
	old, err := q.decodePlan(st.Spec)
	if err != nil {
		return nil, err
	}
	var slots []persist.Slot
	for t := now; len(slots) < 10*maxRecurFill; {
		s := old.next(t)
		if s.IsZero() || s.UnixMicro() > st.Watermark {
			break
		}
		slots = append(slots, persist.Slot{Due: ceilMicro(s), Key: old.slotKey(s, q.cfg.Partitions)})
		t = s
	}
	return slots, nil
}

// fillRecur stores the slot jobs of p due now (missed) or soon, given its
// watermark as read, and arms those this process owns.
func (q *Queue) fillRecur(ctx context.Context, p *plan, wm int64, now time.Time) error {
	slots, floor := p.slots(wm, now, q.cfg.MaxDelay, q.recurLookahead())
	if len(slots) == 0 || slots[len(slots)-1].UnixMicro() <= max(wm, floor) {
		return nil
	}
	type slotJob struct {
		rec *persist.Record
		due int64
	}
	jobs := make(map[string]slotJob, len(slots))
	sl := make([]persist.Slot, 0, len(slots))
	for _, s := range slots {
		key := p.slotKey(s, q.cfg.Partitions)
		if key == "" {
			return fmt.Errorf("wheelq: recurring %q: no key reaches partition %d", p.r.Name, p.part)
		}
		_, id, _ := persist.SplitJobKey(key)
		rec := &persist.Record{Topic: p.r.Topic, ID: id, Rev: rand.Uint32(), MaxAttempts: p.maxAttem,
			Created: now, Payload: p.r.Payload, Headers: p.r.Headers}
		jobs[key] = slotJob{rec, ceilMicro(s)}
		sl = append(sl, persist.Slot{Due: ceilMicro(s), Key: key, Record: rec.Encode()})
	}
	tok := ""
	if ts := q.recov.Tokens(); ts != nil {
		tok = ts[p.part]
	}
	wctx, cancel := context.WithTimeout(ctx, q.cfg.WriteTimeout)
	defer cancel()
	stored, err := q.store.FillRecur(wctx, p.part, tok, p.r.Name, p.spec, floor, sl)
	if errors.Is(err, persist.ErrSpecChanged) {
		return nil // changed or removed meanwhile: the next fill reads it again
	}
	if err != nil {
		return errs.Errorf("wheelq: recurring %q: store its slots: %w", p.r.Name, uncertain(err))
	}
	for _, k := range stored {
		q.stats.scheduled.Add(1)
		q.observeScheduled(p.r.Topic)
		q.arm(k, jobs[k].due, jobs[k].rec)
	}
	return nil
}

// RemoveRecurring removes a recurring schedule, and its stored slot jobs
// still to come (unless a run of one has started). ErrNotFound if there
// is no schedule of that name; ErrContended if others change it at each
// of its tries (nothing removed: retry).
func (q *Queue) RemoveRecurring(ctx context.Context, name string) error {
	return q.removeRecurring(ctx, name, nil)
}

// RemoveRecurringIf is RemoveRecurring, done only if check, called with
// the schedule as stored, returns nil; else nothing changes and its error
// is returned as it is. As with DeclareRecurringIf, the check and the
// removal are one step.
func (q *Queue) RemoveRecurringIf(ctx context.Context, name string, check func(stored *Recurring) error) error {
	if check == nil {
		return fmt.Errorf("%w: RemoveRecurringIf with a nil check", ErrInvalidOption)
	}
	return q.removeRecurring(ctx, name, check)
}

func (q *Queue) removeRecurring(ctx context.Context, name string, check func(stored *Recurring) error) error {
	if err := checkCtx(ctx, "RemoveRecurring"); err != nil {
		return err
	}
	if name == "" || len(name) > 200 || !printable(name) {
		return fmt.Errorf("%w: Recurring.Name: %q: want 1 to 200 bytes of UTF-8 without control characters", ErrInvalidOption, name)
	}
	if q.closing() {
		return ErrClosed
	}
	if err := q.checkLayout(ctx); err != nil {
		return errs.Errorf("wheelq: remove recurring: %w", unreachable(err))
	}
	part := q.store.PartitionOf(name)
	now, err := q.recurNow(ctx)
	if err != nil {
		return errs.Errorf("wheelq: remove recurring %q: %w", name, unreachable(err))
	}
	for range 5 {
		st, err := q.store.RecurOf(ctx, part, name)
		if err != nil {
			return errs.Errorf("wheelq: remove recurring %q: %w", name, unreachable(err))
		}
		if st.Spec == "" {
			return fmt.Errorf("%w: recurring schedule %q", ErrNotFound, name)
		}
		if err := checkStored(check, st.Spec); err != nil {
			return err
		}
		coming, err := q.comingSlots(st, now)
		if err != nil {
			return errs.Errorf("wheelq: remove recurring %q: %w", name, unreachable(err))
		}
		drop := make([]string, len(coming))
		for i, sl := range coming {
			drop[i] = sl.Key
		}
		ok, err := q.store.RemoveRecur(ctx, part, name, st.Spec, st.Watermark, drop)
		if errors.Is(err, persist.ErrSpecChanged) {
			continue
		}
		if err != nil {
			return errs.Errorf("wheelq: remove recurring %q: %w", name, uncertain(err))
		}
		if !ok {
			return fmt.Errorf("%w: recurring schedule %q", ErrNotFound, name)
		}
		for _, k := range drop {
			q.sched.Cancel(k)
			q.cache.Remove(k)
			q.dropStart(k)
		}
		return nil
	}
	return errs.Errorf("wheelq: remove recurring %q: %w", name, ErrContended)
}

// Recurrings lists the namespace's recurring schedules, by name, each
// with its next slots and the job of its latest slot whose time has come
// (RecurringInfo.Last).
func (q *Queue) Recurrings(ctx context.Context) ([]RecurringInfo, error) {
	if err := checkCtx(ctx, "Recurrings"); err != nil {
		return nil, err
	}
	if err := q.checkLayout(ctx); err != nil {
		return nil, errs.Errorf("wheelq: recurrings: %w", unreachable(err))
	}
	sts, err := q.store.Recurs(ctx, nil)
	if err != nil {
		return nil, errs.Errorf("wheelq: recurrings: %w", unreachable(err))
	}
	now, err := q.recurNow(ctx)
	if err != nil {
		return nil, errs.Errorf("wheelq: recurrings: %w", unreachable(err))
	}
	out := make([]RecurringInfo, 0, len(sts))
	for _, st := range sts {
		p, err := q.decodePlan(st.Spec)
		if err != nil {
			return nil, err
		}
		info := RecurringInfo{Recurring: p.r}
		for t := now; len(info.Next) < 3; {
			s := p.next(t)
			if s.IsZero() {
				break
			}
			info.Next = append(info.Next, s)
			t = s
		}
		if st.Watermark > 0 {
			info.Stored = time.UnixMicro(st.Watermark)
		}
		if info.Last, err = q.lastRecur(ctx, p, st, now); err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b RecurringInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// lastRecur returns the job of the latest slot of schedule st (compiled
// as p) whose time has come, for RecurringInfo.Last: the latest of the
// slots the state lists as recently stored (of any spec it had) and of
// p's own slots up to the watermark (the recent list keeps 8, so a
// schedule with more slots than that in its lookahead lists only slots
// still to come). One slot is looked up, as one listing's cost per
// schedule is bounded: if its job is not known (forgotten by the run
// history, or never stored: dropped by a redeclaration before it ran,
// skipped), Last is nil. Going on to older slots could not tell a slot
// never stored from one forgotten, and would show an older slot's dead
// job for a schedule whose latest slots ran well.
func (q *Queue) lastRecur(ctx context.Context, p *plan, st persist.RecurState, now time.Time) (*JobInfo, error) {
	var last time.Time
	for _, us := range st.Recent {
		if s := time.UnixMicro(us); !s.After(now) && s.After(last) {
			last = s
		}
	}
	if st.Watermark > 0 {
		upTo := minTime(now, time.UnixMicro(st.Watermark))
		for _, s := range p.lastSlots(upTo.Add(-lastLookback), upTo, 1) {
			if ceilMicro(s) > ceilMicro(last) {
				last = s // exact: its job's id has s's milliseconds
			}
		}
	}
	if last.IsZero() {
		return nil, nil
	}
	_, id, _ := persist.SplitJobKey(p.slotKey(last, q.cfg.Partitions))
	ji, err := q.Lookup(ctx, p.r.Topic, id)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &ji, nil
}

// lastLookback is how far back of the watermark lastRecur looks for a
// schedule's own slots: a yearly one has one in it.
const lastLookback = 400 * 24 * time.Hour

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// fillOwned stores the coming slots of the schedules of the partitions
// this process owns; the recurring loop calls it every recurFillEvery.
func (q *Queue) fillOwned(ctx context.Context) error {
	owned := q.Owned()
	if len(owned) == 0 {
		return nil
	}
	sts, err := q.store.Recurs(ctx, owned) // the partitions it owns only
	if err != nil || len(sts) == 0 {
		return err
	}
	now, err := q.recurNow(ctx)
	if err != nil {
		return err
	}
	var errsOut []error
	for _, st := range sts {
		p, err := q.decodePlan(st.Spec)
		if err == nil && q.unrunRecur(p) {
			continue
		}
		if err == nil {
			err = q.fillRecur(ctx, p, st.Watermark, now)
		}
		if err != nil {
			errsOut = append(errsOut, err)
		}
	}
	return errors.Join(errsOut...)
}

// unrunRecur reports whether p's topic is one this queue does not run
// (Config.RefuseUnhandled): its slots are not stored, since they could
// only be dead-lettered; the first time, a WARN says so. The loop's
// goroutine only.
func (q *Queue) unrunRecur(p *plan) bool {
	err := q.runsTopic(p.r.Topic)
	w := &q.recurLoop
	if err == nil {
		delete(w.unrun, p.r.Name)
		return false
	}
	if w.unrun == nil {
		w.unrun = map[string]string{}
	}
	if w.unrun[p.r.Name] != p.spec {
		w.unrun[p.r.Name] = p.spec
		q.log.Warn("wheelq: recurring schedule not filled: its topic is neither handled nor pulled here (Config.RefuseUnhandled); declare it with a topic this process runs, or remove it",
			"name", p.r.Name, "topic", p.r.Topic)
	}
	return true
}

// startRecurring starts the loop that stores the coming slots of the
// schedules of this process's partitions; Shutdown stops it.
func (q *Queue) startRecurring() {
	w := &q.recurLoop
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.done)
		tick := time.NewTicker(recurFillEvery)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
				ctx, cancel := context.WithTimeout(context.Background(), q.cfg.WriteTimeout)
				if err := q.fillOwned(ctx); err != nil {
					q.log.Warn("wheelq: recurring schedules: storing their coming slots; the next second tries again", "err", err)
				}
				cancel()
			}
		}
	}()
}

// stopRecurring stops the loop of startRecurring, if it was started.
func (q *Queue) stopRecurring() {
	w := &q.recurLoop
	if w.stop == nil {
		return
	}
	close(w.stop)
	<-w.done
}

// recurNow is the time of recurring schedules: Redis's clock (TIME), the
// one every process of the namespace reads alike, so that a process whose
// own clock is off or was stepped neither takes slots to come for missed
// ones (and skips them for every process) nor stores them ahead of the
// lookahead. Each slot's job then fires by the process's clock, as any
// job does.
func (q *Queue) recurNow(ctx context.Context) (time.Time, error) {
	if q.cfg.test.recurClock {
		_, now := wheel.Readings(q.clock)
		return now, nil
	}
	t, err := q.store.Time(ctx)
	if err != nil {
		return time.Time{}, err
	}
	return t, nil
}
