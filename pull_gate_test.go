package wheelq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/redistest"
)

// heldAhead reports whether key's job is reserved ahead and held in q's
// start gate for its time.
func heldAhead(q *Queue, key string) bool {
	q.gate.mu.Lock()
	defer q.gate.mu.Unlock()
	h := q.gate.held[key]
	return h != nil && h.res != nil
}

// waitHeldAhead waits (bounded) until key's job is reserved ahead and held.
func waitHeldAhead(t *testing.T, q *Queue, key string) {
	t.Helper()
	for end := time.Now().Add(wait); !heldAhead(q, key); time.Sleep(100 * time.Microsecond) {
		require.True(t, time.Now().Before(end), "never reserved ahead and held")
	}
}

type reserveResult struct {
	rs  []*Reservation
	err error
	at  time.Time
}

// reserveAsync starts a Reserve bounded by d and returns its result's
// channel, once the Reserve waits in q (or has returned already).
func reserveAsync(t *testing.T, q *Queue, opts ReserveOptions, d time.Duration) <-chan reserveResult {
	t.Helper()
	done := make(chan reserveResult, 1)
	before := pullWaiters(q, opts.Topics[0])
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		rs, err := q.Reserve(ctx, opts)
		done <- reserveResult{rs, err, time.Now()}
	}()
	for end := time.Now().Add(wait); pullWaiters(q, opts.Topics[0]) == before && len(done) == 0; time.Sleep(100 * time.Microsecond) {
		require.True(t, time.Now().Before(end), "Reserve never waited")
	}
	return done
}

// reservedAhead starts a queue pulling "p" with a claim lead of a
// second, a Reserve blocked on it (its result's channel returned), and a
// job id due in 2.5 s, and waits until that job is reserved ahead for the
// Reserve and held in the start gate.
func reservedAhead(t *testing.T, payload, id string) (*bundle, *Queue, <-chan reserveResult) {
	t.Helper()
	b := setupPull(t, Config{ClaimLead: time.Second}, "p")
	q := b.q
	done := reserveAsync(t, q, ReserveOptions{Topics: []string{"p"}}, 10*time.Second)
	_, err := q.Schedule(b.ctx, "p", []byte(payload), ID(id), After(2500*time.Millisecond))
	require.NoError(t, err)
	waitHeldAhead(t, q, persist.JobKey("p", id))
	return b, q, done
}

// requireNextJob schedules job b due now and requires done's Reserve to
// get it, and only it.
func requireNextJob(t *testing.T, b *bundle, q *Queue, done <-chan reserveResult, msg string) {
	t.Helper()
	_, err := q.Schedule(b.ctx, "p", []byte("b"), ID("b"))
	require.NoError(t, err)
	res := <-done
	require.NoError(t, res.err, msg)
	require.Len(t, res.rs, 1)
	require.Equal(t, "b", res.rs[0].ID)
}

// TestPullCancelReservedAheadFreesWaiter: a job reserved ahead (within
// the claim lead) for a blocked Reserve and cancelled while held in the
// start gate is never handed out, and the Reserve it was promised to
// still gets the next job that comes due.
func TestPullCancelReservedAheadFreesWaiter(t *testing.T) {
	t.Parallel()
	b, q, done := reservedAhead(t, "a", "a")
	if err := q.Cancel(b.ctx, "p", "a"); errors.Is(err, ErrRunning) {
		t.Skip("handed over before the cancel (a machine too slow for the claim lead's second)")
	} else {
		require.NoError(t, err)
	}
	requireNextJob(t, b, q, done, "the waiting Reserve gets the next job")
}

// TestPullRescheduleReservedAheadFreesWaiter: a job reserved ahead for a
// blocked Reserve and rescheduled while held in the start gate is handed
// to that Reserve at its new time (not before).
func TestPullRescheduleReservedAheadFreesWaiter(t *testing.T) {
	t.Parallel()
	b, q, done := reservedAhead(t, "a", "a")
	due := time.Now().Add(2 * time.Second)
	if err := q.Reschedule(b.ctx, "p", "a", due); errors.Is(err, ErrRunning) {
		t.Skip("handed over before the reschedule (a machine too slow for the claim lead's second)")
	} else {
		require.NoError(t, err)
	}
	res := <-done
	require.NoError(t, res.err, "the waiting Reserve gets the job at its new time")
	require.Len(t, res.rs, 1)
	require.Equal(t, "a", res.rs[0].ID)
	require.False(t, res.at.Before(due), "handed out %v before its new time", due.Sub(res.at))
	require.NoError(t, q.Ack(b.ctx, res.rs[0].Receipt))
}

