package semantic_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/semantic"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/internal/sampledb"
	"github.com/nlproxy/nlproxy/testkit/needs"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// dbtBinary finds dbt: $NLPROXY_DBT, the virtual environment .ci/run
// installs (~/.cache/nlproxy/dbt-venv), or dbt on the PATH.
func dbtBinary(t *testing.T) string {
	if p := os.Getenv("NLPROXY_DBT"); p != "" {
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "nlproxy", "dbt-venv", "bin", "dbt")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("dbt"); err == nil {
		return p
	}
	needs.Missing(t, "dbt is not installed: .ci/run installs dbt-core and dbt-postgres from PyPI into ~/.cache/nlproxy/dbt-venv (or set NLPROXY_DBT)")
	return ""
}

// parsed runs the real `dbt parse` on testdata/dbt_shop (a copy) and
// returns the semantic_manifest.json it wrote.
func parsed(t *testing.T) string {
	dbt := dbtBinary(t)
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/dbt_shop")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, dbt, "parse", "--project-dir", dir, "--profiles-dir", dir, "--no-partial-parse")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DBT_SEND_ANONYMOUS_USAGE_STATS=false", "DO_NOT_TRACK=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dbt parse: %v\n%s", err, out)
	}
	return filepath.Join(dir, "target", "semantic_manifest.json")
}

// TestDBTManifest: what dbt writes for the project becomes column
// descriptions under the semantic names, glossary terms with SQL for the
// measures and metrics, and join paths from the entities.
func TestDBTManifest(t *testing.T) {
	l, err := semantic.ReadDBT(parsed(t))
	if err != nil {
		t.Fatal(err)
	}
	docs := l.Docs()
	find := func(kind, table, column, term string) *descindex.Doc {
		for i, d := range docs {
			if d.Kind == kind && d.Table == table && d.Column == column && d.Term == term {
				return &docs[i]
			}
		}
		return nil
	}
	if d := find(descindex.KindColumn, "orders", "amt2", ""); d == nil || d.Schema != "public" || !strings.Contains(d.Text, "order total") {
		t.Errorf("orders.amt2 described as %+v", d)
	}
	if d := find(descindex.KindColumn, "customers", "flag", ""); d == nil || !strings.Contains(d.Text, "VIP") {
		t.Errorf("customers.flag described as %+v", d)
	}
	if d := find(descindex.KindGlossary, "orders", "", "revenue"); d == nil || d.SQLHint != "SUM(amt2)" || !strings.Contains(d.Text, "Revenue") {
		t.Errorf("metric revenue: %+v", d)
	}
	if d := find(descindex.KindGlossary, "orders", "", "average order value"); d == nil || d.SQLHint != "SUM(amt2) / NULLIF(COUNT(order_id), 0)" {
		t.Errorf("metric average_order_value: %+v", d)
	}
	var joins []string
	for _, j := range l.Joins() {
		joins = append(joins, j.From+"="+j.To)
	}
	for _, want := range []string{"public.orders.customer_id=public.customers.customer_id", "public.customers.region_id=public.regions.region_id",
		"public.order_lines.order_id=public.orders.order_id"} {
		if !slices.Contains(joins, want) {
			t.Errorf("joins %q lack %s", joins, want)
		}
	}
}

