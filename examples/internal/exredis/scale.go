package exredis

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

// Scale returns a -scale flag: every delay of an example is multiplied by
// it, so that "30 minutes" can be watched in a second (tests use it).
func Scale() *float64 {
	return flag.Float64("scale", 1, "multiply every delay by this (e.g. 0.001)")
}

// D scales d.
func D(d time.Duration, scale float64) time.Duration { return time.Duration(float64(d) * scale) }

// Main is the main function of an example: it parses -scale, connects to
// Redis (see Connect), runs run, and exits non-zero on an error.
func Main(name string, run func(ctx context.Context, rdb redis.UniversalClient, out io.Writer, scale float64) error) {
	scale := Scale()
	flag.Parse()
	rdb, closeRedis, err := Connect(os.Stdout)
	if err == nil {
		err = run(context.Background(), rdb, os.Stdout, *scale)
		closeRedis()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}
