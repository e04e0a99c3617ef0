package ownconn_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine/askall"
	"github.com/nlproxy/nlproxy/workload"
)

// ownGen turns fuzz bytes into hostile DDL: objects of mallory's (in her
// schema) or bob's (in public) that a query of the proxy's own could reach
// if it resolved a name through a user's schema, cast through a user's
// function, read a view or a policy of a user's, or read a column of a
// user's type. Every function made here is a spy (see spy).
type ownGen struct {
	b   []byte
	i   int
	tag string
	n   int // objects made, for unique names
	// mallory makes objects in schema, carol in public.
	schema, mallory, carol string
}

func (g *ownGen) pick(n int) int {
	if g.i >= len(g.b) {
		return 0
	}
	v := int(g.b[g.i]) % n
	g.i++
	return v
}

var (
	textLikeNames = []string{"text", "citext", "varchar", "name", "bpchar", `"char"`, "character varying"}
	catalogRels   = []string{"pg_roles", "pg_database", "pg_class", "pg_namespace", "pg_attribute", "pg_type",
		"pg_extension", "pg_depend", "pg_policy", "pg_proc", "pg_constraint", "pg_index", "pg_enum",
		"pg_description", "pg_attrdef", "pg_stat_activity", "pg_db_role_setting", "pg_partition_tree"}
	// look-alikes of the functions the proxy's own queries call, with
	// the argument types they are called with.
	lookalikes = []struct{ name, args, ret string }{
		{"array_position", "text[], text", "integer"}, {"length", "text", "integer"}, {"length", "character varying", "integer"},
		{"format_type", "oid, integer", "text"}, {"current_database", "", "name"}, {"pg_get_userbyid", "oid", "name"},
		{"to_regclass", "text", "regclass"}, {"cardinality", "text[]", "integer"}, {"has_schema_privilege", "oid, text", "boolean"},
		{"has_column_privilege", "oid, smallint, text", "boolean"}, {"pg_get_expr", "pg_node_tree, oid", "text"},
		{"set_config", "text, text, boolean", "text"}, {"count", "text", "bigint"}, {"string_agg", "text, text", "text"},
		{"current_schemas", "boolean", "name[]"}, {"pg_get_viewdef", "oid", "text"}, {"now", "", "timestamptz"},
		{"pg_partition_tree", "oid", "SETOF record"}, {"has_database_privilege", "oid, oid, text", "boolean"},
	}
	operatorTypes = [][2]string{{"oid", "oid"}, {"text", "text"}, {"name", "name"}, {"name", "text"}, {"bigint", "bigint"},
		{`"char"`, `"char"`}, {"regclass", "regclass"}, {"smallint", "smallint"}, {"integer", "integer"}}
	operatorNames = []string{"=", "<>", "<", "<=", ">", ">="}
)

