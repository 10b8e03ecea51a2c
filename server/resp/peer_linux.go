//go:build linux

package resp

import (
	"crypto/tls"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// watchPeer watches nc, while a command blocks, for its peer closing the
// connection (or resetting it): then it calls gone. went says whether
// the peer went, without ending the watch; stop ends the watch (before
// redcon reads the connection again) and says whether the peer went. It peeks at the socket (MSG_PEEK), so
// it consumes nothing: should the client send more (pipelined commands),
// the watch ends there, not knowing. nc is the connection redcon reads:
// a limitedConn over a TCP or TLS connection.
func watchPeer(nc net.Conn, gone func()) (went, stop func() bool) {
	no := func() bool { return false }
	sc := rawConn(nc)
	if sc == nil {
		return no, no
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return no, no
	}
	// redcon's idle deadline, set for its last read, would end the watch.
	_ = nc.SetReadDeadline(time.Time{})
	var left atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		_ = rc.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case err == syscall.EAGAIN || err == syscall.EINTR:
				return false // nothing yet: wait until readable
			case err != nil || n == 0:
				left.Store(true) // reset, or the end of the stream
				gone()
			}
			return true
		})
	}()
	return left.Load, func() bool {
		_ = nc.SetReadDeadline(time.Now()) // ends a wait in rc.Read
		<-done
		_ = nc.SetReadDeadline(time.Time{}) // redcon sets its own before reading
		return left.Load()
	}
}

// rawConn is the TCP connection under nc, or nil.
func rawConn(nc net.Conn) syscall.Conn {
	for {
		switch c := nc.(type) {
		case *limitedConn:
			nc = c.Conn
		case *tls.Conn:
			nc = c.NetConn()
		case syscall.Conn:
			return c
		default:
			return nil
		}
	}
}
