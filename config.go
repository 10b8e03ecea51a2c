package wheelq

// Config: what New takes, its defaults and their checks.

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wheelq/wheelq/internal/crashpoint"
	"github.com/wheelq/wheelq/wheel"
)

// Config configures a Queue. A zero field means the default written in its
// comment; New rejects values that make no sense.
type Config struct {
	// Namespace separates independent queues on one Redis. Default
	// "default". 1 to 64 bytes of ASCII letters, digits, '.', '_' and '-';
	// any other is an ErrInvalidConfig.
	Namespace string
	// Partitions is the number of partitions of the namespace; every
	// process of a namespace must use the same: the first to use the
	// namespace records its number in Redis, and Start, or a producer's
	// first call, fails with ErrLayout on another. Default 16, at most
	// 4,096.
	Partitions int
	// Concurrency is the number of handlers that run at once. Default 64,
	// at most 1,048,576.
	Concurrency int
	// MaxAttempts is the default number of runs of a job before it is
	// dead-lettered, at most 2^31-1. Default 10.
	MaxAttempts int
	// Backoff returns the delay before the run after a failed run number
	// attempt (from 1). Default: 1s doubling per attempt up to 1h, each
	// delay scaled by a random factor in [0.75, 1.25).
	Backoff func(attempt int, err error) time.Duration
	// HandlerTimeout bounds one run of a handler through its context.
	// A handler that ignores its context and runs StuckGrace longer has
	// its run abandoned: logged, counted in Stats.Stuck, its job settled
	// as a failed run (ErrHandlerStuck; it may run again while the
	// handler goes on), so that neither hand-overs nor Shutdown wait for
	// it. Default 1 minute.
	HandlerTimeout time.Duration
	// MaxPayload is the largest payload Schedule accepts. Default 1 MiB.
	MaxPayload int
	// MaxDelay is the furthest ahead a job may be scheduled. Default 365
	// days.
	MaxDelay time.Duration
	// Horizon is how far ahead jobs are held in memory; later ones wait in
	// Redis until the poller brings them in. Default 1 minute.
	Horizon time.Duration
	// PollInterval is how often the poller advances the horizon and picks
	// up jobs that other processes scheduled for this one. Default 100ms.
	PollInterval time.Duration
	// LeaseTTL is how long a partition stays with a process that stopped
	// renewing its lease (a crash); then another process takes it over.
	// It is also how long a process that stopped stays in the namespace's
	// roster of live workers, by which the partitions are shared out
	// evenly among the started processes. Default 10s.
	LeaseTTL time.Duration
	// WriteTimeout bounds the Redis round trip of Schedule, Cancel,
	// Reschedule and of a batch of acks. Default 5s.
	WriteTimeout time.Duration
	// MaxBatch is the most jobs written (or settled) in one round trip.
	// Default 256, at most 65,536.
	MaxBatch int
	// ClaimLead is how long before its due time a job is claimed in Redis
	// (checked, read, marked running); it then waits in memory for its
	// exact time, so the round trip costs no precision. A claim may go out
	// up to a fifth of ClaimLead (1 ms at most) earlier still, with others
	// due just after it. Default 5ms.
	ClaimLead time.Duration
	// CacheSize is how many job records are kept in memory, so that a
	// loaded job fires without reading Redis for its payload, and fires even
	// while Redis is down. Default 100,000.
	CacheSize int
	// CacheBytes bounds the same records by weight: their payloads,
	// headers and keys, plus about 200 bytes each. Past either bound the
	// records kept longest are dropped; a job whose record was dropped
	// fires all the same, its record read by its claim (a job not cached
	// does not run while Redis is down, even with RunWhileRedisDown).
	// Default 128 MiB.
	CacheBytes int
	// Logger receives warnings and errors. Default: none.
	Logger *slog.Logger
	// Observer, if set, is told of the queue's events (jobs scheduled,
	// started, finished, cancelled; Redis round trips) for metrics: see
	// Observer, and contrib/prometheus for one. Its methods run on the
	// jobs' path and must return quickly. Default nil: none (a nil check
	// per event).
	Observer Observer
	// Clock is the source of time. Default wheel.RealClock(); tests inject
	// a wheel.FakeClock.
	Clock wheel.Clock
	// ReplicaAcks, if above 0, makes Schedule, Cancel, Reschedule and
	// Requeue return nil only once that many replicas have the change too
	// (a WAIT in the same round trip): with Sentinel, a failover then loses
	// no acknowledged job, as long as the promoted replica is one of them
	// (ask for all of a primary's replicas, and see docs/operations.md for
	// min-replicas-to-write). A change the primary applied but not enough
	// replicas acknowledged within ReplicaTimeout fails with an error
	// wrapping ErrOutcomeUnknown (it may be lost at a failover). On a
	// Cluster client every primary that takes a write waits for its own
	// replicas (set it to the replicas each primary has).
	//
	// Default (0): 1 on a client that says the deployment fails over — a
	// Sentinel client (redis.NewFailoverClient, or NewUniversalClient with
	// a MasterName) or a *redis.ClusterClient — since without it a
	// failover loses what Schedule acknowledged (a test lost 39,095 of
	// 181,206 jobs); none on a plain client. With one replica per primary,
	// the default is every replica; with more, set it to their number (a
	// replica that was not promoted may have acknowledged a write the
	// promoted one lacks). The cost and the availability it trades are in
	// docs/operations.md: while no replica acknowledges (every replica of a
	// primary down), writes fail after ReplicaTimeout with
	// ErrOutcomeUnknown rather than being acknowledged, as Kafka's
	// acks=all with min.insync.replicas refuses them. NoReplicaAcks opts
	// out: an acknowledgement then means the primary has the change (as
	// durable as its persistence settings make it).
	ReplicaAcks int
	// ReplicaTimeout bounds the wait for ReplicaAcks. Default 1s.
	ReplicaTimeout time.Duration
	// InstanceID is a stable name of this process, one that no other live
	// process of the namespace has at the same time: a StatefulSet pod's
	// name, a host's name with one process per host. With it, a process
	// restarted after a crash takes the partitions of its former
	// incarnation over at once, instead of waiting up to LeaseTTL for their
	// leases to lapse (during which its own jobs, and the partitions' jobs,
	// would wait). Two live processes with one InstanceID would take each
	// other's partitions and break every promise: leave it empty unless the
	// platform guarantees it is unique. It is also the process's id in
	// the roster of live workers, so a restarted process gets the same
	// share of the partitions back and a rolling restart moves no other
	// process's partitions. At most 128 bytes, no '#', not starting with
	// '!' (claim marks use it). Default empty
	// (leases always lapse before another process takes them).
	InstanceID string
	// LockDir is where a started queue keeps its lock file (on Unix; see
	// below), in a directory per namespace. Without an InstanceID, a
	// process killed and restarted on the same host would wait up to
	// LeaseTTL for its former incarnation's leases to lapse; a lock file
	// (flock(2), which the kernel drops when its process ends, however it
	// ends, and never while it lives, stopped or not) proves that
	// incarnation gone, and the new process takes its leases and roster
	// place over at once. It tells only of processes on this host (or
	// sharing the directory): a process restarted elsewhere still waits.
	// The directory must be local to the host (not a network file system
	// whose locks are not the kernel's). Default: a directory under
	// os.TempDir(); "-" keeps no lock file.
	LockDir string
	// RunWhileRedisDown is an availability mode, off by default. Off, a job
	// starts only after Redis confirmed its claim, so every promise holds
	// whatever fails. On, a job whose claim cannot reach Redis (an error or
	// a timeout) runs from the payload cache all the same, as long as this
	// process's lease on its partition is still valid by its own clock.
	// The weaker guarantee that buys: a job that another process cancelled
	// or rescheduled (both returned nil) shortly before Redis became
	// unreachable from here may still run at its old time, and a run whose
	// ack cannot be stored before the lease lapses runs again elsewhere.
	// A paused topic's jobs do not run this way when this process knows
	// of the pause: it made it itself (even by a Pause that returned an
	// error), got its message, read it from Redis (at Start, then every
	// second), or holds jobs of the topic parked; they are parked, and
	// run after Resume once Redis is back. But a topic that another
	// process paused shortly before Redis became unreachable from here,
	// a pause this process neither got as a message nor read yet, may
	// still run.
	RunWhileRedisDown bool
	// RefuseUnhandled makes Schedule, ScheduleBatch and DeclareRecurring
	// refuse, with ErrTopicMode, a job or schedule of a topic this queue
	// neither handles (Handle) nor pulls (Pull), before anything is
	// stored, and Requeue a dead job of such a topic (it stays dead);
	// and a schedule of such a topic stored earlier is not filled
	// by the queue's loop (a WARN names it once). For a team whose processes all run the same topics (a
	// started wheelq-server), where such a job could only fail "no
	// handler" until it is dead-lettered. Off by default: a producer, or
	// a team upgraded one process at a time, may schedule a topic that
	// another process or a later version handles.
	RefuseUnhandled bool
	// History is the run history's retention: a job that finished (its
	// handler succeeded, or it was cancelled) keeps its outcome, finish
	// time, attempts and last error, without its payload, so that Lookup
	// can say what happened to it. Dead jobs stay in the dead-letter set
	// until requeued or cancelled, whatever this says.
	History HistoryRetention
	// Testing is for package wheelqtest only, and nil everywhere else: its
	// type lives in an internal package, so no other package can make
	// one. It connects the queue to wheelqtest's harness (crash points and
	// the history of what was stored). Nil costs one nil check per crash
	// point.
	Testing *crashpoint.Hooks

	test testHooks // set by this package's tests only
}

