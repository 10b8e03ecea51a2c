package wheelq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/persist"
)

// storeFault is a fault that faultStore injects into one call of the
// engine's store (the engineStore seam).
type storeFault int

const (
	// replyLost: the call applies in Redis, and its reply is lost: the
	// caller gets a read timeout, as from a connection that died.
	replyLost storeFault = iota + 1
	// replyLate: the call applies, and its reply comes lateBy later (or
	// the caller's context ends first, and it gets that error).
	replyLate
	// noScript: Redis refuses the call with a NOSCRIPT error reply (its
	// script cache was flushed and the store could not reload it); nothing
	// applied.
	noScript
	// fenced: the call is refused with ErrFenced (another process holds a
	// partition's lease); nothing applied.
	fenced
	// refused: the connection is refused, so nothing was sent.
	refused
)

func (f storeFault) String() string {
	return [...]string{"none", "reply lost", "reply late", "NOSCRIPT", "fenced", "connection refused"}[f]
}

var allStoreFaults = []storeFault{replyLost, replyLate, noScript, fenced, refused}

// lateBy is how late a replyLate reply comes.
const lateBy = 150 * time.Millisecond

// replyError is an error reply from Redis (go-redis's redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

// faultStore wraps the engine's store and injects planned faults into the
// calls that change jobs, per method: plan("Settle", replyLost) makes the
// next Settle call apply and lose its reply. Calls with no fault planned
// pass through; every other method is the wrapped store's.
type faultStore struct {
	engineStore

	mu       sync.Mutex
	plans    map[string][]storeFault // guarded by mu: the next faults of each method, in order
	injected map[string]int          // guarded by mu: faults injected so far, by method
}

func newFaultStore(s engineStore) *faultStore {
	return &faultStore{engineStore: s, plans: map[string][]storeFault{}, injected: map[string]int{}}
}

// plan queues faults for the next calls of method, one call each.
func (f *faultStore) plan(method string, faults ...storeFault) {
	f.mu.Lock()
	f.plans[method] = append(f.plans[method], faults...)
	f.mu.Unlock()
}

// count returns how many faults were injected into method's calls.
func (f *faultStore) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected[method]
}

