package catalog_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

func introspect(t *testing.T, db string, opts catalog.IntrospectOptions) *catalog.Schema {
	t.Helper()
	ctx := context.Background()
	conn, err := env.cluster(t).Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	s, err := catalog.Introspect(ctx, conn, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustTable(t *testing.T, s *catalog.Schema, name string) *catalog.Table {
	t.Helper()
	tb := s.Table(name)
	if tb == nil {
		t.Fatalf("table %s missing", name)
	}
	return tb
}

func mustColumn(t *testing.T, s *catalog.Schema, table, col string) *catalog.Column {
	t.Helper()
	c := mustTable(t, s, table).Column(col)
	if c == nil {
		t.Fatalf("column %s.%s missing", table, col)
	}
	return c
}

func TestIntrospectSample(t *testing.T) {
	s := introspect(t, "sample", catalog.IntrospectOptions{})

	kinds := map[string]string{
		"customers": catalog.KindTable, "orders": catalog.KindTable, "order_lines": catalog.KindTable,
		"customer_order_totals": catalog.KindView, "monthly_sales": catalog.KindMaterialized,
	}
	for name, kind := range kinds {
		if got := mustTable(t, s, name).Kind; got != kind {
			t.Errorf("%s kind = %q, want %q", name, got, kind)
		}
	}
	if len(s.Tables) != 14 {
		t.Errorf("got %d relations, want 14 (12 tables, a view, a materialized view)", len(s.Tables))
	}

	cols := []struct {
		table, col, typ, def, comment string
		nullable, enum                bool
	}{
		{"orders", "status", "order_status", "'pending'::order_status", "order life-cycle status", false, true},
		{"orders", "amt2", "numeric(12,2)", "", "total in the order currency incl. tax", true, false},
		{"orders", "currency", "character(3)", "", "currency code the order was placed in", false, false},
		{"customers", "flag", "smallint", "", "1 = churned (customer cancelled their account), 0 or NULL = active", true, false},
		{"customers", "created_at", "timestamp with time zone", "", "when the account was created", false, false},
		{"products", "discontinued", "boolean", "false", "true when the product can no longer be ordered", false, false},
		{"exchange_rates", "rate_id", "integer", "nextval('exchange_rates_rate_id_seq'::regclass)", "", false, false},
		{"customer_order_totals", "total_usd", "numeric", "", "", true, false},
	}
	for _, tc := range cols {
		c := mustColumn(t, s, tc.table, tc.col)
		if c.Type != tc.typ || c.Default != tc.def || c.Comment != tc.comment || c.Nullable != tc.nullable || c.IsEnum != tc.enum {
			t.Errorf("%s.%s = %+v, want type %q default %q comment %q nullable %v enum %v",
				tc.table, tc.col, *c, tc.typ, tc.def, tc.comment, tc.nullable, tc.enum)
		}
	}
	if got := s.Enums["order_status"]; !slices.Equal(got, []string{"pending", "paid", "shipped", "delivered", "cancelled", "returned"}) {
		t.Errorf("enum labels = %v", got)
	}

	keys := []struct {
		table     string
		pk        []string
		unique    [][]string
		fks       []catalog.ForeignKey
		rowsExact int64
	}{
		{"order_lines", []string{"order_id", "line_no"}, nil, []catalog.ForeignKey{
			{Columns: []string{"order_id"}, RefSchema: "public", RefTable: "orders", RefColumns: []string{"order_id"}},
			{Columns: []string{"product_id"}, RefSchema: "public", RefTable: "products", RefColumns: []string{"product_id"}},
		}, -2},
		{"returns", []string{"return_id"}, nil, []catalog.ForeignKey{
			{Columns: []string{"order_id", "line_no"}, RefSchema: "public", RefTable: "order_lines", RefColumns: []string{"order_id", "line_no"}},
		}, -2},
		{"exchange_rates", []string{"rate_id"}, [][]string{{"currency", "rate_date"}}, []catalog.ForeignKey{
			{Columns: []string{"currency"}, RefSchema: "public", RefTable: "currencies", RefColumns: []string{"code"}},
		}, 360},
		// A unique index that backs no constraint counts as a unique key.
		{"employees", []string{"employee_id"}, [][]string{{"email"}}, []catalog.ForeignKey{
			{Columns: []string{"manager_id"}, RefSchema: "public", RefTable: "employees", RefColumns: []string{"employee_id"}},
			{Columns: []string{"region_id"}, RefSchema: "public", RefTable: "regions", RefColumns: []string{"region_id"}},
		}, 40},
		{"orders", []string{"order_id"}, nil, nil, 3000},
		{"customer_order_totals", nil, nil, nil, -1},
	}
	for _, tc := range keys {
		tb := mustTable(t, s, tc.table)
		if !slices.Equal(tb.PrimaryKey, tc.pk) {
			t.Errorf("%s PK = %v, want %v", tc.table, tb.PrimaryKey, tc.pk)
		}
		if !slices.EqualFunc(tb.Uniques, tc.unique, slices.Equal) {
			t.Errorf("%s uniques = %v, want %v", tc.table, tb.Uniques, tc.unique)
		}
		if tc.fks != nil {
			fks := slices.Clone(tb.ForeignKeys)
			slices.SortFunc(fks, func(a, b catalog.ForeignKey) int { return slices.Compare(a.Columns, b.Columns) })
			if !slices.EqualFunc(fks, tc.fks, func(a, b catalog.ForeignKey) bool {
				return slices.Equal(a.Columns, b.Columns) && a.RefSchema == b.RefSchema && a.RefTable == b.RefTable && slices.Equal(a.RefColumns, b.RefColumns)
			}) {
				t.Errorf("%s FKs = %+v, want %+v", tc.table, fks, tc.fks)
			}
		}
		if tc.rowsExact != -2 && tb.RowEstimate != tc.rowsExact {
			t.Errorf("%s row estimate = %d, want %d", tc.table, tb.RowEstimate, tc.rowsExact)
		}
	}
	if c := mustTable(t, s, "orders").Comment; c != "Customer orders (one row per order)." {
		t.Errorf("orders comment = %q", c)
	}
	if c := mustTable(t, s, "monthly_sales").Comment; c == "" {
		t.Error("materialized view comment missing")
	}

	// pg_stats: examples and distinct estimates after ANALYZE.
	city := mustColumn(t, s, "addresses", "city")
	if city.Stats == nil || len(city.Stats.Examples) != 3 || city.Stats.NullFrac <= 0 {
		t.Fatalf("addresses.city stats = %+v", city.Stats)
	}
	cur := mustColumn(t, s, "orders", "currency").Stats
	if d := cur.EstimatedDistinct(3000); d != 6 {
		t.Errorf("orders.currency distinct = %d, want 6", d)
	}
	if s.Fingerprint == "" || len(s.Fingerprint) != 64 {
		t.Errorf("fingerprint %q", s.Fingerprint)
	}
}

func TestIntrospectSchemasAndNames(t *testing.T) {
	dbName := pgtest.UniqueName(t, "schemas")
	newDB(t, dbName, `
CREATE SCHEMA hr;
CREATE SCHEMA sales;
CREATE TYPE sales.tier AS ENUM ('gold', 'silver');
CREATE TABLE hr.staff (id int PRIMARY KEY, "Full Name" text, "user" text, tier sales.tier);
CREATE TABLE sales."Order Items" (id int PRIMARY KEY, staff_id int REFERENCES hr.staff, a int, b int, UNIQUE (a, b));
CREATE TABLE public.plain (x int GENERATED ALWAYS AS IDENTITY, y int GENERATED ALWAYS AS (x * 2) STORED, tags text[]);
INSERT INTO public.plain (tags) VALUES ('{a,b}'), ('{"c d",NULL}');
ANALYZE public.plain;
CREATE TABLE public.never_analyzed (v text);
`)
	// Default: every schema, those on the search path (public) first.
	def := introspect(t, dbName, catalog.IntrospectOptions{})
	if names := tableNames(def); !slices.Equal(names, []string{"public.never_analyzed", "public.plain", "hr.staff", "sales.Order Items"}) {
		t.Fatalf("tables = %v", names)
	}
	if got := mustTable(t, def, "never_analyzed").RowEstimate; got != -1 {
		t.Errorf("never analyzed row estimate = %d, want -1", got)
	}
	if got := mustColumn(t, def, "plain", "x").Default; got != "GENERATED ALWAYS AS IDENTITY" {
		t.Errorf("identity default = %q", got)
	}
	if got := mustColumn(t, def, "plain", "y").Default; got != "GENERATED ALWAYS AS ((x * 2)) STORED" {
		t.Errorf("generated default = %q", got)
	}
	// Array-typed columns' MCVs cannot be split into examples; they must not fail.
	if st := mustColumn(t, def, "plain", "tags").Stats; st == nil || len(st.Examples) != 0 {
		t.Errorf("array column stats = %+v", st)
	}

	s := introspect(t, dbName, catalog.IntrospectOptions{Schemas: []string{"sales", "hr"}})
	if len(s.Tables) != 2 || s.Tables[0].Schema != "sales" || s.Tables[1].Schema != "hr" {
		t.Fatalf("tables = %+v", s.Tables)
	}
	oi := mustTable(t, s, "sales.Order Items")
	want := catalog.ForeignKey{Columns: []string{"staff_id"}, RefSchema: "hr", RefTable: "staff", RefColumns: []string{"id"}}
	if len(oi.ForeignKeys) != 1 || oi.ForeignKeys[0].RefSchema != want.RefSchema || oi.ForeignKeys[0].RefTable != want.RefTable {
		t.Errorf("cross-schema FK = %+v", oi.ForeignKeys)
	}
	if !slices.EqualFunc(oi.Uniques, [][]string{{"a", "b"}}, slices.Equal) {
		t.Errorf("uniques = %v", oi.Uniques)
	}
	if oi.QualifiedName() != `sales."Order Items"` {
		t.Errorf("qualified name = %s", oi.QualifiedName())
	}
	tier := mustColumn(t, s, "hr.staff", "tier")
	if !tier.IsEnum || !slices.Equal(s.Enums[tier.Type], []string{"gold", "silver"}) {
		t.Errorf("tier = %+v, enums %v", tier, s.Enums)
	}
	out := s.RenderFull(catalog.RenderOptions{})
	for _, want := range []string{
		`CREATE TABLE sales."Order Items" (`,
		`FOREIGN KEY (staff_id) REFERENCES hr.staff (id)`,
		`"Full Name" text,`,
		`"user" text,`,
		`CREATE TYPE sales.tier AS ENUM ('gold', 'silver');`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

func TestFingerprint(t *testing.T) {
	dbName := pgtest.UniqueName(t, "fp")
	newDB(t, dbName, `
CREATE TYPE mood AS ENUM ('ok', 'sad');
CREATE TABLE a (id int PRIMARY KEY, name text, m mood);
CREATE TABLE b (id int PRIMARY KEY, a_id int);
`)
	ctx := context.Background()
	c := env.cluster(t)
	prev := introspect(t, dbName, catalog.IntrospectOptions{}).Fingerprint
	if again := introspect(t, dbName, catalog.IntrospectOptions{}).Fingerprint; again != prev {
		t.Fatal("fingerprint not stable")
	}
	steps := []struct {
		sql     string
		changes bool
	}{
		{"INSERT INTO a SELECT g, 'n' || g FROM generate_series(1, 500) g; ANALYZE", false},
		{"ALTER TABLE a ADD COLUMN extra int", true},
		{"COMMENT ON COLUMN a.name IS 'the name'", true},
		{"COMMENT ON COLUMN a.name IS 'the full name'", true},
		{"COMMENT ON TABLE b IS 'bees'", true},
		{"ALTER TABLE a ALTER COLUMN name SET NOT NULL", true},
		{"ALTER TABLE a ALTER COLUMN extra SET DEFAULT 7", true},
		{"ALTER TABLE a ALTER COLUMN extra TYPE bigint", true},
		{"ALTER TYPE mood ADD VALUE 'happy'", true},
		{"ALTER TABLE b ADD CONSTRAINT b_a FOREIGN KEY (a_id) REFERENCES a", true},
		{"ALTER TABLE a ADD CONSTRAINT a_u UNIQUE (name, extra)", true},
		{"CREATE VIEW v AS SELECT id FROM a", true},
		{"ALTER TABLE a RENAME COLUMN extra TO extra2", true},
		{"DROP VIEW v", true},
		{"CREATE INDEX ON a (name)", false},
	}
	for _, st := range steps {
		if err := c.Exec(ctx, dbName, st.sql); err != nil {
			t.Fatalf("%s: %v", st.sql, err)
		}
		fp := introspect(t, dbName, catalog.IntrospectOptions{}).Fingerprint
		if (fp != prev) != st.changes {
			t.Errorf("%s: fingerprint changed = %v, want %v", st.sql, fp != prev, st.changes)
		}
		prev = fp
	}
}

func TestVisibleTo(t *testing.T) {
	ctx := context.Background()
	c := env.cluster(t)
	if err := c.Exec(ctx, "sample", `
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'analyst') THEN CREATE ROLE analyst; END IF;
END $$;
GRANT SELECT ON orders, order_lines TO analyst;
GRANT SELECT (customer_id, name) ON customers TO analyst;
GRANT SELECT (name) ON products TO analyst;`); err != nil {
		t.Fatal(err)
	}
	full := introspect(t, "sample", catalog.IntrospectOptions{})
	conn, err := c.Connect(ctx, "sample")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	v, err := full.VisibleTo(ctx, conn, "analyst")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tb := range v.Tables {
		names = append(names, tb.Name)
	}
	if !slices.Equal(names, []string{"customers", "order_lines", "orders", "products"}) {
		t.Fatalf("visible tables = %v", names)
	}
	cust := mustTable(t, v, "customers")
	if len(cust.Columns) != 2 || cust.Column("flag") != nil || !slices.Equal(cust.PrimaryKey, []string{"customer_id"}) {
		t.Errorf("customers = %+v", cust)
	}
	prod := mustTable(t, v, "products")
	if len(prod.PrimaryKey) != 0 || len(prod.Uniques) != 0 {
		t.Errorf("products keeps keys on hidden columns: %+v", prod)
	}
	// orders → customers stays (both ends visible); orders → currencies goes.
	var refs []string
	for _, fk := range mustTable(t, v, "orders").ForeignKeys {
		refs = append(refs, fk.RefTable)
	}
	if !slices.Equal(refs, []string{"customers"}) {
		t.Errorf("orders FKs to %v", refs)
	}
	// order_lines → products drops: products.product_id is hidden.
	for _, fk := range mustTable(t, v, "order_lines").ForeignKeys {
		if fk.RefTable == "products" {
			t.Error("FK to a hidden column kept")
		}
	}
	if _, ok := v.Enums["order_status"]; !ok {
		t.Error("enum of a visible column dropped")
	}
	if v.Fingerprint == full.Fingerprint {
		t.Error("filtered schema shares the full fingerprint")
	}
	if all, _ := full.VisibleTo(ctx, conn, "postgres"); len(all.Tables) != len(full.Tables) || all.Fingerprint != full.Fingerprint {
		t.Error("superuser view differs from the full schema")
	}
}
