package wheelq

import (
	"context"
	"log/slog"
	"time"

	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/recovery"
	"github.com/wheelq/wheelq/wheel"
)

// engineStore is what the engine needs of the Redis store: the seam at
// which tests inject faults per call (a reply lost after the call applied,
// a late reply, a refusal). persist.Store is the one implementation; the
// recoverer sees the same value through recovery.Store.
type engineStore interface {
	recovery.Store
	inspectorStore

	Init(ctx context.Context) error
	Ping(ctx context.Context) error
	PartitionOf(key string) int
	Keys(p int) persist.Keys

	Write(ctx context.Context, tokens []string, ws []persist.Write) ([]persist.WriteResult, error)
	CancelMany(ctx context.Context, keys []string) ([]persist.Change, error)
	Cancel(ctx context.Context, key string) (persist.Change, error)
	RescheduleMany(ctx context.Context, tokens []string, ms []persist.Move) ([]persist.Change, error)
	Reschedule(ctx context.Context, tok, key string, due int64, rev uint32) (persist.Change, error)
	Claim(ctx context.Context, tokens []string, reqs []persist.ClaimRequest, out []persist.ClaimResult) ([]persist.ClaimResult, error)
	Settle(ctx context.Context, tokens []string, now int64, os []persist.Outcome) ([]bool, error)
	DeadLetterCorrupt(ctx context.Context, tok, key string, raw, rec []byte, now int64) (bool, error)

	// Pulled topics (pull.go).
	DeclareTopics(ctx context.Context, modes map[string]string) error
	TopicModes(ctx context.Context) (map[string]string, error)
	Due(ctx context.Context, tokens []string, now, ahead int64, jobs []persist.DueJob) ([]persist.DueResult, error)
	Take(ctx context.Context, topics []string, max int, now, deadline int64, nonce, tok string, start int) (persist.TakeResult, error)
	Pop(ctx context.Context, topics []string, max int, now int64, start int) (persist.TakeResult, error)
	Resolve(ctx context.Context, now int64, ops []persist.ResolveOp) ([]byte, error)

	// Per-topic limits (limits.go).
	Admit(ctx context.Context, now, lease int64, reqs []persist.LimitRequest) ([]int64, error)
	RenewPermits(ctx context.Context, lease int64, ps []persist.PermitRef) error
	ReleasePermits(ctx context.Context, ps []persist.PermitRef) error

	// Recurring schedules (recurring.go).
	Recurs(ctx context.Context, parts []int) ([]persist.RecurState, error)
	RecurOf(ctx context.Context, p int, name string) (persist.RecurState, error)
	DeclareRecur(ctx context.Context, p int, name, spec, old string, read, watermark int64, drop []persist.Slot) (bool, error)
	RemoveRecur(ctx context.Context, p int, name, spec string, read int64, drop []string) (bool, error)
	FillRecur(ctx context.Context, p int, tok, name, spec string, floor int64, slots []persist.Slot) ([]string, error)
	Time(ctx context.Context) (time.Time, error)

	Get(ctx context.Context, key string) (persist.Record, persist.State, error)
	History(ctx context.Context, key string) (persist.Record, persist.State, bool, error)
	Requeue(ctx context.Context, tok, key string, rev uint32, due int64, rec []byte) (bool, error)
	RangeDead(ctx context.Context, p int, cur persist.Cursor, limit int) ([]persist.Entry, persist.Cursor, error)
	Records(ctx context.Context, p int, keys []string) ([][]byte, error)
	Counts(ctx context.Context) (pending, dead int64, err error)
	Census(ctx context.Context, before int64) (persist.Census, error)
	Repair(ctx context.Context, p int, tok string, cur persist.RepairCursor, count int, now int64) (persist.RepairCursor, persist.RepairResult, error)
}

var _ engineStore = (*persist.Store)(nil)

// stageDeps is what the stages that act on jobs in Redis share (the
// claimer and the settler): the store, the queue's lease token per
// partition (its fence), its clock, logger, record cache, counters and
// in-flight set.
type stageDeps struct {
	store    engineStore
	fence    []string
	clock    wheel.Clock
	log      *slog.Logger
	cache    *recordCache
	stats    *counters
	inflight *inflightSet
}

// testHooks are set only by this package's tests (Config.test).
type testHooks struct {
	// wrapStore, if set, wraps the store the engine uses.
	wrapStore func(engineStore) engineStore
	// sweepInterval, if set, is the recoverer's SweepInterval: a test
	// of a path that arms jobs sets it long, so that the sweep (the
	// safety net for lost armings) cannot hide a job that path lost.
	sweepInterval time.Duration
	// recurClock, if set, is the clock of recurring schedules' slots
	// instead of Redis's TIME (recurNow): a test on a fake clock.
	recurClock bool
}
