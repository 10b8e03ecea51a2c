package breaker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBreaker: a connection failure opens it; one probe at a time goes
// through every ProbeEvery; an answer closes it. Its error says for how
// long and wraps the failure seen last. (The root's TestReachStates runs
// the same states through the queue's adapter.)
func TestBreaker(t *testing.T) {
	var b Breaker
	t0 := time.Unix(1000, 0)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	require.True(t, b.Up())
	b.Note(context.Canceled, false, t0)
	require.True(t, b.Up(), "a caller that gave up says nothing of the server")
	b.Note(refused, false, t0)
	require.False(t, b.Up())
	_, err := b.Admit(t0.Add(100 * time.Millisecond))
	var d *Down
	require.ErrorAs(t, err, &d)
	require.Equal(t, 100*time.Millisecond, d.For)
	require.ErrorIs(t, err, refused)
	require.Contains(t, err.Error(), "unreachable for 100ms")
	require.NoError(t, (&Breaker{}).Err(t0), "reachable: no error")
	probe, err := b.Admit(t0.Add(ProbeEvery))
	require.NoError(t, err)
	require.True(t, probe)
	err = b.Err(t0.Add(ProbeEvery))
	require.ErrorAs(t, err, &d, "a probe in flight: still unreachable")
	require.ErrorIs(t, err, refused)
	_, err = b.Admit(t0.Add(ProbeEvery))
	require.ErrorAs(t, err, &d, "Err took no probe's turn: the probe in flight holds it")
	b.Note(nil, true, t0.Add(ProbeEvery))
	require.True(t, b.Up())
	require.NoError(t, b.Err(t0.Add(ProbeEvery)))
	require.True(t, IsConnErr(io.EOF))
	require.True(t, IsConnErr(fmt.Errorf("wrapped: %w", ErrNoAnswer)))
	require.False(t, IsConnErr(errors.New("ERR wrong type")))
}

// TestIsConnErrBare: errors go-redis v9.23 returned from a real
// redis-server behind a proxy (a silent one, a reset one), as captured:
// a fresh connection's read ended by ReadTimeout came back as a bare
// *poll.DeadlineExceededError ("i/o timeout", no *net.OpError around it),
// and a write on a reset connection as *os.SyscallError{"write",
// syscall.EPIPE}. Neither was counted, so a failed probe marked the
// server reachable again. A context that ended still is not one.
func TestIsConnErrBare(t *testing.T) {
	for _, err := range []error{
		os.ErrDeadlineExceeded,
		fmt.Errorf("wheelq: %w", os.ErrDeadlineExceeded),
		&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded},
		&os.SyscallError{Syscall: "write", Err: syscall.EPIPE},
	} {
		require.True(t, IsConnErr(err), "%v", err)
	}
	require.False(t, IsConnErr(context.DeadlineExceeded))
	require.False(t, IsConnErr(fmt.Errorf("wrapped: %w", context.Canceled)))
}
