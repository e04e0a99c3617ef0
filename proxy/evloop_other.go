//go:build !linux

package proxy

// eventLoops is empty where there is no epoll: every session uses the
// goroutine relay.
type eventLoops struct{}

func (s *session) loopRelay() bool { return true }
