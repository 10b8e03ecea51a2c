package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/wheelq/wheelq/wheel"
)

// dues returns n due times spread uniformly over [t0+from, t0+to].
func dues(t0 time.Time, n int, from, to time.Duration) []time.Time {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]time.Time, n)
	for i := range out {
		out[i] = t0.Add(from + time.Duration(r.Int64N(int64(to-from))))
	}
	return out
}

// lateness collects (fired - due) per index.
type lateness struct {
	mu    sync.Mutex
	lat   []time.Duration
	of    []time.Duration // of[i]: entry i's lateness, once fired
	fired []bool
	early int
	dup   int
	left  int
}

func newLateness(n int) *lateness {
	return &lateness{lat: make([]time.Duration, 0, n), of: make([]time.Duration, n), fired: make([]bool, n), left: n}
}

func (l *lateness) record(i int, due, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fired[i] {
		l.dup++
		return
	}
	l.fired[i] = true
	l.left--
	d := now.Sub(due)
	if d < 0 {
		l.early++
	}
	l.lat = append(l.lat, d)
	l.of[i] = d
}

// subset returns the lateness of the fired entries i for which keep(i).
func (l *lateness) subset(keep func(i int) bool) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Duration
	for i, f := range l.fired {
		if f && keep(i) {
			out = append(out, l.of[i])
		}
	}
	return out
}

func (l *lateness) result(workload, system string, n int) result {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := summarize(l.lat).into(result{"workload": workload, "system": system, "n": n})
	r["early"] = l.early
	r["missing"] = l.left
	r["duplicates"] = l.dup
	return r
}

func (l *lateness) remaining() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.left
}

// waitAll waits until every entry fired or until deadline.
func waitAll(ctx context.Context, l *lateness, deadline time.Time) {
	for l.remaining() > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
}

func runPrecision(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(20000, 2000)
	ids := make([]string, n)
	index := make(map[string]int, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%d", i)
		index[ids[i]] = i
	}

	// The wheel on the real (precise) clock.
	{
		lat := newLateness(n)
		var wc *wakeClock
		var clock wheel.Clock
		if cfg.wakes > 0 {
			wc = newWakeClock()
			clock = wc
		}
		var s *wheel.Scheduler
		s, err := wheel.NewScheduler(wheel.SchedulerConfig{Clock: clock, Backup: cfg.backup}, func(batch []wheel.Fired) {
			now := time.Now()
			for _, f := range batch {
				lat.record(index[f.ID], f.Due, now)
			}
		})
		if err != nil {
			return err
		}
		s.Start()
		t0 := time.Now()
		cpu0 := procCPU()
		if wc != nil {
			wc.t0 = t0
		}
		ds := dues(t0, n, time.Second, 3*time.Second)
		for i, d := range ds {
			if _, err := s.Add(ids[i], d); err != nil {
				return err
			}
		}
		waitAll(ctx, lat, t0.Add(5*time.Second))
		s.Stop()
		cpu := procCPU() - cpu0
		if wc != nil {
			wc.report(os.Stderr, cfg.wakes)
		}
		r := lat.result("precision", "wheel", n)
		r["cpu_ms"] = round(float64(cpu) / 1e6)
		r["backup"] = cfg.backup
		emit(r)
	}

	// time.AfterFunc, the baseline.
	{
		lat := newLateness(n)
		t0 := time.Now()
		cpu0 := procCPU()
		ds := dues(t0, n, time.Second, 3*time.Second)
		timers := make([]*time.Timer, n)
		for i, d := range ds {
			timers[i] = time.AfterFunc(time.Until(d), func() { lat.record(i, d, time.Now()) })
		}
		waitAll(ctx, lat, t0.Add(5*time.Second))
		for _, t := range timers {
			t.Stop()
		}
		r := lat.result("precision", "time.AfterFunc", n)
		r["cpu_ms"] = round(float64(procCPU()-cpu0) / 1e6)
		emit(r)
	}
	return ctx.Err()
}

