package resp

import "net"

// LimitedConn is limitedConn for the tests: c with a limit of max bytes
// read between two commands.
func LimitedConn(c net.Conn, max int64) net.Conn { return newLimitedConn(c, max) }
