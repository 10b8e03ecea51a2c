package fanout

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestEach: every index runs once, on at most workers goroutines at once.
func TestEach(t *testing.T) {
	for _, n := range []int{0, 1, 7, 500} {
		seen := make([]atomic.Int32, n)
		var running, most atomic.Int32
		Each(n, 4, func(i int) {
			r := running.Add(1)
			for m := most.Load(); r > m && !most.CompareAndSwap(m, r); m = most.Load() {
			}
			time.Sleep(10 * time.Microsecond)
			running.Add(-1)
			seen[i].Add(1)
		})
		for i := range seen {
			if seen[i].Load() != 1 {
				t.Fatalf("n=%d: index %d ran %d times", n, i, seen[i].Load())
			}
		}
		if most.Load() > 4 {
			t.Fatalf("n=%d: %d at once, want at most 4", n, most.Load())
		}
	}
}
