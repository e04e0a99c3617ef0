package guard

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/nlproxy/nlproxy/internal/pgcluster"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// lexingSettings are session settings that change how a simple Query is
// lexed: the sealed text must mean the same under each.
var lexingSettings = []string{
	"SET standard_conforming_strings = on; SET client_encoding = 'UTF8'",
	"SET standard_conforming_strings = off; SET client_encoding = 'UTF8'; SET backslash_quote = on",
	"SET standard_conforming_strings = off; SET client_encoding = 'SJIS'",
	"SET standard_conforming_strings = off; SET client_encoding = 'GBK'",
	"SET standard_conforming_strings = off; SET client_encoding = 'BIG5'",
	"SET standard_conforming_strings = on; SET client_encoding = 'GB18030'; SET backslash_quote = off",
}

// lexFixture is a database and an unprivileged role that fuzzed SQL can run
// as without harming anything (it owns nothing and runs READ ONLY).
type lexFixture struct {
	conn *pgconn.PgConn
	opts Options
}

func newLexFixture(t testing.TB) *lexFixture {
	t.Helper()
	cl := pgtest.New(t, pgcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, sql := range []string{"CREATE ROLE lexer LOGIN", "CREATE DATABASE lex", "REVOKE TEMP ON DATABASE lex FROM PUBLIC"} {
		if err := cl.Exec(ctx, "postgres", sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Exec(ctx, "lex", "CREATE TABLE t (a text); INSERT INTO t VALUES ('x'), ('é'); GRANT SELECT ON t TO lexer"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgconn.Connect(ctx, fmt.Sprintf("host=%s port=%d user=lexer dbname=lex", cl.SocketDir, cl.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return &lexFixture{conn: conn, opts: Options{Catalog: builtins(t), Names: SearchPath{"public"}}}
}

// results runs sql as one simple Query under settings, inside a READ ONLY
// transaction that is rolled back, and returns how many statements the
// server reported (results and errors) and their command tags or errors.
func (f *lexFixture) results(t testing.TB, settings, sql string) (int, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prelude := "ROLLBACK; RESET ALL; SET statement_timeout = '5s'; " + settings + "; BEGIN READ ONLY"
	if _, err := f.conn.Exec(ctx, prelude).ReadAll(); err != nil {
		t.Fatalf("prelude: %v", err)
	}
	rs, err := f.conn.Exec(ctx, sql).ReadAll()
	var out []string
	for _, r := range rs {
		if r.Err != nil {
			out = append(out, "error: "+r.Err.Error())
			continue
		}
		out = append(out, r.CommandTag.String()+fmt.Sprint(r.Rows))
	}
	n := len(rs)
	if err != nil && (n == 0 || rs[n-1].Err == nil) {
		// A statement that failed before producing a result still ran.
		out = append(out, "error: "+err.Error())
		n++
	}
	return n, out
}

// checkLexing is the differential property: (1) under default settings the
// server runs no more statements than the guard's parser sees; (2) the
// sealed text of anything the guard accepts is exactly one statement with
// the same result under every lexing setting.
func (f *lexFixture) checkLexing(t *testing.T, sql string) {
	if strings.IndexByte(sql, 0) >= 0 {
		return // the protocol cannot carry NUL
	}
	if tree, err := pg_query.Parse(sql); err == nil && len(tree.GetStmts()) > 0 {
		if n, res := f.results(t, lexingSettings[0], sql); n > len(tree.GetStmts()) {
			t.Fatalf("the guard's parser sees %d statements, the server ran %d: %q\n%v", len(tree.GetStmts()), n, sql, res)
		}
	}
	st, err := Seal(sql, f.opts)
	if err != nil {
		return
	}
	// The reference is the sealed text under default settings: the server
	// (PostgreSQL 15) may read the text as written differently from the
	// guard's newer parser (0x1F literals, say), but the sealed text is what
	// runs, and it must mean the same under every setting.
	_, want := f.results(t, lexingSettings[0], st.SQL())
	for _, set := range lexingSettings {
		n, got := f.results(t, set, st.SQL())
		if n != 1 {
			t.Fatalf("sealed %q ran as %d statements under %q: %v", st.SQL(), n, set, got)
		}
		if !strings.Contains(set, "'UTF8'") {
			continue // rows come back in another encoding
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("sealed %q under %q = %v; under defaults = %v", st.SQL(), set, got, want)
		}
	}
	// The EXPLAIN derived from it (the optimizer's cost model) is one
	// statement under every setting, too, and the server plans it.
	ex, err := Explain(st)
	if err != nil {
		t.Fatalf("sealed %q has no EXPLAIN: %v", st.SQL(), err)
	}
	for _, set := range lexingSettings {
		n, got := f.results(t, set, ex.SQL())
		if n != 1 {
			t.Fatalf("explain %q ran as %d statements under %q: %v", ex.SQL(), n, set, got)
		}
		// The plan's text quotes constants, which other client encodings
		// may not be able to show.
		if strings.Contains(set, "'UTF8'") && !strings.HasPrefix(got[0], "EXPLAIN") && !strings.HasPrefix(want[0], "error") {
			t.Fatalf("explain %q under %q = %v, but the statement itself runs (%v)", ex.SQL(), set, got, want)
		}
	}
}

// lexingSeeds mix quotes, backslashes, dollar quotes, comments and
// multibyte characters whose SJIS/BIG5/GBK encodings end in 0x5C.
var lexingSeeds = []string{
	`SELECT 'x\' , ';SELECT 2;--' AS y`, // two statements when standard_conforming_strings is off
	`SELECT 'a\'; SELECT 1 --'`,
	`SELECT E'a\'; SELECT 2; --'`,
	`SELECT 'ソ\'; SELECT 3; --'`,
	`SELECT E'表\'; SELECT 4 --'`,
	`SELECT E'功\' , 1 --'`,
	`SELECT '\' AS a, '; SELECT 5; --' AS b`,
	`SELECT $$\$$, ';SELECT 6;'`,
	`SELECT $a$ $$ ' $a$ AS x, 'y'`,
	`SELECT 1 /* \*/ ; SELECT 7 -- */`,
	`SELECT U&'\005C' || '\', 8`,
	`SELECT a FROM t WHERE a = 'é' OR a = E'\x27' OR a = 'x'`,
	`SELECT "ソ\" FROM (SELECT 1 AS "ソ\") s`,
	"SELECT 'a'\n'\\' AS c",
	`SELECT E'\\' || '\\', 'ー\'`,
}

func TestSealLexing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	f := newLexFixture(t)
	for _, sql := range lexingSeeds {
		t.Run(sql, func(t *testing.T) { f.checkLexing(t, sql) })
	}
	// Every seed that seals must have sealed: the property above is not vacuous.
	sealed := 0
	for _, sql := range lexingSeeds {
		if _, err := Seal(sql, f.opts); err == nil {
			sealed++
		}
	}
	if sealed < len(lexingSeeds)/2 {
		t.Errorf("only %d of %d seeds seal", sealed, len(lexingSeeds))
	}
}

// FuzzSealLexing is the differential fuzz target: generated strings of
// quotes, backslashes, dollar quotes, comments and multibyte characters,
// checked against a real server under every lexing setting.
func FuzzSealLexing(f *testing.F) {
	for _, s := range lexingSeeds {
		f.Add(s)
	}
	fx := newLexFixture(f)
	f.Fuzz(func(t *testing.T, sql string) { fx.checkLexing(t, sql) })
}
