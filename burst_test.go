package wheelq

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBurstLeads(t *testing.T) {
	t.Parallel()
	var b burstLeads
	due := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC).UnixMicro()
	for range burstFree {
		require.Zero(t, b.lead(due), "the first claim batch of a bucket keeps the plain lead")
	}
	require.Equal(t, time.Second/burstClaimRate, b.lead(due+5), "the same 10 ms")
	prev := time.Duration(0)
	for range 100_000 {
		l := b.lead(due)
		require.GreaterOrEqual(t, l, prev, "later jobs of a burst are claimed earlier")
		prev = l
	}
	require.Equal(t, maxBurstLead, prev, "capped")
	require.Equal(t, maxBurstLead, b.most(due), "the longest lead its bucket gave")

	// A steady stream of 10 jobs per millisecond keeps the plain lead.
	var s burstLeads
	for i := range int64(100_000) {
		require.Zero(t, s.lead(due+i*100))
	}
	require.Zero(t, s.most(due+5_000), "a lone job's: a claim finding it moved later re-arms it")
	// The next bucket, and a bucket that reuses a slot, count from 0.
	require.Zero(t, b.lead(due+burstBucket.Microseconds()))
	require.Zero(t, b.lead(due+burstSlots*burstBucket.Microseconds()))
	require.Zero(t, b.lead(due), "its slot was taken by a later bucket: counted from 0 again")
}

// TestMovedLaterIsNotHeld: a job moved later by another process after this
// one armed it is found not due by its claim, which is given back at once
// and the job armed again, not held claimed until its new time: a Cancel
// meanwhile finds it not running.
// (With a claim window widened for bursts to every job, the cancel came
// back ErrRunning and the job ran.)
func TestMovedLaterIsNotHeld(t *testing.T) {
	t.Parallel()
	// The poller would re-arm the job from its inbox within a poll
	// interval; a long one leaves the old entry to fire.
	obs := newCountingObserver()
	b := setup(t, Config{PollInterval: 5 * time.Second, Observer: obs})
	r := newRuns()
	require.NoError(t, b.q.Handle("m", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
	other := b.newQueue(t, Config{}) // a producer: never started
	due := time.Now().Add(400 * time.Millisecond)
	id, err := b.q.Schedule(b.ctx, "m", nil, At(due))
	require.NoError(t, err)
	require.NoError(t, other.Reschedule(b.ctx, "m", id, due.Add(800*time.Millisecond)))
	// Claimed at the old time and found moved: wait for that claim, not a
	// fixed time (on a slow machine the cancel could come before it, and
	// check nothing).
	eventually(t, func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return obs.items[OpClaim] >= 1
	}, "the job claimed at its old time")
	// The claim marked it running; finding it moved, the claimer gives
	// the claim back (an unclaim, stored with the next settle batch).
	eventually(t, func() bool {
		info, err := other.Lookup(b.ctx, "m", id)
		return err == nil && info.State == StatePending
	}, "the claim given back")
	require.True(t, time.Now().Before(due.Add(700*time.Millisecond)), "given back long before the new due time, not held until it")
	require.NoError(t, other.Cancel(b.ctx, "m", id), "not running: its claim found it moved")
	r.none(t, time.Until(due.Add(1200*time.Millisecond)))
}
