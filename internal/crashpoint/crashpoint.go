// Package crashpoint is the seam between wheelq's engine and its test
// harness (package wheelqtest): the named points of the engine at which a
// test may stop the queue as a SIGKILL would, and what the engine tells the
// harness of the writes it makes.
//
// The engine reaches it through wheelq.Config.Testing, an exported field
// whose type lives here, in an internal package: only packages of the
// wheelq module can make a *Hooks, so a user can set the field only
// through wheelqtest (or leave it nil, its only value in production). A nil
// Hooks costs the engine one nil check per point; see wheelqtest's package
// documentation for why this shape was chosen.
package crashpoint

import (
	"errors"
	"sync"
	"sync/atomic"
)

// Point names a place in the engine where a crash can be injected.
type Point int

// The crash points, in the order a job meets them.
const (
	// AfterWrite: Schedule's write is stored in Redis, the job is not yet
	// armed in memory, and Schedule has not returned.
	AfterWrite Point = iota + 1
	// AfterClaim: the job is claimed in Redis (marked running) and its
	// time has come; its handler is not yet called.
	AfterClaim
	// DuringRun: the handler has been called; the process dies while it
	// runs: its context is cancelled and its outcome is never stored.
	DuringRun
	// AfterRun: the handler returned; its outcome (ack, retry or dead
	// letter) is not yet queued for Redis.
	AfterRun
	// MidReload: the recoverer is arming jobs it read from Redis (a reload
	// after Start or a take-over, or a poll bringing jobs into the
	// horizon); the jobs before this one are armed, this one and the rest
	// of the page are not.
	MidReload
	// AfterReserve: a pulled job is reserved in Redis for a consumer
	// (Queue.Reserve) and not handed over: its reservation lapses at its
	// deadline, and the job comes back.
	AfterReserve
)

// String returns the point's name.
func (p Point) String() string {
	switch p {
	case AfterWrite:
		return "AfterWrite"
	case AfterClaim:
		return "AfterClaim"
	case DuringRun:
		return "DuringRun"
	case AfterRun:
		return "AfterRun"
	case MidReload:
		return "MidReload"
	case AfterReserve:
		return "AfterReserve"
	}
	return "Point(?)"
}

// Valid reports whether p is one of the named points.
func (p Point) Valid() bool { return p >= AfterWrite && p <= AfterReserve }

// ErrCrashed is returned by calls of a queue that a crash point stopped,
// and by its store for every call made after the crash.
var ErrCrashed = errors.New("wheelq: the queue crashed at a crash point (wheelqtest)")

// EventKind tells what a store call did.
type EventKind int

// The events the engine reports (only calls that Redis applied).
const (
	// Written: a job was stored by Schedule (Due is its due time).
	Written EventKind = iota + 1
	// Cancelled: a cancel deleted a job that no run had claimed.
	Cancelled
	// CancelledRunning: a cancel deleted a job whose run was claimed.
	CancelledRunning
	// Rescheduled: a job was moved to Due.
	Rescheduled
	// Acked: a run's success was stored: the job is gone.
	Acked
	// Retried: a failed run's retry was stored, due at Due.
	Retried
	// Dead: the job was dead-lettered.
	Dead
)

// Event is one applied store call about one job.
type Event struct {
	Kind EventKind
	Key  string // the job's key: topic + persist.KeySep + id
	Due  int64  // unix µs, for Written, Rescheduled and Retried
}

// Hooks connects one queue (one process incarnation) to the harness. Make
// one with New for every queue; it must not be shared by two queues.
type Hooks struct {
	// At is called by the engine at every point it passes, with the job's
	// key; it returns true to crash the queue there. It must not block.
	At func(p Point, key string) bool
	// Observe, if set, is told of every applied store call about a job. It
	// is called from the engine's goroutines and must not block.
	Observe func(Event)

	calls    atomic.Int64 // store calls that change jobs, in flight
	dead     atomic.Bool
	deadOnce sync.Once
	deadCh   chan struct{}
	mu       sync.Mutex
	kill     func()
	killed   bool
}

// New returns Hooks with at and observe (either may be nil).
func New(at func(Point, string) bool, observe func(Event)) *Hooks {
	return &Hooks{At: at, Observe: observe, deadCh: make(chan struct{})}
}

// Hit is called by the engine at point p for key: it reports whether the
// queue crashes there, and if so marks it dead first (from then on its
// store refuses every call, as a killed process sends nothing).
func (h *Hooks) Hit(p Point, key string) bool {
	if h.dead.Load() {
		return true
	}
	if h.At == nil || !h.At(p, key) {
		return false
	}
	h.MarkDead()
	return true
}

// MarkDead marks the queue dead without stopping its goroutines (Kill
// does).
func (h *Hooks) MarkDead() {
	h.dead.Store(true)
	h.deadOnce.Do(func() { close(h.deadCh) })
}

// Dead reports whether the queue crashed.
func (h *Hooks) Dead() bool { return h.dead.Load() }

// Crashed is closed when the queue crashes.
func (h *Hooks) Crashed() <-chan struct{} { return h.deadCh }

// Bind is called by the engine's New with the function that stops every
// goroutine of the queue without flushing or releasing anything.
func (h *Hooks) Bind(kill func()) {
	h.mu.Lock()
	h.kill = kill
	h.mu.Unlock()
}

// Kill marks the queue dead and stops it as a SIGKILL would (see Bind),
// once; later calls do nothing. It returns when every goroutine of the
// queue has returned.
func (h *Hooks) Kill() {
	h.MarkDead()
	h.mu.Lock()
	kill := h.kill
	done := h.killed
	h.killed = true
	h.mu.Unlock()
	if kill != nil && !done {
		kill()
	}
}

// Enter is called by the engine's store before a call that changes jobs,
// Exit after it (and after its events are noted).
func (h *Hooks) Enter() { h.calls.Add(1) }

// Exit: see Enter.
func (h *Hooks) Exit() { h.calls.Add(-1) }

// InFlight returns the number of store calls that change jobs in flight:
// with none, every change Redis applied has been noted.
func (h *Hooks) InFlight() int64 { return h.calls.Load() }

// Note reports an event to Observe, if set.
func (h *Hooks) Note(e Event) {
	if h.Observe != nil {
		h.Observe(e)
	}
}
