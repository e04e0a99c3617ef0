// Package ownconn_test checks the proxy's own connections (internal/ownconn)
// against a real PostgreSQL full of what hostile users can create: mallory
// owns a schema first on her search_path, bob can create in public (the
// default of every database created before PostgreSQL 15). Every function
// either of them writes raises a WARNING carrying the test's marker, so a
// call shows in the server log whatever the transaction did afterwards; the
// catalog build, the value index, the pg_stat_statements reader, the ask(all)
// perimeter check and the catalog store must never leave one there.
package ownconn_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/internal/ownconn"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// world is one database with mallory's and bob's objects, the catalog role
// (the README's: SELECT on what it indexes, plus a secret table it may read
// and nobody else may), and an authenticator.
type world struct {
	cluster *pgcluster.Cluster
	db      string
	tag     string // marker of this world's user functions: "RAN-" + tag
	cat     string // catalog role
	auth    string // authenticator role
}

const password = "pw-for-tests"

// statStatements reports whether the server binaries ship pg_stat_statements.
func statStatements(tb testing.TB) bool {
	bin, err := pgtest.FindBinDir()
	if err != nil {
		tb.Skipf("no PostgreSQL server binaries: %v", err)
	}
	_, err = os.Stat(filepath.Join(filepath.Dir(bin), "lib", "pg_stat_statements.so"))
	return err == nil
}

func newCluster(tb testing.TB) *pgcluster.Cluster {
	opts := pgcluster.Options{}
	if statStatements(tb) {
		opts.Settings = map[string]string{"shared_preload_libraries": "'pg_stat_statements'"}
	}
	return pgtest.New(tb, opts)
}

// spy is the body of every user function: a WARNING with the marker (the
// server log keeps it past any rollback), then ret.
func spy(tag, what, ret string) string {
	return fmt.Sprintf("LANGUAGE plpgsql AS $f$ BEGIN RAISE WARNING 'RAN-%s %s'; RETURN %s; END $f$", tag, what, ret)
}

