package wheelq

import (
	"context"
	"time"

	"github.com/wheelq/wheelq/internal/crashpoint"
	"github.com/wheelq/wheelq/internal/errs"
	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/recovery"
)

// This file is the engine's side of package wheelqtest's crash points
// (Config.Testing). With Config.Testing nil, none of it runs: each point
// in queue.go is one nil check (crashAt inlines to it).

// crashAt reports whether the queue crashes at point p for the job key:
// Config.Testing is set and its hook says so (the store then already
// refuses every call). The caller abandons what it was doing.
func (q *Queue) crashAt(p crashpoint.Point, key string) bool {
	return q.cfg.Testing != nil && q.cfg.Testing.Hit(p, key)
}

// crash stops the queue as a SIGKILL would stop its process: the store
// already refuses every call (Hooks.MarkDead), so nothing queued is
// flushed, no claim is given back and no lease is released; running
// handlers' contexts are cancelled at once and their outcomes dropped. It
// returns once every goroutine of the queue has returned (a handler that
// ignores its context is waited for).
func (q *Queue) crash() {
	q.cfg.Testing.MarkDead()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace: Shutdown cancels the handlers and abandons the flush
	_ = q.Shutdown(ctx)
	q.workers.Wait()
}

// crashStore is the store of a queue with Config.Testing set: once the
// queue is dead it refuses every call (a killed process sends nothing),
// and it tells the hooks what each applied call did to which job.
type crashStore struct {
	engineStore
	h *crashpoint.Hooks
}

func newCrashStore(s engineStore, h *crashpoint.Hooks) engineStore {
	c := &crashStore{engineStore: s, h: h}
	if w, ok := s.(recovery.RosterWatcher); ok {
		// Keep the roster's watch: without it a queue with Config.Testing
		// learnt of roster changes only by polling.
		return crashWatchStore{crashStore: c, w: w}
	}
	return c
}

// crashWatchStore is a crashStore over a store that watches the roster.
type crashWatchStore struct {
	*crashStore
	w recovery.RosterWatcher
}

// WatchRoster watches until ctx ends; a dead queue watches nothing.
func (s crashWatchStore) WatchRoster(ctx context.Context, changed func()) error {
	if err := s.dead(); err != nil {
		return err
	}
	return s.w.WatchRoster(ctx, changed)
}

func (c *crashStore) dead() error {
	if c.h.Dead() {
		return errs.Errorf("wheelq: store: %w", crashpoint.ErrCrashed)
	}
	return nil
}

func (c *crashStore) Init(ctx context.Context) error {
	if err := c.dead(); err != nil {
		return err
	}
	return c.engineStore.Init(ctx)
}

func (c *crashStore) LeaseAll(ctx context.Context, parts []int, op persist.LeaseOp, token string, ttl time.Duration, dead ...string) ([]bool, error) {
	if err := c.dead(); err != nil {
		return nil, err
	}
	return c.engineStore.LeaseAll(ctx, parts, op, token, ttl, dead...)
}

func (c *crashStore) PollMany(ctx context.Context, loaded int64, ttl time.Duration, maxInbox, pageSize int, reqs []persist.PollRequest, out []persist.PollReply) ([]persist.PollReply, error) {
	if err := c.dead(); err != nil {
		return out[:0], err
	}
	return c.engineStore.PollMany(ctx, loaded, ttl, maxInbox, pageSize, reqs, out)
}

func (c *crashStore) RangePending(ctx context.Context, p int, after, until int64, cur persist.Cursor, limit int) ([]persist.Entry, persist.Cursor, error) {
	if err := c.dead(); err != nil {
		return nil, cur, err
	}
	return c.engineStore.RangePending(ctx, p, after, until, cur, limit)
}

func (c *crashStore) Census(ctx context.Context, before int64) (persist.Census, error) {
	if err := c.dead(); err != nil {
		return persist.Census{}, err
	}
	return c.engineStore.Census(ctx, before)
}

func (c *crashStore) Repair(ctx context.Context, p int, tok string, cur persist.RepairCursor, count int, now int64) (persist.RepairCursor, persist.RepairResult, error) {
	if err := c.dead(); err != nil {
		return cur, persist.RepairResult{}, err
	}
	return c.engineStore.Repair(ctx, p, tok, cur, count, now)
}

