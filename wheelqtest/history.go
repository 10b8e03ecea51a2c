package wheelqtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/wheelq/wheelq/internal/crashpoint"
	"github.com/wheelq/wheelq/internal/persist"
)

// Run is one call of a handler, as the harness saw it.
type Run struct {
	Topic, ID string
	// Attempt is Job.Attempt: a run cut short by a crash runs again with
	// the same Attempt.
	Attempt int
	// Due is the job's due time; Start and End are the fake clock's wall
	// readings when the handler was called and when it returned.
	Due, Start, End time.Time
	Payload         []byte
	// Err is what the handler returned (a panic as an error).
	Err error
	// Done says the handler returned.
	Done bool
	// Crashed says the queue crashed before this run's outcome could be
	// stored (DuringRun, AfterRun, or a crash elsewhere while it ran):
	// the run counts as cut short, and the job runs again.
	Crashed bool
	// Incarnation is the queue that ran it: 1 for the first, and one more
	// for each Restart.
	Incarnation int

	startSeq, endSeq uint64
}

// Crash is a crash point that fired.
type Crash struct {
	Point     Point
	Topic, ID string    // the job at the point
	At        time.Time // the fake clock's wall reading
	// Incarnation is the queue that crashed.
	Incarnation int

	seq uint64
}

// event is a change Redis applied, in history order.
type event struct {
	crashpoint.Event
	seq uint64
}

// History is what the harness recorded.
type History struct {
	Runs    []Run
	Crashes []Crash
}

// History returns a copy of the history so far.
func (h *Harness) History() History {
	h.mu.Lock()
	defer h.mu.Unlock()
	return History{Runs: slices.Clone(h.runs), Crashes: slices.Clone(h.crashes)}
}

// Runs returns the runs of the job topic/id so far, in the order they
// started.
func (h *Harness) Runs(topic, id string) []Run {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Run
	for _, i := range h.runsByKey[persist.JobKey(topic, id)] {
		out = append(out, h.runs[i])
	}
	return out
}

// Crashes returns the crash points that fired so far.
func (h *Harness) Crashes() []Crash {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.crashes)
}

// Check asserts wheelq's promises on the history so far, and returns an
// error wrapping ErrViolation that lists every broken one:
//
//   - nothing acknowledged is lost: every job whose write Redis applied
//     was acked, cancelled or dead-lettered since, or is still stored
//     (a paused topic's job that has not run, say: that is no violation);
//   - never early: no run started before its job's due time by the fake
//     clock;
//   - cancel wins: no run started after a cancel that deleted the job
//     while no run of it was claimed (unless it was scheduled again);
//   - duplicates only at crash points: no job ran successfully twice, or
//     ran after its ack was stored, unless it was scheduled or moved again
//     in between, or (for the first) a crash came in between.
//
// Call it when no handler is running (after Advance, say).
func (h *Harness) Check() error {
	h.mu.Lock()
	runs := slices.Clone(h.runs)
	crashes := slices.Clone(h.crashes)
	events := slices.Clone(h.events)
	h.mu.Unlock()

	var bad []string
	byKey := map[string][]event{}
	for _, e := range events {
		byKey[e.Key] = append(byKey[e.Key], e)
	}
	runsOf := map[string][]Run{}
	for _, r := range runs {
		k := persist.JobKey(r.Topic, r.ID)
		runsOf[k] = append(runsOf[k], r)
		if r.Start.Before(r.Due) {
			bad = append(bad, fmt.Sprintf("%s (attempt %d) started at %v, before its due time %v", k, r.Attempt, r.Start, r.Due))
		}
	}
	// renewed says whether the job was written or moved between seqs a
	// and b: a new job, or a new due time, which may run again.
	renewed := func(key string, a, b uint64) bool {
		for _, e := range byKey[key] {
			if e.seq > a && e.seq < b && (e.Kind == crashpoint.Written || e.Kind == crashpoint.Rescheduled) {
				return true
			}
		}
		return false
	}
	crashedBetween := func(a, b uint64) bool {
		for _, c := range crashes {
			if c.seq > a && c.seq < b {
				return true
			}
		}
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.Timeout)
	defer cancel()
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		es := byKey[k]
		written := false
		var last crashpoint.EventKind
		for _, e := range es {
			written = written || e.Kind == crashpoint.Written
			last = e.Kind
			if e.Kind == crashpoint.Cancelled || e.Kind == crashpoint.Acked {
				for _, r := range runsOf[k] {
					if r.startSeq > e.seq && !renewed(k, e.seq, r.startSeq) {
						what := "a cancel"
						if e.Kind == crashpoint.Acked {
							what = "its ack was stored"
						}
						bad = append(bad, fmt.Sprintf("%s (attempt %d) started at %v after %s", k, r.Attempt, r.Start, what))
					}
				}
			}
		}
		switch last {
		case crashpoint.Written, crashpoint.Rescheduled, crashpoint.Retried:
			if !written {
				break
			}
			_, st, err := h.store.Get(ctx, k)
			if err != nil && !errors.Is(err, persist.ErrNotFound) {
				return fmt.Errorf("wheelqtest: check %s: %w", k, err)
			}
			if st == persist.Missing {
				bad = append(bad, fmt.Sprintf("%s was stored and is gone, with no ack, cancel or dead letter", k))
			}
		}
	}
	for k, rs := range runsOf {
		var prev *Run
		for i := range rs {
			r := &rs[i]
			if r.Err != nil || r.Crashed || !r.Done {
				continue
			}
			if prev != nil && !renewed(k, prev.startSeq, r.startSeq) && !crashedBetween(prev.startSeq, r.startSeq) {
				bad = append(bad, fmt.Sprintf("%s ran successfully twice (attempts %d and %d, at %v and %v) with no crash in between",
					k, prev.Attempt, r.Attempt, prev.Start, r.Start))
			}
			prev = r
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return fmt.Errorf("%w:\n\t%s", ErrViolation, strings.Join(bad, "\n\t"))
}
