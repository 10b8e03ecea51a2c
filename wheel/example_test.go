package wheel_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/wheelq/wheelq/wheel"
)

// A Scheduler hands each entry to its callback at its due time, in due
// order, on the scheduler's own goroutine.
func ExampleScheduler() {
	fired := make(chan string, 3)
	s, err := wheel.NewScheduler(wheel.SchedulerConfig{}, func(batch []wheel.Fired) {
		for _, f := range batch {
			fired <- f.ID
		}
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Start()
	defer s.Stop()
	now := time.Now()
	_, _ = s.Add("never", now.Add(time.Hour))
	_, _ = s.Add("second", now.Add(20*time.Millisecond))
	_, _ = s.Add("first", now.Add(10*time.Millisecond))
	_, _ = s.Add("last", now.Add(30*time.Millisecond))
	s.Cancel("never")
	for range 3 {
		fmt.Println(<-fired)
	}
	// Output:
	// first
	// second
	// last
}

// Backup adds a second runner on a thread of its own, for a process whose
// main work is the scheduler; where it cannot run, NewScheduler says so
// and the caller decides.
func ExampleSchedulerConfig_backup() {
	fired := make(chan string, 1)
	onFire := func(batch []wheel.Fired) {
		for _, f := range batch {
			fired <- f.ID
		}
	}
	s, err := wheel.NewScheduler(wheel.SchedulerConfig{Backup: true}, onFire)
	if errors.Is(err, wheel.ErrNoBackup) {
		// Not Linux, or GOMAXPROCS is 1: one runner, then.
		s, err = wheel.NewScheduler(wheel.SchedulerConfig{}, onFire)
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Start()
	defer s.Stop()
	_, _ = s.Add("reminder", time.Now().Add(5*time.Millisecond))
	fmt.Println(<-fired, "fired")
	// Output:
	// reminder fired
}

// SetSchedSlice is a setting of the whole process: call it once, early in
// main, before the work whose wakes should come sooner. Where the kernel
// cannot be asked, the process runs as before. (No Output line: it would
// change the slice of the test binary running the examples.)
func ExampleSetSchedSlice() {
	err := wheel.SetSchedSlice(100 * time.Microsecond)
	switch {
	case errors.Is(err, wheel.ErrNoSchedSlice):
		fmt.Println("the kernel's default time slice stays:", err)
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println("every thread runs with a 100µs time slice")
	}
}
