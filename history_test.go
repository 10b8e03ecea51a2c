package wheelq

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLookupSaysWhatHappened: after a job finished, Lookup says how: done
// (with its attempts and finish time), cancelled (with a run in progress
// or not), dead; a job never scheduled is ErrNotFound. Before the run
// history, all but the dead one were ErrNotFound alike.
func TestLookupSaysWhatHappened(t *testing.T) {
	t.Parallel()
	eachDeployment(t, func(t *testing.T, d deployment) {
		b := d.setup(t, Config{MaxAttempts: 2})
		running := make(chan struct{})
		release := make(chan struct{})
		done := make(chan string, 8)
		require.NoError(t, b.q.Handle("h", HandlerFunc(func(ctx context.Context, j *Job) error {
			defer func() { done <- j.ID }()
			switch {
			case j.ID == "flaky" && j.Attempt == 1:
				return errors.New("first run fails")
			case j.ID == "dead":
				return Permanent(errors.New("no such user"))
			case j.ID == "slow":
				close(running)
				<-release
			}
			return nil
		})))
		start := time.Now()
		for _, id := range []string{"ok", "flaky", "dead", "slow"} {
			_, err := b.q.Schedule(b.ctx, "h", []byte("payload"), ID(id))
			require.NoError(t, err)
		}
		_, err := b.q.Schedule(b.ctx, "h", nil, ID("later"), After(time.Hour))
		require.NoError(t, err)
		<-running
		require.ErrorIs(t, b.q.Cancel(b.ctx, "h", "slow"), ErrRunning)
		close(release)
		require.NoError(t, b.q.Cancel(b.ctx, "h", "later"))
		for range 5 { // ok, flaky twice, dead, slow
			<-done
		}
		lookup := func(id string) JobInfo {
			t.Helper()
			var info JobInfo
			eventually(t, func() bool {
				var err error
				info, err = b.q.Lookup(b.ctx, "h", id)
				return err == nil && info.State != StatePending && info.State != StateRunning
			}, fmt.Sprintf("%s finished", id))
			return info
		}
		ok := lookup("ok")
		require.Equal(t, StateDone, ok.State)
		require.Equal(t, 1, ok.Attempts)
		require.False(t, ok.Finished.Before(start.Truncate(time.Millisecond)), "finished %v, started %v", ok.Finished, start)
		require.Nil(t, ok.Payload, "the history keeps no payload")
		flaky := lookup("flaky")
		require.Equal(t, StateDone, flaky.State)
		require.Equal(t, 2, flaky.Attempts)
		require.Equal(t, "first run fails", flaky.LastError)
		dead := lookup("dead")
		require.Equal(t, StateDead, dead.State)
		require.Contains(t, dead.LastError, "no such user")
		require.False(t, dead.Finished.IsZero())
		later := lookup("later")
		require.Equal(t, StateCancelled, later.State)
		require.Zero(t, later.Attempts)
		slow := lookup("slow")
		require.Equal(t, StateCancelled, slow.State, "cancelled while running: its ack did not apply")
		require.Equal(t, 1, slow.Attempts, "a run had started")
		_, err = b.q.Lookup(b.ctx, "h", "never")
		require.ErrorIs(t, err, ErrNotFound)
	})
}

// TestNoHistory: with a negative History.Count nothing is kept: a done job
// is ErrNotFound, as before the run history.
func TestNoHistory(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{History: HistoryRetention{Count: -1}})
	r := newRuns()
	require.NoError(t, b.q.Handle("h", HandlerFunc(func(_ context.Context, j *Job) error { r.add(j); return nil })))
	_, err := b.q.Schedule(b.ctx, "h", nil, ID("x"))
	require.NoError(t, err)
	r.next(t)
	eventually(t, func() bool {
		_, err := b.q.Lookup(b.ctx, "h", "x")
		return errors.Is(err, ErrNotFound)
	}, "acked, and not in any history")
	require.Empty(t, b.keys(t, ":history"))
}
