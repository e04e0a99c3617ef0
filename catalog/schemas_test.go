package catalog_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// multiSchemaSetup has the same table name in two schemas (public.orders and
// sales.orders, with different columns, comments and values), a quoted
// mixed-case schema and table, and a schema the catalog role may not use.
const multiSchemaSetup = `
CREATE TABLE public.customers (id int PRIMARY KEY, name text);
CREATE TABLE public.orders (id int PRIMARY KEY, customer_id int REFERENCES public.customers, status text, note text);
COMMENT ON TABLE public.orders IS 'Web shop orders.';
CREATE SCHEMA sales;
CREATE TABLE sales.orders (deal_id int PRIMARY KEY, customer_id int REFERENCES public.customers, status text);
COMMENT ON TABLE sales.orders IS 'CRM pipeline deals.';
CREATE TABLE sales.regions (region_id int PRIMARY KEY, label text);
CREATE SCHEMA "Archive";
CREATE TABLE "Archive"."Old Orders" ("Order Id" int PRIMARY KEY, status text);
CREATE SCHEMA secret;
CREATE TABLE secret.vault (k text);
INSERT INTO public.customers SELECT g, 'customer ' || g FROM generate_series(1, 20) g;
INSERT INTO public.orders SELECT g, g % 20 + 1, CASE WHEN g % 2 = 0 THEN 'open' ELSE 'closed' END FROM generate_series(1, 40) g;
INSERT INTO sales.orders SELECT g, g % 20 + 1, CASE WHEN g % 3 = 0 THEN 'won' ELSE 'lost' END FROM generate_series(1, 30) g;
`

// multiSchemaDB creates a fresh database with multiSchemaSetup and a
// non-superuser catalog role with USAGE on every schema but secret.
func multiSchemaDB(t *testing.T) (db, role string) {
	t.Helper()
	db, role = pgtest.UniqueName(t, "multi"), pgtest.UniqueName(t, "catrole")
	newDB(t, db, multiSchemaSetup)
	ctx := context.Background()
	c := env.cluster(t)
	if err := c.CreateRole(ctx, role, "", false); err != nil {
		t.Fatal(err)
	}
	r := pgx.Identifier{role}.Sanitize()
	if err := c.Exec(ctx, db, `GRANT USAGE ON SCHEMA sales, "Archive" TO `+r); err != nil {
		t.Fatal(err)
	}
	return db, role
}

// introspectAs introspects db over a connection of role (TCP, trust auth).
func introspectAs(t *testing.T, role, db string, opts catalog.IntrospectOptions) (*catalog.Schema, error) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, env.cluster(t).URL(role, "", db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	return catalog.Introspect(ctx, conn, opts)
}

func tableNames(s *catalog.Schema) []string {
	var out []string
	for _, tb := range s.Tables {
		out = append(out, tb.Schema+"."+tb.Name)
	}
	return out
}

