// Package needs says what a test does when a tool or model it drives is not
// on the machine: on a developer's machine it skips, saying how to get it; in
// CI (CI=true), where .ci/run installs every one of them, it fails, because a
// skip there would let a broken install pass as green.
package needs

import (
	"fmt"
	"os"
	"testing"
)

// Missing ends the test: a skip with why, or, under CI=true, a failure.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI installs it: a skip would hide a broken install)", why)
	}
	t.Skip(why)
}
