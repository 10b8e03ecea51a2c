//go:build !linux

package wheel

func newPreciseSleeper() Sleeper { return newRuntimeSleeper() }
