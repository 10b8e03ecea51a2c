//go:build linux

// Package sched reads and sets Linux threads' scheduling attributes
// (sched_getattr(2), sched_setattr(2)): wheel.SetSchedSlice's calls, and
// the benchmarks' for the processes they start.
package sched

import (
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
