package wheelq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/redistest"
)

// Tests of bad input: each gets a clear error or a dead-letter entry with
// the reason, never a panic, a hang, a silent default or a silent drop.

// TestPastDueTimesRunAtOnce: a due time before the Unix epoch (the zero
// time.Time, a date of 1900) runs at once, as any past time does, through
// Schedule and Reschedule; and a job stored with a score before
// the epoch (as Schedule stored At(time.Time{}) before) is reloaded at
// Start and runs.
func TestPastDueTimesRunAtOnce(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.bundle(t)
		b.q = b.newQueue(t, Config{})
		key := persist.JobKey("past", "stored")
		k := b.q.store.Keys(b.q.store.PartitionOf(key))
		rec := persist.Record{Rev: 1, MaxAttempts: 3, Created: time.Now()}
		require.NoError(t, b.rdb.HSet(b.ctx, k.Jobs, key, rec.Encode()).Err())
		require.NoError(t, b.rdb.ZAdd(b.ctx, k.Pending, redis.Z{Score: float64(time.Time{}.UnixMicro()), Member: key}).Err())
		r := newRuns()
		require.NoError(t, b.q.Handle("past", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
		require.NoError(t, b.q.Start(b.ctx))
		<-b.q.Ready()

		// The zero time itself is refused (TestZeroTimeRefused); a time
		// just after it runs at once.
		_, err := b.q.Schedule(b.ctx, "past", nil, ID("zero"), At(time.Time{}.Add(time.Microsecond)))
		require.NoError(t, err)
		_, err = b.q.Schedule(b.ctx, "past", nil, ID("1900"), At(time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)))
		require.NoError(t, err)
		_, err = b.q.Schedule(b.ctx, "past", nil, ID("moved"), After(time.Hour))
		require.NoError(t, err)
		require.NoError(t, b.q.Reschedule(b.ctx, "past", "moved", time.Time{}.Add(time.Microsecond)))
		ran := map[string]bool{}
		for range 4 {
			ran[r.next(t).ID] = true
		}
		require.Equal(t, map[string]bool{"stored": true, "zero": true, "1900": true, "moved": true}, ran)
		eventually(t, func() bool { return len(wqKeys(t, b)) == 0 }, "every job acked")
	})
}

// TestEmptyIDIsInvalid: ID("") is an error, not a random id (which would
// lose the idempotency the caller asked for); the calls that take an id
// refuse an empty one (or one too long to exist) too.
func TestEmptyIDIsInvalid(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		id, err := b.q.Schedule(b.ctx, "t", nil, ID(""))
		require.ErrorIs(t, err, ErrInvalidID)
		require.Empty(t, id)
		st, err := b.q.Stats(b.ctx)
		require.NoError(t, err)
		require.Zero(t, st.Pending, "nothing stored")
		for _, bad := range []string{"", strings.Repeat("x", 513)} {
			require.ErrorIs(t, b.q.Cancel(b.ctx, "t", bad), ErrInvalidID)
			require.ErrorIs(t, b.q.Reschedule(b.ctx, "t", bad, time.Now()), ErrInvalidID)
			require.ErrorIs(t, b.q.Requeue(b.ctx, "t", bad, time.Now()), ErrInvalidID)
			_, err = b.q.Lookup(b.ctx, "t", bad)
			require.ErrorIs(t, err, ErrInvalidID)
		}
	})
}

// TestMaxAttemptsOutOfRange: MaxAttempts below 1 is an error, not the
// default; so is one too large to store (more than 2^31-1), in an option
// or in Config. Nothing is stored.
func TestMaxAttemptsOutOfRange(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		for _, n := range []int{0, -1, 1 << 31} {
			_, err := b.q.Schedule(b.ctx, "t", nil, ID("x"), MaxAttempts(n))
			require.ErrorIs(t, err, ErrInvalidOption, "MaxAttempts(%d)", n)
		}
		_, err := b.q.Lookup(b.ctx, "t", "x")
		require.ErrorIs(t, err, ErrNotFound, "nothing stored")
		_, err = New(b.rdb, Config{MaxAttempts: 1 << 31})
		require.Error(t, err)
		_, err = b.q.Schedule(b.ctx, "t", nil, ID("x"), MaxAttempts(1<<31-1))
		require.NoError(t, err, "the largest that can be stored")
	})
}

