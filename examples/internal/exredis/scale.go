package exredis

import (
	"flag"
	"time"
)

// Scale returns a -scale flag: every delay of an example is multiplied by
// it, so that "30 minutes" can be watched in a second (tests use it).
func Scale() *float64 {
	return flag.Float64("scale", 1, "multiply every delay by this (e.g. 0.001)")
}

// D scales d.
func D(d time.Duration, scale float64) time.Duration { return time.Duration(float64(d) * scale) }
