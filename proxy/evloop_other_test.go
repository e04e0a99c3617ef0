//go:build !linux

package proxy

import "testing"

// onLoop checks that the test's session is relayed: with no event loops
// here, every session is on the goroutine relay, whatever kind is asked for.
func onLoop(t *testing.T, srv *Server, _ RelayLoop) {
	t.Helper()
	for _, s := range srv.Sessions() {
		if s.Ready {
			return
		}
	}
	t.Fatal("no session past authentication")
}
