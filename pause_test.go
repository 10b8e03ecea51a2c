package wheelq

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/persist"
	"github.com/wheelq/wheelq/internal/redistest"
)

// recordRuns registers a handler of topic that records each run.
func recordRuns(t *testing.T, q *Queue, topic string) *runs {
	t.Helper()
	r := newRuns()
	require.NoError(t, q.Handle(topic, HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
	return r
}

// runOrder waits for n runs and returns their ids in the order they ran.
func runOrder(t *testing.T, r *runs, n int) []string {
	t.Helper()
	var out []string
	for range n {
		out = append(out, r.next(t).ID)
	}
	return out
}

// TestPauseHoldsTopicAcrossProcesses: a pause made by one process (a
// producer, never started) holds in another (the worker): the paused
// topic's due jobs do not run while another topic's do; they stay
// pending, Counts and Paused say the topic is paused, and a resume made by
// the producer runs them all in the worker, oldest first.
func TestPauseHoldsTopicAcrossProcesses(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{Concurrency: 1}) // one worker: runs start in the order recorded
		paused, other := recordRuns(t, b.q, "p"), recordRuns(t, b.q, "o")
		admin := b.newQueue(t, Config{})
		require.NoError(t, admin.Pause(b.ctx, "p"))
		require.NoError(t, admin.Pause(b.ctx, "p"), "pausing twice does nothing")
		base := time.Now()
		var want []string
		for i := range 20 {
			id := fmt.Sprintf("j%02d", i)
			// Due times in reverse of the order they are scheduled in, all
			// due within 100ms.
			_, err := admin.Schedule(b.ctx, "p", nil, ID(id), At(base.Add(time.Duration(100-5*i)*time.Millisecond)))
			require.NoError(t, err)
			want = append([]string{id}, want...)
		}
		_, err := admin.Schedule(b.ctx, "o", nil, ID("free"))
		require.NoError(t, err)
		require.Equal(t, "free", other.next(t).ID, "another topic runs")
		paused.none(t, 500*time.Millisecond)
		counts, err := admin.Counts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, []TopicCounts{{Topic: "p", Pending: 20, Paused: true}}, counts)
		topics, err := b.q.Paused(b.ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"p"}, topics)

		require.NoError(t, admin.Resume(b.ctx, "p"))
		require.Equal(t, want, runOrder(t, paused, 20), "resumed: every job runs, in due order")
		paused.none(t, 50*time.Millisecond)
		topics, err = admin.Paused(b.ctx)
		require.NoError(t, err)
		require.Empty(t, topics)
		require.NoError(t, admin.Resume(b.ctx, "p"), "resuming twice does nothing")
		require.ErrorIs(t, admin.Pause(b.ctx, ""), ErrInvalidTopic)
		require.ErrorIs(t, admin.Resume(b.ctx, "a/b"), ErrInvalidTopic)
	})
}

// TestPauseSurvivesRestart: a pause is durable: a process started after
// the one that saw the pause shut down does not run the paused topic's
// jobs either, until it is resumed.
func TestPauseSurvivesRestart(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{Concurrency: 1}) // one worker: runs start in the order recorded
		first := recordRuns(t, b.q, "p")
		require.NoError(t, b.q.Pause(b.ctx, "p"))
		for i := range 5 {
			_, err := b.q.Schedule(b.ctx, "p", nil, ID(fmt.Sprint(i)), After(time.Duration(i)*time.Millisecond))
			require.NoError(t, err)
		}
		first.none(t, 300*time.Millisecond)
		require.NoError(t, b.q.Shutdown(b.ctx))

		q2 := b.newQueue(t, Config{Concurrency: 1})
		r := recordRuns(t, q2, "p")
		require.NoError(t, q2.Start(b.ctx))
		<-q2.Ready()
		r.none(t, 300*time.Millisecond)
		require.NoError(t, q2.Resume(b.ctx, "p"))
		require.Equal(t, []string{"0", "1", "2", "3", "4"}, runOrder(t, r, 5))
	})
}

