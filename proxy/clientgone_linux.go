package proxy

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// watchClientGone calls gone once the client's peer has closed its end of
// conn, without reading from it: while an ask is being answered nobody
// reads the client's socket (what the client sent next must stay there), so
// its going away would otherwise be noticed only when the answer is
// written, minutes later, after the ask held its slots all that time.
// poll reports POLLRDHUP when the peer shut its end (POLLHUP, POLLERR on a
// reset) whatever data is still unread. stop ends the watch and waits for it.
func watchClientGone(conn net.Conn, gone func()) (stop func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return func() {}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	// A duplicate of the socket: the session may close its own descriptor
	// meanwhile, and a number closed and reused must never be polled.
	fd := -1
	_ = raw.Control(func(u uintptr) {
		if d, err := unix.FcntlInt(u, unix.F_DUPFD_CLOEXEC, 0); err == nil {
			fd = d
		}
	})
	if fd < 0 {
		return func() {}
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(fd)
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}, {Fd: int32(wake), Events: unix.POLLIN}}
			_, err := unix.Poll(fds, -1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || fds[1].Revents != 0 {
				return
			}
			if fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				gone()
				return
			}
		}
	}()
	return func() {
		_, _ = unix.Write(wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		<-done
		unix.Close(wake)
		unix.Close(fd)
	}
}