// newWorld creates the database, the roles and the hostile objects.
func newWorld(tb testing.TB, cluster *pgcluster.Cluster) *world {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := &world{cluster: cluster, db: pgtest.UniqueName(tb, "own"), cat: pgtest.UniqueName(tb, "cat"),
		auth: pgtest.UniqueName(tb, "auth"), tag: pgtest.UniqueName(tb, "t")}
	mallory, bob := "mallory_"+w.tag, "bob_"+w.tag
	if err := cluster.CreateDatabase(ctx, w.db); err != nil {
		tb.Fatal(err)
	}
	secret := "'TOPSECRET-" + w.tag + "'"
	leak := "(SELECT pg_catalog.string_agg(secret, ',') FROM vault.secrets)"
	ext := ""
	if statStatements(tb) {
		// In public, where CREATE EXTENSION puts it by default, next to bob.
		ext = "CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public;"
	}
	sql := fmt.Sprintf(`
CREATE ROLE %[1]s LOGIN PASSWORD '%[4]s';
CREATE ROLE %[2]s LOGIN PASSWORD '%[4]s';
CREATE ROLE %[3]s LOGIN PASSWORD '%[4]s';
CREATE ROLE %[5]s LOGIN PASSWORD '%[4]s';
GRANT pg_read_all_stats TO %[1]s;
GRANT CREATE ON SCHEMA public TO PUBLIC;
%[6]s
-- The owner of the database put public first for everyone.
ALTER DATABASE %[7]s SET search_path = public, pg_catalog;
CREATE SCHEMA vault;
CREATE TABLE vault.secrets (secret text);
INSERT INTO vault.secrets VALUES (%[8]s);
GRANT USAGE ON SCHEMA vault TO %[1]s;
GRANT SELECT ON vault.secrets TO %[1]s;
CREATE TABLE public.plain (label text);
INSERT INTO public.plain VALUES ('visible-%[9]s'), ('visible-%[9]s'), ('other-%[9]s');
GRANT SELECT ON public.plain TO %[1]s;
CREATE FUNCTION public.control() RETURNS int %[10]s;
CREATE SCHEMA %[2]s AUTHORIZATION %[2]s;
ALTER ROLE %[2]s SET search_path = %[2]s, public;
`, w.cat, mallory, bob, password, w.auth, ext, w.db, secret, w.tag, strings.Replace(spy(w.tag, "", "1"), "RAN-", "CONTROL-", 1))
	if err := cluster.Exec(ctx, w.db, sql); err != nil {
		tb.Fatal(err)
	}
	// mallory, in her own schema: look-alike types with her casts, an enum
	// with her cast to text, a domain whose check is hers, a view, and
	// row-level security policies calling her function and her operator.
	m := mallory
	malSQL := fmt.Sprintf(`SET ROLE %[1]s;
CREATE TYPE %[1]s.citext AS (v text);
CREATE TYPE %[1]s.varchar AS (v text);
CREATE FUNCTION %[1]s.leak(%[1]s.citext) RETURNS text %[2]s;
CREATE FUNCTION %[1]s.leak2(%[1]s.varchar) RETURNS text %[3]s;
CREATE CAST (%[1]s.citext AS text) WITH FUNCTION %[1]s.leak(%[1]s.citext) AS IMPLICIT;
CREATE CAST (%[1]s.varchar AS text) WITH FUNCTION %[1]s.leak2(%[1]s.varchar) AS IMPLICIT;
CREATE TABLE %[1]s.notes (label %[1]s.citext, title %[1]s.varchar);
INSERT INTO %[1]s.notes VALUES (ROW('a'), ROW('b'));
CREATE TYPE %[1]s.code AS ENUM ('NY', 'CA', 'TX');
CREATE FUNCTION %[1]s.code_text(%[1]s.code) RETURNS text %[4]s;
CREATE CAST (%[1]s.code AS text) WITH FUNCTION %[1]s.code_text(%[1]s.code) AS IMPLICIT;
CREATE TABLE %[1]s.states (state_code %[1]s.code, state_name text);
INSERT INTO %[1]s.states VALUES ('NY', 'New York'), ('CA', 'California'), ('TX', 'Texas');
CREATE FUNCTION %[1]s.ok(text) RETURNS boolean %[5]s;
CREATE DOMAIN %[1]s.word AS text;
CREATE TABLE %[1]s.words (w %[1]s.word);
INSERT INTO %[1]s.words VALUES ('domain-value-%[6]s');
ALTER DOMAIN %[1]s.word ADD CONSTRAINT hers CHECK (%[1]s.ok(VALUE)) NOT VALID;
CREATE FUNCTION %[1]s.viewfn() RETURNS text %[7]s;
CREATE VIEW %[1]s.v AS SELECT %[1]s.viewfn() AS label;
CREATE FUNCTION %[1]s.pol(text) RETURNS boolean %[8]s;
CREATE TABLE %[1]s.guarded (label text);
INSERT INTO %[1]s.guarded VALUES ('guarded-%[6]s');
ALTER TABLE %[1]s.guarded ENABLE ROW LEVEL SECURITY;
CREATE POLICY p ON %[1]s.guarded USING (%[1]s.pol(label));
CREATE FUNCTION %[1]s.opfn(text, text) RETURNS boolean %[9]s;
CREATE OPERATOR %[1]s.=== (LEFTARG = text, RIGHTARG = text, FUNCTION = %[1]s.opfn);
CREATE TABLE %[1]s.guarded2 (label text);
INSERT INTO %[1]s.guarded2 VALUES ('guarded2-%[6]s');
ALTER TABLE %[1]s.guarded2 ENABLE ROW LEVEL SECURITY;
CREATE POLICY p ON %[1]s.guarded2 USING (label OPERATOR(%[1]s.===) 'x');
CREATE TABLE %[1]s.open_rls (label text);
INSERT INTO %[1]s.open_rls VALUES ('rls-open-%[6]s');
ALTER TABLE %[1]s.open_rls ENABLE ROW LEVEL SECURITY;
CREATE POLICY p ON %[1]s.open_rls USING (label <> '');
GRANT USAGE ON SCHEMA %[1]s TO PUBLIC;
GRANT SELECT ON ALL TABLES IN SCHEMA %[1]s TO PUBLIC;
RESET ROLE;`, m, spy(w.tag, "cast", leak), spy(w.tag, "cast2", leak), spy(w.tag, "enum cast", leak),
		spy(w.tag, "domain check", "true"), w.tag, spy(w.tag, "view", leak), spy(w.tag, "policy", "true"), spy(w.tag, "operator", "true"))
	if err := cluster.Exec(ctx, w.db, malSQL); err != nil {
		tb.Fatal(err)
	}
	// bob, in public: look-alikes of what the proxy's own queries name.
	b := bob
	bobSQL := fmt.Sprintf(`SET ROLE %[1]s;
CREATE FUNCTION public.spy() RETURNS boolean %[2]s;
CREATE FUNCTION public.array_position(text[], text) RETURNS integer %[3]s;
CREATE FUNCTION public.current_database() RETURNS name %[4]s;
CREATE FUNCTION public.format_type(oid, integer) RETURNS text %[5]s;
CREATE FUNCTION public.length(text) RETURNS integer %[6]s;
CREATE FUNCTION public.has_schema_privilege(oid, text) RETURNS boolean %[2]s;
CREATE FUNCTION public.cardinality(text[]) RETURNS integer %[6]s;
CREATE FUNCTION public.to_regclass(text) RETURNS regclass %[7]s;
CREATE FUNCTION public.pg_get_userbyid(oid) RETURNS name %[4]s;
CREATE FUNCTION public.now() RETURNS timestamptz %[8]s;
CREATE FUNCTION public.eqspy(oid, oid) RETURNS boolean %[2]s;
CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = public.eqspy);
CREATE FUNCTION public.neqspy(text, text) RETURNS boolean %[2]s;
CREATE OPERATOR public.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = public.neqspy);
CREATE VIEW public.pg_roles AS SELECT * FROM pg_catalog.pg_roles WHERE public.spy();
CREATE VIEW public.pg_database AS SELECT * FROM pg_catalog.pg_database WHERE public.spy();
CREATE VIEW public.pg_class AS SELECT * FROM pg_catalog.pg_class WHERE public.spy();
CREATE VIEW public.pg_namespace AS SELECT * FROM pg_catalog.pg_namespace WHERE public.spy();
CREATE VIEW public.pg_stats AS SELECT schemaname, tablename, attname, inherited, null_frac, n_distinct, NULL::text AS most_common_vals FROM pg_catalog.pg_stats WHERE public.spy();
CREATE VIEW public.pg_extension AS SELECT * FROM pg_catalog.pg_extension WHERE public.spy();
CREATE VIEW public.pg_stat_activity AS SELECT * FROM pg_catalog.pg_stat_activity WHERE public.spy();
GRANT SELECT ON public.pg_roles, public.pg_database, public.pg_class, public.pg_namespace, public.pg_stats, public.pg_extension, public.pg_stat_activity TO PUBLIC;
RESET ROLE;`, b, spy(w.tag, "bob", "true"), spy(w.tag, "array_position", "1"), spy(w.tag, "current_database", "'x'"),
		spy(w.tag, "format_type", "'text'"), spy(w.tag, "length", "1"), spy(w.tag, "to_regclass", "NULL"), spy(w.tag, "now", "pg_catalog.now()"))
	if err := cluster.Exec(ctx, w.db, bobSQL); err != nil {
		tb.Fatal(err)
	}
	if err := cluster.Exec(ctx, w.db, "ANALYZE"); err != nil {
		tb.Fatal(err)
	}
	return w
}

