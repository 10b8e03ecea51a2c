//go:build unix

package push

import (
	"net"
	"syscall"
)

// quiet says whether nc, kept idle, has nothing to read: the receiver
// neither closed it nor sent anything unasked (which the next push would
// otherwise read as its reply). One look at the socket, without
// consuming or waiting.
func quiet(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	q := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		q = err == syscall.EAGAIN || err == syscall.EINTR
		return true
	})
	return q && err == nil
}
