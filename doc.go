// Package wheelq runs delayed jobs: "cancel this unpaid order in 30
// minutes", "remind the patient two hours before", "delete this in 24 hours
// unless the user undoes it". It is precise, durable and fast at once:
// jobs fire from an in-process hierarchical timing wheel within a fraction
// of a millisecond of their due time, every job is in Redis before
// Schedule returns, and writes (schedules, cancels, reschedules, acks)
// are group-committed.
//
// # Basics
//
//	q, err := wheelq.New(rdb, wheelq.Config{})        // rdb: a *redis.Client or *redis.ClusterClient
//	q.Handle("orders.cancel", wheelq.HandlerFunc(func(ctx context.Context, j *wheelq.Job) error {
//		return cancelOrder(ctx, string(j.Payload))   // nil: done; error: retried
//	}))
//	q.Start(ctx)
//	id, err := q.Schedule(ctx, "orders.cancel", []byte(orderID), wheelq.After(30*time.Minute), wheelq.ID(orderID))
//	...
//	q.Cancel(ctx, "orders.cancel", orderID)            // the order was paid
//	q.Shutdown(ctx)
//
// # Guarantees
//
// Delivery is at-least-once. Schedule returns nil only after Redis
// acknowledged the job; from then on it leaves Redis only when its handler
// returned nil, when it was dead-lettered, or when it was cancelled (or
// a consumer acked it, or took it with Pop: see Pulled topics). A
// process killed at any instant loses nothing: a process that starts (or
// takes over the dead one's partitions: at once on the same host, by its
// lock file, see Config.LockDir; elsewhere after Config.LeaseTTL) runs
// every job still pending. A run that was in progress at the crash runs
// again, with the same Job.Attempt and Job.Rerun set: handlers must be
// idempotent.
//
// A handler never starts before its job's due time (due times are stored
// in microseconds, rounded up). A due time in the past runs at once.
//
// Cancel wins: after Cancel returned nil the job never starts. If a run
// had already been claimed, Cancel returns ErrRunning: the job is deleted,
// so it is not retried, but that run goes on.
//
// What survives a crash of Redis itself depends on its persistence
// settings: with appendonly yes and appendfsync always, every acknowledged
// job; with everysec, all but about the last second of writes. See
// docs/operations.md.
//
// # Timing
//
// Jobs due within Config.Horizon (default 1 minute) are held in the
// wheel, whose goroutine waits on Linux for a timerfd(2) through Go's
// network poller and wakes tens of microseconds late. A job is claimed in Redis
// Config.ClaimLead (default 5ms; up to a fifth more, 1 ms at most, so
// that jobs due close together share a wake) before its due time and
// started at that time exactly, so the claim's round trip costs no
// precision: a run's lateness is set by how soon the process is
// scheduled at the due time (the figures, with their commands, are in
// docs/benchmarks.md).
// Jobs due later wait in Redis and are brought in by a poller every
// Config.PollInterval (default 100ms) as they enter the horizon. A job
// scheduled by a process that does not own its partition is armed by the
// owner within one poll interval.
//
// Due times are absolute wall-clock times, stored as unix microseconds:
// the process that runs a job compares them with its own clock, so clocks
// of the processes of a namespace should agree within the lateness you can
// accept (NTP keeps them within milliseconds); a host whose clock is ahead
// runs jobs early by the skew, as that host reckons them. Within one
// process the wheel runs on the monotonic clock: a due time is converted
// when it is armed, and a job starts only once the process's wall clock
// shows its due time, so a step of the wall clock never makes a job early
// by the process's own clock (a step forward is noticed by the poller,
// which arms every loaded job again against the stepped clock).
//
// # Failures
//
// A handler's error (or panic) runs the job again after Config.Backoff
// (exponential with jitter by default) until Job.MaxAttempts runs failed;
// then the job moves to the dead-letter set, where DeadJobs lists it and
// Requeue or Cancel handles it. RetryAfter and Permanent let a handler
// choose. While Redis is unreachable no job starts (a job starts only
// after Redis confirmed its claim), and outcomes of runs already made are
// retried until Redis is back, never dropped. Once a call has found Redis
// unreachable, Schedule, Cancel, Reschedule and Requeue fail at once with
// ErrUnavailable, sending nothing, while one call in a while goes through
// to see whether it is back (the first call spends the client's own retry
// budget, or Config.WriteTimeout when Redis answers nothing). Config.RunWhileRedisDown trades the claim for availability:
// jobs in memory run from the payload cache while their lease is valid,
// with the weaker guarantee written on the field.
//
// A reply lost after its command applied, and a command the client sent
// again, never become a wrong answer: a replayed Schedule is recognised by
// its record (not ErrDuplicate), a replayed Cancel by a tombstone of its
// call (not ErrNotFound), a replayed Requeue, retry or dead-lettering by
// its new record, a lost poll reply leaves no window unscanned, and claims
// are bounded in bytes so that a slow link cannot make one time out
// forever. A write whose outcome cannot be known (its reply was lost) fails
// with an error wrapping ErrOutcomeUnknown; calling again is safe.
//
// # Pulled topics
//
// A topic may be consumed by pulling instead of a Handler, by any process
// (or, through a server, any language): Pull declares it, Reserve blocks
// until jobs of it are due and returns up to Max of them, each reserved
// for a time-to-run, and Ack, Nack and Touch settle or extend a
// reservation by its Receipt (the job and a token). Every promise above
// holds for pulled jobs: a job is never handed out before its due time;
// a consumer already blocked in Reserve gets it at that time, through
// the same start gate that starts handlers (its reservation written in
// Redis before Reserve returns); after Cancel returned nil it is never
// handed out, and Cancel of a reserved job returns ErrRunning (the
// consumer's Ack then fails with ErrReservationLost); delivery is at
// least once: a reservation neither acked nor nacked by its deadline
// lapses, counts a failed attempt, and the job is handed out again after
// the backoff (dead-lettered after its last attempt). Due jobs no
// consumer has asked for wait in Redis, in due order, costing no memory
// in any process, and Reserve in any process of the namespace takes them,
// oldest first. Reservations live in Redis, not in a process: a consumer
// may ack through any process, and a process that dies loses none. Pop is
// the exception a consumer chooses: it finishes the due jobs it takes in
// the same Redis call, so each is delivered at most once (a consumer that
// dies after Pop returned loses them). A
// topic is consumed one way in a namespace: Start refuses a topic recorded
// the other way (ErrTopicMode).
//
// # Partitions
//
// Jobs are spread over Config.Partitions partitions by a hash of topic
// and id; each partition is run by one process at a time, which holds its
// lease in Redis. Every script that claims or settles a job checks the
// lease (fencing), and a claimed job starts only while its process owns
// the partition by its own conservative clock: the lease's validity is
// counted from when its renewal was sent, less a drift margin
// (LeaseTTL/10), and it must still be the lease the claim was made under.
// So a process that was paused (GC, VM stall, SIGSTOP) or cut off from
// Redis past its lease starts nothing more of that partition, and drops
// what it held; the new owner runs those jobs. The assumption: a
// process's clock does not run slower than Redis's by more than the
// margin over a lease.
//
// The started processes of a namespace share its partitions out evenly
// (each owns about Partitions/N; Owned lists them). They find each other
// through a roster of live workers in Redis; a process joining gets its
// share handed over, and one that shuts down hands its share over at once.
// A hand-over keeps the old owner's lease until the outcomes of the runs
// it claimed in the partition are stored, so it runs no job twice. A
// process that dies is taken over at once by a process of the namespace on
// its host (its lock file, Config.LockDir, proves it gone); elsewhere it
// keeps its share until its leases lapse (LeaseTTL), or until it restarts
// with the same Config.InstanceID.
//
// Any process, started or not, can look into a namespace and steer it:
// Lookup says what became of a job (pending, dead, or, within
// Config.History's retention, done or cancelled: the run history keeps a
// finished job's outcome, finish time, attempts and last error, not its
// payload); List pages through jobs by topic, state and due window in due
// order; Counts counts them per topic; RunNow, CancelWhere and
// RequeueWhere act on one job or on a filter's; Pause holds a topic in
// every process, durably, and Resume runs its due jobs in due order.
// Config.Observer is told of every job event and Redis round trip (the
// contrib/prometheus module exports them); Headers carry a trace context
// from Schedule to the handler (contrib/otel). Package dashboard serves
// all of it as a web page, and cmd/wheelq from a shell.
package wheelq
