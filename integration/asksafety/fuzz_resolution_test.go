package asksafety_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// differential is a session of mallory's (see resolutionDDL) with its
// temporary stand-ins, the guard options an ask of that session seals with,
// and where every call of mallory's functions shows (the server log).
type differential struct {
	cluster *pgcluster.Cluster
	db      string
	admin   *pgx.Conn
	conn    *pgconn.PgConn
	opts    guard.Options
}

func newDifferential(tb testing.TB) *differential {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster := pgtest.New(tb, pgcluster.Options{})
	if err := cluster.CreateRole(ctx, mallory, mallory+"-secret", false); err != nil {
		tb.Fatal(err)
	}
	db := "diff_" + randomSuffix(tb)
	if err := cluster.CreateDatabase(ctx, db); err != nil {
		tb.Fatal(err)
	}
	if err := cluster.Exec(ctx, db, fmt.Sprintf(resolutionDDL, db)+`
SET ROLE mallory;
CREATE FUNCTION mallory.lower(public.ledger) RETURNS text LANGUAGE plpgsql AS $$
BEGIN RAISE WARNING 'mallory-called %', pg_catalog.current_database(); RETURN 'x'; END $$;
CREATE FUNCTION mallory.to_text(mallory.mood) RETURNS text LANGUAGE plpgsql AS $$
BEGIN RAISE WARNING 'mallory-called %', pg_catalog.current_database(); RETURN 'ok'; END $$;
CREATE CAST (mallory.mood AS text) WITH FUNCTION mallory.to_text(mallory.mood) AS IMPLICIT;
CREATE TABLE mallory.notes (id int, c mallory.checked_text, n int);
RESET ROLE;`); err != nil {
		tb.Fatal(err)
	}
	admin, err := cluster.Connect(ctx, db)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { admin.Close(context.Background()) })
	conn, err := pgconn.Connect(ctx, cluster.URL(mallory, mallory+"-secret", db))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, fmt.Sprintf(sessionDDL, randomSuffix(tb))).ReadAll(); err != nil {
		tb.Fatal(err)
	}
	cats := &catalog.Manager{Connect: func(ctx context.Context, database string) (*pgx.Conn, error) {
		return cluster.Connect(ctx, database)
	}}
	tb.Cleanup(func() { cats.Close() })
	snap, err := cats.Get(ctx, db)
	if err != nil {
		tb.Fatal(err)
	}
	eng := &engine.Engine{Catalogs: cats, TrialTimeout: 10 * time.Second}
	names, err := eng.SessionNames(ctx, db, engine.ConnExecutor{Conn: conn})
	if err != nil {
		tb.Fatal(err)
	}
	checkCallDetector(tb, cluster, admin, db)
	return &differential{cluster: cluster, db: db, admin: admin, conn: conn, opts: guard.Options{Catalog: snap.Functions, Names: names}}
}

func (d *differential) calls(tb testing.TB) int64 { return mallorysCalls(tb, d.cluster, d.db) }

// check seals sql with the session's options; when the guard accepts it,
// it runs as a trial on mallory's session, and no function of mallory's
// may have been called, nor a lock be left behind. It reports whether the
// guard accepted.
func (d *differential) check(tb testing.TB, sql string) bool {
	tb.Helper()
	st, err := guard.Seal(sql, d.opts)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := d.calls(tb)
	// Server errors are fine (no such function, a failed cast): only a
	// call of mallory's counts.
	_, _ = engine.ConnExecutor{Conn: d.conn}.Trial(ctx, st, pg.Limits{Timeout: 10 * time.Second, MaxRows: 10, MaxBytes: 1 << 20})
	if after := d.calls(tb); after != before {
		tb.Fatalf("the guard allowed %q (sealed %q) and the server called %d of mallory's functions", sql, st.SQL(), after-before)
	}
	rs, err := d.conn.Exec(ctx, "SELECT count(*) FROM pg_catalog.pg_locks WHERE pid = pg_catalog.pg_backend_pid() AND locktype = 'advisory'").ReadAll()
	if err != nil || len(rs) != 1 || string(rs[0].Rows[0][0]) != "0" {
		tb.Fatalf("after %q the session holds advisory locks (%v)", sql, err)
	}
	return true
}

// gen builds a statement from b: expressions over mallory's relations
// mixing casts to built-in, user, domain and temporary types, field
// selections that name functions, built-in and qualified user operators,
// and function calls.
type gen struct {
	b []byte
	i int
}

func (g *gen) pick(n int) int {
	if g.i >= len(g.b) {
		return 0
	}
	c := int(g.b[g.i])
	g.i++
	return c % n
}

