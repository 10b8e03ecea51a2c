package wheelqtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/crashpoint"
)

// TestCheckRules feeds the checker made-up histories: each broken promise
// is reported, and the same history with a crash (or a new write) in the
// right place is not.
func TestCheckRules(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func(kind crashpoint.EventKind, seq uint64) event {
		return event{Event: crashpoint.Event{Kind: kind, Key: "job/x"}, seq: seq}
	}
	run := func(start, end uint64, at time.Time) Run {
		return Run{Topic: "job", ID: "x", Attempt: 1, Due: t0, Start: at, End: at, Done: true, startSeq: start, endSeq: end}
	}
	for _, tc := range []struct {
		name    string
		events  []event
		runs    []Run
		crashes []Crash
		want    string // "" for no violation
	}{
		{name: "acked once", events: []event{ev(crashpoint.Written, 1), ev(crashpoint.Acked, 4)},
			runs: []Run{run(2, 3, t0)}},
		{name: "early", events: []event{ev(crashpoint.Written, 1), ev(crashpoint.Acked, 4)},
			runs: []Run{run(2, 3, t0.Add(-time.Microsecond))}, want: "before its due time"},
		{name: "twice without a crash", events: []event{ev(crashpoint.Written, 1), ev(crashpoint.Acked, 6)},
			runs: []Run{run(2, 3, t0), run(4, 5, t0)}, want: "ran successfully twice"},
		{name: "twice across a crash", events: []event{ev(crashpoint.Written, 1), ev(crashpoint.Acked, 7)},
			runs: []Run{run(2, 3, t0), run(5, 6, t0)}, crashes: []Crash{{Point: AfterRun, seq: 4}}},
		{name: "twice, written again between", events: []event{ev(crashpoint.Written, 1), ev(crashpoint.Written, 4), ev(crashpoint.Acked, 7)},
			runs: []Run{run(2, 3, t0), run(5, 6, t0)}},
		{name: "after its ack", events: []event{ev(crashpoint.Written, 1), ev(crashpoint.Acked, 4)},
			runs:    []Run{run(2, 3, t0), {Topic: "job", ID: "x", Due: t0, Start: t0, Err: errFake, Done: true, startSeq: 6, endSeq: 7}},
			crashes: []Crash{{Point: AfterRun, seq: 5}}, want: "after its ack was stored"},
		{name: "after a cancel", events: []event{ev(crashpoint.Written, 1), ev(crashpoint.Cancelled, 2)},
			runs: []Run{run(3, 4, t0)}, want: "after a cancel"},
		{name: "cancel while running", events: []event{ev(crashpoint.Written, 1), ev(crashpoint.CancelledRunning, 3)},
			runs: []Run{run(2, 4, t0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := New(t, Options{SkipCheck: true})
			h.mu.Lock()
			h.events, h.runs, h.crashes = tc.events, tc.runs, tc.crashes
			h.mu.Unlock()
			err := h.Check()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrViolation)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

var errFake = errTest("failed")

type errTest string

func (e errTest) Error() string { return string(e) }
