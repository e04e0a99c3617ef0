package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Version and commit the test binary is stamped with, as the Makefile does.
const (
	testVersion = "v9.8.7-test"
	testCommit  = "abc1234"
)

// buildNLProxy builds the product binary into a temp dir with the
// Makefile's -ldflags, so tests drive exactly what users run.
func buildNLProxy(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go toolchain not on PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "nlproxy")
	args := []string{"build", "-o", bin, "-ldflags", "-X main.version=" + testVersion + " -X main.commit=" + testCommit}
	if raceEnabled {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, append(args, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
