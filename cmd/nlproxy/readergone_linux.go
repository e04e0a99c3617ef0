package main

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// watchReaderGone calls onGone once w — when it is a pipe or socket, such as
// stdout piped into head or tee — has lost its reader, without writing to it:
// poll reports POLLERR on a pipe's write end once no reader is left, POLLHUP
// on a socket whose peer closed. Files and terminals are not watched
// (a closed terminal sends SIGHUP). stop ends the watch and waits for it.
func watchReaderGone(w io.Writer, onGone func()) (stop func()) {
	f, ok := w.(*os.File)
	if !ok {
		return func() {}
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return func() {}
	}
	fd := -1
	_ = raw.Control(func(u uintptr) {
		var st unix.Stat_t
		if unix.Fstat(int(u), &st) == nil {
			if m := st.Mode & unix.S_IFMT; m == unix.S_IFIFO || m == unix.S_IFSOCK {
				fd = int(u)
			}
		}
	})
	var wake [2]int
	if fd < 0 || unix.Pipe2(wake[:], unix.O_CLOEXEC) != nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			fds := []unix.PollFd{{Fd: int32(fd)}, {Fd: int32(wake[0]), Events: unix.POLLIN}}
			_, err := unix.Poll(fds, -1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || fds[1].Revents != 0 {
				return
			}
			if fds[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0 {
				onGone()
				return
			}
		}
	}()
	return func() {
		_, _ = unix.Write(wake[1], []byte{0})
		<-done
		unix.Close(wake[0])
		unix.Close(wake[1])
	}
}
