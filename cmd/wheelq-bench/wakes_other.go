//go:build !linux

package main

import (
	"io"
	"time"

	"github.com/wheelq/wheelq/wheel"
)

// wakeClock is the real clock; -wakes reports nothing off Linux.
type wakeClock struct{ t0 time.Time }

func newWakeClock() *wakeClock { return &wakeClock{} }

func (c *wakeClock) Now() time.Time                  { return time.Now() }
func (c *wakeClock) NewSleeper() wheel.Sleeper       { return wheel.RealClock().NewSleeper() }
func (c *wakeClock) report(io.Writer, time.Duration) {}

// procCPU is 0: not measured here.
func procCPU() time.Duration { return 0 }

// sleepUntil sleeps until deadline (clock_nanosleep on Linux).
func sleepUntil(deadline time.Time) { time.Sleep(time.Until(deadline)) }

// sleeperThread does nothing off Linux (timer slack is Linux's).
func sleeperThread() {}
