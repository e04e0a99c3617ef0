//go:build !linux

package proxy

import "net"

// eventLoops is empty where there is no epoll: every session uses the
// goroutine relay.
type eventLoops struct{}

func (s *session) loopRelay() bool { return true }

// loopable is the conn a session's TLS is made over: the socket itself
// where no event loop carries TLS.
func loopable(c net.Conn) net.Conn { return c }