var (
	genRelations = []string{"ledger l", "mallory.diary l", "mallory.notes l", "eqview l", "pg_temp.ledger l", "mallory.eqview l", "cases l"}
	genColumns   = []string{"l.id", "l.owner", "l.m", "l.c", "l.n", "l", "l.*"}
	genTypes     = []string{"text", "int", "oid", "mood", "checked_text", "mood2", "pg_temp.mood2", "mallory.mood", "mallory.checked_text", "bigint", "ledger", "mallory.notes", "mood[]"}
	genFields    = []string{"touch", "lower", "pg_advisory_lock", "id", "owner", "nextval", "to_text", "length"}
	genOps       = []string{"=", "+", "||", "OPERATOR(mallory.=)", "OPERATOR(pg_catalog.=)", "<", "LIKE", "IS DISTINCT FROM"}
	genCalls     = []string{"lower", "length", "mallory.to_temp", "mallory.lower", "to_text", "coalesce", "pg_catalog.upper", "format"}
	genLiterals  = []string{"5", "'x'", "1::oid", "'ok'", "NULL", "4242::bigint", "'(1,a)'"}
)

func (g *gen) expr(depth int) string {
	if depth > 3 {
		return genLiterals[g.pick(len(genLiterals))]
	}
	switch g.pick(7) {
	case 0:
		return genColumns[g.pick(len(genColumns))]
	case 1:
		return genLiterals[g.pick(len(genLiterals))]
	case 2:
		return "(" + g.expr(depth+1) + ")::" + genTypes[g.pick(len(genTypes))]
	case 3:
		return "(" + g.expr(depth+1) + ")." + genFields[g.pick(len(genFields))]
	case 4:
		return "(" + g.expr(depth+1) + " " + genOps[g.pick(len(genOps))] + " " + g.expr(depth+1) + ")"
	case 5:
		return genCalls[g.pick(len(genCalls))] + "(" + g.expr(depth+1) + ")"
	default:
		return "CASE WHEN " + g.expr(depth+1) + " " + genOps[g.pick(len(genOps))] + " " + g.expr(depth+1) + " THEN " + g.expr(depth+1) + " END"
	}
}

func (g *gen) statement() string {
	sql := "SELECT " + g.expr(0) + " FROM " + genRelations[g.pick(len(genRelations))]
	if g.pick(2) == 1 {
		sql += " WHERE " + g.expr(1) + " " + genOps[g.pick(len(genOps))] + " " + g.expr(1)
	}
	return sql
}

// FuzzGuardCallsOnlyAllowed is the differential check: every statement the
// guard accepts for mallory's session runs without calling a function of
// mallory's (counted server-side, past the ROLLBACK).
func FuzzGuardCallsOnlyAllowed(f *testing.F) {
	for _, seed := range [][]byte{
		{3, 0, 0, 0}, {2, 1, 3}, {3, 0, 2, 4}, {4, 0, 3, 2, 1, 6}, {6, 0, 1, 0, 2, 4, 1, 0, 3},
		{2, 0, 2, 5}, {5, 3, 0, 0}, {4, 1, 2, 0, 3, 0, 4}, {0, 1, 1}, {2, 2, 1, 4},
	} {
		f.Add(seed)
	}
	d := newDifferential(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		d.check(t, (&gen{b: b}).statement())
	})
}

// TestGuardCallsOnlyAllowed runs the differential check over every
// statement of a bounded enumeration of the grammar (each choice byte
// cycled), so that `go test` covers it without the fuzzing engine, and
// checks that the enumeration both accepts and refuses statements.
func TestGuardCallsOnlyAllowed(t *testing.T) {
	d := newDifferential(t)
	accepted, refused := 0, 0
	seen := map[string]bool{}
	for i := 0; i < 400; i++ {
		b := make([]byte, 12)
		for j := range b {
			b[j] = byte((i*7 + j*13 + i*j) % 251)
		}
		sql := (&gen{b: b}).statement()
		if seen[sql] {
			continue
		}
		seen[sql] = true
		if d.check(t, sql) {
			accepted++
		} else {
			refused++
		}
	}
	t.Logf("%d distinct statements: %d accepted and run, %d refused", len(seen), accepted, refused)
	if accepted == 0 || refused == 0 {
		t.Fatalf("the enumeration accepted %d and refused %d; it must exercise both", accepted, refused)
	}
	if !strings.Contains(strings.Join(keys(seen), "\n"), "OPERATOR(mallory.=)") {
		t.Fatal("the enumeration never used mallory's operator")
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