// TestPauseParkingIsBounded: past its bound of parked jobs, a paused
// topic's jobs are not kept in memory, and its resume reads them again
// from Redis: every job runs, in due order. A resume missed by the
// subscription (written to Redis behind the queue's back) is found by the
// periodic look at the paused topics. No sweep runs meanwhile: it would
// re-arm a job the resume lost.
func TestPauseParkingIsBounded(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		// One worker: runs start in the order recorded.
		b := d.setup(t, Config{Concurrency: 1, test: testHooks{sweepInterval: time.Hour}})
		b.q.pauses.mu.Lock()
		b.q.pauses.max = 3
		b.q.pauses.mu.Unlock()
		r := recordRuns(t, b.q, "p")
		require.NoError(t, b.q.Pause(b.ctx, "p"))
		base := time.Now()
		var want []string
		for i := range 12 {
			id := fmt.Sprintf("j%02d", i)
			_, err := b.q.Schedule(b.ctx, "p", nil, ID(id), At(base.Add(time.Duration(i)*time.Millisecond)))
			require.NoError(t, err)
			want = append(want, id)
		}
		eventually(t, func() bool {
			b.q.pauses.mu.Lock()
			defer b.q.pauses.mu.Unlock()
			return b.q.pauses.n == 3 && b.q.pauses.overflow["p"]
		}, "three parked, the rest left in Redis")
		r.none(t, 100*time.Millisecond)
		require.NoError(t, b.q.Resume(b.ctx, "p"))
		require.Equal(t, want, runOrder(t, r, 12))

		// A resume without its message: the recheck finds it.
		require.NoError(t, b.q.Pause(b.ctx, "p"))
		_, err := b.q.Schedule(b.ctx, "p", nil, ID("late"))
		require.NoError(t, err)
		eventually(t, func() bool {
			b.q.pauses.mu.Lock()
			defer b.q.pauses.mu.Unlock()
			return b.q.pauses.n == 1
		}, "parked")
		for p := range b.q.cfg.Partitions {
			require.NoError(t, b.rdb.HDel(b.ctx, b.q.store.Keys(p).Paused, "p").Err())
		}
		require.Equal(t, "late", r.next(t).ID)
	})
}

// TestPauseResumePastBoundReadsPages: a resume past the parking bound
// reads the topic's jobs from Redis a few at a time (a page of 8 over 4
// partitions: 2 entries per read), merged over the partitions, among the
// jobs of another paused topic interleaved with them in due time (reads
// that find none of the topic's): every job of the resumed topic runs,
// once, in due order, and the other topic's stay pending. No sweep runs
// meanwhile: it would re-arm a job this path lost.
func TestPauseResumePastBoundReadsPages(t *testing.T) {
	t.Parallel()
	// One worker: runs start in the order recorded.
	b := setup(t, Config{Concurrency: 1, test: testHooks{sweepInterval: time.Hour}})
	b.q.pauses.mu.Lock()
	b.q.pauses.max, b.q.pauses.page = 1, 8
	b.q.pauses.mu.Unlock()
	r, other := recordRuns(t, b.q, "p"), recordRuns(t, b.q, "o")
	require.NoError(t, b.q.Pause(b.ctx, "p"))
	require.NoError(t, b.q.Pause(b.ctx, "o"))
	base := time.Now()
	var want []string
	for i := range 40 {
		// Three of p, then one of o, in due order: reads find two of p,
		// one, or none.
		topic, id := "p", fmt.Sprintf("j%02d", i)
		if i%4 == 3 {
			topic = "o"
		} else {
			want = append(want, id)
		}
		_, err := b.q.Schedule(b.ctx, topic, nil, ID(id), At(base.Add(time.Duration(i)*time.Millisecond)))
		require.NoError(t, err)
	}
	eventually(t, func() bool {
		b.q.pauses.mu.Lock()
		defer b.q.pauses.mu.Unlock()
		return b.q.pauses.n == 1 && b.q.pauses.overflow["p"] && b.q.pauses.overflow["o"]
	}, "one parked, the rest left in Redis")
	r.none(t, 100*time.Millisecond)
	require.NoError(t, b.q.Resume(b.ctx, "p"))
	require.Equal(t, want, runOrder(t, r, 30), "every job of the resumed topic, in due order")
	r.none(t, 300*time.Millisecond)
	other.none(t, 0)
	counts, err := b.q.Counts(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []TopicCounts{{Topic: "o", Pending: 10, Paused: true}}, counts)
}