// do runs call, the method's real call, with the method's next planned
// fault, if any.
func (f *faultStore) do(ctx context.Context, method string, call func() error) error {
	f.mu.Lock()
	var fault storeFault
	if p := f.plans[method]; len(p) > 0 {
		fault, f.plans[method] = p[0], p[1:]
		f.injected[method]++
	}
	f.mu.Unlock()
	switch fault {
	case noScript:
		return replyError("NOSCRIPT No matching script. Please use EVAL.")
	case fenced:
		return fmt.Errorf("%w (injected)", persist.ErrFenced)
	case refused:
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	err := call()
	switch {
	case err != nil || fault == 0:
		return err
	case fault == replyLost:
		return &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	}
	select { // replyLate
	case <-time.After(lateBy):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *faultStore) Write(ctx context.Context, tokens []string, ws []persist.Write) (res []persist.WriteResult, err error) {
	err = f.do(ctx, "Write", func() (err error) { res, err = f.engineStore.Write(ctx, tokens, ws); return err })
	return res, err
}

func (f *faultStore) CancelMany(ctx context.Context, keys []string) (res []persist.Change, err error) {
	err = f.do(ctx, "Cancel", func() (err error) { res, err = f.engineStore.CancelMany(ctx, keys); return err })
	return res, err
}

func (f *faultStore) RescheduleMany(ctx context.Context, tokens []string, ms []persist.Move) (res []persist.Change, err error) {
	err = f.do(ctx, "Reschedule", func() (err error) { res, err = f.engineStore.RescheduleMany(ctx, tokens, ms); return err })
	return res, err
}

func (f *faultStore) Claim(ctx context.Context, tokens []string, reqs []persist.ClaimRequest, out []persist.ClaimResult) (res []persist.ClaimResult, err error) {
	err = f.do(ctx, "Claim", func() (err error) { res, err = f.engineStore.Claim(ctx, tokens, reqs, out); return err })
	return res, err
}

func (f *faultStore) Settle(ctx context.Context, tokens []string, now int64, os []persist.Outcome) (res []bool, err error) {
	err = f.do(ctx, "Settle", func() (err error) { res, err = f.engineStore.Settle(ctx, tokens, now, os); return err })
	return res, err
}

// faultQueue starts a queue on a fresh redis-server whose store is
// wrapped by a faultStore, with a handler on topic "t" that records the
// runs and fails a job's first run when its id begins with "fail".
func faultQueue(t *testing.T) (*bundle, *faultStore, *runs) {
	t.Helper()
	var fs *faultStore
	cfg := Config{test: testHooks{wrapStore: func(s engineStore) engineStore { fs = newFaultStore(s); return fs }}}
	b := setup(t, cfg)
	r := newRuns()
	require.NoError(t, b.q.Handle("t", HandlerFunc(func(_ context.Context, j *Job) error {
		r.add(j)
		if j.Attempt == 1 && len(j.ID) >= 4 && j.ID[:4] == "fail" {
			return errors.New("first run fails")
		}
		return nil
	})))
	return b, fs, r
}

// runsOf waits until want runs were recorded, checks that none started
// before its due time, and returns the attempts seen per job id. It waits
// a little longer for runs that should not come.
func runsOf(t *testing.T, r *runs, want int) map[string][]int {
	t.Helper()
	got := map[string][]int{}
	for range want {
		j := r.next(t)
		got[j.ID] = append(got[j.ID], j.Attempt)
	}
	r.none(t, 300*time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, j := range r.jobs {
		require.False(t, r.at[i].Before(j.Due), "%s ran %v before its due time", j.ID, j.Due.Sub(r.at[i]))
	}
	return got
}

// drained waits until no job of the queue is left in Redis.
func drained(t *testing.T, b *bundle) {
	t.Helper()
	eventually(t, func() bool {
		st, err := b.q.Stats(b.ctx)
		return err == nil && st.Pending == 0 && st.UnstoredOutcomes == 0
	}, "every outcome stored, nothing pending")
}

// requireSaid checks what a call that changes jobs returned under fault:
// nil for a late reply, ErrOutcomeUnknown for a lost one, and for a fault
// that applied nothing an error that says so. It returns whether the
// call applied.
func requireSaid(t *testing.T, fault storeFault, err error) (applied bool) {
	t.Helper()
	switch fault {
	case replyLate:
		require.NoError(t, err)
		return true
	case replyLost:
		require.ErrorIs(t, err, ErrOutcomeUnknown)
		return true
	}
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrOutcomeUnknown, "nothing was applied: %v", err)
	return false
}

// TestStoreFaultsOnClaim: whatever happens to a claim (applied with its
// reply lost or late, refused by Redis, fenced, never sent), every job
// runs once, none early, and nothing is left pending.
func TestStoreFaultsOnClaim(t *testing.T) {
	t.Parallel()
	for _, fault := range allStoreFaults {
		t.Run(fault.String(), func(t *testing.T) {
			t.Parallel()
			b, fs, r := faultQueue(t)
			n := 2 // one for the first claim, one for the claim again
			if fault == replyLate {
				n = 1 // no claim again: the late reply is a success
			}
			for range n {
				fs.plan("Claim", fault)
			}
			due := time.Now().Add(100 * time.Millisecond)
			for i := range 10 {
				_, err := b.q.Schedule(b.ctx, "t", nil, ID(fmt.Sprintf("j%d", i)), At(due))
				require.NoError(t, err)
			}
			got := runsOf(t, r, 10)
			for id, attempts := range got {
				require.Equal(t, []int{1}, attempts, "%s ran once", id)
			}
			require.Len(t, got, 10)
			require.Equal(t, n, fs.count("Claim"), "every planned fault was injected")
			drained(t, b)
		})
	}
}

// TestStoreFaultsOnSettle: whatever happens to the call that stores
// outcomes, an acked job runs once and is gone, and a failed job's retry
// is armed and runs (a retry stored with its reply lost is recognised
// when sent again, not taken for a skip).
func TestStoreFaultsOnSettle(t *testing.T) {
	t.Parallel()
	for _, fault := range allStoreFaults {
		t.Run(fault.String(), func(t *testing.T) {
			t.Parallel()
			b, fs, r := faultQueue(t)
			fs.plan("Settle", fault, fault, fault)
			for _, id := range []string{"ok", "fail"} {
				_, err := b.q.Schedule(b.ctx, "t", nil, ID(id), After(50*time.Millisecond))
				require.NoError(t, err)
			}
			got := runsOf(t, r, 3)
			require.Equal(t, []int{1}, got["ok"])
			require.Equal(t, []int{1, 2}, got["fail"], "the retry was armed and ran")
			require.Positive(t, fs.count("Settle"))
			drained(t, b)
		})
	}
}

// TestStoreFaultsOnSchedule: Schedule tells a write that may have applied
// (ErrOutcomeUnknown) from one that surely did not (a refusal, or a
// connection never made), and what it says is so.
func TestStoreFaultsOnSchedule(t *testing.T) {
	t.Parallel()
	for _, fault := range allStoreFaults {
		t.Run(fault.String(), func(t *testing.T) {
			t.Parallel()
			b, fs, r := faultQueue(t)
			fs.plan("Write", fault)
			_, err := b.q.Schedule(b.ctx, "t", nil, ID("w"), After(50*time.Millisecond))
			require.Equal(t, 1, fs.count("Write"))
			if !requireSaid(t, fault, err) {
				_, err := b.q.Lookup(b.ctx, "t", "w")
				require.ErrorIs(t, err, ErrNotFound)
				r.none(t, 300*time.Millisecond)
				return
			}
			require.Equal(t, []int{1}, runsOf(t, r, 1)["w"])
			drained(t, b)
		})
	}
}

// TestStoreFaultsOnCancel: a Cancel whose reply was lost says
// ErrOutcomeUnknown and did cancel; one refused says so and did not.
func TestStoreFaultsOnCancel(t *testing.T) {
	t.Parallel()
	for _, fault := range allStoreFaults {
		t.Run(fault.String(), func(t *testing.T) {
			t.Parallel()
			b, fs, r := faultQueue(t)
			_, err := b.q.Schedule(b.ctx, "t", nil, ID("c"), After(300*time.Millisecond))
			require.NoError(t, err)
			fs.plan("Cancel", fault)
			if requireSaid(t, fault, b.q.Cancel(b.ctx, "t", "c")) {
				r.none(t, time.Second)
				info, err := b.q.Lookup(b.ctx, "t", "c")
				require.NoError(t, err)
				require.Equal(t, StateCancelled, info.State)
				return
			}
			require.Equal(t, []int{1}, runsOf(t, r, 1)["c"], "not cancelled: it runs")
		})
	}
}
