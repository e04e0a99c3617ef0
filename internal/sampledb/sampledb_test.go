package sampledb_test

import (
	"context"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/internal/sampledb"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

func TestLoadSmall(t *testing.T) {
	ctx := context.Background()
	c := pgtest.New(t, pgcluster.Options{})
	counts := func(db string) map[string]int64 {
		conn, err := c.Connect(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		out := map[string]int64{}
		for _, tb := range []string{"customers", "addresses", "orders", "order_lines", "returns", "products", "monthly_sales"} {
			var n int64
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+tb).Scan(&n); err != nil {
				t.Fatalf("count %s: %v", tb, err)
			}
			out[tb] = n
		}
		return out
	}
	load := func(db string) time.Duration {
		if err := c.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
		conn, err := c.Connect(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		start := time.Now()
		if err := sampledb.Load(ctx, conn, sampledb.Small); err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		// A second load is a no-op.
		if err := sampledb.Load(ctx, conn, sampledb.Small); err != nil {
			t.Fatalf("second load: %v", err)
		}
		return d
	}
	d := load("s1")
	t.Logf("Small load: %v", d)
	load("s2")
	a, b := counts("s1"), counts("s2")
	if a["orders"] != int64(sampledb.Small.Orders) || a["customers"] != int64(sampledb.Small.Customers) {
		t.Fatalf("counts %v", a)
	}
	if a["order_lines"] < a["orders"] || a["returns"] == 0 || a["monthly_sales"] == 0 {
		t.Fatalf("counts %v", a)
	}
	for k, v := range a {
		if b[k] != v {
			t.Errorf("%s: %d vs %d rows: not deterministic", k, v, b[k])
		}
	}

	conn, err := c.Connect(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The messy parts the rest of the system is tested against.
	checks := []struct {
		name, sql string
	}{
		{"city variants of Los Angeles", `SELECT count(DISTINCT city) >= 4 FROM addresses WHERE city IN ('LA','L.A.','Los Angeles','los angeles','Los Angeles, CA')`},
		{"NYC spelled several ways", `SELECT count(DISTINCT city) >= 3 FROM addresses WHERE city IN ('NYC','New York','New York City','N.Y.C.','new york')`},
		{"null-heavy phone", `SELECT avg((phone IS NULL)::int) > 0.4 FROM customers`},
		{"churn flag", `SELECT count(*) > 0 FROM customers WHERE flag = 1`},
		{"amt2 = amt1 incl. tax", `SELECT bool_and(amt2 >= amt1) FROM orders WHERE amt1 IS NOT NULL`},
		{"currency codes", `SELECT count(DISTINCT currency) >= 5 FROM orders`},
		{"enum statuses", `SELECT count(DISTINCT status) = 6 FROM orders`},
		{"multi-column FK holds", `SELECT count(*) = 0 FROM returns r LEFT JOIN order_lines l USING (order_id, line_no) WHERE l.order_id IS NULL`},
	}
	for _, ch := range checks {
		var ok bool
		if err := conn.QueryRow(ctx, ch.sql).Scan(&ok); err != nil {
			t.Fatalf("%s: %v", ch.name, err)
		}
		if !ok {
			t.Errorf("%s: check failed", ch.name)
		}
	}
}

func TestWideSchema(t *testing.T) {
	ctx := context.Background()
	c := pgtest.New(t, pgcluster.Options{})
	conn, err := c.Connect(ctx, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := sampledb.WideSchema(ctx, conn, 12, 7); err != nil {
		t.Fatal(err)
	}
	var tables, cols int
	err = conn.QueryRow(ctx, `SELECT count(DISTINCT table_name), count(*) FROM information_schema.columns
		WHERE table_schema = 'public' AND table_name LIKE 'w%'`).Scan(&tables, &cols)
	if err != nil {
		t.Fatal(err)
	}
	if tables != 12 || cols != 12*7 {
		t.Fatalf("got %d tables, %d columns; want 12, 84", tables, cols)
	}
	if err := sampledb.WideSchema(ctx, conn, 0, 7); err == nil {
		t.Fatal("want error for 0 tables")
	}
}
