//go:build linux

package main

import "github.com/wheelq/wheelq/internal/sched"

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
	_, err := sched.SetSlices(pid, 0)
	return err
}