// object returns the statements of one object, run as owner.
func (g *ownGen) object() (owner string, stmts []string) {
	g.n++
	schema, owner := g.schema, g.mallory
	if g.pick(2) == 1 {
		schema, owner = "public", g.carol
	}
	n := fmt.Sprintf("o%d", g.n)
	q := func(s string) string { return schema + "." + s }
	fn := func(name, args, ret string) string {
		body := spy(g.tag, name, "NULL")
		if ret == "boolean" {
			body = spy(g.tag, name, "true")
		}
		if strings.HasPrefix(ret, "SETOF") {
			return fmt.Sprintf("CREATE OR REPLACE FUNCTION %s(%s) RETURNS %s LANGUAGE plpgsql AS $f$ BEGIN RAISE WARNING 'RAN-%s %s'; END $f$", q(name), args, ret, g.tag, name)
		}
		return fmt.Sprintf("CREATE OR REPLACE FUNCTION %s(%s) RETURNS %s %s", q(name), args, ret, body)
	}
	grant := fmt.Sprintf("GRANT SELECT ON %s TO PUBLIC", q(n))
	switch g.pick(9) {
	case 0: // a composite type named like a text type, her cast to text, a table of it
		tn := strings.Trim(textLikeNames[g.pick(len(textLikeNames))], `"`)
		tn = strings.ReplaceAll(tn, " ", "_") + "_" + n
		if g.pick(2) == 0 {
			tn = `"` + strings.Trim(textLikeNames[g.pick(len(textLikeNames))], `"`) + `"`
		}
		target := []string{"text", "character varying", "name"}[g.pick(3)]
		return owner, []string{
			fmt.Sprintf("CREATE TYPE %s AS (v text)", q(tn)),
			fn("cast_"+n, q(tn), target),
			fmt.Sprintf("CREATE CAST (%s AS %s) WITH FUNCTION %s(%s) AS IMPLICIT", q(tn), target, q("cast_"+n), q(tn)),
			fmt.Sprintf("CREATE TABLE %s (label %s, title text)", q(n), q(tn)),
			fmt.Sprintf("INSERT INTO %s VALUES (ROW('a'), 'title a'), (ROW('b'), 'title b')", q(n)), grant,
		}
	case 1: // an enum with her cast to text, in a code/name table
		return owner, []string{
			fmt.Sprintf("CREATE TYPE %s AS ENUM ('NY', 'CA', 'TX')", q("e_"+n)),
			fn("ecast_"+n, q("e_"+n), "text"),
			fmt.Sprintf("CREATE CAST (%s AS text) WITH FUNCTION %s(%s)", q("e_"+n), q("ecast_"+n), q("e_"+n)),
			fmt.Sprintf("CREATE TABLE %s (state_code %s, state_name text)", q(n), q("e_"+n)),
			fmt.Sprintf("INSERT INTO %s VALUES ('NY', 'New York'), ('CA', 'California'), ('TX', 'Texas')", q(n)), grant,
		}
	case 2: // a domain over a text type whose check is hers
		base := []string{"text", "character varying(20)", "name", "character(8)"}[g.pick(4)]
		return owner, []string{
			fn("chk_"+n, "text", "boolean"),
			fmt.Sprintf("CREATE DOMAIN %s AS %s", q("d_"+n), base),
			fmt.Sprintf("CREATE TABLE %s (label %s)", q(n), q("d_"+n)),
			fmt.Sprintf("INSERT INTO %s VALUES ('domain %s')", q(n), n),
			fmt.Sprintf("ALTER DOMAIN %s ADD CONSTRAINT c CHECK (%s(VALUE)) NOT VALID", q("d_"+n), q("chk_"+n)), grant,
		}
	case 3: // a view named like a catalog relation, or a plain view, calling her function
		vn := n
		if g.pick(2) == 0 {
			vn = catalogRels[g.pick(len(catalogRels))]
		}
		return owner, []string{
			fn("vf_"+n, "", "boolean"),
			fmt.Sprintf("CREATE OR REPLACE VIEW %s AS SELECT 'v'::text AS label, 0::oid AS oid, ''::name AS relname, ''::name AS rolname, ''::name AS nspname WHERE %s()", q(vn), q("vf_"+n)),
			fmt.Sprintf("GRANT SELECT ON %s TO PUBLIC", q(vn)),
		}
	case 4: // a function named like one the proxy calls
		l := lookalikes[g.pick(len(lookalikes))]
		if l.name == "count" || l.name == "string_agg" {
			return owner, []string{
				fn("sf_"+n, "text, text", "text"),
				fmt.Sprintf("CREATE AGGREGATE %s(%s) (SFUNC = %s, STYPE = text)", q(l.name), l.args, q("sf_"+n)),
			}
		}
		return owner, []string{fn(l.name, l.args, l.ret)}
	case 5: // an operator the proxy's queries could resolve to
		ts := operatorTypes[g.pick(len(operatorTypes))]
		op := operatorNames[g.pick(len(operatorNames))]
		return owner, []string{
			fn("op_"+n, ts[0]+", "+ts[1], "boolean"),
			fmt.Sprintf("CREATE OPERATOR %s.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = %s)", schema, op, ts[0], ts[1], q("op_"+n)),
		}
	case 6: // a table under row-level security: her function, her operator, or built-ins only
		pol := []string{q("pol_"+n) + "(label)", "label <> ''", "label OPERATOR(" + schema + ".<>) ''",
			"label = (SELECT pg_catalog.min(label) FROM " + q(n) + ")", "pg_catalog.length(label) > 0"}[g.pick(5)]
		return owner, []string{
			fn("pol_"+n, "text", "boolean"),
			fn("opx_"+n, "text, text", "boolean"),
			fmt.Sprintf("DO $d$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_operator o WHERE o.oprname = '<>' AND o.oprnamespace = '%s'::pg_catalog.regnamespace AND o.oprleft = 'pg_catalog.text'::pg_catalog.regtype) THEN EXECUTE 'CREATE OPERATOR %s.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = %s)'; END IF; END $d$", schema, schema, q("opx_"+n)),
			fmt.Sprintf("CREATE TABLE %s (label text)", q(n)),
			fmt.Sprintf("INSERT INTO %s VALUES ('rls %s')", q(n), n),
			fmt.Sprintf("ALTER TABLE %s ENABLE ROW LEVEL SECURITY", q(n)),
			fmt.Sprintf("CREATE POLICY p ON %s USING (%s)", q(n), pol), grant,
		}
	case 7: // inheritance and partitions: a child under her policy, a partitioned table
		if g.pick(2) == 0 {
			return owner, []string{
				fn("cpol_"+n, "text", "boolean"),
				fmt.Sprintf("CREATE TABLE %s (label text)", q(n)),
				fmt.Sprintf("CREATE TABLE %s () INHERITS (%s)", q("c_"+n), q(n)),
				fmt.Sprintf("INSERT INTO %s VALUES ('child %s')", q("c_"+n), n),
				fmt.Sprintf("ALTER TABLE %s ENABLE ROW LEVEL SECURITY", q("c_"+n)),
				fmt.Sprintf("CREATE POLICY p ON %s USING (%s(label))", q("c_"+n), q("cpol_"+n)),
				grant, fmt.Sprintf("GRANT SELECT ON %s TO PUBLIC", q("c_"+n)),
			}
		}
		return owner, []string{
			fmt.Sprintf("CREATE TABLE %s (label text, k int) PARTITION BY LIST (k)", q(n)),
			fmt.Sprintf("CREATE TABLE %s PARTITION OF %s FOR VALUES IN (1)", q("p_"+n), q(n)),
			fmt.Sprintf("INSERT INTO %s VALUES ('part %s', 1)", q(n), n), grant,
		}
	default: // a materialized view over her function, never populated
		return owner, []string{
			fn("mf_"+n, "", "text"),
			fmt.Sprintf("CREATE MATERIALIZED VIEW %s AS SELECT %s() AS label WITH NO DATA", q(n), q("mf_"+n)), grant,
		}
	}
}