// config is a connection config for role on the world's database, as the
// proxy opens its own (ownconn.Configure), unless raw.
func (w *world) config(tb testing.TB, role string, raw bool) *pgx.ConnConfig {
	tb.Helper()
	cfg, err := pgx.ParseConfig(w.cluster.URL(role, password, w.db))
	if err != nil {
		tb.Fatal(err)
	}
	if role == pgtest.Superuser {
		cfg.Password = pgtest.SuperuserPassword
	}
	if !raw {
		ownconn.Configure(&cfg.Config, ownconn.Read, ownconn.Bounds{})
	}
	return cfg
}

func (w *world) connect(ctx context.Context, role string, raw bool, tb testing.TB) (*pgx.Conn, error) {
	return pgx.ConnectConfig(ctx, w.config(tb, role, raw))
}

// ran returns the server log lines that show a function of this world's
// users ran.
func (w *world) ran(tb testing.TB) []string {
	tb.Helper()
	return w.logLines(tb, "RAN-"+w.tag)
}

func (w *world) logLines(tb testing.TB, marker string) []string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(w.cluster.Dir(), "postgres.log"))
	if err != nil {
		tb.Fatalf("server log: %v", err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, marker) {
			out = append(out, l)
		}
	}
	return out
}

// checkDetector calls the control function once and checks its WARNING is
// in the log: the log check can fail.
func (w *world) checkDetector(tb testing.TB) {
	tb.Helper()
	if err := w.cluster.Exec(context.Background(), w.db, "SELECT public.control()"); err != nil {
		tb.Fatal(err)
	}
	if len(w.logLines(tb, "CONTROL-"+w.tag)) == 0 {
		tb.Fatal("the control function's WARNING is not in the server log: the detector is blind")
	}
}

func (w *world) noneRan(tb testing.TB, what string) {
	tb.Helper()
	if lines := w.ran(tb); len(lines) > 0 {
		tb.Fatalf("%s ran a user's function:\n%s", what, strings.Join(lines, "\n"))
	}
}
