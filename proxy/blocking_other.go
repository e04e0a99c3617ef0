//go:build !unix

package proxy

import (
	"errors"
	"syscall"
)

// Blocking mode is not offered off Unix: enterBlocking fails here and the
// session stays on the netpoller.
func setNonblock(syscall.RawConn, bool) error { return errors.ErrUnsupported }

func shutdown(syscall.RawConn) {}