func (c *crashStore) Write(ctx context.Context, tokens []string, ws []persist.Write) ([]persist.WriteResult, error) {
	if err := c.dead(); err != nil {
		return nil, err
	}
	c.h.Enter()
	defer c.h.Exit()
	res, err := c.engineStore.Write(ctx, tokens, ws)
	if err == nil {
		for i, r := range res {
			if r != persist.Duplicate {
				c.h.Note(crashpoint.Event{Kind: crashpoint.Written, Key: ws[i].Key, Due: ws[i].Due})
			}
		}
	}
	return res, err
}

func (c *crashStore) noteCancel(key string, ch persist.Change) {
	switch ch {
	case persist.Changed:
		c.h.Note(crashpoint.Event{Kind: crashpoint.Cancelled, Key: key})
	case persist.ChangedWhileRunning:
		c.h.Note(crashpoint.Event{Kind: crashpoint.CancelledRunning, Key: key})
	}
}

func (c *crashStore) CancelMany(ctx context.Context, keys []string) ([]persist.Change, error) {
	if err := c.dead(); err != nil {
		return nil, err
	}
	c.h.Enter()
	defer c.h.Exit()
	res, err := c.engineStore.CancelMany(ctx, keys)
	if err == nil {
		for i, ch := range res {
			c.noteCancel(keys[i], ch)
		}
	}
	return res, err
}

func (c *crashStore) Cancel(ctx context.Context, key string) (persist.Change, error) {
	if err := c.dead(); err != nil {
		return persist.NotFound, err
	}
	c.h.Enter()
	defer c.h.Exit()
	ch, err := c.engineStore.Cancel(ctx, key)
	if err == nil {
		c.noteCancel(key, ch)
	}
	return ch, err
}

func (c *crashStore) RescheduleMany(ctx context.Context, tokens []string, ms []persist.Move) ([]persist.Change, error) {
	if err := c.dead(); err != nil {
		return nil, err
	}
	c.h.Enter()
	defer c.h.Exit()
	res, err := c.engineStore.RescheduleMany(ctx, tokens, ms)
	if err == nil {
		for i, ch := range res {
			if ch != persist.NotFound {
				c.h.Note(crashpoint.Event{Kind: crashpoint.Rescheduled, Key: ms[i].Key, Due: ms[i].Due})
			}
		}
	}
	return res, err
}

func (c *crashStore) Reschedule(ctx context.Context, tok, key string, due int64, rev uint32) (persist.Change, error) {
	if err := c.dead(); err != nil {
		return persist.NotFound, err
	}
	c.h.Enter()
	defer c.h.Exit()
	ch, err := c.engineStore.Reschedule(ctx, tok, key, due, rev)
	if err == nil && ch != persist.NotFound {
		c.h.Note(crashpoint.Event{Kind: crashpoint.Rescheduled, Key: key, Due: due})
	}
	return ch, err
}

func (c *crashStore) Claim(ctx context.Context, tokens []string, reqs []persist.ClaimRequest, out []persist.ClaimResult) ([]persist.ClaimResult, error) {
	if err := c.dead(); err != nil {
		return nil, err
	}
	return c.engineStore.Claim(ctx, tokens, reqs, nil)
}

func (c *crashStore) Settle(ctx context.Context, tokens []string, now int64, os []persist.Outcome) ([]bool, error) {
	if err := c.dead(); err != nil {
		return nil, err
	}
	c.h.Enter()
	defer c.h.Exit()
	applied, err := c.engineStore.Settle(ctx, tokens, now, os)
	if err == nil {
		for i, o := range os {
			if i >= len(applied) || !applied[i] {
				continue
			}
			switch o.Op {
			case persist.Ack:
				c.h.Note(crashpoint.Event{Kind: crashpoint.Acked, Key: o.Key})
			case persist.Retry:
				c.h.Note(crashpoint.Event{Kind: crashpoint.Retried, Key: o.Key, Due: o.Due})
			case persist.Dead:
				c.h.Note(crashpoint.Event{Kind: crashpoint.Dead, Key: o.Key})
			}
		}
	}
	return applied, err
}

func (c *crashStore) DeadLetterCorrupt(ctx context.Context, tok, key string, raw, rec []byte, now int64) (bool, error) {
	if err := c.dead(); err != nil {
		return false, err
	}
	return c.engineStore.DeadLetterCorrupt(ctx, tok, key, raw, rec, now)
}

func (c *crashStore) Get(ctx context.Context, key string) (persist.Record, persist.State, error) {
	if err := c.dead(); err != nil {
		return persist.Record{}, 0, err
	}
	return c.engineStore.Get(ctx, key)
}

func (c *crashStore) History(ctx context.Context, key string) (persist.Record, persist.State, bool, error) {
	if err := c.dead(); err != nil {
		return persist.Record{}, 0, false, err
	}
	return c.engineStore.History(ctx, key)
}