// TestPauseTwoWorkers: two started workers share the partitions; a pause
// made by one holds in both, and a resume made by the other runs every
// held job once, wherever its partition is run.
func TestPauseTwoWorkers(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{})
		r := recordRuns(t, b.q, "p")
		w2 := b.newQueue(t, Config{})
		require.NoError(t, w2.Handle("p", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
		require.NoError(t, w2.Start(b.ctx))
		eventually(t, func() bool { return len(b.q.Owned()) > 0 && len(w2.Owned()) > 0 }, "the partitions shared")
		require.NoError(t, b.q.Pause(b.ctx, "p"))
		var want []string
		for i := range 20 {
			id := fmt.Sprint(i)
			_, err := w2.Schedule(b.ctx, "p", nil, ID(id))
			require.NoError(t, err)
			want = append(want, id)
		}
		r.none(t, 300*time.Millisecond)
		require.NoError(t, w2.Resume(b.ctx, "p"))
		got := runOrder(t, r, 20)
		slices.Sort(got)
		slices.Sort(want)
		require.Equal(t, want, got, "each held job ran once")
		r.none(t, 100*time.Millisecond)
	})
}

// TestArmParksJobsOfPausedTopic: a job of a topic whose jobs are parked
// here (paused at their claims), armed by the reload, the poller or the
// sweep, is parked at once, not claimed only to be parked: the sweep armed
// every overdue job of a long pause again on each pass, a claim round trip
// each (found in review). Another topic's job is armed.
func TestArmParksJobsOfPausedTopic(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	now := time.Now().UnixMicro()
	b.q.pauses.park("mail/1", now) // as a claim answered "paused"
	armed := b.q.sched.Len()
	sink{b.q}.Arm([]persist.Entry{{Key: "mail/2", Due: now}, {Key: "other/3", Due: now + time.Hour.Microseconds()}})
	require.Equal(t, armed+1, b.q.sched.Len(), "only the other topic's job is armed")
	b.q.pauses.mu.Lock()
	defer b.q.pauses.mu.Unlock()
	require.Contains(t, b.q.pauses.parked["mail"], "mail/2")
}

// TestPauseHoldsWhileRedisDown: with RunWhileRedisDown on, a topic this
// process knows to be paused does not start while Redis is unreachable:
// its job that comes due meanwhile is parked, while another topic's job
// due with it runs from the payload cache (so the claims did fail and
// took the unverified path). Once Redis is back and the topic is resumed,
// the paused job runs, once, and the topic is no longer known as paused.
// Each subtest is a way to learn of the pause (and of the resume): this
// process's own Pause, another process's (a message, or the watcher's
// read), a pause written behind the queues' back (no message: the
// watcher's read), and one made before Start (Start's read).
func TestPauseHoldsWhileRedisDown(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"own", "other", "behind", "start"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, redistest.Options{AOF: true})
			srv.RequireReal(t)
			b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
			q := b.newQueue(t, Config{WriteTimeout: 300 * time.Millisecond, LeaseTTL: time.Minute, RunWhileRedisDown: true})
			paused, other := recordRuns(t, q, "p"), recordRuns(t, q, "o")
			admin := b.newQueue(t, Config{})
			behind := func(pause bool) error { // no message
				for p := range q.cfg.Partitions {
					k := q.store.Keys(p).Paused
					cmd := b.rdb.HDel(b.ctx, k, "p")
					if pause {
						cmd = b.rdb.HSet(b.ctx, k, "p", "1")
					}
					if err := cmd.Err(); err != nil {
						return err
					}
				}
				return nil
			}
			if how == "start" {
				require.NoError(t, admin.Pause(b.ctx, "p"))
			}
			require.NoError(t, q.Start(b.ctx))
			<-q.Ready()
			switch how {
			case "own":
				require.NoError(t, q.Pause(b.ctx, "p"))
			case "other":
				require.NoError(t, admin.Pause(b.ctx, "p"))
			case "behind":
				require.NoError(t, behind(true))
			case "start":
				require.True(t, knowsPaused(q, "p"), "read at Start")
			}
			eventually(t, func() bool { return knowsPaused(q, "p") }, "the pause known here")
			due := time.Now().Add(time.Second)
			for _, topic := range []string{"p", "o"} {
				// Scheduled here: the payload is in q's cache.
				_, err := q.Schedule(b.ctx, topic, []byte("x"), ID("j"), At(due))
				require.NoError(t, err)
			}
			srv.Kill()
			require.True(t, time.Now().Before(due.Add(-q.cfg.ClaimLead)), "Redis was down before the jobs were claimed")
			require.Equal(t, "j", other.next(t).ID, "the other topic's job runs unverified")
			paused.none(t, 300*time.Millisecond)
			eventually(t, func() bool {
				q.pauses.mu.Lock()
				defer q.pauses.mu.Unlock()
				_, ok := q.pauses.parked["p"]["p/j"]
				return ok
			}, "the paused topic's job parked")

			require.NoError(t, srv.Restart())
			switch how {
			case "own", "start":
				eventually(t, func() bool { return q.Resume(b.ctx, "p") == nil }, "resumed once Redis is back")
				require.False(t, knowsPaused(q, "p"), "its own resume clears it")
			case "other":
				eventually(t, func() bool { return admin.Resume(b.ctx, "p") == nil }, "resumed once Redis is back")
			case "behind":
				eventually(t, func() bool { return behind(false) == nil }, "resumed once Redis is back")
			}
			j := paused.next(t)
			require.Equal(t, "j", j.ID, "the paused job runs after the resume")
			require.False(t, time.Now().Before(due))
			eventually(t, func() bool { return !knowsPaused(q, "p") }, "the resume clears the pause here")
			paused.none(t, 300*time.Millisecond)
			other.none(t, 0)
			drained(t, &bundle{q: q, ctx: b.ctx})
		})
	}
}

