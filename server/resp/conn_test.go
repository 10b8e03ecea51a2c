package resp_test

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/server/resp"
)

// countingConn counts the writes that reach it.
type countingConn struct {
	net.Conn
	writes [][]byte
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.writes = append(c.writes, append([]byte(nil), b...))
	return len(b), nil
}

// TestEmptyWritesStayOff: redcon flushes after every batch of commands,
// buffered bytes or none, so a blocked WQ.RESERVE, flushed before it
// blocks and after its reply, made two empty writes per reply, each a
// system call. The connection the server hands redcon passes none of
// them on, and every other write whole.
func TestEmptyWritesStayOff(t *testing.T) {
	under := &countingConn{}
	c := resp.LimitedConn(under, 1<<20)
	n, err := c.Write(nil)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = c.Write([]byte{})
	require.NoError(t, err)
	require.Zero(t, n)
	require.Empty(t, under.writes, "an empty write reached the socket")
	n, err = c.Write([]byte("+OK\r\n"))
	require.NoError(t, err)
	require.Equal(t, 5, n)
	require.Equal(t, [][]byte{[]byte("+OK\r\n")}, under.writes)
}
