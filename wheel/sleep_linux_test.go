//go:build linux

package wheel

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSleeperIgnoresStaleExpiry: when the runtime timer ends a wait first,
// the timerfd's expiry for the same deadline still comes, later; the next
// Sleep must not take that token for its own deadline. It did, and
// returned at once: TestRealSleeper failed so in a full CI run ("returned
// before the deadline") when the netpoller noticed the timerfd after the
// runtime timer. Here the late token is put in the sleeper's channel by
// hand.
func TestSleeperIgnoresStaleExpiry(t *testing.T) {
	t.Parallel()
	s, ok := newPreciseSleeper().(*timerfdSleeper)
	if !ok {
		t.Skip("no timerfd here")
	}
	defer s.Close()
	for range 5 {
		select { // an earlier deadline's expiry, noticed late (one may be there already)
		case s.fired <- struct{}{}:
		default:
		}
		deadline := time.Now().Add(3 * time.Millisecond)
		s.Sleep(deadline)
		require.False(t, time.Now().Before(deadline), "returned before the deadline")
	}
}

// TestPreciseSleeperAllocatesNothing: the scheduler sleeps once per due
// time, thousands of times a second under load, so a Sleep or a Wake that
// allocated would be garbage per fired timer. A version that armed the
// timerfd through a fresh closure allocated three times per Sleep. (A
// wait ended by the runtime timer first may allocate: rare, hence below
// one on average rather than zero.)
func TestPreciseSleeperAllocatesNothing(t *testing.T) {
	s := newPreciseSleeper()
	defer s.Close()
	if _, ok := s.(*timerfdSleeper); !ok {
		t.Skip("no timerfd here")
	}
	s.Sleep(time.Now().Add(50 * time.Microsecond)) // warm up: the reader starts
	sleeps := testing.AllocsPerRun(50, func() { s.Sleep(time.Now().Add(50 * time.Microsecond)) })
	require.Less(t, sleeps, 1.0, "allocations per Sleep")
	wakes := testing.AllocsPerRun(50, func() {
		s.Wake()
		s.Sleep(time.Time{}) // takes the Wake
	})
	require.Less(t, wakes, 1.0, "allocations per Wake and Sleep")
}
