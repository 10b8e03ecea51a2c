//go:build linux

// Package sched reads and sets Linux threads' scheduling attributes
// (sched_getattr(2), sched_setattr(2)): wheel.SetSchedSlice's calls, and
// the benchmarks' for the processes they start.
package sched

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Attr is the kernel's struct sched_attr. For the fair policies Runtime
// is the thread's time slice in ns (Linux 6.12 and later; 0 before);
// setting 0 there restores the kernel's default slice.
type Attr struct {
	Size     uint32
	Policy   uint32
	Flags    uint64
	Nice     int32
	Priority uint32
	Runtime  uint64
	Deadline uint64
	Period   uint64
	UtilMin  uint32
	UtilMax  uint32
}

// Get returns thread tid's attributes.
func Get(tid int) (Attr, error) {
	var a Attr
	_, _, e := unix.Syscall6(unix.SYS_SCHED_GETATTR, uintptr(tid), uintptr(unsafe.Pointer(&a)), unsafe.Sizeof(a), 0, 0, 0)
	if e != 0 {
		return a, e
	}
	return a, nil
}

// Set sets thread tid's attributes to a (its Size filled in).
func Set(tid int, a Attr) error {
	a.Size = uint32(unsafe.Sizeof(a))
	_, _, e := unix.Syscall(unix.SYS_SCHED_SETATTR, uintptr(tid), uintptr(unsafe.Pointer(&a)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// Threads lists the ids of process pid's threads (0: this process).
func Threads(pid int) ([]int, error) {
	dir := "/proc/self/task"
	if pid != 0 {
		dir = fmt.Sprintf("/proc/%d/task", pid)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// ErrIgnored is returned by SetSlices when the kernel accepted a time
// slice and kept another: a Linux before 6.12, which has no custom slices.
var ErrIgnored = errors.New("sched: the kernel kept its own time slice")

// SetSlices sets the time slice (ns; 0: the kernel's default) of every
// thread of process pid (0: this process) that runs under a fair policy
// (SCHED_NORMAL or SCHED_BATCH; a real-time or idle thread keeps its
// own) and does not have it yet, leaving the threads' other attributes
// as they are. A thread that exits meanwhile is passed over. It returns
// how many threads it set; a thread started meanwhile may have been
// missed, and a second call finds it.
func SetSlices(pid int, slice uint64) (int, error) {
	tids, err := Threads(pid)
	if err != nil {
		return 0, err
	}
	set := 0
	for _, tid := range tids {
		a, err := Get(tid)
		if errors.Is(err, unix.ESRCH) {
			continue // the thread has exited
		}
		if err != nil {
			return set, fmt.Errorf("sched_getattr: %w", err)
		}
		if (slice != 0 && a.Runtime == slice) || (a.Policy != unix.SCHED_NORMAL && a.Policy != unix.SCHED_BATCH) {
			continue
		}
		a.Runtime = slice
		a.Flags &= unix.SCHED_FLAG_RESET_ON_FORK // keep that; no clamps
		if err := Set(tid, a); errors.Is(err, unix.ESRCH) {
			continue
		} else if err != nil {
			return set, fmt.Errorf("sched_setattr: %w", err)
		}
		if slice != 0 {
			if got, err := Get(tid); err == nil && got.Runtime != slice {
				return set, fmt.Errorf("%w: asked for %d ns, kept %d ns", ErrIgnored, slice, got.Runtime)
			}
		}
		set++
	}
	return set, nil
}