// HistoryRetention bounds the run history (Config.History). The memory
// it takes in Redis is bounded by Count: about 220 bytes an entry with a
// 17-byte job key, so 22 MB for the default 100,000 (docs/operations.md).
type HistoryRetention struct {
	// Count is the most finished jobs kept in the namespace, the latest
	// first (each partition keeps Count/Partitions of its own, rounded
	// up). A full history is trimmed in steps of a 64th of a partition's
	// share: it holds up to 1/64 more entries between trims. Default
	// 100,000; a negative Count keeps no history.
	Count int
	// Age is how long after it finished a job is kept. Default 24h.
	Age time.Duration
}

func (c *Config) fill() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Namespace == "" {
		c.Namespace = defaultNamespace
	}
	if err := validNamespace(c.Namespace); err != nil {
		return err
	}
	def(&c.Partitions, 16)
	def(&c.Concurrency, 64)
	def(&c.MaxAttempts, 10)
	def(&c.MaxPayload, 1<<20)
	def(&c.MaxBatch, 256)
	def(&c.CacheSize, 100_000)
	def(&c.CacheBytes, 128<<20)
	if c.LockDir == "" {
		c.LockDir = defaultLockDir()
	}
	defd(&c.HandlerTimeout, time.Minute)
	defd(&c.MaxDelay, 365*24*time.Hour)
	defd(&c.Horizon, time.Minute)
	defd(&c.PollInterval, 100*time.Millisecond)
	defd(&c.LeaseTTL, 10*time.Second)
	defd(&c.WriteTimeout, 5*time.Second)
	defd(&c.ClaimLead, 5*time.Millisecond)
	def(&c.History.Count, 100_000)
	defd(&c.History.Age, 24*time.Hour)
	c.ClaimLead = c.ClaimLead.Truncate(time.Microsecond) // due times are whole µs
	if c.Backoff == nil {
		c.Backoff = DefaultBackoff
	}
	if c.Clock == nil {
		c.Clock = wheel.RealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Concurrency < 1 || c.Concurrency > maxConcurrency:
		return fmt.Errorf("%w: concurrency %d outside [1, %d]", ErrInvalidConfig, c.Concurrency, maxConcurrency)
	case c.Partitions < 1 || c.Partitions > maxPartitions:
		return fmt.Errorf("%w: partitions %d outside [1, %d]", ErrInvalidConfig, c.Partitions, maxPartitions)
	case c.MaxBatch > maxMaxBatch:
		return fmt.Errorf("%w: max batch %d > %d", ErrInvalidConfig, c.MaxBatch, maxMaxBatch)
	case c.MaxAttempts < 1 || c.MaxAttempts > maxAttemptsLimit:
		return fmt.Errorf("%w: max attempts %d outside [1, 2^31-1]", ErrInvalidConfig, c.MaxAttempts)
	case c.MaxPayload < 1:
		return fmt.Errorf("%w: max payload %d < 1", ErrInvalidConfig, c.MaxPayload)
	case c.MaxBatch < 1:
		return fmt.Errorf("%w: max batch %d < 1", ErrInvalidConfig, c.MaxBatch)
	case c.CacheSize < 1:
		return fmt.Errorf("%w: cache size %d < 1", ErrInvalidConfig, c.CacheSize)
	case c.CacheBytes < 1:
		return fmt.Errorf("%w: cache bytes %d < 1", ErrInvalidConfig, c.CacheBytes)
	case c.ReplicaAcks < NoReplicaAcks:
		return fmt.Errorf("%w: replica acks %d: want NoReplicaAcks (-1), 0 (the default) or a count of replicas", ErrInvalidConfig, c.ReplicaAcks)
	case c.ClaimLead < 0 || c.ClaimLead > time.Second:
		return fmt.Errorf("%w: claim lead %v outside [0, 1s]", ErrInvalidConfig, c.ClaimLead)
	case c.HandlerTimeout < 0 || c.WriteTimeout < 0:
		return fmt.Errorf("%w: negative timeout", ErrInvalidConfig)
	case c.MaxDelay < time.Second || c.MaxDelay > 10*365*24*time.Hour:
		return fmt.Errorf("%w: max delay %v outside [1s, 10 years]", ErrInvalidConfig, c.MaxDelay)
	case c.Horizon < time.Second || c.Horizon > c.MaxDelay:
		return fmt.Errorf("%w: horizon %v outside [1s, max delay]", ErrInvalidConfig, c.Horizon)
	case c.PollInterval < time.Millisecond || 2*c.PollInterval > c.Horizon:
		return fmt.Errorf("%w: poll interval %v outside [1ms, horizon/2]", ErrInvalidConfig, c.PollInterval)
	case c.History.Age < 0:
		return fmt.Errorf("%w: history age %v < 0", ErrInvalidConfig, c.History.Age)
	case c.LeaseTTL < time.Second:
		return fmt.Errorf("%w: lease TTL %v < 1s", ErrInvalidConfig, c.LeaseTTL)
	case len(c.InstanceID) > 128 || strings.Contains(c.InstanceID, "#") || strings.HasPrefix(c.InstanceID, "!"):
		return fmt.Errorf("%w: instance id %q: at most 128 bytes, no '#', not starting with '!'", ErrInvalidConfig, c.InstanceID)
	}
	return nil
}

