package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/internal/sampledb"
)

// OwnedSampleDB makes the end-to-end suites' database: a login role (not a
// superuser) with password pass, database db owned by it, and the small
// sample data loaded over TCP with the role's own login, as an application
// would load its data.
func OwnedSampleDB(ctx context.Context, tb testing.TB, c *pgcluster.Cluster, role, pass, db string) {
	tb.Helper()
	if err := c.CreateRole(ctx, role, pass, false); err != nil {
		tb.Fatal(err)
	}
	if err := c.Exec(ctx, "postgres", "CREATE DATABASE "+db+" OWNER "+role); err != nil {
		tb.Fatal(err)
	}
	owner, err := pgx.Connect(ctx, c.URL(role, pass, db))
	if err != nil {
		tb.Fatal(err)
	}
	defer owner.Close(ctx)
	if err := sampledb.Load(ctx, owner, sampledb.Small); err != nil {
		tb.Fatalf("load sample db: %v", err)
	}
}
