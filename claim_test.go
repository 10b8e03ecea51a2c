package wheelq

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTurnstile: batches whose claims come back in any order are let
// through in the order they were taken.
func TestTurnstile(t *testing.T) {
	t.Parallel()
	var ts turnstile
	var mu sync.Mutex
	var order []uint64
	var wg sync.WaitGroup
	arrive := []uint64{4, 2, 0, 3, 1, 5} // the order their claims come back
	started := make(chan struct{})
	for _, seq := range arrive {
		wg.Go(func() {
			started <- struct{}{}
			ts.wait(seq)
			mu.Lock()
			order = append(order, seq)
			mu.Unlock()
			ts.pass()
		})
		<-started
	}
	wg.Wait()
	require.Equal(t, []uint64{0, 1, 2, 3, 4, 5}, order)
}

// TestLingerFor: fired jobs wait for others to share their claim only
// while there is time for it and not yet a good share of a claim.
func TestLingerFor(t *testing.T) {
	t.Parallel()
	const lead = 5 * time.Millisecond
	for _, c := range []struct {
		queued   int
		untilDue time.Duration
		want     time.Duration
	}{
		{0, lead, 0},              // nothing queued
		{1, lead, maxClaimLinger}, // a lone job, a whole lead away: the most
		{1, 3 * time.Millisecond, 500 * time.Microsecond}, // up to half the lead before due
		{1, lead/2 + 40*time.Microsecond, 0},              // under 50 µs: not worth a timer
		{1, time.Millisecond, 0},                          // later than half the lead
		{1, -time.Second, 0},                              // overdue
		{maxClaim/4 - 1, lead, maxClaimLinger},
		{maxClaim / 4, lead, 0}, // a quarter of a claim: go now
	} {
		require.Equal(t, c.want, lingerFor(c.queued, c.untilDue, lead), "%d queued, due in %v", c.queued, c.untilDue)
	}
}

func TestNextBatchLimit(t *testing.T) {
	// Deferred past the byte budget: what the budget held, at least one.
	require.Equal(t, 4, nextBatchLimit(maxClaim, 400, 396))
	require.Equal(t, 1, nextBatchLimit(4, 4, 4))
	// Nothing deferred: back towards maxClaim, doubling.
	require.Equal(t, 8, nextBatchLimit(4, 4, 0))
	require.Equal(t, maxClaim, nextBatchLimit(maxClaim, 10, 0))
	require.Equal(t, maxClaim, nextBatchLimit(700, 700, 0))
}
