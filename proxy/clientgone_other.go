//go:build !linux

package proxy

import "net"

// watchClientGone is a no-op where poll has no POLLRDHUP: a client that
// goes away is noticed when its answer is written.
func watchClientGone(net.Conn, func()) (stop func()) { return func() {} }
