package wheelq

import (
	"context"
	"errors"
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
	r.note(errors.New("ERR some reply"), false, at(t0)) // Redis answered: still reachable
	_, err = r.admit(at(t0))
	require.NoError(t, err)
	r.note(context.Canceled, false, at(t0)) // the caller gave up: says nothing of Redis
	_, err = r.admit(at(t0))
	require.NoError(t, err)

	r.note(refused, false, at(t0))
	_, err = r.admit(at(t0.Add(time.Millisecond)))
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, refused, "the failure seen is wrapped")

	probe, err = r.admit(at(t0.Add(breaker.ProbeEvery)))
	require.NoError(t, err)
	require.True(t, probe, "one call goes through")
	_, err = r.admit(at(t0.Add(breaker.ProbeEvery)))
	require.ErrorIs(t, err, ErrUnavailable, "only one probe at a time")
	r.note(refused, true, at(t0.Add(breaker.ProbeEvery+time.Second))) // a slow probe
	_, err = r.admit(at(t0.Add(breaker.ProbeEvery + time.Second + breaker.ProbeEvery/2)))
	require.ErrorIs(t, err, ErrUnavailable, "the next probe is counted from the last one's end")

	probe, err = r.admit(at(t0.Add(breaker.ProbeEvery + time.Second + breaker.ProbeEvery)))
	require.NoError(t, err)
	require.True(t, probe)
	r.note(nil, true, at(t0.Add(3*time.Second)))
	probe, err = r.admit(at(t0.Add(3 * time.Second)))
	require.NoError(t, err)
	require.False(t, probe, "reachable again")
}
