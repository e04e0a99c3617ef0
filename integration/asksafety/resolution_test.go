package asksafety_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// The attacker of these tests is an ordinary role, mallory, that owns a
// schema first on its search_path (pg_catalog explicitly after it, so its
// operators win over pg_catalog's), may create temporary objects, functions,
// types, casts and operators there, and whose model answers what mallory
// wants. Every function mallory writes counts its calls in a sequence, which
// a ROLLBACK does not undo: a call that happened is seen afterwards.
const (
	mallory       = "mallory"
	columnSecret  = "Zanzibar Columnsecret"
	rowSecretName = "Ozymandias Rowsecret"
)

var resolutionDDL = `
CREATE TABLE ledger (id int PRIMARY KEY, owner text NOT NULL, motto text NOT NULL);
INSERT INTO ledger SELECT g, 'owner' || g, '` + columnSecret + ` ' || mod(g, 3) FROM generate_series(1, 30) g;
GRANT SELECT (id, owner) ON ledger TO mallory;
CREATE TABLE cases (id int PRIMARY KEY, clerk text NOT NULL, name text NOT NULL);
INSERT INTO cases VALUES (1, 'mallory', 'Mallory Own');
INSERT INTO cases SELECT g, 'someone_else', '` + rowSecretName + `' FROM generate_series(2, 40) g;
ALTER TABLE cases ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_cases ON cases USING (clerk = current_user);
GRANT SELECT ON cases TO mallory;
CREATE SCHEMA mallory AUTHORIZATION mallory;
ALTER ROLE mallory IN DATABASE %s SET search_path = mallory, pg_catalog, public;
SET ROLE mallory;
CREATE SEQUENCE mallory.calls;
CREATE FUNCTION mallory.touch(public.ledger) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  RAISE WARNING 'mallory-called %%', pg_catalog.current_database();
  PERFORM pg_catalog.pg_advisory_lock(4242);
  PERFORM pg_catalog.set_config('mallory.flag', 'set', false);
  RETURN 1;
END $$;
CREATE FUNCTION mallory.chk(text) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN RAISE WARNING 'mallory-called %%', pg_catalog.current_database(); RETURN true; END $$;
CREATE DOMAIN mallory.checked_text AS text CHECK (mallory.chk(VALUE));
CREATE TYPE mallory.mood AS ENUM ('ok');
CREATE FUNCTION mallory.to_mood(int) RETURNS mallory.mood LANGUAGE plpgsql AS $$
BEGIN RAISE WARNING 'mallory-called %%', pg_catalog.current_database(); RETURN 'ok'; END $$;
CREATE CAST (int AS mallory.mood) WITH FUNCTION mallory.to_mood(int) AS IMPLICIT;
CREATE TABLE mallory.diary (id int, m mallory.mood);
CREATE FUNCTION mallory.eq(oid, oid) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN RAISE WARNING 'mallory-called %%', pg_catalog.current_database(); RETURN true; END $$;
CREATE OPERATOR mallory.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = mallory.eq);
SET search_path = mallory, pg_catalog, public;
CREATE VIEW mallory.eqview AS SELECT id FROM public.ledger WHERE 1::oid = 2::oid;
CREATE TABLE mallory.int8 (x int);
CREATE TABLE mallory.text (x int);
GRANT SELECT ON mallory.eqview TO mallory;
RESET search_path;
RESET ROLE;
ANALYZE;
`

// sessionDDL is what mallory makes in its own session before asking:
// temporary stand-ins for the types and relations the proxy uses.
// (%[1]s makes the function's name unique: a session's temporary type, and
// the function returning it, are dropped after the session ends.)
const sessionDDL = `
CREATE TYPE pg_temp.mood2 AS ENUM ('x');
CREATE FUNCTION mallory.to_mood2_%[1]s(int) RETURNS pg_temp.mood2 LANGUAGE plpgsql AS $$
BEGIN RAISE WARNING 'mallory-called %%', pg_catalog.current_database(); RETURN 'x'; END $$;
CREATE CAST (int AS pg_temp.mood2) WITH FUNCTION mallory.to_mood2_%[1]s(int);
CREATE TEMP TABLE ledger (id int, owner pg_catalog.text, motto pg_catalog.text);
INSERT INTO ledger VALUES (1, 'temp-shadow', 'temp-shadow');
`

type resolutionVector struct {
	id, sql string
	// rows: the ask may answer, with these owners (comma-joined) when set.
	rows  bool
	owner string
	code  string // the SQLSTATE a refused ask fails with ("" any)
}