func TestIntrospectEverySchema(t *testing.T) {
	db, role := multiSchemaDB(t)
	ctx := context.Background()

	// Superuser, with a temp table of its own on the introspecting session:
	// every schema but the system and temp ones; search_path schemas first.
	conn, err := env.cluster(t).Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TEMP TABLE scratch (x int)"); err != nil {
		t.Fatal(err)
	}
	all, err := catalog.Introspect(ctx, conn, catalog.IntrospectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"public.customers", "public.orders", "Archive.Old Orders", "sales.orders", "sales.regions", "secret.vault"}
	if got := tableNames(all); !slices.Equal(got, want) {
		t.Fatalf("superuser tables = %v, want %v", got, want)
	}

	cases := []struct {
		name    string
		schemas []string
		want    []string
		err     error
	}{
		{"default: every usable schema", nil,
			[]string{"public.customers", "public.orders", "Archive.Old Orders", "sales.orders", "sales.regions"}, nil},
		{"narrowed, in the listed order", []string{"sales", "Archive"},
			[]string{"sales.orders", "sales.regions", "Archive.Old Orders"}, nil},
		{"unusable, system and unknown schemas skipped", []string{"secret", "sales", "nosuch", "pg_catalog", "information_schema"},
			[]string{"sales.orders", "sales.regions"}, nil},
		{"nothing usable", []string{"secret", "pg_toast"}, nil, catalog.ErrNoSchemas},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := introspectAs(t, role, db, catalog.IntrospectOptions{Schemas: tc.schemas})
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			if got := tableNames(s); !slices.Equal(got, tc.want) {
				t.Errorf("tables = %v, want %v", got, tc.want)
			}
		})
	}

	s, err := introspectAs(t, role, db, catalog.IntrospectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Fingerprint == all.Fingerprint {
		t.Error("the catalog role's schema shares the superuser's fingerprint")
	}
	// Same-named tables keep their own columns, comments and keys.
	pub, sal := mustTable(t, s, "public.orders"), mustTable(t, s, "sales.orders")
	if pub.Comment != "Web shop orders." || sal.Comment != "CRM pipeline deals." {
		t.Errorf("comments: public %q, sales %q", pub.Comment, sal.Comment)
	}
	if !slices.Equal(pub.PrimaryKey, []string{"id"}) || !slices.Equal(sal.PrimaryKey, []string{"deal_id"}) {
		t.Errorf("primary keys: public %v, sales %v", pub.PrimaryKey, sal.PrimaryKey)
	}
	if len(sal.ForeignKeys) != 1 || sal.ForeignKeys[0].RefSchema != "public" || sal.ForeignKeys[0].RefTable != "customers" {
		t.Errorf("sales.orders FKs = %+v", sal.ForeignKeys)
	}
	if c := mustTable(t, s, "Archive.Old Orders").Column("Order Id"); c == nil {
		t.Error(`"Archive"."Old Orders"."Order Id" missing`)
	}
}

func TestTableLookupTwoSchemas(t *testing.T) {
	db, role := multiSchemaDB(t)
	s, err := introspectAs(t, role, db, catalog.IntrospectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		searchPath []string
		onPath     bool   // TableOnPath instead of Table
		want       string // "schema.table" or "" for none
	}{
		{"orders", nil, false, "public.orders"}, // Tables order: the role's search_path first
		{"sales.orders", nil, false, "sales.orders"},
		{"public.orders", nil, false, "public.orders"},
		{"Archive.Old Orders", nil, false, "Archive.Old Orders"},
		{"Old Orders", nil, false, "Archive.Old Orders"}, // on no path schema: the only one
		{"secret.vault", nil, false, ""},
		{"sales.customers", nil, false, ""},
		{"orders", []string{"sales", "public"}, true, "sales.orders"},
		{"orders", []string{"public", "sales"}, true, "public.orders"},
		{"orders", []string{"Archive"}, true, "public.orders"}, // not on the path: Table's rule
		{"regions", []string{"public"}, true, "sales.regions"},
		{"sales.orders", []string{"public"}, true, "sales.orders"},
	}
	for _, tc := range cases {
		var got *catalog.Table
		if tc.onPath {
			got = s.TableOnPath(tc.name, tc.searchPath)
		} else {
			got = s.Table(tc.name)
		}
		name := ""
		if got != nil {
			name = got.Schema + "." + got.Name
		}
		if name != tc.want {
			t.Errorf("lookup %q on %v = %q, want %q", tc.name, tc.searchPath, name, tc.want)
		}
	}
}