// TestAtWithAfterIsInvalid: At and After together (in either order) are
// an error, not the last one silently; nothing is stored.
func TestAtWithAfterIsInvalid(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		for _, opts := range [][]Option{
			{At(time.Now().Add(time.Hour)), After(time.Minute)},
			{After(time.Minute), At(time.Now().Add(time.Hour))},
		} {
			_, err := b.q.Schedule(b.ctx, "t", nil, append(opts, ID("x"))...)
			require.ErrorIs(t, err, ErrInvalidOption, "%v", opts)
		}
		_, err := b.q.Lookup(b.ctx, "t", "x")
		require.ErrorIs(t, err, ErrNotFound, "nothing stored")
	})
}

// TestNilOptionAndUnknownPolicy: a nil Option is an error, not a panic;
// an OnDuplicate policy that is neither Reject nor Replace is an error,
// not Reject silently.
func TestNilOptionAndUnknownPolicy(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		var err error
		require.NotPanics(t, func() { _, err = b.q.Schedule(b.ctx, "t", nil, nil) })
		require.ErrorIs(t, err, ErrInvalidOption)
		_, err = b.q.Schedule(b.ctx, "t", nil, ID("x"), OnDuplicate(DuplicatePolicy(7)))
		require.ErrorIs(t, err, ErrInvalidOption)
		st, err := b.q.Stats(b.ctx)
		require.NoError(t, err)
		require.Zero(t, st.Pending, "nothing stored")
	})
}

// TestInspectBadArguments: DeadJobs with a negative limit is an error,
// not a panic (a limit of 0 lists nothing); Requeue beyond MaxDelay is an
// ErrTooFar, as Schedule and Reschedule are, and leaves the job dead.
func TestInspectBadArguments(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{MaxDelay: time.Hour})
		var err error
		require.NotPanics(t, func() { _, err = b.q.DeadJobs(b.ctx, -1) })
		require.ErrorIs(t, err, ErrInvalidOption)
		_, err = b.q.Schedule(b.ctx, "nohandler", nil, ID("d"), MaxAttempts(1))
		require.NoError(t, err)
		eventually(t, func() bool {
			info, err := b.q.Lookup(b.ctx, "nohandler", "d")
			return err == nil && info.State == StateDead
		}, "dead-lettered")
		dead, err := b.q.DeadJobs(b.ctx, 0)
		require.NoError(t, err)
		require.Empty(t, dead)
		require.ErrorIs(t, b.q.Requeue(b.ctx, "nohandler", "d", time.Now().Add(2*time.Hour)), ErrTooFar)
		info, err := b.q.Lookup(b.ctx, "nohandler", "d")
		require.NoError(t, err)
		require.Equal(t, StateDead, info.State, "still dead")
	})
}