// TestPullReplaceReservedAheadFreesWaiter: a job reserved ahead for a
// blocked Reserve and replaced (Schedule with OnDuplicate(Replace), due
// within the claim lead) while held in the start gate is reserved ahead
// again, for a second Reserve; the first, to which the replaced
// reservation was promised, still gets the next job that comes due.
func TestPullReplaceReservedAheadFreesWaiter(t *testing.T) {
	t.Parallel()
	b, q, first := reservedAhead(t, "old", "k")
	second := reserveAsync(t, q, ReserveOptions{Topics: []string{"p"}}, 10*time.Second)
	_, err := q.Schedule(b.ctx, "p", []byte("new"), ID("k"), After(300*time.Millisecond), OnDuplicate(Replace))
	require.NoError(t, err)
	res := <-second
	require.NoError(t, res.err, "the replaced job is handed out at its new time")
	require.Len(t, res.rs, 1)
	require.Equal(t, "new", string(res.rs[0].Job.Payload))
	require.NoError(t, q.Ack(b.ctx, res.rs[0].Receipt))
	if len(first) > 0 {
		t.Skip("the old reservation was handed over before the replace (a machine too slow for the claim lead's second)")
	}
	requireNextJob(t, b, q, first, "the first Reserve gets the next job")
}

// TestPullRunNowOfLaterJob: RunNow of a pulled job due later (armed, its
// record cached with its due time) makes it ready at once, for a Reserve
// blocked then or one that comes after, not at the time it was due
// before; so does a RunNow by another process (an unstarted queue: the
// owner arms it from its inbox).
func TestPullRunNowOfLaterJob(t *testing.T) {
	t.Parallel()
	b := setupPull(t, Config{}, "p")
	q := b.q
	other := b.newQueue(t, Config{})
	for _, c := range []struct {
		name    string
		blocked bool
		by      *Queue
	}{{"blocked", true, q}, {"later", false, q}, {"other", false, other}} {
		t.Run(c.name, func(t *testing.T) {
			_, err := q.Schedule(b.ctx, "p", []byte("a"), ID(c.name), After(8*time.Second))
			require.NoError(t, err)
			var done <-chan reserveResult
			if c.blocked {
				done = reserveAsync(t, q, ReserveOptions{Topics: []string{"p"}}, 15*time.Second)
			}
			start := time.Now()
			require.NoError(t, c.by.RunNow(b.ctx, "p", c.name))
			if !c.blocked {
				// Once armed here (from the inbox, for another's RunNow):
				// held in the start gate, or queued for any consumer.
				key := persist.JobKey("p", c.name)
				armed := func() bool {
					q.gate.mu.Lock()
					defer q.gate.mu.Unlock()
					return q.gate.held[key] != nil || readyJobs(b, q, "p") > 0
				}
				for end := time.Now().Add(wait); !armed(); time.Sleep(time.Millisecond) {
					require.True(t, time.Now().Before(end), "never armed")
				}
				done = reserveAsync(t, q, ReserveOptions{Topics: []string{"p"}}, 15*time.Second)
			}
			res := <-done
			require.NoError(t, res.err)
			require.Len(t, res.rs, 1)
			require.Equal(t, c.name, res.rs[0].ID)
			require.Less(t, res.at.Sub(start), 4*time.Second, "%s: handed out %v after RunNow", c.name, res.at.Sub(start))
			require.NoError(t, q.Ack(b.ctx, res.rs[0].Receipt))
		})
	}
}

// TestPullTakeForNothingLeavesOthersUnpromised: a take for a Reserve
// that, by the time the take looks, wants nothing more reads nothing, and
// promises nothing to the other Reserves like it: one that stayed
// promised a share of a take never made got nothing more until its
// context ended. The taker wants nothing when a job was reserved ahead
// for it since it chose to take (its promise), or when the Reserves
// before it in line want MaxReserve jobs between them (the take's most):
// the second is any Reserve coming after ten Reserves of 100 of a topic
// (a server's long polls) that looks first on an announcement.
func TestPullTakeForNothingLeavesOthersUnpromised(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name               string
		max, wMax, promise int
	}{{"promised", 1, 1, 1}, {"budget", MaxReserve, 1, 0}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setupPull(t, Config{}, "p")
			q := b.q
			other := reserveAsync(t, q, ReserveOptions{Topics: []string{"p"}, Max: c.max}, 10*time.Second)
			// Wait for the other's first look at the ready sets to end.
			ps := q.pull
			idle := func() bool {
				ps.mu.Lock()
				defer ps.mu.Unlock()
				return !ps.taking && len(ps.byTopic["p"]) == 1 && ps.byTopic["p"][0].promised == 0
			}
			for end := time.Now().Add(wait); !idle(); time.Sleep(time.Millisecond) {
				require.True(t, time.Now().Before(end), "the other Reserve never idle")
			}
			// A Reserve like it, after it in line, that chose to take.
			w := &pullWaiter{topics: []string{"p"}, max: c.wMax, ttr: DefaultTTR, promised: c.promise, sig: make(chan struct{}, 1)}
			ps.mu.Lock()
			ps.byTopic["p"] = append(ps.byTopic["p"], w)
			ps.taking = true
			ps.mu.Unlock()
			_, err := q.takeFor(b.ctx, w, false)
			require.NoError(t, err)
			q.unwait(w)
			_, err = q.Schedule(b.ctx, "p", []byte("b"), ID("b"))
			require.NoError(t, err)
			res := <-other
			require.NoError(t, res.err, "the other Reserve gets the next job")
			require.Len(t, res.rs, 1)
			require.Equal(t, "b", res.rs[0].ID)
		})
	}
}

