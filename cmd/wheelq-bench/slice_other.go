//go:build !linux

package main

// kernelSlice does nothing: -sched-slice is Linux's.
func kernelSlice(int) error { return nil }