// ownDifferential is one world and what its readers need.
type ownDifferential struct {
	w *world
	// schema is mallory's schema for generated objects, carol the role
	// that makes them in public; both are emptied after each check, so
	// the world's own objects (newWorld) stay for every check.
	schema, carol string
}

func newOwnDifferential(tb testing.TB) *ownDifferential {
	w := newWorld(tb, newCluster(tb))
	w.checkDetector(tb)
	d := &ownDifferential{w: w, schema: "fz_" + w.tag, carol: "carol_" + w.tag}
	if err := w.cluster.Exec(context.Background(), w.db, fmt.Sprintf(
		"CREATE ROLE %s LOGIN; CREATE SCHEMA %s AUTHORIZATION mallory_%s; GRANT USAGE ON SCHEMA %[2]s TO PUBLIC",
		d.carol, d.schema, w.tag)); err != nil {
		tb.Fatal(err)
	}
	return d
}

// check makes the objects b describes, runs every reader on the proxy's
// own connections, and fails if one of them made the server call a user's
// function (a new marker line in the log). The objects are dropped after.
func (d *ownDifferential) check(tb testing.TB, b []byte) (made int) {
	tb.Helper()
	w := d.w
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mallory := "mallory_" + w.tag
	g := &ownGen{b: b, tag: w.tag, schema: d.schema, mallory: mallory, carol: d.carol}
	var ddl []string
	for k := 0; k < 1+len(b)/3 && k < 6; k++ {
		owner, stmts := g.object()
		for _, s := range stmts {
			// A statement the server refuses (a name taken, an operator
			// pg_catalog already has) only loses that object.
			if w.cluster.Exec(ctx, w.db, "SET ROLE "+owner+"; "+s) == nil {
				made++
			}
			ddl = append(ddl, owner+": "+s)
		}
	}
	defer func() {
		if err := w.cluster.Exec(context.WithoutCancel(ctx), w.db, fmt.Sprintf(
			"DROP OWNED BY %s CASCADE; DROP SCHEMA %s CASCADE; CREATE SCHEMA %[2]s AUTHORIZATION %s; GRANT USAGE ON SCHEMA %[2]s TO PUBLIC",
			d.carol, d.schema, mallory)); err != nil {
			tb.Fatal(err)
		}
	}()
	before := len(w.ran(tb))
	var errs []string
	note := func(what string, err error) {
		if err != nil {
			errs = append(errs, what+": "+err.Error())
		}
	}
	// The catalog build: introspection, functions and views, value index;
	// on a connection pinned at startup as the proxy opens it, or (odd
	// inputs) on one that is not, as the catalog subcommands' (each
	// transaction pins itself).
	conn, err := w.connect(ctx, w.cat, len(b)%2 == 1, tb)
	if err != nil {
		tb.Fatal(err)
	}
	_, err = catalog.Build(ctx, conn, w.db, catalog.BuildOptions{})
	note("catalog build", err)
	conn.Close(ctx)
	if statStatements(tb) {
		_, err = workload.PgStatStatements{Connect: func(ctx context.Context, _ string) (*pgx.Conn, error) {
			return w.connect(ctx, w.cat, true, tb)
		}}.Statements(ctx, w.db)
		note("stats reader", err)
	}
	pc, err := pgconn.ConnectConfig(ctx, &w.config(tb, w.auth, true).Config)
	if err != nil {
		tb.Fatal(err)
	}
	_, err = askall.Perimeter(ctx, pc, mallory)
	note("perimeter", err)
	pc.Close(ctx)
	if lines := w.ran(tb); len(lines) > before {
		tb.Fatalf("the proxy's own connections called a user's function:\n%s\nafter:\n%s\n(reader errors: %v)",
			strings.Join(lines[before:], "\n"), strings.Join(ddl, "\n"), errs)
	}
	// A reader failing outright would hide a call it never made: the
	// objects made here must never stop the build.
	if len(errs) > 0 {
		tb.Fatalf("a reader failed on:\n%s\n%v", strings.Join(ddl, "\n"), errs)
	}
	return made
}

