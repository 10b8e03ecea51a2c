//go:build linux

package wheel

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSleeperIgnoresStaleExpiry: when the read deadline (the runtime
// timer) or a Wake ends a wait first, the timerfd's expiry still comes, and
// may sit unread; the next Sleep must not take it for its own deadline. An
// earlier version did (the expiry was a token in a channel then), and
// returned at once: TestRealSleeper failed so in a full CI run ("returned
// before the deadline"). Here the timerfd is made to expire, unread,
// before each Sleep, and a Wake's expiry is left behind by a Sleep that
// took the Wake before it came.
func TestSleeperIgnoresStaleExpiry(t *testing.T) {
	t.Parallel()
	s, ok := newPreciseSleeper().(*timerfdSleeper)
	if !ok {
		t.Skip("no timerfd here")
	}
	defer s.Close()
	for i := range 6 {
		if i%2 == 0 {
			require.True(t, s.arm(time.Nanosecond)) // an earlier deadline's expiry
		} else {
			s.woken.Store(true) // a Wake that a Sleep took before its expiry came
			s.Sleep(time.Now().Add(time.Hour))
			require.True(t, s.arm(time.Nanosecond))
		}
		time.Sleep(time.Millisecond) // expired, not read
		deadline := time.Now().Add(3 * time.Millisecond)
		s.Sleep(deadline)
		require.False(t, time.Now().Before(deadline), "returned before the deadline")
	}
}

// TestPreciseSleeperAllocatesNothing: the scheduler sleeps once per due
// time, thousands of times a second under load, so a Sleep or a Wake that
// allocated would be garbage per fired timer. A version that armed the
// timerfd through a fresh closure allocated three times per Sleep. (A
// read deadline that ends a wait first allocates its error: rare, hence
// below one on average rather than zero.)
func TestPreciseSleeperAllocatesNothing(t *testing.T) {
	s := newPreciseSleeper()
	defer s.Close()
	if _, ok := s.(*timerfdSleeper); !ok {
		t.Skip("no timerfd here")
	}
	s.Sleep(time.Now().Add(50 * time.Microsecond)) // warm up
	sleeps := testing.AllocsPerRun(50, func() { s.Sleep(time.Now().Add(50 * time.Microsecond)) })
	require.Less(t, sleeps, 1.0, "allocations per Sleep")
	wakes := testing.AllocsPerRun(50, func() {
		s.Wake()
		s.Sleep(time.Time{}) // takes the Wake
	})
	require.Less(t, wakes, 1.0, "allocations per Wake and Sleep")
}
