// Package redistest starts throwaway Redis servers for tests and benchmarks:
// a real redis-server on a free loopback port in a temporary directory,
// which a test may stop, kill with SIGKILL and restart (with AOF on or off).
// It never touches a server it did not start.
//
// Where redis-server is not installed, Start falls back to an in-process
// miniredis and says so loudly; setting WHEELQ_REQUIRE_REDIS=1 (as CI does)
// turns that fallback into a test failure. Tests that need the real thing
// (kill -9, AOF) call RequireReal, which skips them on the fallback.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// EnvRequire names the environment variable that forbids the miniredis
// fallback when set to a non-empty value other than "0".
const EnvRequire = "WHEELQ_REQUIRE_REDIS"

// EnvServer names the environment variable that gives the redis-server
// binary to run (a name looked up in PATH, or a path); default
// "redis-server".
const EnvServer = "WHEELQ_REDIS_SERVER"

// ErrNoServer is returned by StartServer when redis-server is not installed.
var ErrNoServer = errors.New("redistest: redis-server not found in PATH")

// Options configures a server.
type Options struct {
	// AOF turns on the append-only file with appendfsync Fsync.
	AOF bool
	// Fsync is the appendfsync policy with AOF: "always" (default),
	// "everysec" or "no".
	Fsync string
	// Dir is the data directory; default a new temporary directory.
	Dir string
	// ReplicaOf, if set (host:port), starts the server as a replica of
	// that server.
	ReplicaOf string
	// Sentinel, if set, starts a Sentinel instead of a server, with these
	// lines of configuration (sentinel monitor ..., written to a file in
	// Dir that the Sentinel rewrites).
	Sentinel string
	// Cluster starts the server with cluster mode enabled (a node of a
	// Redis Cluster; see StartCluster).
	Cluster bool
}

// Server is a redis-server process (or the miniredis fallback).
type Server struct {
	// Addr is host:port of the server.
	Addr string

	opts   Options
	ownDir bool // Dir was made by StartServer and is removed by Close
	port   int
	bin    string

	mu       sync.Mutex
	cmd      *exec.Cmd // nil when not running
	wait     chan error
	mini     *miniredis.Miniredis
	admin    *redis.Client // see client; closed by Close
	stopTick chan struct{} // stops the miniredis clock
	tickDone chan struct{}
}

// StartMiniredis starts an in-process miniredis whose keys expire in real
// time (miniredis on its own expires keys only when told time passed, so
// wheelq's leases would never lapse). The caller must Close it.
func StartMiniredis() (*Server, error) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, err
	}
	s := &Server{Addr: m.Addr(), mini: m, stopTick: make(chan struct{}), tickDone: make(chan struct{})}
	go func() {
		defer close(s.tickDone)
		const step = 50 * time.Millisecond
		t := time.NewTicker(step)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				m.FastForward(step)
			case <-s.stopTick:
				return
			}
		}
	}()
	return s, nil
}