// TestIndexesTwoSchemas builds the value and description indexes of a
// database holding orders in two schemas and checks nothing is mixed up:
// examples, value matches, literal correction, descriptions, privileges
// and a saved-and-loaded snapshot all keep the schema.
func TestIndexesTwoSchemas(t *testing.T) {
	db, _ := multiSchemaDB(t)
	ctx := context.Background()
	c := env.cluster(t)
	conn, err := c.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	built, err := catalog.Build(ctx, conn, db, catalog.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := catalog.SaveSnapshot(dir, built); err != nil {
		t.Fatal(err)
	}
	loaded, err := catalog.LoadSnapshot(dir, db, descindex.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, snap := range []*catalog.Snapshot{built, loaded} {
		s := snap.Schema
		// Never analyzed: the examples come from the value index, per table.
		for table, allowed := range map[string][]string{"public.orders": {"open", "closed"}, "sales.orders": {"won", "lost"}} {
			st := mustColumn(t, s, table, "status").Stats
			if st == nil || len(st.Examples) == 0 {
				t.Fatalf("%s.status has no examples", table)
			}
			for _, v := range st.Examples {
				if !slices.Contains(allowed, v) {
					t.Errorf("%s.status example %q belongs to the other orders table", table, v)
				}
			}
		}
		ms := snap.Values.Lookup(ctx, []string{"won"}, valueindex.LookupOptions{})
		if len(ms) == 0 || ms[0].Schema != "sales" || ms[0].Table != "orders" || ms[0].Value != "won" {
			t.Errorf("lookup won = %+v, want sales.orders.status first", ms)
		}
		for _, m := range ms {
			if m.Schema == "public" && m.Table == "orders" {
				t.Errorf("lookup won matched public.orders: %+v", m)
			}
		}
		closest := []struct{ table, lit, want, schema string }{
			{"sales.orders", "Won", "won", "sales"},
			{"public.orders", "opn", "open", "public"},
			{"public.orders", "lost", "", "public"}, // only public's values are candidates
		}
		for _, tc := range closest {
			got := snap.Values.Closest(ctx, tc.table, "status", tc.lit, 3)
			if len(got) == 0 && tc.want != "" {
				t.Fatalf("Closest(%s, %q) found nothing", tc.table, tc.lit)
			}
			for _, m := range got {
				if m.Schema != tc.schema || m.Table != "orders" {
					t.Errorf("Closest(%s, %q) returned %s.%s", tc.table, tc.lit, m.Schema, m.Table)
				}
			}
			if tc.want != "" && got[0].Value != tc.want {
				t.Errorf("Closest(%s, %q) = %q, want %q", tc.table, tc.lit, got[0].Value, tc.want)
			}
		}
		hits := snap.Descriptions.Search(ctx, "CRM pipeline deals", 3)
		if len(hits) == 0 || hits[0].Schema != "sales" || hits[0].Table != "orders" || hits[0].Kind != descindex.KindTable {
			t.Errorf("description search = %+v, want the sales.orders comment first", hits)
		}
	}

	// Privileges: the asker may read sales.orders and customers only.
	asker := pgtest.UniqueName(t, "asker")
	if err := c.CreateRole(ctx, asker, "", false); err != nil {
		t.Fatal(err)
	}
	a := pgx.Identifier{asker}.Sanitize()
	if err := c.Exec(ctx, db, "GRANT USAGE ON SCHEMA sales TO "+a+"; GRANT SELECT ON sales.orders, public.customers TO "+a); err != nil {
		t.Fatal(err)
	}
	v, err := built.Schema.VisibleTo(ctx, conn, asker)
	if err != nil {
		t.Fatal(err)
	}
	if got := tableNames(v); !slices.Equal(got, []string{"public.customers", "sales.orders"}) {
		t.Fatalf("visible tables = %v", got)
	}
	if fks := mustTable(t, v, "orders").ForeignKeys; len(fks) != 1 || fks[0].RefTable != "customers" {
		t.Errorf("sales.orders FKs after filtering = %+v", fks)
	}
	if mustTable(t, v, "orders").Column("deal_id") == nil {
		t.Error("the visible orders table is not sales.orders")
	}
}

func TestFingerprintTwoSchemas(t *testing.T) {
	db := pgtest.UniqueName(t, "fp2")
	newDB(t, db, "CREATE SCHEMA a; CREATE SCHEMA b; CREATE TABLE a.t (x int);")
	ctx := context.Background()
	c := env.cluster(t)
	fp := func() string { return introspect(t, db, catalog.IntrospectOptions{}).Fingerprint }
	steps := []struct {
		sql  string
		same string // label of an earlier state the schema is identical to again
		name string
	}{
		{"", "", "a.t"},
		{"CREATE TABLE b.t (x int)", "", "a.t + b.t"},
		{"ALTER TABLE b.t ADD COLUMN y int", "", "a.t + b.t(y)"},
		{"ALTER TABLE b.t DROP COLUMN y; ALTER TABLE a.t ADD COLUMN y int", "", "a.t(y) + b.t"},
		{"ALTER TABLE a.t DROP COLUMN y", "a.t + b.t", "a.t + b.t again"},
		{"DROP TABLE b.t", "a.t", "a.t again"},
		{"ALTER TABLE a.t SET SCHEMA b", "", "b.t"},
	}
	seen := map[string]string{} // fingerprint → state
	byName := map[string]string{}
	for _, st := range steps {
		if st.sql != "" {
			if err := c.Exec(ctx, db, st.sql); err != nil {
				t.Fatalf("%s: %v", st.sql, err)
			}
		}
		f := fp()
		byName[st.name] = f
		if st.same != "" {
			if f != byName[st.same] {
				t.Errorf("%s: fingerprint differs from %s", st.name, st.same)
			}
			continue
		}
		if prev, dup := seen[f]; dup {
			t.Errorf("%s: same fingerprint as %s", st.name, prev)
		}
		seen[f] = st.name
	}
}

// walletDDL is a small database whose tables all live in one schema that
// is not on a default search_path (consumer_div), with foreign keys inside
// it, in the manner of sql-eval's ewallet.
const walletDDL = `CREATE SCHEMA consumer_div;
CREATE TABLE consumer_div.users (uid bigint PRIMARY KEY, username text NOT NULL, country text);
CREATE TABLE consumer_div.merchants (mid bigint PRIMARY KEY, name text NOT NULL, category text);
CREATE TABLE consumer_div.coupons (cid bigint PRIMARY KEY, merchant_id bigint REFERENCES consumer_div.merchants (mid), code text);
CREATE TABLE consumer_div.notifications (id bigint PRIMARY KEY, user_id bigint REFERENCES consumer_div.users (uid), message text, created_at timestamptz);
CREATE TABLE consumer_div.wallet_transactions_daily (txid bigint PRIMARY KEY, amount numeric(12,2), created_at timestamptz);`

// TestIntrospectSchemaOnly: a database whose tables all live in schema
// consumer_div; the catalog sees them there, with their keys, and the
// prompt qualifies them unless that schema is on the search path.
func TestIntrospectSchemaOnly(t *testing.T) {
	db := pgtest.UniqueName(t, "wallet")
	newDB(t, db, walletDDL)
	s := introspect(t, db, catalog.IntrospectOptions{})
	want := []string{"coupons", "merchants", "notifications", "users", "wallet_transactions_daily"}
	var got []string
	for _, tb := range s.Tables {
		if tb.Schema != "consumer_div" {
			t.Errorf("unexpected table %s.%s", tb.Schema, tb.Name)
			continue
		}
		got = append(got, tb.Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("consumer_div tables = %v, want %v", got, want)
	}
	n := mustTable(t, s, "consumer_div.notifications")
	if len(n.ForeignKeys) != 1 || n.ForeignKeys[0].RefSchema != "consumer_div" || n.ForeignKeys[0].RefTable != "users" {
		t.Errorf("notifications FKs = %+v", n.ForeignKeys)
	}
	// consumer_div is not on a default search_path: the prompt qualifies it.
	out := s.RenderFull(catalog.RenderOptions{})
	for _, w := range []string{"CREATE TABLE consumer_div.users (", "REFERENCES consumer_div.users (uid)"} {
		if !strings.Contains(out, w) {
			t.Errorf("rendering lacks %q", w)
		}
	}
	if out := s.RenderFull(catalog.RenderOptions{SearchPath: []string{"consumer_div", "public"}}); !strings.Contains(out, "CREATE TABLE users (") {
		t.Error("with consumer_div on the search path, users is not rendered unqualified")
	}
}
