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