// FuzzOwnConnCallsNoUserCode is the differential check of the proxy's own
// connections: whatever look-alike types, casts, operators, functions,
// views, policies and tables users make in public and in their schemas,
// the catalog build (introspection, functions and views, value index), the
// pg_stat_statements reader and the ask(all) perimeter check make the
// server call none of their functions. The seed corpus (one entry per
// object kind and schema, and a mix) is in testdata/fuzz/FuzzOwnConnCallsNoUserCode;
// plain go test runs it too.
func FuzzOwnConnCallsNoUserCode(f *testing.F) {
	d := newOwnDifferential(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		d.check(t, b)
	})
}

// TestOwnConnCallsNoUserCode runs the differential check over a bounded
// enumeration (every object kind, in mallory's schema and in public), so
// that go test covers it without the fuzzing engine, and checks that the
// server accepted the hostile objects (a check over nothing proves nothing).
func TestOwnConnCallsNoUserCode(t *testing.T) {
	d := newOwnDifferential(t)
	for kind := 0; kind < 9; kind++ {
		made := 0
		for owner := 0; owner < 2; owner++ {
			made += d.check(t, []byte{byte(kind), byte(owner), byte(kind + owner), byte(owner + 1), byte(kind)})
		}
		if made == 0 {
			t.Errorf("object kind %d: the server accepted none of its statements", kind)
		}
	}
}
