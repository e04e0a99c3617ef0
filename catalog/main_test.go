package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/internal/sampledb"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// testEnv is the one Postgres cluster of this package's tests, with the
// Small sample database loaded into "sample" (read-only for tests; tests
// that change DDL create their own database).
type testEnv struct {
	c *pgcluster.Cluster
}

func (e *testEnv) cluster(t *testing.T) *pgcluster.Cluster {
	t.Helper()
	if e.c == nil {
		t.Skip("no PostgreSQL server binaries")
	}
	return e.c
}

var env testEnv // set once in TestMain, read-only afterwards

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgtest.Start(ctx, pgcluster.Options{})
	if errors.Is(err, pgtest.ErrNoPostgres) {
		fmt.Fprintln(os.Stderr, "skipping Postgres tests:", err)
		return m.Run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "start postgres:", err)
		return 1
	}
	defer c.Stop()
	if err := c.CreateDatabase(ctx, "sample"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	conn, err := c.Connect(ctx, "sample")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	err = sampledb.Load(ctx, conn, sampledb.Small)
	conn.Close(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.c = c
	return m.Run()
}

// newDB creates a fresh database running setup SQL. Shared cluster: pass a
// name unique to the run (pgtest.UniqueName), so -count=N never collides.
func newDB(t *testing.T, name, setup string) {
	t.Helper()
	ctx := context.Background()
	c := env.cluster(t)
	if err := c.CreateDatabase(ctx, name); err != nil {
		t.Fatal(err)
	}
	if setup != "" {
		if err := c.Exec(ctx, name, setup); err != nil {
			t.Fatal(err)
		}
	}
}
