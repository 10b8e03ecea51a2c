// Package exredis connects the examples to Redis: the server named by
// REDIS_ADDR, or else an embedded in-process Redis (miniredis), so that an
// example runs on a machine with nothing but Go.
package exredis

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Connect returns a client and a function that closes it (and the embedded
// server, if one was started). It says on w which Redis it uses.
func Connect(w io.Writer) (redis.UniversalClient, func(), error) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		fmt.Fprintf(w, "using Redis at %s (REDIS_ADDR)\n", addr)
		return rdb, func() { rdb.Close() }, nil
	}
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(w, "no REDIS_ADDR: using an embedded in-process Redis (miniredis); it keeps nothing on disk\n")
	// miniredis expires keys (wheelq's leases) only when told time passed.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				m.FastForward(50 * time.Millisecond)
			case <-stop:
				return
			}
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return rdb, func() { close(stop); <-done; rdb.Close(); m.Close() }, nil
}
