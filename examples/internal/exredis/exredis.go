// Package exredis connects the examples to Redis: the server named by
// REDIS_ADDR, or else an embedded in-process Redis (miniredis), so that an
// example runs on a machine with nothing but Go.
package exredis

import (
	"fmt"
	"io"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq/internal/redistest"
)

// Connect returns a client and a function that closes it (and the embedded
// server, if one was started). It says on w which Redis it uses.
func Connect(w io.Writer) (redis.UniversalClient, func(), error) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		fmt.Fprintf(w, "using Redis at %s (REDIS_ADDR)\n", addr)
		return rdb, func() { rdb.Close() }, nil
	}
	srv, err := redistest.StartMiniredis()
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(w, "no REDIS_ADDR: using an embedded in-process Redis (miniredis); it keeps nothing on disk\n")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	return rdb, func() { rdb.Close(); srv.Close() }, nil
}