// TestCallsAfterShutdownAreErrClosed: after Shutdown every call but Handle
// and Shutdown returns ErrClosed, as ErrClosed's doc says, and changes
// nothing in Redis; Stats still gives the process's own figures.
func TestCallsAfterShutdownAreErrClosed(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		_, err := b.q.Schedule(b.ctx, "t", nil, ID("x"), After(time.Hour))
		require.NoError(t, err)
		require.NoError(t, b.q.Shutdown(b.ctx))
		_, err = b.q.Schedule(b.ctx, "t", nil, ID("y"))
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorIs(t, b.q.Cancel(b.ctx, "t", "x"), ErrClosed)
		require.ErrorIs(t, b.q.Reschedule(b.ctx, "t", "x", time.Now()), ErrClosed)
		require.ErrorIs(t, b.q.Requeue(b.ctx, "t", "x", time.Now()), ErrClosed)
		_, err = b.q.Lookup(b.ctx, "t", "x")
		require.ErrorIs(t, err, ErrClosed)
		_, err = b.q.DeadJobs(b.ctx, 10)
		require.ErrorIs(t, err, ErrClosed)
		st, err := b.q.Stats(b.ctx)
		require.ErrorIs(t, err, ErrClosed)
		require.Equal(t, uint64(1), st.Scheduled, "the process's own figures")

		other := b.newQueue(t, Config{})
		info, err := other.Lookup(b.ctx, "t", "x")
		require.NoError(t, err)
		require.Equal(t, StatePending, info.State, "not cancelled")
		require.Greater(t, time.Until(info.Due), 30*time.Minute, "not rescheduled")
	})
}

// TestRingClientRefused: a *redis.Ring shards keys over servers, so the
// scripts that touch several partitions would reach one shard only; New
// refuses it with ErrUnsupportedClient instead of a queue that is fenced
// forever.
func TestRingClientRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	q, err := New(ring, Config{})
	require.ErrorIs(t, err, ErrUnsupportedClient)
	require.Nil(t, q)
}

// TestLayoutMismatchRefusedToProducers: the namespace's layout in Redis
// holds for every process. A producer (never started) configured with
// another number of partitions than the namespace's gets ErrLayout from
// its first call instead of writing where no worker looks; so does a
// process whose Start failed on the mismatch. Nothing is written.
func TestLayoutMismatchRefusedToProducers(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.bundle(t)
		worker := b.newQueue(t, Config{Partitions: 8})
		require.NoError(t, worker.Start(b.ctx))
		producer := b.newQueue(t, Config{Partitions: 16})
		failed := b.newQueue(t, Config{Partitions: 16})
		require.ErrorIs(t, failed.Start(b.ctx), ErrLayout)
		for _, q := range []*Queue{producer, failed} {
			for i := range 16 { // some fall in partitions 8-15, which no worker reads
				_, err := q.Schedule(b.ctx, "t", nil, ID(fmt.Sprint(i)))
				require.ErrorIs(t, err, ErrLayout)
			}
			require.ErrorIs(t, q.Cancel(b.ctx, "t", "0"), ErrLayout)
			require.ErrorIs(t, q.Reschedule(b.ctx, "t", "0", time.Now()), ErrLayout)
			require.ErrorIs(t, q.Requeue(b.ctx, "t", "0", time.Now()), ErrLayout)
			_, err := q.Lookup(b.ctx, "t", "0")
			require.ErrorIs(t, err, ErrLayout)
			_, err = q.DeadJobs(b.ctx, 1)
			require.ErrorIs(t, err, ErrLayout)
		}
		keys := b.keys(t, ":jobs")
		require.Empty(t, keys, "nothing written")
	})
}

// failFirst fails the first command of a name with an error, as if Redis
// had been unreachable, and counts the commands of that name.
type failFirst struct {
	name string
	n    atomic.Int64
}