// TestLinkingRecall: on the demo database, the description index the
// engine's retrieval searches (8 hits per ask) finds the columns the
// project's questions need more often with the semantic layer than without.
// Recall is logged; the semantic layer must not lower it and must raise it.
func TestLinkingRecall(t *testing.T) {
	manifest := parsed(t)
	l, err := semantic.ReadDBT(manifest)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster, db := sampleShop(ctx, t)
	questions := []struct {
		q    string
		cols []string // table.column the SQL needs
	}{
		{"What is the total revenue per sales channel?", []string{"orders.amt2", "orders.channel"}},
		{"How many VIP customers are there?", []string{"customers.flag"}},
		{"average order value by order status", []string{"orders.amt2", "orders.status"}},
		{"order subtotal before discounts in 2024", []string{"orders.amt1", "orders.ordered_at"}},
		{"revenue per customer segment", []string{"orders.amt2", "customers.segment"}},
		{"How many orders were placed per region name?", []string{"orders.order_id", "regions.name"}},
		{"units sold per order", []string{"order_lines.qty"}},
		{"customers who opened their account in 2023", []string{"customers.created_at"}},
		// A metric over orders and customers (revenue_per_customer).
		{"what is the average revenue per customer account?", []string{"orders.amt2", "customers.customer_id"}},
	}
	recall := map[bool]float64{}
	for _, with := range []bool{false, true} {
		m := &catalog.Manager{Connect: cluster.Connect}
		if with {
			m.Glossary = l.Docs()
		}
		snap, err := m.Get(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		found, total := 0, 0
		for _, q := range questions {
			hits := snap.Descriptions.Search(ctx, q.q, 8)
			for _, c := range q.cols {
				total++
				tbl, col, _ := strings.Cut(c, ".")
				if slices.ContainsFunc(hits, func(h descindex.Hit) bool {
					onTable := h.Table == tbl || slices.Contains(h.Also, "public."+tbl) // a term over a join reads each of its tables
					return onTable && (h.Column == col || h.Kind == descindex.KindGlossary && strings.Contains(h.SQLHint, col))
				}) {
					found++
				}
			}
		}
		m.Close()
		recall[with] = float64(found) / float64(total)
		t.Logf("semantic layer %v: %d/%d needed columns among the description hits (recall %.2f)", with, found, total, recall[with])
	}
	if recall[true] <= recall[false] {
		t.Errorf("recall with the semantic layer %.2f, without %.2f: it should help", recall[true], recall[false])
	}
}

// TestMetricOverJoin: the project's ratio and derived metrics read orders
// and customers. Their glossary entries, as dbt's manifest gives them,
// carry both tables and the join path the customer entity gives; the
// engine's model-free linking of a question naming the metric on the demo
// database then includes both tables, joined.
func TestMetricOverJoin(t *testing.T) {
	l, err := semantic.ReadDBT(parsed(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster, db := sampleShop(ctx, t)
	m := &catalog.Manager{Connect: cluster.Connect, Glossary: l.Docs()}
	defer m.Close()
	snap, err := m.Get(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	eng := &engine.Engine{Catalogs: m, SemanticJoins: l.Joins()}
	for _, tc := range []struct{ term, question, sql string }{
		{"revenue per customer", "what is the revenue per customer?", "SUM(orders.amt2) / NULLIF(COUNT(DISTINCT customers.customer_id), 0)"},
		{"orders per customer", "how many orders per customer on average?", "COUNT(orders.order_id) * 1.0 / NULLIF(COUNT(DISTINCT customers.customer_id), 0)"},
	} {
		t.Run(tc.term, func(t *testing.T) {
			hits := snap.Descriptions.Search(ctx, tc.question, 8)
			i := slices.IndexFunc(hits, func(h descindex.Hit) bool { return h.Term == tc.term })
			if i < 0 {
				t.Fatalf("no hit for %q among %+v", tc.term, hits)
			}
			h := hits[i]
			if h.Schema+"."+h.Table != "public.orders" || !slices.Equal(h.Also, []string{"public.customers"}) || h.SQLHint != tc.sql ||
				!strings.Contains(h.Text, "joined on orders.customer_id = customers.customer_id") {
				t.Errorf("hit %+v: want orders and customers joined, SQL %s", h.Doc, tc.sql)
			}
			// A budget for three of the demo's tables (orders alone takes
			// about half of it): of its 15 tables and views.
			ch := eng.PreviewSchema(ctx, snap, tc.question, 800, nil)
			for _, want := range []string{"public.orders", "public.customers"} {
				if !slices.Contains(ch.Tables, want) {
					t.Errorf("linked %q, lacks %s", ch.Tables, want)
				}
			}
			if !slices.ContainsFunc(ch.Joins, func(j engine.JoinLink) bool {
				return strings.Contains(j.Left+"="+j.Right, "orders.customer_id") && strings.Contains(j.Left+"="+j.Right, "customers.customer_id")
			}) {
				t.Errorf("joins %+v lack orders.customer_id = customers.customer_id", ch.Joins)
			}
			t.Logf("linked %q", ch.Tables)
		})
	}
}

// sampleShop is a fresh database holding the demo's sample data, on a
// throwaway server.
func sampleShop(ctx context.Context, t *testing.T) (*pgcluster.Cluster, string) {
	t.Helper()
	cluster := pgtest.New(t, pgcluster.Options{})
	db := pgtest.UniqueName(t, "shop")
	if err := cluster.Exec(ctx, "postgres", "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	conn, err := cluster.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := sampledb.Load(ctx, conn, sampledb.Small); err != nil {
		t.Fatal(err)
	}
	return cluster, db
}
