package wheelq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/breaker"
	"github.com/wheelq/wheelq/wheel"
)

func TestReachStates(t *testing.T) {
	t.Parallel()
	var r reach
	t0 := time.Unix(1000, 0)
	clk := wheel.NewFakeClock(t0)
	at := func(tm time.Time) wheel.Clock { clk.Advance(tm.Sub(clk.Now())); return clk }
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}

	probe, err := r.admit(at(t0))
	require.NoError(t, err)
	require.False(t, probe)
	r.note(context.Background(), errors.New("ERR some reply"), false, at(t0)) // Redis answered: still reachable
	_, err = r.admit(at(t0))
	require.NoError(t, err)
	r.note(context.Background(), context.Canceled, false, at(t0)) // the caller gave up: says nothing of Redis
	_, err = r.admit(at(t0))
	require.NoError(t, err)
	ended, cancel := context.WithDeadline(context.Background(), t0)
	defer cancel()
	<-ended.Done()
	r.note(ended, ended.Err(), false, at(t0)) // the caller's deadline ended the call: says nothing of Redis
	_, err = r.admit(at(t0))
	require.NoError(t, err)
	var silent reach
	silent.note(context.Background(), fmt.Errorf("wrapped: %w", context.DeadlineExceeded), false, at(t0))
	_, err = silent.admit(at(t0.Add(time.Millisecond)))
	require.ErrorIs(t, err, ErrUnavailable, "the queue's own deadline ended it: Redis left it unanswered")
	require.ErrorIs(t, err, breaker.ErrNoAnswer)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "a fail-fast error is not the caller's deadline")

	r.note(context.Background(), refused, false, at(t0))
	_, err = r.admit(at(t0.Add(time.Millisecond)))
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, refused, "the failure seen is wrapped")

	probe, err = r.admit(at(t0.Add(breaker.ProbeEvery)))
	require.NoError(t, err)
	require.True(t, probe, "one call goes through")
	_, err = r.admit(at(t0.Add(breaker.ProbeEvery)))
	require.ErrorIs(t, err, ErrUnavailable, "only one probe at a time")
	r.note(context.Background(), refused, true, at(t0.Add(breaker.ProbeEvery+time.Second))) // a slow probe
	_, err = r.admit(at(t0.Add(breaker.ProbeEvery + time.Second + breaker.ProbeEvery/2)))
	require.ErrorIs(t, err, ErrUnavailable, "the next probe is counted from the last one's end")

	probe, err = r.admit(at(t0.Add(breaker.ProbeEvery + time.Second + breaker.ProbeEvery)))
	require.NoError(t, err)
	require.True(t, probe)
	r.note(context.Background(), nil, true, at(t0.Add(3*time.Second)))
	probe, err = r.admit(at(t0.Add(3 * time.Second)))
	require.NoError(t, err)
	require.False(t, probe, "reachable again")
}
