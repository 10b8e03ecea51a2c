//go:build linux

package resp

import (
	"crypto/tls"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// watchGrace is how long a blocked command waits before it watches its
// client's socket. Most blocked reserves are answered sooner, and a watch
// costs a goroutine, a system call and two goroutine wakes; a client that
// leaves within the grace is found by a look at the socket before its
// reply is written (Stop), or when the grace ends.
const watchGrace = 50 * time.Millisecond

// peerWatch watches a connection, while a command blocks, for its peer
// closing it (or resetting it), and then calls gone. It peeks at the
// socket (MSG_PEEK), so it consumes nothing: should the client send more
// (pipelined commands), the watch ends there, not knowing.
type peerWatch struct {
	nc      net.Conn
	rc      syscall.RawConn // nil: nothing to watch
	gone    func()
	left    atomic.Bool
	began   atomic.Bool
	timer   *time.Timer // starts watch after watchGrace
	stopped chan struct{}
}

// watchPeer starts watching nc, the connection redcon reads (a
// limitedConn over a TCP or TLS connection), after watchGrace; Stop ends
// the watch before redcon reads the connection again.
func watchPeer(nc net.Conn, gone func()) *peerWatch {
	w := &peerWatch{nc: nc, gone: gone}
	sc := rawConn(nc)
	if sc == nil {
		return w
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return w
	}
	w.rc = rc
	// redcon's idle deadline, set for its last read, would end the watch.
	_ = nc.SetReadDeadline(time.Time{})
	w.stopped = make(chan struct{})
	w.timer = time.AfterFunc(watchGrace, w.watch)
	return w
}

func (w *peerWatch) watch() {
	defer close(w.stopped)
	w.began.Store(true)
	_ = w.rc.Read(func(fd uintptr) bool {
		left, quiet := peek(fd)
		if quiet {
			return false // nothing yet: wait until readable
		}
		if left {
			w.left.Store(true)
			w.gone()
		}
		return true
	})
}

// peek looks at the socket without consuming or waiting: quiet when there
// is nothing to read yet, left when the peer closed or reset it.
func peek(fd uintptr) (left, quiet bool) {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case err == syscall.EAGAIN || err == syscall.EINTR:
		return false, true
	case err != nil || n == 0:
		return true, false // reset, or the end of the stream
	}
	return false, false // more commands
}

// Went says whether the peer went, without ending the watch.
func (w *peerWatch) Went() bool { return w.left.Load() }

// Watching says whether the watch's goroutine began (the grace is over):
// then Stop wakes it and waits for it.
func (w *peerWatch) Watching() bool { return w.began.Load() }

// Stop ends the watch and says whether the peer went. Within the grace it
// looks at the socket once instead.
func (w *peerWatch) Stop() bool {
	if w.rc == nil {
		return false
	}
	if w.timer.Stop() {
		_ = w.rc.Control(func(fd uintptr) {
			if left, _ := peek(fd); left {
				w.left.Store(true)
			}
		})
		return w.left.Load()
	}
	_ = w.nc.SetReadDeadline(time.Now()) // ends a wait in rc.Read
	<-w.stopped
	_ = w.nc.SetReadDeadline(time.Time{}) // redcon sets its own before reading
	return w.left.Load()
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
