//go:build unix

package proxy

import "syscall"

func setNonblock(r syscall.RawConn, on bool) error {
	var serr error
	if err := r.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), on) }); err != nil {
		return err
	}
	return serr
}

func shutdown(r syscall.RawConn) {
	_ = r.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
}
