//go:build linux

package main

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/wheelq/wheelq/internal/sched"
)

// kernelSliceIf is kernelSlice when the bench runs with -sched-slice.
func kernelSliceIf(cfg *config, pid int) error {
	if cfg.schedSlice == 0 {
		return nil
	}
	return kernelSlice(pid)
}

// kernelSlice gives every thread of process pid (a Redis or a beanstalkd
// the bench started, which inherited the bench's -sched-slice) the
// kernel's default time slice back: only the processes measured run
// with the one asked for.
func kernelSlice(pid int) error {
	tids, err := sched.Threads(pid)
	if err != nil {
		return err
	}
	for _, tid := range tids {
		a, err := sched.Get(tid)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			return err
		}
		a.Runtime, a.Flags = 0, a.Flags&unix.SCHED_FLAG_RESET_ON_FORK
		if err := sched.Set(tid, a); err != nil && !errors.Is(err, unix.ESRCH) {
			return err
		}
	}
	return nil
}
