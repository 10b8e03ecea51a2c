// Package breaker remembers that a server was found unreachable, so that
// calls fail at once instead of each spending a client's whole dial-retry
// budget before failing; one call at a time is let through every
// ProbeEvery to find out whether the server is back. While the server is
// reachable a call costs one atomic load.
package breaker

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ProbeEvery is how often, while the server is known to be unreachable,
// one call is let through to find out whether it is back.
const ProbeEvery = 250 * time.Millisecond

// Down is the error Admit returns while the server is unreachable: since
// when, and the connection failure seen last.
type Down struct {
	For  time.Duration
	Last error
}

func (d *Down) Error() string {
	return "unreachable for " + d.For.Round(time.Millisecond).String() + ", the last failure: " + d.Last.Error()
}

// Unwrap returns the failure seen last.
func (d *Down) Unwrap() error { return d.Last }

// Breaker is the state; its zero value is a reachable server.
type Breaker struct {
	down atomic.Bool // fast path: false while the server is reachable

	mu        sync.Mutex
	err       error     // guarded by mu: the connection failure seen last
	since     time.Time // guarded by mu: when the server was first found unreachable
	nextProbe time.Time // guarded by mu: when the next call may go through
	probing   bool      // guarded by mu: a probe is in flight
}

// Up reports whether the server is taken to be reachable: one atomic
// load, for a caller's fast path before it reads its clock.
func (b *Breaker) Up() bool { return !b.down.Load() }

// Admit says whether a call may go to the server at now: yes while it is
// reachable, or when it is this call's turn to probe (probe is true then;
// pass it to Note). Otherwise it returns a *Down.
func (b *Breaker) Admit(now time.Time) (probe bool, err error) {
	if !b.down.Load() {
		return false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.down.Load() {
		return false, nil
	}
	if !b.probing && !now.Before(b.nextProbe) {
		b.probing = true
		return true, nil
	}
	return false, &Down{For: now.Sub(b.since), Last: b.err}
}

// Err returns, at now, the *Down that Admit would return while the
// server is taken to be unreachable, and nil while it is reachable. Unlike
// Admit it never lets a call through: it is for a caller that will not go
// to the server now (one probe is in flight, or it would wait for
// another's call) but says why it has nothing.
func (b *Breaker) Err(now time.Time) error {
	if !b.down.Load() {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.down.Load() {
		return nil
	}
	return &Down{For: now.Sub(b.since), Last: b.err}
}

// Note records at now the outcome err of a call that Admit let through.
func (b *Breaker) Note(err error, probe bool, now time.Time) {
	conn := err != nil && IsConnErr(err)
	if !conn && !probe && !b.down.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	switch {
	case conn:
		if !b.down.Load() {
			b.since = now
		}
		b.err, b.nextProbe = err, now.Add(ProbeEvery)
		b.down.Store(true)
	case err == nil || probe:
		// The server answered (or the probe failed for another reason: a
		// refusal, the caller's context): reachable again.
		b.down.Store(false)
		b.err = nil
	}
}

// ErrNoAnswer stands for a call that the server left unanswered until the
// caller's own deadline for it ended (a write timeout, not a deadline
// handed down by the caller's caller): a caller passes it to Note in place
// of context.DeadlineExceeded. A server that is cut off with its
// connections left open answers nothing and refuses nothing; this is how
// it is found unreachable.
var ErrNoAnswer = errors.New("no answer within the call's timeout")

// IsConnErr reports whether err says that the server could not be
// reached: a refused or reset connection, a network timeout, a connection
// closed, ErrNoAnswer. A reply of the server's (an error reply) and a
// context that ended are not. go-redis returns some of these bare, without
// the *net.OpError: "i/o timeout" (os.ErrDeadlineExceeded) on a fresh
// connection's read, "write: broken pipe" (an *os.SyscallError) on a
// connection reset. A caller whose own deadline may have set the
// connection's must not pass its timeouts here (see the root's reach.note).
func IsConnErr(err error) bool {
	var op *net.OpError
	return errors.Is(err, ErrNoAnswer) || errors.As(err, &op) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
