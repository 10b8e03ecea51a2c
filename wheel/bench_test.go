package wheel

import (
	"fmt"
	"testing"
	"time"
)

// Benchmarks compare the wheel with Go's runtime timers at the same number
// of pending entries. Run them with:
//
//	go test ./wheel -run '^$' -bench . -benchmem
//
// "Wheel" is the bare data structure, "Scheduler" adds the lock and the
// clock read, "AfterFunc" is time.AfterFunc (+ Stop).

var sizes = []int{10_000, 1_000_000}

func makeIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%d", i)
	}
	return ids
}

// filledWheel returns a wheel with n entries due within the next hour.
func filledWheel(b *testing.B, n int) *Wheel {
	w, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	for i, id := range makeIDs(n) {
		if _, err := w.Add(id, time.Duration(i%3600)*time.Second+time.Duration(i)); err != nil {
			b.Fatal(err)
		}
	}
	return w
}

func filledScheduler(b *testing.B, n int) *Scheduler {
	s, err := NewScheduler(SchedulerConfig{}, func([]Fired) {})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for i, id := range makeIDs(n) {
		if _, err := s.Add(id, now.Add(time.Hour+time.Duration(i%3600)*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
	s.Start()
	b.Cleanup(s.Stop)
	return s
}

func filledTimers(b *testing.B, n int) []*time.Timer {
	ts := make([]*time.Timer, n)
	for i := range ts {
		ts[i] = time.AfterFunc(time.Hour+time.Duration(i%3600)*time.Second, func() {})
	}
	b.Cleanup(func() {
		for _, t := range ts {
			t.Stop()
		}
	})
	return ts
}

const probeIDs = 1 << 16

// probeKeys returns probeIDs ids that are not among those of makeIDs.
func probeKeys() []string {
	probe := makeIDs(probeIDs)
	for i := range probe {
		probe[i] = "probe-" + probe[i]
	}
	return probe
}

func BenchmarkAdd(b *testing.B) {
	for _, n := range sizes {
		probe := probeKeys()
		b.Run(fmt.Sprintf("Wheel/pending=%d", n), func(b *testing.B) {
			w := filledWheel(b, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				// Adds beyond probeIDs move existing entries, as a re-add does.
				_, _ = w.Add(probe[i&(probeIDs-1)], time.Duration(i)*time.Millisecond)
				i++
			}
		})
		b.Run(fmt.Sprintf("Scheduler/pending=%d", n), func(b *testing.B) {
			s := filledScheduler(b, n)
			now := time.Now()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_, _ = s.Add(probe[i&(probeIDs-1)], now.Add(time.Hour+time.Duration(i)*time.Millisecond))
				i++
			}
		})
		b.Run(fmt.Sprintf("AfterFunc/pending=%d", n), func(b *testing.B) {
			filledTimers(b, n)
			ts := make([]*time.Timer, 0, probeIDs)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if len(ts) == probeIDs {
					b.StopTimer()
					for _, t := range ts {
						t.Stop()
					}
					ts = ts[:0]
					b.StartTimer()
				}
				ts = append(ts, time.AfterFunc(time.Hour+time.Duration(i)*time.Millisecond, func() {}))
				i++
			}
			for _, t := range ts {
				t.Stop()
			}
		})
	}
}

func BenchmarkCancel(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("Wheel/pending=%d", n), func(b *testing.B) {
			w := filledWheel(b, n)
			ids := makeIDs(n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				id := ids[i%n]
				if !w.Cancel(id) {
					b.StopTimer()
					_, _ = w.Add(id, time.Duration(i)*time.Microsecond) // refill
					b.StartTimer()
					w.Cancel(id)
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("AfterFunc/pending=%d", n), func(b *testing.B) {
			ts := filledTimers(b, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if !ts[i%n].Stop() {
					b.StopTimer()
					ts[i%n] = time.AfterFunc(time.Hour, func() {})
					b.StartTimer()
					ts[i%n].Stop()
				}
				i++
			}
		})
	}
}

func BenchmarkAddCancel(b *testing.B) {
	for _, n := range sizes {
		probe := probeKeys()
		b.Run(fmt.Sprintf("Wheel/pending=%d", n), func(b *testing.B) {
			w := filledWheel(b, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				id := probe[i&(probeIDs-1)]
				_, _ = w.Add(id, time.Duration(i%3600)*time.Second)
				w.Cancel(id)
				i++
			}
		})
		b.Run(fmt.Sprintf("Scheduler/pending=%d", n), func(b *testing.B) {
			s := filledScheduler(b, n)
			now := time.Now()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				id := probe[i&(probeIDs-1)]
				_, _ = s.Add(id, now.Add(time.Hour+time.Duration(i%3600)*time.Second))
				s.Cancel(id)
				i++
			}
		})
		b.Run(fmt.Sprintf("AfterFunc/pending=%d", n), func(b *testing.B) {
			filledTimers(b, n)
			f := func() {}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				t := time.AfterFunc(time.Hour+time.Duration(i%3600)*time.Second, f)
				t.Stop()
				i++
			}
		})
	}
}

// BenchmarkAdvance measures firing: every iteration expires one entry and
// adds one, with n pending.
func BenchmarkAdvance(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("Wheel/pending=%d", n), func(b *testing.B) {
			w, _ := New(Config{})
			ids := makeIDs(n)
			for i, id := range ids {
				_, _ = w.Add(id, time.Duration(i)*time.Microsecond)
			}
			var buf []Expired
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				buf = w.Advance(time.Duration(i)*time.Microsecond, buf[:0])
				for _, e := range buf {
					_, _ = w.Add(e.ID, e.Due+time.Duration(n)*time.Microsecond)
				}
				i++
			}
		})
	}
}