// DefaultBackoff is the default Config.Backoff: 1s doubling per attempt up
// to 1h, scaled by a random factor in [0.75, 1.25) so that jobs that failed
// together do not retry together.
func DefaultBackoff(attempt int, _ error) time.Duration {
	d := time.Hour
	if attempt < 13 {
		d = min(time.Second<<max(attempt-1, 0), time.Hour)
	}
	return time.Duration(float64(d) * (0.75 + 0.5*rand.Float64()))
}

// NoReplicaAcks, as Config.ReplicaAcks, waits for no replica, also on a
// Sentinel or Cluster client (where the default waits for one): an
// acknowledged write is then on the primary alone, and a failover can lose
// it.
const NoReplicaAcks = -1

// replicaAcksFor resolves Config.ReplicaAcks for rdb: a set value as it is
// (NoReplicaAcks: 0), the default 1 on a Sentinel or Cluster client and 0
// on any other.
func replicaAcksFor(rdb redis.UniversalClient, acks int) int {
	switch {
	case acks == NoReplicaAcks:
		return 0
	case acks != 0:
		return acks
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return 1
	case *redis.Client:
		// go-redis names a Sentinel client's address so (sentinel.go).
		if c.Options().Addr == "FailoverClient" {
			return 1
		}
	}
	return 0
}

// validNamespace checks Config.Namespace: 1 to 64 bytes of ASCII
// letters, digits, '.', '_' and '-' (a namespace is part of every Redis
// key and of command lines; ':', '{' and '}' would break the keys' hash
// tags).
func validNamespace(ns string) error {
	if ns == "" || len(ns) > 64 {
		return fmt.Errorf("%w: namespace %q: want 1 to 64 bytes", ErrInvalidConfig, ns)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: namespace %q: only ASCII letters, digits, '.', '_' and '-'", ErrInvalidConfig, ns)
		}
	}
	return nil
}

// The largest counts a Config may give: past them a process could not
// hold what they ask for (a channel of Concurrency tasks, buffers of
// MaxBatch jobs); the store takes at most 4,096 partitions.
const (
	maxConcurrency = 1 << 20
	maxPartitions  = 4096
	maxMaxBatch    = 1 << 16
)
