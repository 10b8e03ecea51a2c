//go:build linux

package wheel

import (
	"errors"
	"fmt"
	"time"

	"github.com/wheelq/wheelq/internal/sched"
)

// SetSchedSlice asks Linux (6.12 or later) to run every thread of this
// process, and every thread it starts later (they inherit it), with a
// time slice of d under the fair scheduler (EEVDF) instead of the
// kernel's default (a base slice times 1 + log2 of the CPUs: 1.4 ms on
// the 2-CPU VM of docs/benchmarks.md). A shorter slice gives a thread an earlier virtual deadline, so
// that when it wakes, at a wheel's due time or for a reply, it preempts
// a thread that has run longer instead of waiting for the end of that
// thread's slice: on a machine whose cores are busy with other work,
// wakes come sooner; the process's share of the CPU is unchanged. It
// needs no privilege (unlike a real-time policy or a negative nice) and
// leaves each thread's policy and nice value as they are.
//
// d must lie in [MinSchedSlice, MaxSchedSlice] (ErrBadSchedSlice). On a
// kernel that ignores the request (before 6.12), or another system, it
// returns ErrNoSchedSlice. Call it once, early in main: it is a setting
// of the process, not of a Scheduler or a Queue, and only another
// call changes it. docs/benchmarks-history.md has what it changed in
// the benchmarks on a 2-core VM with Linux 6.18.
func SetSchedSlice(d time.Duration) error {
	if err := checkSchedSlice(d); err != nil {
		return err
	}
	// A thread started while the threads are set may have been cloned
	// from one not yet set: set again until a pass finds none to set.
	for pass := 0; ; pass++ {
		set, err := sched.SetSlices(0, uint64(d))
		if errors.Is(err, sched.ErrIgnored) {
			return fmt.Errorf("%w: %v", ErrNoSchedSlice, err)
		}
		if err != nil {
			return fmt.Errorf("wheel: SetSchedSlice: %w", err)
		}
		if set == 0 {
			return nil
		}
		if pass == 10 {
			return fmt.Errorf("wheel: SetSchedSlice: threads kept appearing (%d set in the tenth pass)", set)
		}
	}
}
