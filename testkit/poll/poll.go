// Package poll waits in tests for something another goroutine or process
// brings about, where no event says when it has: a row a background
// worker writes, a session a server ends. The bound is a hang guard for a
// broken build, never a speed requirement: a loaded CI machine is slow,
// never this slow.
package poll

import (
	"testing"
	"time"
)

// Bound is how long Until waits before it fails the test.
const Bound = 2 * time.Minute

// Until polls cond until it holds; after Bound it fails the test (Fatal,
// so call it from the test's goroutine).
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// UntilState is Until for a condition that also describes what it saw,
// reported when the wait fails; it waits at most timeout, and reports a
// timeout with Errorf (the test goes on, to report more).
func UntilState(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) bool {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, state := cond()
		if ok {
			t.Logf("%s: after %v", what, time.Since(start).Round(time.Millisecond))
			return true
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: not reached within %v (%s)", what, timeout, state)
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