func (h *failFirst) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == h.name && h.n.Add(1) == 1 {
			err := errors.New("injected: connection reset")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (h *failFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLayoutCheckedOnce: a producer checks the layout on its first call,
// not on every call; a check that failed on a Redis error fails that call
// and is made again on the next one.
func TestLayoutCheckedOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.NewClient()
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &failFirst{name: "hsetnx"} // Init's first command
	rdb.AddHook(hook)
	b := &bundle{srv: srv, rdb: rdb, ctx: context.Background()}
	producer := b.newQueue(t, Config{})
	_, err := producer.Schedule(b.ctx, "t", nil, ID("first"))
	require.ErrorContains(t, err, "injected")
	require.NotErrorIs(t, err, ErrLayout)
	for i := range 10 {
		_, err := producer.Schedule(b.ctx, "t", nil, ID(fmt.Sprint(i)))
		require.NoError(t, err)
	}
	require.NoError(t, producer.Cancel(b.ctx, "t", "0"))
	require.Equal(t, int64(2), hook.n.Load(), "checked until it succeeded, then never again")
	_, err = producer.Lookup(b.ctx, "t", "first")
	require.ErrorIs(t, err, ErrNotFound, "the failed call wrote nothing")
}

// TestScheduleUnderMaxmemoryLeavesNoHalfJob fills a redis-server that has
// a small maxmemory and the noeviction policy with Schedule calls (from 64
// callers, so that batches are large; most with random ids, the
// plain-write path, some with ids, schedule.lua's) until it refuses
// writes: a write that failed leaves neither a pending entry
// without its record (which claims find gone and nothing removes) nor a
// record without its pending entry (which never runs), and every job
// whose Schedule returned nil is stored whole.
func TestScheduleUnderMaxmemoryLeavesNoHalfJob(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	srv.RequireReal(t) // miniredis has no maxmemory
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	q := b.newQueue(t, Config{})
	require.NoError(t, b.rdb.ConfigSet(b.ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, b.rdb.ConfigSet(b.ctx, "maxmemory", "4mb").Err())
	payload := make([]byte, 4096)
	var mu sync.Mutex
	var stored []string
	var failed int
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 200 {
				opts := []Option{After(time.Hour)}
				if g%4 == 0 {
					opts = append(opts, ID(fmt.Sprint(g, "-", i)))
				}
				id, err := q.Schedule(b.ctx, "t", payload, opts...)
				mu.Lock()
				if err == nil {
					stored = append(stored, id)
				} else {
					failed++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d jobs stored, %d refused", len(stored), failed)
	require.NotEmpty(t, stored)
	require.NotZero(t, failed, "the server ran out of memory")
	records, pending := map[string]bool{}, map[string]bool{}
	for p := range q.store.Partitions() {
		k := q.store.Keys(p)
		fields, err := b.rdb.HKeys(b.ctx, k.Jobs).Result()
		require.NoError(t, err)
		for _, f := range fields {
			records[f] = true
		}
		members, err := b.rdb.ZRange(b.ctx, k.Pending, 0, -1).Result()
		require.NoError(t, err)
		for _, m := range members {
			pending[m] = true
		}
	}
	var noRecord, notPending []string
	for m := range pending {
		if !records[m] {
			noRecord = append(noRecord, m)
		}
	}
	for f := range records {
		if !pending[f] {
			notPending = append(notPending, f)
		}
	}
	require.Zero(t, len(noRecord), "pending entries without their record, such as %v", noRecord[:min(3, len(noRecord))])
	require.Zero(t, len(notPending), "records without their pending entry, such as %v", notPending[:min(3, len(notPending))])
	for _, id := range stored {
		require.True(t, pending[persist.JobKey("t", id)], "acknowledged job %s stored", id)
	}
}

// TestCorruptRecordsAreDeadLettered: records too short to hold a revision
// (0 and 3 bytes: a partial write, a foreign tool) and a record with bytes
// after its payload are dead-lettered with their raw bytes as the payload
// and the reason, never run and never left pending (to be armed again
// forever).
func TestCorruptRecordsAreDeadLettered(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.bundle(t)
		b.q = b.newQueue(t, Config{})
		good := (&persist.Record{Rev: 7, MaxAttempts: 3, Created: time.Now(), Payload: []byte("payload")}).Encode()
		raws := map[string][]byte{
			"empty":    {},
			"short":    good[:3],
			"trailing": append(append([]byte{}, good...), "junk"...),
		}
		now := float64(time.Now().UnixMicro())
		for id, raw := range raws {
			key := persist.JobKey("c", id)
			k := b.q.store.Keys(b.q.store.PartitionOf(key))
			require.NoError(t, b.rdb.HSet(b.ctx, k.Jobs, key, raw).Err())
			require.NoError(t, b.rdb.ZAdd(b.ctx, k.Pending, redis.Z{Score: now, Member: key}).Err())
		}
		r := newRuns()
		require.NoError(t, b.q.Handle("c", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
		require.NoError(t, b.q.Start(b.ctx))
		var dead []JobInfo
		eventually(t, func() bool {
			var err error
			dead, err = b.q.DeadJobs(b.ctx, 10)
			require.NoError(t, err)
			return len(dead) == len(raws)
		}, "every corrupt record dead-lettered")
		for _, d := range dead {
			require.Equal(t, StateDead, d.State)
			require.Contains(t, d.LastError, "corrupt", d.ID)
			require.Equal(t, raws[d.ID], d.Payload, "%s: the raw bytes are kept", d.ID)
		}
		st, err := b.q.Stats(b.ctx)
		require.NoError(t, err)
		require.Zero(t, st.Pending)
		r.none(t, 50*time.Millisecond)
		eventually(t, func() bool {
			n := 0
			for p := range b.q.store.Partitions() {
				n += int(b.rdb.HLen(b.ctx, b.q.store.Keys(p).Running).Val())
			}
			return n == 0
		}, "no claim mark left")
	})
}

// TestZeroTimeRefused: At(time.Time{}) ran the job at
// once, so an uninitialised time in the caller's code fired a destructive
// job immediately. The zero time is an ErrInvalidOption wherever a due time
// is given, and nothing is stored.
func TestZeroTimeRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	r := newRuns()
	require.NoError(t, b.q.Handle("del", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
	_, err := b.q.Schedule(b.ctx, "del", nil, ID("z"), At(time.Time{}))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "zero time")
	_, err = b.q.Lookup(b.ctx, "del", "z")
	require.ErrorIs(t, err, ErrNotFound, "nothing stored")
	_, err = b.q.Schedule(b.ctx, "del", nil, ID("y"), After(time.Hour))
	require.NoError(t, err)
	require.ErrorIs(t, b.q.Reschedule(b.ctx, "del", "y", time.Time{}), ErrInvalidOption)
	require.ErrorIs(t, b.q.Requeue(b.ctx, "del", "y", time.Time{}), ErrInvalidOption)
	_, err = b.q.RequeueWhere(b.ctx, JobFilter{Topic: "del"}, time.Time{})
	require.ErrorIs(t, err, ErrInvalidOption)
	j, err := b.q.Lookup(b.ctx, "del", "y")
	require.NoError(t, err)
	require.Equal(t, StatePending, j.State, "not moved")
	r.none(t, 100*time.Millisecond)
}

// TestNilContextRefused: Schedule with a nil context
// panicked (a nil dereference); the public methods that take a context
// refuse a nil one with ErrInvalidOption.
func TestNilContextRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	var nilCtx context.Context
	_, err := b.q.Schedule(nilCtx, "t", nil, After(time.Hour))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "nil context")
	require.ErrorIs(t, b.q.Cancel(nilCtx, "t", "x"), ErrInvalidOption)
	require.ErrorIs(t, b.q.Reschedule(nilCtx, "t", "x", time.Now()), ErrInvalidOption)
	_, err = b.q.Lookup(nilCtx, "t", "x")
	require.ErrorIs(t, err, ErrInvalidOption)
	_, _, err = b.q.List(nilCtx, JobFilter{}, "", 10)
	require.ErrorIs(t, err, ErrInvalidOption)
	_, err = b.q.Stats(nilCtx)
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorIs(t, b.q.Pause(nilCtx, "t"), ErrInvalidOption)
	// A Nack given a receipt alone reads the reservation first: the nil
	// context is refused before that (it panicked there).
	require.NotPanics(t, func() {
		err = b.q.Nack(nilCtx, &Reservation{Receipt: Receipt{Topic: "t", ID: "x", Token: "0123456789"}}, NackOptions{})
	})
	require.ErrorIs(t, err, ErrInvalidOption)
}
