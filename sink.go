package wheelq

// The recovery sink: what the recoverer (internal/recovery) tells the
// engine, each call handed to the stage it concerns.

import (
	"github.com/wheelq/wheelq/internal/crashpoint"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/wheel"
)

// sink is the engine as the recoverer sees it (recovery.Sink).
type sink struct{ q *Queue }

// Arm puts loaded jobs in the wheel, or parks those of paused topics.
func (s sink) Arm(es []persist.Entry) {
	q := s.q
	now, wall := wheel.Readings(q.clock)
	for _, e := range es {
		if q.crashAt(crashpoint.MidReload, e.Key) {
			return
		}
		if q.pauses.parkIfPaused(e.Key, e.Due) {
			continue
		}
		q.noteDue(e.Key, e.Due)
		// A score before the epoch (stored by an older version) is
		// past: armed at the epoch, it runs at once.
		q.armAt(e.Key, max(e.Due, 0), now, wall)
	}
}

// Release drops the claimed tasks of a lost partition that have not
// started: held for their time, or waiting for a renewal. The new owner
// runs those jobs (a take-over clears the claim marks). Jobs of the
// partition still in the wheel stay there until they fire and are dropped
// then (the claimers check ownership), which costs memory for up to a
// horizon but no Redis traffic.
func (s sink) Release(p int) {
	drop := s.q.gate.release(p)
	for _, t := range drop {
		s.q.settle.drop(t)
	}
	if len(drop) > 0 {
		s.q.log.Info("wheelq: partition released; its claimed jobs that had not started go to its next owner", "partition", p, "jobs", len(drop))
	}
}

// Renewed: tasks that waited for a renewal go through the start gate
// again.
func (s sink) Renewed() { s.q.gate.renewed() }

// Busy: a job of partition p claimed here (or being claimed) has an
// outcome not yet stored.
func (s sink) Busy(p int) bool {
	return s.q.inflight.any(func(k string) bool { return s.q.store.PartitionOf(k) == p })
}