// knowsPaused reports whether q knows topic to be paused (its
// pauser.known).
func knowsPaused(q *Queue, topic string) bool {
	q.pauses.mu.Lock()
	defer q.pauses.mu.Unlock()
	return q.pauses.known[topic]
}

// TestParkIfKnownPaused: a job whose claim could not reach Redis is
// parked when its topic is known here to be paused, or has jobs parked
// here (a pause this process learnt from a claim), and not otherwise.
func TestParkIfKnownPaused(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{RunWhileRedisDown: true})
	now := time.Now().UnixMicro()
	b.q.pauses.park("mail/1", now) // as a claim answered "paused"
	b.q.pauses.notePaused("sms", true)
	require.True(t, b.q.pauses.parkIfKnownPaused("mail/2", now))
	require.True(t, b.q.pauses.parkIfKnownPaused("sms/1", now))
	require.False(t, b.q.pauses.parkIfKnownPaused("other/1", now))
	b.q.pauses.notePaused("sms", false)
	require.False(t, knowsPaused(b.q, "sms"))
	b.q.pauses.mu.Lock()
	defer b.q.pauses.mu.Unlock()
	require.Contains(t, b.q.pauses.parked["mail"], "mail/2")
	require.Contains(t, b.q.pauses.parked["sms"], "sms/1")
	require.NotContains(t, b.q.pauses.parked, "other")
}

// TestRunNowOnPausedTopic: "run now" on a paused
// topic printed done while the job stayed pending. RunNow makes the job
// due now all the same, and says with ErrPaused that it waits for Resume;
// on Resume it runs.
func TestRunNowOnPausedTopic(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	b := &bundle{srv: srv, rdb: srv.Client(t), ctx: context.Background()}
	q := b.newQueue(t, Config{Partitions: 2})
	ran := make(chan string, 4)
	require.NoError(t, q.Handle("hook", HandlerFunc(func(_ context.Context, j *Job) error {
		ran <- j.ID
		return nil
	})))
	require.NoError(t, q.Start(b.ctx))
	require.NoError(t, q.Pause(b.ctx, "hook"))
	_, err := q.Schedule(b.ctx, "hook", nil, ID("h0"), After(time.Hour))
	require.NoError(t, err)
	err = q.RunNow(b.ctx, "hook", "h0")
	require.ErrorIs(t, err, ErrPaused)
	require.EqualError(t, err, `wheelq: run now hook/h0: made due now, but topic is paused (it runs on Resume)`)
	info, err := q.Lookup(b.ctx, "hook", "h0")
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), info.Due, 5*time.Second, "made due now")
	select {
	case id := <-ran:
		t.Fatalf("%s ran while its topic was paused", id)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, q.Resume(b.ctx, "hook"))
	select {
	case id := <-ran:
		require.Equal(t, "h0", id)
	case <-time.After(10 * time.Second):
		t.Fatal("not run on Resume")
	}
}