// pullingThrough starts a queue on a Redis of its own that pulls topic
// "p", its store wrapped by wrap, and waits until it is ready.
func pullingThrough(t *testing.T, wrap func(engineStore) engineStore) (*bundle, *Queue) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	q := b.newQueue(t, Config{})
	q.store = wrap(q.store)
	require.NoError(t, q.Pull("p"))
	require.NoError(t, q.Start(b.ctx))
	<-q.Ready()
	return b, q
}

// lostDueReply is a store whose first due.lua call that reserves a job
// applies in Redis and then fails, as a call whose reply was lost.
type lostDueReply struct {
	engineStore
	lost atomic.Bool
}

func (s *lostDueReply) Due(ctx context.Context, tokens []string, now, ahead int64, jobs []persist.DueJob) ([]persist.DueResult, error) {
	res, err := s.engineStore.Due(ctx, tokens, now, ahead, jobs)
	if err == nil && slices.ContainsFunc(jobs, func(j persist.DueJob) bool { return j.Nonce != "" }) && s.lost.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("%w (the reply was lost)", context.DeadlineExceeded)
	}
	return res, err
}

// TestPullDueLostReplyNotALapse: the reply of the due.lua call that
// reserved a job for a blocked Reserve is lost (the reservation is in
// Redis). The job is still handed out, to that Reserve: the reservation's
// replay is recognised, as a lost reply must be (the fault model), not
// left to lapse after its time-to-run as a failed attempt nobody made (a
// job of one attempt was dead-lettered without ever being handed out).
func TestPullDueLostReplyNotALapse(t *testing.T) {
	t.Parallel()
	ls := &lostDueReply{}
	b, q := pullingThrough(t, func(es engineStore) engineStore { ls.engineStore = es; return ls })
	done := reserveAsync(t, q, ReserveOptions{Topics: []string{"p"}, TTR: 300 * time.Millisecond}, 5*time.Second)
	_, err := q.Schedule(b.ctx, "p", []byte("a"), ID("a"), After(200*time.Millisecond), MaxAttempts(1))
	require.NoError(t, err)
	res := <-done
	require.True(t, ls.lost.Load(), "no reply was lost")
	info, lerr := q.Lookup(b.ctx, "p", "a")
	require.NoError(t, res.err, "the job is handed out (it is now %v, last error %q; %v)", info.State, info.LastError, lerr)
	require.Len(t, res.rs, 1)
	require.NoError(t, q.Ack(b.ctx, res.rs[0].Receipt))
}

// heldDue is a store whose due.lua calls that reserve a job apply in
// Redis and then wait for release before they reply: a slow reply.
type heldDue struct {
	engineStore
	held    chan struct{} // closed once a call waits
	release chan struct{}
	once    sync.Once
}

func (s *heldDue) Due(ctx context.Context, tokens []string, now, ahead int64, jobs []persist.DueJob) ([]persist.DueResult, error) {
	res, err := s.engineStore.Due(ctx, tokens, now, ahead, jobs)
	if slices.ContainsFunc(jobs, func(j persist.DueJob) bool { return j.Nonce != "" }) {
		s.once.Do(func() { close(s.held) })
		<-s.release
	}
	return res, err
}

// TestPullShutdownReleasesLateReservation: a job reserved for a blocked
// Reserve whose reply comes once Shutdown began (the Reserve returned
// ErrClosed, the pull loop released the spare reservations and returned)
// goes back to its ready set, as the reservations held ahead do, not left
// reserved for no one to lapse after its time-to-run as a failed attempt.
func TestPullShutdownReleasesLateReservation(t *testing.T) {
	t.Parallel()
	hd := &heldDue{held: make(chan struct{}), release: make(chan struct{})}
	b, q := pullingThrough(t, func(es engineStore) engineStore { hd.engineStore = es; return hd })
	done := reserveAsync(t, q, ReserveOptions{Topics: []string{"p"}}, wait)
	_, err := q.Schedule(b.ctx, "p", []byte("a"), ID("a"), After(100*time.Millisecond))
	require.NoError(t, err)
	select {
	case <-hd.held:
	case <-time.After(wait):
		t.Fatal("never reserved")
	}
	shut := make(chan error, 1)
	go func() { shut <- q.Shutdown(b.ctx) }()
	res := <-done
	require.ErrorIs(t, res.err, ErrClosed)
	select {
	case <-q.pull.done:
	case <-time.After(wait):
		t.Fatal("the pull loop never returned")
	}
	// The job's time has come: the reply hands it over at once.
	rec, _, err := q.store.Get(b.ctx, persist.JobKey("p", "a"))
	require.NoError(t, err)
	for end := time.Now().Add(wait); time.Now().Before(rec.Due.Add(-DefaultTTR)); time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(end))
	}
	close(hd.release)
	require.NoError(t, <-shut)
	_, st, err := hd.engineStore.Get(b.ctx, persist.JobKey("p", "a"))
	require.NoError(t, err)
	require.Equal(t, persist.Pending, st, "released to its ready set, not left reserved (state %d)", st)
	require.EqualValues(t, 1, readyJobs(b, q, "p"))
}
