//go:build unix

package loadgen

import (
	"net"
	"syscall"
)

// closedByPeer reports whether the server has closed nc (or sent it bytes
// no request asked for), without blocking: one recv(2) with MSG_PEEK.
func closedByPeer(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var b [1]byte
	closed := false
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read: open. Else the end of the stream, stray bytes
		// or an error (a reset).
		closed = err != syscall.EAGAIN && err != syscall.EWOULDBLOCK && err != syscall.EINTR
		return true
	})
	return closed || err != nil
}