var resolutionCorpus = []resolutionVector{
	// Field selection is a call, touch(l): under the pinned search_path the
	// server finds no such function (pg_catalog's only).
	{id: "r01", sql: "SELECT l.touch FROM ledger l"},
	{id: "r02", sql: "SELECT (l).touch FROM ledger l"},
	// A domain's check, an explicit cast and an implicit one on a column.
	{id: "r03", sql: "SELECT 'x'::checked_text", code: "42501"},
	{id: "r04", sql: "SELECT CAST(5 AS mood)", code: "42501"},
	{id: "r05", sql: "SELECT id FROM diary WHERE m = 5", code: "42501"},
	// A temporary type with a cast, named and qualified.
	{id: "r06", sql: "SELECT CAST(5 AS mood2)"},
	{id: "r07", sql: "SELECT CAST(5 AS pg_temp.mood2)", code: "42501"},
	// A built-in with effects through field selection.
	{id: "r08", sql: "SELECT (4242::bigint).pg_advisory_lock", code: "42501"},
	// mallory's = (oid, oid) is first on its path; the ask uses pg_catalog's.
	{id: "r09", sql: "SELECT id FROM ledger WHERE 1::oid = 2::oid", rows: true},
	{id: "r10", sql: "SELECT id FROM ledger WHERE 1::oid OPERATOR(mallory.=) 2::oid", code: "42501"},
	// The temporary table does not stand in for public.ledger.
	{id: "r11", sql: "SELECT owner FROM ledger WHERE id = 1", rows: true, owner: "owner1"},
	{id: "r12", sql: "WITH ledger AS (SELECT owner FROM ledger WHERE id = 2) SELECT owner FROM ledger", rows: true, owner: "owner2"},
	// A view mallory made with its own = (oid, oid): the view's recorded
	// dependencies, not its text, show the operator.
	{id: "r16", sql: "SELECT id FROM eqview", code: "42501"},
	// On mallory's path (pg_catalog named after its schema) ::int8 is its
	// table's row type, as Postgres reads it: the cast fails, nothing runs.
	// Its table "text" must not change the proxy's own probes, which name
	// ::text (every other vector here would fail if it did).
	{id: "r17", sql: "SELECT 1::int8"},
	// What a statement may ask of the server.
	{id: "r13", sql: "SELECT pg_catalog.length(pg_catalog.repeat('x', 1000000000))", code: "54000"},
	{id: "r14", sql: "WITH " + chainedCTEs(1000) + " SELECT * FROM c999", code: "54000"},
	{id: "r15", sql: "SELECT " + strings.Repeat("ROW(", 1000) + "1" + strings.Repeat(")", 1000), code: ""},
}

func chainedCTEs(n int) string {
	parts := []string{"c0 AS (SELECT 1 AS x)"}
	for i := 1; i < n; i++ {
		parts = append(parts, fmt.Sprintf("c%d AS (SELECT x FROM c%d)", i, i-1))
	}
	return strings.Join(parts, ", ")
}

// TestResolutionIsPinned runs the corpus as mallory, idle and inside a
// transaction, over the simple and the extended protocol, and checks after
// every ask that no function of mallory's ran, that the session holds no
// new lock, setting or temporary object, and that no value mallory may not
// read reached the model.
func TestResolutionIsPinned(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db := f.malloryDatabase(t, "resolve")
	admin, err := f.cluster.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	calls := func(t *testing.T) int64 { return mallorysCalls(t, f.cluster, db) }
	checkCallDetector(t, f.cluster, admin, db)

	rules := []fakeollama.Rule{{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords},
		Reply: `{"keywords": ["ledger", "owner", "cases"], "entities": ["zanzibar columsecret", "ozymandias rowsecet"]}`}}
	for _, v := range resolutionCorpus {
		tag := "hostile " + v.id + " "
		rules = append(rules,
			fakeollama.Rule{Name: "candidate " + v.id, PromptContains: []string{fakeollama.PromptCandidate}, Match: fakeollama.QuestionContains(tag), Reply: sqlReply(v.sql)},
			fakeollama.Rule{Name: "fix " + v.id, PromptContains: []string{fakeollama.PromptFixer}, Match: fakeollama.QuestionContains(tag), Reply: sqlReply(v.sql)})
	}
	f.fake.SetRules(rules...)

	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		for _, inTx := range []bool{false, true} {
			name := fmt.Sprintf("%v/tx=%v", mode, inTx)
			t.Run(name, func(t *testing.T) {
				conn, _ := f.connectAs(t, f.proxy, mallory, db)
				if _, err := conn.Exec(ctx, fmt.Sprintf(sessionDDL, randomSuffix(t)), pgx.QueryExecModeSimpleProtocol); err != nil {
					t.Fatal(err)
				}
				before := sessionState(t, conn)
				for _, v := range resolutionCorpus {
					if inTx {
						if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
							t.Fatal(err)
						}
					}
					n0 := calls(t)
					owners, err := askRows(ctx, conn, mode, fmt.Sprintf("-- ask: hostile %s via %s", v.id, name))
					switch {
					case v.rows && err != nil:
						t.Errorf("%s: %v, want rows", v.id, err)
					case v.rows && v.owner != "" && owners != v.owner:
						t.Errorf("%s: rows %q, want %q (the session's temporary table stood in)", v.id, owners, v.owner)
					case !v.rows && err == nil:
						t.Errorf("%s: the ask answered %q; it must fail (%s)", v.id, owners, v.sql)
					case !v.rows && v.code != "" && pgCode(err) != v.code:
						t.Errorf("%s: %v, want SQLSTATE %s", v.id, err, v.code)
					}
					if n := calls(t); n != n0 {
						t.Errorf("%s: %d of mallory's functions ran (%s)", v.id, n-n0, v.sql)
					}
					if inTx && err == nil {
						// The client's transaction goes on, writable. (A
						// failed ask fails the transaction, as any error does.)
						if _, err := conn.Exec(ctx, "CREATE TEMP TABLE IF NOT EXISTS scratch_w (x int); INSERT INTO scratch_w VALUES (1); DROP TABLE scratch_w"); err != nil {
							t.Errorf("%s: the client's transaction after the ask: %v", v.id, err)
						}
					}
					if inTx {
						if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
							t.Fatal(err)
						}
					}
					if after := sessionState(t, conn); after != before {
						t.Errorf("%s: the session changed:\n before %s\n after  %s", v.id, before, after)
					}
				}
			})
		}
	}

	// The model is sent misspelt entities; only retrieval of stored values
	// could put the stored spelling in a prompt.
	prompts := f.prompts()
	for _, secret := range []string{columnSecret, rowSecretName} {
		if strings.Contains(prompts, secret) {
			t.Errorf("the model was shown %q, which mallory may not read", secret)
		}
	}
	if strings.Contains(prompts, "temp-shadow") {
		t.Errorf("the model was shown the session's temporary table")
	}
}

