// Package wheelqtest tests code that uses wheelq, including what happens
// when the process dies at the worst moment, in an ordinary unit test.
//
// New starts a queue on an embedded Redis (miniredis; or on the client in
// Options.Redis, such as a real redis-server) with a fake clock. Handlers
// are registered through the Harness, which records every run. Advance
// moves the fake clock and returns once every job that came due has run
// and its outcome is stored, stepping through each due time on the way, so
// a test asserts on a settled world with no sleeps:
//
//	h := wheelqtest.New(t, wheelqtest.Options{})
//	h.Handle("order.expire", expire)
//	_, _ = h.Queue().Schedule(ctx, "order.expire", []byte("o-1"), wheelq.ID("o-1"), wheelq.After(30*time.Minute))
//	require.NoError(t, h.Advance(30*time.Minute))
//
// # Paused topics
//
// A topic paused with Queue.Pause keeps its jobs pending, as it does in
// production: Advance, Restart and RunNow do not wait for them (they are
// not unfinished work) and Advance does not stop at their due times.
// Scheduled and ExpectScheduled still see them; after Queue.Resume, the
// next Advance (Advance(0) for those already due) runs them. A paused
// job that has not run is no violation for Check.
//
// # Crash points
//
// CrashAt and CrashAtJob arm a crash at a named point of the engine (a
// Point: AfterWrite, AfterClaim, DuringRun, AfterRun, MidReload), for any
// job or for one. When the engine reaches it the queue stops as a SIGKILL
// would stop its process: from that instant its store sends nothing to
// Redis (no queued outcome is flushed, no claim given back, no lease
// released), runs in progress have their contexts cancelled and their
// outcomes dropped, and every goroutine of the queue is stopped. Restart
// then starts a new queue on the same Redis and the same clock, as a
// restarted process would: its former incarnation's leases are still in
// Redis, and it takes them over at once through Config.InstanceID (the
// harness sets one), so the restart waits for no lease TTL.
//
// # The history check
//
// The harness records every run (Runs, History), every crash, and every
// change Redis applied (writes, cancels, acks, retries, dead letters).
// Check, which New's cleanup also runs, asserts wheelq's promises on that
// history: no job whose write Redis applied is lost (it ran to an ack, was
// cancelled or dead-lettered, or is still stored), no run started before
// its due time by the fake clock, no run started after a cancel that found
// the job unclaimed, and no job ran successfully twice unless a crash came
// in between. What the handler did twice across such a crash is the
// user's to judge: Runs gives each job's runs, so the test asserts its own
// idempotency (the card was charged once).
//
// # Pulled topics
//
// Options.Pull names topics consumed by pulling (wheelq.Queue.Pull). The
// test is the consumer: Harness.Reserve takes what is due by the fake
// clock (it does not block), and Harness.Ack and Nack settle a
// reservation; each reservation is a run in the history, ended by its
// Ack or Nack. A consumer that dies holding a reservation is a test that
// never acks it: Advance past its deadline and the job comes back, one
// attempt counted. The crash point AfterReserve kills the process between
// reserving a job in Redis and handing it over.
//
// # Why Config.Testing
//
// The engine needs a seam for crash points and for the history, and the
// public API should not grow one. wheelq.Config.Testing is an exported
// field whose type, *crashpoint.Hooks, lives in an internal package: only
// wheelq's own packages can make one, so users cannot set it except
// through this package, and it needs no build tag. (River's Config.Test
// is an exported struct users could fill; the internal type keeps ours
// closed.) With the field nil, each crash point costs the engine one nil
// check; docs/benchmarks-history.md has the before and after figures.
//
// The harness stands for one process at a time. It needs handlers that
// return when their context is cancelled (a crash waits for them).
package wheelqtest
