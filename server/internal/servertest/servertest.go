// Package servertest runs a wheelq server inside a test's process, on a
// real redis-server the test starts (internal/redistest), for the tests of
// the server's clients and front ends.
package servertest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/redistest"
	"github.com/wheelq/wheelq/server"
	"github.com/wheelq/wheelq/server/config"
)

// Addrs are where a started server listens.
type Addrs struct {
	// HTTP is the API's base URL ("http://127.0.0.1:PORT").
	HTTP string
	// RESP is the RESP front end's host:port, if cfg.RESP.Addr was set.
	RESP string
	// Redis is the redis-server's host:port (for a test's own reads of
	// it: INFO, say).
	Redis string
}

// Start runs a server on loopback ports of its own and a redis-server of
// its own, with config.Default changed by edit (if not nil), until the
// test ends; it returns once the queue is ready.
func Start(t testing.TB, edit func(*config.Config)) Addrs {
	t.Helper()
	rs := redistest.Start(t, redistest.Options{})
	cfg := config.Default()
	cfg.Redis.URL = config.Secret("redis://" + rs.Addr + "/0")
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.Log.Access = false
	if edit != nil {
		edit(&cfg)
	}
	httpc, respc := make(chan string, 1), make(chan string, 1)
	s, err := server.New(cfg, server.Options{
		Listening:     func(a string) { httpc <- a },
		ListeningRESP: func(a string) { respc <- a },
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	a := Addrs{Redis: rs.Addr}
	select {
	case h := <-httpc:
		a.HTTP = "http://" + h
	case err := <-done:
		t.Fatalf("server stopped: %v", err)
	}
	if cfg.RESP.Addr != "" {
		select {
		case r := <-respc:
			a.RESP = r
		case err := <-done:
			t.Fatalf("server stopped: %v", err)
		}
	}
	<-s.Queue().Ready()
	return a
}
