package wheelq

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkSchedule measures Schedule against a real redis-server started
// for it: 64-byte payloads, random ids, due in an hour, from 1 and from 32
// goroutines. ns/op is per job; allocs/op are the process's per job. Run
// with
//
//	go test -run '^$' -bench Schedule -benchmem .
//
// cmd/wheelq-bench's throughput workload compares the same calls with
// Redis's raw pipelined limit.
func BenchmarkSchedule(b *testing.B) {
	for _, g := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			q, ctx := benchQueue(b)
			payload := make([]byte, 64)
			b.ReportAllocs()
			b.ResetTimer()
			runGoroutines(b, g, func() error {
				_, err := q.Schedule(ctx, "t", payload, After(time.Hour))
				return err
			})
		})
	}
}

// BenchmarkCancel measures Cancel of pending jobs (scheduled before the
// timer starts, with ids, due in an hour) from 1 and from 32 goroutines,
// against a real redis-server. ns/op is per cancelled job.
func BenchmarkCancel(b *testing.B) {
	benchmarkChange(b, func(ctx context.Context, q *Queue, id string) error {
		return q.Cancel(ctx, "t", id)
	})
}

// BenchmarkReschedule is BenchmarkCancel for Reschedule (each job moved
// to two hours ahead).
func BenchmarkReschedule(b *testing.B) {
	benchmarkChange(b, func(ctx context.Context, q *Queue, id string) error {
		return q.Reschedule(ctx, "t", id, time.Now().Add(2*time.Hour))
	})
}

// benchmarkChange times change on b.N pending jobs, from 1 and from 32
// goroutines.
func benchmarkChange(b *testing.B, change func(context.Context, *Queue, string) error) {
	for _, g := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			q, ctx := benchQueue(b)
			var next atomic.Int64
			runGoroutines(b, 32, func() error { // not timed: the jobs to change
				_, err := q.Schedule(ctx, "t", nil, ID(strconv.FormatInt(next.Add(1), 10)), After(time.Hour))
				return err
			})
			next.Store(0)
			b.ReportAllocs()
			b.ResetTimer()
			runGoroutines(b, g, func() error {
				return change(ctx, q, strconv.FormatInt(next.Add(1), 10))
			})
		})
	}
}

// benchQueue starts a queue on a redis-server of its own, ready, shut
// down when b ends.
func benchQueue(b *testing.B) (*Queue, context.Context) {
	b.Helper()
	return benchQueueConfig(b, Config{})
}

// runGoroutines calls f b.N times in all from g goroutines.
func runGoroutines(b *testing.B, g int, f func() error) {
	b.Helper()
	var next atomic.Int64
	errs := make(chan error, g)
	for range g {
		go func() {
			for next.Add(1) <= int64(b.N) {
				if err := f(); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range g {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFire measures what the engine allocates per fired job on the
// claim → start → run → settle path (B/op and allocs/op; ns/op is wall
// time and mostly waiting for due times). b.N jobs with 64-byte payloads
// and caller ids are scheduled first (not measured), due over the next
// b.N/10,000 seconds as in cmd/wheelq-bench's precision64; the clock runs
// from the first due time until every outcome is stored.
//
//	go test -run '^$' -bench Fire -benchmem .
func BenchmarkFire(b *testing.B) { benchmarkFire(b, Config{}) }
