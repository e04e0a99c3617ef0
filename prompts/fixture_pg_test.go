package prompts

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// TestFixtureSchemaIsValid loads testdata/schema.sql into a real server so
// the golden prompts show a schema PostgreSQL accepts, and runs the few-shot
// example SQL used in the candidate golden against it.
func TestFixtureSchemaIsValid(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	cl := pgtest.New(t, pgcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.Exec(ctx, "postgres", fixtureSchema(t)); err != nil {
		t.Fatalf("fixture schema: %v", err)
	}
	for _, sql := range []string{
		"SELECT count(*) FROM customers c WHERE c.\"Loyalty Tier\" = 'gold'",
		"SELECT s.name, sum(oi.quantity * oi.unit_price) FROM stores s JOIN orders o ON o.store_id = s.id JOIN order_items oi ON oi.order_id = o.id WHERE s.city = 'Los Angeles' AND o.status = 'paid' GROUP BY s.name",
	} {
		if err := cl.Exec(ctx, "postgres", sql); err != nil {
			t.Errorf("%s: %v", sql, err)
		}
	}
	// The fixer golden's failing query must fail the way the prompt says.
	var pgErr *pgconn.PgError
	if err := cl.Exec(ctx, "postgres", badSQL); !errors.As(err, &pgErr) || pgErr.Code != "42703" {
		t.Errorf("badSQL: %v; the fixer golden assumes undefined_column (42703)", err)
	}
}