func (c *crashStore) Requeue(ctx context.Context, tok, key string, rev uint32, due int64, rec []byte) (bool, error) {
	if err := c.dead(); err != nil {
		return false, err
	}
	c.h.Enter()
	defer c.h.Exit()
	ok, err := c.engineStore.Requeue(ctx, tok, key, rev, due, rec)
	if err == nil && ok {
		c.h.Note(crashpoint.Event{Kind: crashpoint.Rescheduled, Key: key, Due: due})
	}
	return ok, err
}

func (c *crashStore) RangeDead(ctx context.Context, p int, cur persist.Cursor, limit int) ([]persist.Entry, persist.Cursor, error) {
	if err := c.dead(); err != nil {
		return nil, cur, err
	}
	return c.engineStore.RangeDead(ctx, p, cur, limit)
}

func (c *crashStore) Records(ctx context.Context, p int, keys []string) ([][]byte, error) {
	if err := c.dead(); err != nil {
		return nil, err
	}
	return c.engineStore.Records(ctx, p, keys)
}

func (c *crashStore) Ping(ctx context.Context) error {
	if err := c.dead(); err != nil {
		return err
	}
	return c.engineStore.Ping(ctx)
}

func (c *crashStore) Counts(ctx context.Context) (pending, dead int64, err error) {
	if err := c.dead(); err != nil {
		return 0, 0, err
	}
	return c.engineStore.Counts(ctx)
}

// abandoned returns ctx already cancelled, its cause crashpoint.ErrCrashed:
// the context of a run whose process died while it ran.
func abandoned(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	cancel(crashpoint.ErrCrashed)
	return ctx
}

// The pulled topics' calls: a dead queue sends none.

func (c *crashStore) DeclareTopics(ctx context.Context, modes map[string]string) error {
	if err := c.dead(); err != nil {
		return err
	}
	return c.engineStore.DeclareTopics(ctx, modes)
}

func (c *crashStore) TopicModes(ctx context.Context) (map[string]string, error) {
	if err := c.dead(); err != nil {
		return nil, err
	}
	return c.engineStore.TopicModes(ctx)
}

func (c *crashStore) Due(ctx context.Context, tokens []string, now, ahead int64, jobs []persist.DueJob) ([]persist.DueResult, error) {
	if err := c.dead(); err != nil {
		return nil, err
	}
	c.h.Enter()
	defer c.h.Exit()
	return c.engineStore.Due(ctx, tokens, now, ahead, jobs)
}

func (c *crashStore) Take(ctx context.Context, topics []string, max int, now, deadline int64, nonce, tok string, start int) (persist.TakeResult, error) {
	if err := c.dead(); err != nil {
		return persist.TakeResult{}, err
	}
	c.h.Enter()
	defer c.h.Exit()
	return c.engineStore.Take(ctx, topics, max, now, deadline, nonce, tok, start)
}

// Resolve tells the hooks of the acks, retries and dead letters that
// applied, as Settle does for handlers' outcomes.
func (c *crashStore) Resolve(ctx context.Context, now int64, ops []persist.ResolveOp) ([]byte, error) {
	if err := c.dead(); err != nil {
		return nil, err
	}
	c.h.Enter()
	defer c.h.Exit()
	res, err := c.engineStore.Resolve(ctx, now, ops)
	if err == nil {
		for i, o := range ops {
			if i >= len(res) || res[i] != persist.Resolved {
				continue
			}
			switch o.Op {
			case 'a':
				c.h.Note(crashpoint.Event{Kind: crashpoint.Acked, Key: o.Key})
			case 'r':
				c.h.Note(crashpoint.Event{Kind: crashpoint.Retried, Key: o.Key, Due: o.Score})
			case 'd':
				c.h.Note(crashpoint.Event{Kind: crashpoint.Dead, Key: o.Key})
			}
		}
	}
	return res, err
}

// guarded calls f unless the queue is dead: the crash store's methods
// that only refuse.
func guarded[T any](c *crashStore, f func() (T, error)) (T, error) {
	if err := c.dead(); err != nil {
		var zero T
		return zero, err
	}
	return f()
}

// guardedErr is guarded for a call that returns only an error.
func guardedErr(c *crashStore, f func() error) error {
	if err := c.dead(); err != nil {
		return err
	}
	return f()
}

// The calls the crash store only refuses once dead (every other one it
// also notes for the hooks, above). TestCrashStoreRefusesEveryCall fails
// for an engineStore method missing here.

