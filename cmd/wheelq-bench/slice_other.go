//go:build !linux

package main

// kernelSliceIf does nothing: -sched-slice is Linux's.
func kernelSliceIf(*config, int) error { return nil }
