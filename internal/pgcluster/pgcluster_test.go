package pgcluster_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
)

// TestStopLeavesNothing: Stop returns only once the postmaster has exited and
// its directory is gone — what the demo promises on every way out.
func TestStopLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if errors.Is(err, pgcluster.ErrNoPostgres) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	pid, err := c.PID()
	if err != nil {
		c.Stop()
		t.Fatal(err)
	}
	if exited, err := pgcluster.Exited(pid); err != nil || exited {
		c.Stop()
		t.Fatalf("postmaster %d: exited = %v, %v; want running", pid, exited, err)
	}
	if err := c.Exec(ctx, "postgres", "SELECT 1"); err != nil {
		c.Stop()
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if exited, err := pgcluster.Exited(pid); err != nil || !exited {
		t.Errorf("postmaster %d after Stop: exited = %v, %v", pid, exited, err)
	}
	if _, err := os.Stat(c.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster directory %s after Stop: %v, want it removed", c.Dir(), err)
	}
}

// TestStartCancelled: a start interrupted by its context leaves no directory
// behind.
func TestStartCancelled(t *testing.T) {
	if _, err := pgcluster.FindBinDir(); err != nil {
		t.Skip(err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := pgcluster.Start(ctx, pgcluster.Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with a cancelled context: err = %v, want context.Canceled", err)
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
		t.Fatalf("left in TMPDIR after a failed start: %v (%v)", left, err)
	}
}