// malloryDatabase makes the role mallory and a database of resolutionDDL
// named after prefix, with its catalog loaded.
func (f *fixture) malloryDatabase(t *testing.T, prefix string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := f.cluster.CreateRole(ctx, mallory, mallory+"-secret", false); err != nil {
		t.Fatal(err)
	}
	db := prefix + "_" + randomSuffix(t)
	if err := f.cluster.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := f.cluster.Exec(ctx, db, fmt.Sprintf(resolutionDDL, db)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cats.Get(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db
}

// askRows runs an ask and returns the first column of its rows, joined.
func askRows(ctx context.Context, conn *pgx.Conn, mode pgx.QueryExecMode, sql string) (string, error) {
	rows, err := conn.Query(ctx, sql, mode)
	if err != nil {
		return "", err
	}
	var out []string
	for rows.Next() {
		out = append(out, string(rows.RawValues()[0]))
	}
	rows.Close()
	return strings.Join(out, ","), rows.Err()
}

// sessionState is what an ask must leave as it found it: advisory and
// other locks the session holds outside a transaction, the settings mallory's
// functions would change, the search_path, and the session's temporary
// objects. It runs on mallory's session, under her search_path: the oid
// comparison names pg_catalog's
// operator, or her mallory.= (oid, oid) would count every relation in the
// database, which other sessions change.
func sessionState(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var s string
	err := conn.QueryRow(context.Background(), `SELECT concat_ws(' | ',
		(SELECT count(*) FROM pg_catalog.pg_locks WHERE pid = pg_catalog.pg_backend_pid() AND locktype = 'advisory'),
		pg_catalog.current_setting('mallory.flag', true),
		pg_catalog.current_setting('search_path'),
		pg_catalog.current_setting('transaction_read_only'),
		pg_catalog.current_setting('statement_timeout'),
		(SELECT count(*) FROM pg_catalog.pg_class WHERE relnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()))`,
		pgx.QueryExecModeSimpleProtocol).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPrivilegeChangeTakesEffect: a column GRANT and REVOKE change what the
// model is shown on the very next ask, in a new session.
func TestPrivilegeChangeTakesEffect(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := f.malloryDatabase(t, "privs")
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["ledger", "motto"], "entities": ["zanzibar columsecret"]}`},
		fakeollama.Rule{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply("SELECT id FROM ledger WHERE id = 1")},
		fakeollama.Rule{Name: "fix", PromptContains: []string{fakeollama.PromptFixer}, Reply: sqlReply("SELECT id FROM ledger WHERE id = 1")},
	)
	shown := func(t *testing.T, n int) bool {
		t.Helper()
		f.fake.Reset()
		conn, _ := f.connectAs(t, f.proxy, mallory, db)
		if _, err := askRows(ctx, conn, pgx.QueryExecModeSimpleProtocol, fmt.Sprintf("-- ask: which ledger rows hold zanzibar columsecret (%d)", n)); err != nil {
			t.Fatal(err)
		}
		return strings.Contains(f.prompts(), columnSecret)
	}
	if shown(t, 1) {
		t.Fatal("the model was shown a column mallory may not read")
	}
	if err := f.cluster.Exec(ctx, db, "GRANT SELECT (motto) ON ledger TO mallory"); err != nil {
		t.Fatal(err)
	}
	if !shown(t, 2) {
		t.Fatal("after GRANT the next ask did not see the column's values")
	}
	if err := f.cluster.Exec(ctx, db, "REVOKE SELECT (motto) ON ledger FROM mallory"); err != nil {
		t.Fatal(err)
	}
	if shown(t, 3) {
		t.Fatal("after REVOKE the next ask still showed the column's values")
	}
}

// pgCode is the SQLSTATE of a server error, "" otherwise.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}