func heapAlloc() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func runMemory(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(1_000_000, 100_000)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%d", i)
	}
	now := time.Now()
	{
		before := heapAlloc()
		s, err := wheel.NewScheduler(wheel.SchedulerConfig{}, func([]wheel.Fired) {})
		if err != nil {
			return err
		}
		for i, id := range ids {
			if _, err := s.Add(id, now.Add(time.Hour+time.Duration(i)*time.Millisecond)); err != nil {
				return err
			}
		}
		after := heapAlloc()
		runtime.KeepAlive(ids) // else the GC frees the slice and the figure shrinks
		emit(result{"workload": "memory", "system": "wheel", "n": n,
			"bytes_per_entry": round(float64(after-before) / float64(n)), "note": "id strings excluded (allocated before the baseline)"})
		runtime.KeepAlive(s)
		s.Stop()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	{
		before := heapAlloc()
		f := func() {}
		timers := make([]*time.Timer, n)
		for i := range timers {
			timers[i] = time.AfterFunc(time.Hour+time.Duration(i)*time.Millisecond, f)
		}
		after := heapAlloc()
		runtime.KeepAlive(ids)
		emit(result{"workload": "memory", "system": "time.AfterFunc", "n": n,
			"bytes_per_entry": round(float64(after-before) / float64(n)), "note": "one shared func, no per-timer closure; includes the []*time.Timer slice (8 B/entry) that lets a caller Stop them"})
		for _, t := range timers {
			t.Stop()
		}
	}
	return nil
}

func runAddCancel(ctx context.Context, cfg *config, emit func(result)) error {
	n := cfg.size(1_000_000, 100_000)
	const ops = 1 << 20
	const rounds = 5
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%d", i)
	}
	probe := make([]string, 1<<16)
	for i := range probe {
		probe[i] = fmt.Sprintf("probe-%d", i)
	}
	now := time.Now()
	median := func(f func() time.Duration) float64 {
		var ds []time.Duration
		for range rounds {
			ds = append(ds, f())
		}
		slices.Sort(ds)
		return round(float64(ds[rounds/2]) / ops)
	}

	w, err := wheel.New(wheel.Config{})
	if err != nil {
		return err
	}
	for i, id := range ids {
		_, _ = w.Add(id, time.Hour+time.Duration(i%3600)*time.Second)
	}
	wheelNs := median(func() time.Duration {
		start := time.Now()
		for i := range ops {
			id := probe[i&(len(probe)-1)]
			_, _ = w.Add(id, time.Duration(i%3600)*time.Second)
			w.Cancel(id)
		}
		return time.Since(start)
	})
	w.Reset()

	s, err := wheel.NewScheduler(wheel.SchedulerConfig{}, func([]wheel.Fired) {})
	if err != nil {
		return err
	}
	s.Start()
	for i, id := range ids {
		_, _ = s.Add(id, now.Add(time.Hour+time.Duration(i%3600)*time.Second))
	}
	schedNs := median(func() time.Duration {
		start := time.Now()
		for i := range ops {
			id := probe[i&(len(probe)-1)]
			_, _ = s.Add(id, now.Add(time.Hour+time.Duration(i%3600)*time.Second))
			s.Cancel(id)
		}
		return time.Since(start)
	})
	s.Stop()
	if ctx.Err() != nil {
		return ctx.Err()
	}

	f := func() {}
	timers := make([]*time.Timer, n)
	for i := range timers {
		timers[i] = time.AfterFunc(time.Hour+time.Duration(i%3600)*time.Second, f)
	}
	afNs := median(func() time.Duration {
		start := time.Now()
		for i := range ops {
			t := time.AfterFunc(time.Hour+time.Duration(i%3600)*time.Second, f)
			t.Stop()
		}
		return time.Since(start)
	})
	for _, t := range timers {
		t.Stop()
	}
	for _, r := range []result{
		{"system": "wheel", "ns_per_op": wheelNs, "speedup_vs_afterfunc": round(afNs / wheelNs)},
		{"system": "wheel.Scheduler", "ns_per_op": schedNs, "speedup_vs_afterfunc": round(afNs / schedNs)},
		{"system": "time.AfterFunc", "ns_per_op": afNs},
	} {
		r["workload"], r["n"], r["ops"], r["rounds"] = "addcancel", n, ops, rounds
		emit(r)
	}
	return nil
}