// StartServer starts a redis-server; the caller must Close it. It fails
// with ErrNoServer when redis-server is not installed.
func StartServer(opts Options) (*Server, error) {
	name := os.Getenv(EnvServer)
	if name == "" {
		name = "redis-server"
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", ErrNoServer, name)
	}
	if opts.Fsync == "" {
		opts.Fsync = "always"
	}
	ownDir := opts.Dir == ""
	if ownDir {
		dir, err := os.MkdirTemp("", "wheelq-redis-")
		if err != nil {
			return nil, err
		}
		opts.Dir = dir
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{opts: opts, ownDir: ownDir, port: port, bin: bin, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	if ownDir {
		_ = os.RemoveAll(opts.Dir)
	}
	return nil, lastErr
}

// Start starts a server for the test and stops it at cleanup. See the
// package doc for the fallback.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := StartServer(opts)
	if errors.Is(err, ErrNoServer) {
		if v := os.Getenv(EnvRequire); v != "" && v != "0" {
			t.Fatalf("redistest: redis-server is required (%s=%s) but not installed", EnvRequire, v)
		}
		s, err = StartMiniredis()
		if err != nil {
			t.Fatalf("redistest: miniredis: %v", err)
		}
		t.Logf("redistest: *** redis-server NOT FOUND: falling back to in-process miniredis at %s; "+
			"tests that need a real server are skipped. Install redis-server to run them. ***", s.Addr)
	} else if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// StartReplica starts a real redis-server replicating s (closed at the
// test's cleanup) and returns once its link to s is up. s must be real.
func (s *Server) StartReplica(t testing.TB) *Server {
	t.Helper()
	r, err := StartServer(Options{ReplicaOf: s.Addr})
	if err != nil {
		t.Fatalf("redistest: replica of %s: %v", s.Addr, err)
	}
	t.Cleanup(r.Close)
	c := r.NewClient()
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s never linked to %s: %v", r.Addr, s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Real reports whether this is a real redis-server (not the fallback).
func (s *Server) Real() bool { return s.mini == nil }

// RequireReal skips the test when the server is the miniredis fallback.
func (s *Server) RequireReal(t testing.TB) {
	t.Helper()
	if !s.Real() {
		t.Skip("redistest: needs a real redis-server (kill, restart, AOF); running on the miniredis fallback")
	}
}

// Client returns a new client of the server, closed at the test's cleanup.
func (s *Server) Client(t testing.TB) redis.UniversalClient {
	t.Helper()
	c := s.NewClient()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// NewClient returns a new client of the server; the caller closes it.
func (s *Server) NewClient() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
}

// Dir returns the server's data directory.
func (s *Server) Dir() string { return s.opts.Dir }

func (s *Server) start() error {
	common := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.opts.Dir, "--daemonize", "no",
		"--logfile", filepath.Join(s.opts.Dir, "redis.log"),
		"--protected-mode", "no",
	}
	var args []string
	switch {
	case s.opts.Sentinel != "":
		conf := filepath.Join(s.opts.Dir, "sentinel.conf")
		if _, err := os.Stat(conf); err != nil { // a restart keeps the rewritten one
			if err := os.WriteFile(conf, []byte(s.opts.Sentinel+"\n"), 0o644); err != nil {
				return err
			}
		}
		args = append([]string{conf, "--sentinel"}, common...)
	default:
		args = append(common, "--save", "")
		if s.opts.AOF {
			args = append(args, "--appendonly", "yes", "--appendfsync", s.opts.Fsync)
		} else {
			args = append(args, "--appendonly", "no")
		}
		if s.opts.Cluster {
			args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(s.opts.Dir, "nodes.conf"),
				"--cluster-node-timeout", "2000")
		}
		if s.opts.ReplicaOf != "" {
			host, port, err := net.SplitHostPort(s.opts.ReplicaOf)
			if err != nil {
				return err
			}
			args = append(args, "--replicaof", host, port)
		}
	}
	cmd := exec.Command(s.bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	wait := make(chan error, 1)
	go func() { wait <- cmd.Wait() }()
	c := s.NewClient()
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			break
		}
		select {
		case werr := <-wait:
			log, _ := os.ReadFile(filepath.Join(s.opts.Dir, "redis.log"))
			return fmt.Errorf("redistest: redis-server exited (%v): %s", werr, tail(log))
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-wait
			return fmt.Errorf("redistest: redis-server on %s not ready: %w", s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.mu.Lock()
	s.cmd, s.wait = cmd, wait
	s.mu.Unlock()
	return nil
}

// Kill kills the server with SIGKILL and waits for it to exit.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

// Stop stops the server with SIGTERM (a clean shutdown) and waits.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd, wait := s.cmd, s.wait
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	<-wait
}

// Restart starts the server again on the same port and directory (so with
// AOF on it reloads its data). It is an error if the server is running.
func (s *Server) Restart() error {
	if !s.Real() {
		return errors.New("redistest: cannot restart the miniredis fallback")
	}
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		return errors.New("redistest: server is running")
	}
	return s.start()
}

// Close kills the server and removes a temporary directory it made.
func (s *Server) Close() {
	if s.mini != nil {
		s.mu.Lock()
		if s.stopTick != nil {
			close(s.stopTick)
			<-s.tickDone
			s.stopTick = nil
		}
		s.mu.Unlock()
		s.mini.Close()
		return
	}
	s.Kill()
	s.mu.Lock()
	if s.admin != nil {
		_ = s.admin.Close()
		s.admin = nil
	}
	s.mu.Unlock()
	if s.ownDir {
		_ = os.RemoveAll(s.opts.Dir)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte) string {
	if len(b) > 500 {
		b = b[len(b)-500:]
	}
	return string(b)
}
