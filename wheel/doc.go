// Package wheel is wheelq's in-memory scheduler: a hierarchical hashed
// timing wheel (Wheel), a goroutine that runs one on a clock and sleeps
// precisely (Scheduler), and the clocks (RealClock, RuntimeClock,
// FakeClock).
//
// Guarantees, as precisely as time.Timer states its own:
//
//   - Add, Cancel and Reschedule are O(1) by string id; Add of a pending id
//     moves it. Cancel reports whether the entry was pending; after it
//     returns true the entry is never handed out. An entry already handed
//     to the callback (or being handed) is not pending.
//   - An entry is handed out once per Add, never before its due time on the
//     scheduler's clock, in due order (ties in an order fixed by the sequence of calls). A due time in the past
//     is handed out at once.
//   - The Scheduler's callback runs on its goroutine, never concurrently
//     with itself and never under its lock; Stop waits for it.
//   - Lateness: on Linux the scheduler's goroutine waits for a timerfd(2)
//     (which the kernel fires without timer slack) through Go's network
//     poller, parked and holding no P, and wakes tens of microseconds
//     late, ahead of time.AfterFunc's tail (the figures are in
//     docs/benchmarks.md). Elsewhere it sleeps on runtime timers.
//   - Memory: a pending entry costs about 57 bytes (40 in the slab, the
//     rest in the id index) plus its id string; cancelled and fired entries
//     are recycled; Reset and Stop release everything.
//
// Stability: this package is importable, but its API serves wheelq and may
// change in any minor release before v1.
package wheel