func (c *crashStore) Members(ctx context.Context, op persist.MemberOp, id string, ttl time.Duration) (persist.Roster, error) {
	return guarded(c, func() (persist.Roster, error) { return c.engineStore.Members(ctx, op, id, ttl) })
}

func (c *crashStore) RangeWindow(ctx context.Context, p int, dead bool, after, until int64, cur persist.Cursor, limit int) ([]persist.Entry, persist.Cursor, error) {
	if err := c.dead(); err != nil {
		return nil, cur, err
	}
	return c.engineStore.RangeWindow(ctx, p, dead, after, until, cur, limit)
}

func (c *crashStore) Running(ctx context.Context, p int) ([]persist.Entry, error) {
	return guarded(c, func() ([]persist.Entry, error) { return c.engineStore.Running(ctx, p) })
}

func (c *crashStore) Details(ctx context.Context, p int, keys []string) ([][]byte, []persist.Mark, error) {
	if err := c.dead(); err != nil {
		return nil, nil, err
	}
	return c.engineStore.Details(ctx, p, keys)
}

func (c *crashStore) TallyTopics(ctx context.Context, p int, dead bool, start int64, size int, before int64) ([]persist.Tally, int64, error) {
	if err := c.dead(); err != nil {
		return nil, 0, err
	}
	return c.engineStore.TallyTopics(ctx, p, dead, start, size, before)
}

func (c *crashStore) SetPaused(ctx context.Context, topic string, paused bool) error {
	return guardedErr(c, func() error { return c.engineStore.SetPaused(ctx, topic, paused) })
}

func (c *crashStore) PausedTopics(ctx context.Context) ([]string, error) {
	return guarded(c, func() ([]string, error) { return c.engineStore.PausedTopics(ctx) })
}

func (c *crashStore) WatchPaused(ctx context.Context, changed func(topic string, paused bool)) error {
	return guardedErr(c, func() error { return c.engineStore.WatchPaused(ctx, changed) })
}

func (c *crashStore) WatchEvents(ctx context.Context, f func(op, topic string)) error {
	return guardedErr(c, func() error { return c.engineStore.WatchEvents(ctx, f) })
}

func (c *crashStore) Admit(ctx context.Context, now, lease int64, reqs []persist.LimitRequest) ([]int64, error) {
	return guarded(c, func() ([]int64, error) { return c.engineStore.Admit(ctx, now, lease, reqs) })
}

func (c *crashStore) RenewPermits(ctx context.Context, lease int64, ps []persist.PermitRef) error {
	return guardedErr(c, func() error { return c.engineStore.RenewPermits(ctx, lease, ps) })
}

func (c *crashStore) ReleasePermits(ctx context.Context, ps []persist.PermitRef) error {
	return guardedErr(c, func() error { return c.engineStore.ReleasePermits(ctx, ps) })
}

func (c *crashStore) Recurs(ctx context.Context, parts []int) ([]persist.RecurState, error) {
	return guarded(c, func() ([]persist.RecurState, error) { return c.engineStore.Recurs(ctx, parts) })
}

func (c *crashStore) RecurOf(ctx context.Context, p int, name string) (persist.RecurState, error) {
	return guarded(c, func() (persist.RecurState, error) { return c.engineStore.RecurOf(ctx, p, name) })
}

func (c *crashStore) DeclareRecur(ctx context.Context, p int, name, spec, old string, read, watermark int64, drop []persist.Slot) (bool, error) {
	return guarded(c, func() (bool, error) {
		return c.engineStore.DeclareRecur(ctx, p, name, spec, old, read, watermark, drop)
	})
}

func (c *crashStore) RemoveRecur(ctx context.Context, p int, name, spec string, read int64, drop []string) (bool, error) {
	return guarded(c, func() (bool, error) { return c.engineStore.RemoveRecur(ctx, p, name, spec, read, drop) })
}

func (c *crashStore) FillRecur(ctx context.Context, p int, tok, name, spec string, floor int64, slots []persist.Slot) ([]string, error) {
	return guarded(c, func() ([]string, error) { return c.engineStore.FillRecur(ctx, p, tok, name, spec, floor, slots) })
}

func (c *crashStore) Pop(ctx context.Context, topics []string, max int, now int64, start int) (persist.TakeResult, error) {
	return guarded(c, func() (persist.TakeResult, error) { return c.engineStore.Pop(ctx, topics, max, now, start) })
}

func (c *crashStore) Time(ctx context.Context) (time.Time, error) {
	return guarded(c, func() (time.Time, error) { return c.engineStore.Time(ctx) })
}
