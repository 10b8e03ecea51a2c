package resp

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tidwall/redcon"

	"github.com/wheelq/wheelq"
)

// errConn records the error reply a command writes.
type errConn struct {
	redcon.Conn
	reply string
}

func (c *errConn) WriteError(msg string) { c.reply = msg }

// TestContendedReply: WQ.RECUR or WQ.UNRECUR losing the race for the
// schedule at each try (wheelq.ErrContended) answers -CONTENDED, the HTTP
// API's contended code, not -INTERNAL.
func TestContendedReply(t *testing.T) {
	s := &Server{opts: Options{Logger: slog.New(slog.DiscardHandler)}}
	c := &errConn{}
	s.writeErr(c, fmt.Errorf("wheelq: remove recurring %q: %w", "beat", wheelq.ErrContended))
	require.Regexp(t, `^CONTENDED .*contended`, c.reply)
}
