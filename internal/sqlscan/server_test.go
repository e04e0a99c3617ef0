package sqlscan

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// pg_query's scanner reads only with standard_conforming_strings on and in
// UTF-8; these tests check the other settings (and continuations, which
// pg_query's scanner reports differently when a comment sits between the
// parts) against a real server.

// serverSetting is a session's lexing settings and the Options that
// describe them.
type serverSetting struct {
	set string
	o   Options
}

var serverSettings = []serverSetting{
	{"SET standard_conforming_strings = on; SET client_encoding = 'UTF8'", Options{}},
	{"SET standard_conforming_strings = off; SET client_encoding = 'UTF8'", Options{NonStandardStrings: true}},
	{"SET standard_conforming_strings = off; SET client_encoding = 'SJIS'", Options{NonStandardStrings: true, Encoding: SJIS}},
	{"SET standard_conforming_strings = on; SET client_encoding = 'SJIS'", Options{Encoding: SJIS}},
	{"SET standard_conforming_strings = off; SET client_encoding = 'BIG5'", Options{NonStandardStrings: true, Encoding: BIG5}},
	{"SET standard_conforming_strings = off; SET client_encoding = 'GBK'", Options{NonStandardStrings: true, Encoding: GBK}},
	{"SET standard_conforming_strings = off; SET client_encoding = 'GB18030'", Options{NonStandardStrings: true, Encoding: GB18030}},
}

// serverTexts are Queries whose statements are valid however they are
// split; the server's count of results must be Split's. The \x95\x5c,
// \xa5\x5c and \x81\x5c pairs are one character in SJIS, BIG5 and GBK
// (表, 功, 乗…) whose second byte is a backslash.
var serverTexts = []string{
	`SELECT 'a\'; SELECT 1 --'`,
	`SELECT 'x\' , ';SELECT 2;--' AS y`,
	`SELECT E'a\'; SELECT 2; --'`,
	"SELECT E'\x95\x5c'; SELECT 3; --'",
	"SELECT E'\xa5\x5c'; SELECT 4; --'",
	"SELECT E'\x81\x5c'; SELECT 5; --'",
	"SELECT '\x95\x5c'; SELECT 6; --'",
	`SELECT $$\$$, ';SELECT 7;'`,
	`SELECT $a$ $$ ' $a$ AS x, 'y'; SELECT 8`,
	`SELECT 1 /* \*/ ; SELECT 9 -- */`,
	"SELECT 1 /* /* */ ; SELECT 10 */; SELECT 11",
	"SELECT 'a' -- c\n'; SELECT 12; --'",
	"SELECT \"a;b\" FROM (SELECT 1 AS \"a;b\") s; SELECT 13",
	"SELECT a$b$ FROM (SELECT 1 AS a$b$) s; SELECT 14 --$b$",
}

// serverLiterals are constants whose value the server reports and Decode
// must give (under settings where the server accepts them).
var serverLiterals = []string{
	`'it''s'`, `'a\b'`, `E'\b\f\n\r\t\\\'\"\q'`, `E'\101\x41\x4g'`, `'a\\'`,
	"'a'\n 'b' -- c\n'c'", "E'\\n'\n'\\n'", "$t$a'b$$c$t$", `'\'`,
	"E'\x95\x5c'", "E'\\\x95\x5c'", "'\x95\x5c'", "E'\xa5\x5c\\''", "E'\x81\x30\x81\x5c\\\\'",
	`E'\u00e9'`, `U&'d\0061t'`,
}

func TestAgainstServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	cl := pgtest.New(t, pgcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgconn.Connect(ctx, fmt.Sprintf("host=%s port=%d user=%s dbname=postgres", cl.SocketDir, cl.Port, pgtest.Superuser))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	checked := 0
	for _, st := range serverSettings {
		if _, err := conn.Exec(ctx, "RESET ALL; SET backslash_quote = on; SET escape_string_warning = off; "+st.set).ReadAll(); err != nil {
			t.Fatalf("%s: %v", st.set, err)
		}
		for _, sql := range serverTexts {
			rs, err := conn.Exec(ctx, sql).ReadAll()
			if err != nil {
				t.Logf("%s: %q: %v", st.set, sql, err)
				continue // not valid under this setting (a character the encoding lacks)
			}
			if got := Split(sql, st.o); len(got) != len(rs) {
				t.Errorf("%s: %q: the server ran %d statements, Split finds %d: %q", st.set, sql, len(rs), len(got), got)
			}
			checked++
		}
		for _, lit := range serverLiterals {
			rs, err := conn.Exec(ctx, "SELECT "+lit).ReadAll()
			if err != nil || len(rs) != 1 || len(rs[0].Rows) != 1 {
				continue
			}
			want := string(rs[0].Rows[0][0])
			if st.o.Encoding == ServerSafe || !strings.ContainsAny(lit, "uU") {
				got, err := Decode(lit, st.o)
				if err != nil || got != want {
					t.Errorf("%s: Decode(%q) = %q, %v; the server says %q", st.set, lit, got, err, want)
				}
				checked++
			}
		}
	}
	t.Logf("%d checks", checked)
	if checked < 100 {
		t.Errorf("only %d checks ran", checked)
	}
}
