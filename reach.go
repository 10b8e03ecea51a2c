package wheelq

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wheelq/wheelq/wheel"
)

// probeEvery is how often, while Redis is known to be unreachable, one
// call that changes jobs is let through to find out whether it is back.
const probeEvery = 250 * time.Millisecond

// reach remembers that Redis was found unreachable, so that the calls
// that change jobs (Schedule, Cancel, Reschedule, Requeue) fail at once
// with ErrUnavailable instead of each spending the client's whole
// dial-retry budget (about 0.8 s with go-redis's defaults) before failing.
// While Redis is reachable it costs one atomic load per call.
type reach struct {
	down atomic.Bool // fast path: false while Redis is reachable

	mu        sync.Mutex
	err       error     // guarded by mu: the connection failure seen last
	since     time.Time // guarded by mu: when Redis was first found unreachable
	nextProbe time.Time // guarded by mu: when the next call may go through
	probing   bool      // guarded by mu: a probe is in flight
}

// admit says whether a call may go to Redis now (by clock): yes while Redis is
// reachable, or when it is this call's turn to probe (probe is true then;
// pass it to note). Otherwise it returns an error wrapping ErrUnavailable
// and the failure seen last.
func (r *reach) admit(clock wheel.Clock) (probe bool, err error) {
	if !r.down.Load() {
		return false, nil
	}
	now := clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.down.Load() {
		return false, nil
	}
	if !r.probing && !now.Before(r.nextProbe) {
		r.probing = true
		return true, nil
	}
	return false, fmt.Errorf("%w for %v, the last failure: %w", ErrUnavailable, now.Sub(r.since).Round(time.Millisecond), r.err)
}

// note records the outcome err of a call that admit let through.
func (r *reach) note(err error, probe bool, clock wheel.Clock) {
	conn := err != nil && isConnErr(err)
	if !conn && !probe && !r.down.Load() {
		return
	}
	now := clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if probe {
		r.probing = false
	}
	switch {
	case conn:
		if !r.down.Load() {
			r.since = now
		}
		r.err, r.nextProbe = err, now.Add(probeEvery)
		r.down.Store(true)
	case err == nil || probe:
		// Redis answered (or the probe failed for another reason: a
		// refusal, the caller's context): reachable again.
		r.down.Store(false)
		r.err = nil
	}
}

// isConnErr reports whether err says that Redis could not be reached: a
// refused or reset connection, a network timeout, a connection closed.
// A reply of Redis's (an error reply) and a context that ended are not.
func isConnErr(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
