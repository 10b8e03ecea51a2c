package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// UsedMemory reads INFO memory's used_memory: the bytes Redis holds.
func UsedMemory(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("redistest: no used_memory in INFO memory")
}

// PeakMemory samples UsedMemory every interval, from now until the
// returned function is called; that function returns the largest reading
// (at least from, the caller's reading before). used_memory_peak would not
// do: CONFIG RESETSTAT does not reset it.
func PeakMemory(rdb redis.UniversalClient, from int64, every time.Duration) (stop func() int64) {
	var peak atomic.Int64
	peak.Store(from)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-time.After(every):
			}
			if m, err := UsedMemory(context.Background(), rdb); err == nil && m > peak.Load() {
				peak.Store(m)
			}
		}
	}()
	return func() int64 {
		close(quit)
		<-done
		return peak.Load()
	}
}
