package resp

import "net"

// LimitedConn is limitedConn for the tests: c with a limit of max bytes
// read between two commands.
func LimitedConn(c net.Conn, max int64) net.Conn { return newLimitedConn(c, max) }

// BudgetedConns makes limitedConns for the tests that share a budget of
// most bytes (Options.MaxInflightBytes): conn wraps c with a limit of max
// bytes per command, authenticated; used is the budget's count.
func BudgetedConns(most int64) (conn func(c net.Conn, max int64) net.Conn, used func() int64) {
	b := &budget{max: most}
	return func(c net.Conn, max int64) net.Conn {
		lc := newLimitedConn(c, max)
		lc.inflight = b
		lc.authed.Store(true)
		return lc
	}, b.used.Load
}

// FreeBytes is what a connection holds without counting against the
// budget.
const FreeBytes = freeBytes

// Settle does to c (a limitedConn) what a command about to block does:
// the commands of sizes began (Raw lengths: those redcon parsed together,
// the last the one blocking) begin in turn, then it settles.
func Settle(c net.Conn, began ...int) {
	lc := c.(*limitedConn)
	for _, n := range began {
		lc.began(n)
	}
	lc.settle()
}
