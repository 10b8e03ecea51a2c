package wheelq

// Arming: the only door into the wheel for jobs (arm, armAt, and the
// recoverer's sink.Arm); the claim stage's fire is the only door out of
// it. A job is armed ClaimLead before its due time (earlier in a burst:
// burst.go). A claimed job waits for its time in the start gate's own
// wheel (see gate.go).

import (
	"bytes"
	"errors"
	"time"

	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/wheel"
)

// arm puts a job in the wheel if this process owns its partition and the
// job is due within what the poller has announced; otherwise the poller
// (or the owner) will.
func (q *Queue) arm(key string, dueUs int64, rec *persist.Record) {
	p := q.store.PartitionOf(key)
	if dueUs > q.recov.LoadedUntil(p) {
		return
	}
	if rec != nil {
		c := *rec
		c.Payload = bytes.Clone(rec.Payload)
		c.Due = time.UnixMicro(dueUs) // what the claim expects (the reply then carries no score)
		q.cache.Add(key, &c)
	}
	now, wall := wheel.Readings(q.clock)
	q.armAt(key, dueUs, now, wall)
}

// noteDue is told of a job's stored due time read from Redis (by the
// poller, or a due.lua reply): a cached record due later is of a due time
// gone (the job moved earlier, by another process), and would hold a
// pulled job in the start gate until then (claimBatch takes a pulled
// job's due time from the cache); its copy gets the due time read. (Only
// pulled jobs': a handler's claim reads the stored due time.)
func (q *Queue) noteDue(key string, dueUs int64) {
	if !q.pulledKey(key) {
		return
	}
	if rec, ok := q.cache.Peek(key); ok && rec.Due.UnixMicro() > dueUs {
		c := *rec
		c.Due = time.UnixMicro(dueUs)
		q.cache.Add(key, &c)
	}
}

// armAt puts key in the wheel ClaimLead before its due time, so that the
// claim's round trip is done by then (see starter), and earlier if many
// jobs are due with it (see burstLeads). The due time is a wall
// reading (stored, shared across hosts); the wheel runs on the monotonic
// clock, so it is converted with the clock's readings now and wall, taken
// at the moment of arming: a later step of the wall clock does not move the
// entry (the claim and the start gate check the wall clock again).
func (q *Queue) armAt(key string, dueUs int64, now, wall time.Time) {
	lead := q.cfg.ClaimLead
	if !q.cfg.RunWhileRedisDown { // which starts a job by the time it fired at (claimBatch)
		lead += q.bursts.lead(dueUs)
	}
	at := wheel.AtWall(now, wall, time.UnixMicro(dueUs)).Add(-lead)
	if _, err := q.sched.Add(key, at); err != nil && !errors.Is(err, wheel.ErrStopped) {
		q.log.Error("wheelq: arm", "key", key, "err", err)
	}
}
