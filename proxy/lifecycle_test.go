package proxy

import (
	"testing"

	"github.com/nlproxy/nlproxy/internal/sqlscan"
)

func TestParseLifecycle(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		want lifecycleStmt
	}{
		{"DEALLOCATE a1", lifecycleStmt{kind: lcDeallocate, name: "a1"}},
		{"deallocate prepare PDO_stmt_1;", lifecycleStmt{kind: lcDeallocate, name: "pdo_stmt_1"}},
		{`DEALLOCATE "_PLAN0x5e""x"`, lifecycleStmt{kind: lcDeallocate, name: `_PLAN0x5e"x`}},
		{"/* a /* nested */ comment */ DEALLOCATE -- c\n a ; -- end", lifecycleStmt{kind: lcDeallocate, name: "a"}},
		{"DEALLOCATE ALL", lifecycleStmt{kind: lcDeallocateAll}},
		{`DEALLOCATE "ALL"`, lifecycleStmt{kind: lcDeallocate, name: "ALL"}},
		{"DEALLOCATE PREPARE all;", lifecycleStmt{kind: lcDeallocateAll}},
		{"discard all", lifecycleStmt{kind: lcDeallocateAll}},
		{"EXECUTE a", lifecycleStmt{kind: lcExecute, name: "a"}},
		{`EXECUTE a (1, '(x)', "q(")`, lifecycleStmt{kind: lcExecute, name: "a"}},
		{"PREPARE a AS SELECT 1; SELECT 2", lifecycleStmt{kind: lcPrepare, name: "a"}},
		{"PREPARE a(int) AS SELECT $1", lifecycleStmt{kind: lcPrepare, name: "a"}},
		// Left to the server: several statements, what cannot be read.
		{"DEALLOCATE a; SELECT 1", lifecycleStmt{}},
		{"EXECUTE a; SELECT 1", lifecycleStmt{}},
		{"EXECUTE a($$x)$$, $t$'$t$, /* ) */ 1, -- )\n 2)", lifecycleStmt{kind: lcExecute, name: "a"}},
		{"EXECUTE a$b$ (1)", lifecycleStmt{kind: lcExecute, name: "a$b$"}},
		{"EXECUTE a('x)", lifecycleStmt{}},
		{"EXECUTE a(1", lifecycleStmt{}},
		{"DISCARD PLANS", lifecycleStmt{}},
		{"DEALLOCATE", lifecycleStmt{}},
		{`DEALLOCATE "unterminated`, lifecycleStmt{}},
		{"SELECT 1", lifecycleStmt{}},
		{"/* unterminated", lifecycleStmt{}},
		{"", lifecycleStmt{}},
	} {
		if got := parseLifecycle(tc.sql, sqlscan.Options{}); got != tc.want {
			t.Errorf("parseLifecycle(%q) = %+v, want %+v", tc.sql, got, tc.want)
		}
	}
}

// Where a string ends depends on the session's settings, which the server
// reports: standard_conforming_strings and the client encoding.
func TestParseLifecycleSettings(t *testing.T) {
	execA := lifecycleStmt{kind: lcExecute, name: "a"}
	for _, tc := range []struct {
		sql  string
		opts sqlscan.Options
		want lifecycleStmt
	}{
		{`EXECUTE a('x\')`, sqlscan.Options{}, execA},
		{`EXECUTE a('x\')`, sqlscan.Options{NonStandardStrings: true}, lifecycleStmt{}},
		{`EXECUTE a('x\'')`, sqlscan.Options{NonStandardStrings: true}, execA},
		{`EXECUTE a(E'\'', 1)`, sqlscan.Options{}, execA},
		// SJIS: 0x95 0x5C is one character; its second byte is no backslash.
		{"EXECUTE a('\x95\\')", sqlscan.Options{Encoding: sqlscan.SJIS, NonStandardStrings: true}, execA},
		{"EXECUTE a('\x95\\')", sqlscan.Options{NonStandardStrings: true}, lifecycleStmt{}},
	} {
		if got := parseLifecycle(tc.sql, tc.opts); got != tc.want {
			t.Errorf("parseLifecycle(%q, %+v) = %+v, want %+v", tc.sql, tc.opts, got, tc.want)
		}
	}
}

func TestSplitTxPrefix(t *testing.T) {
	for _, tc := range []struct{ sql, prefix, rest string }{
		{"RELEASE _EXEC_SVP_0x1;SAVEPOINT _EXEC_SVP_0x1;/* ask: q */", "RELEASE _EXEC_SVP_0x1;SAVEPOINT _EXEC_SVP_0x1;", "/* ask: q */"},
		{"BEGIN;-- ask: q", "BEGIN;", "-- ask: q"},
		{"begin work ; start transaction; release savepoint \"a;b\"; ASK q;", `begin work ; start transaction; release savepoint "a;b";`, " ASK q;"},
		{"SAVEPOINT s; INSERT INTO t VALUES (1); ASK q", "SAVEPOINT s;", " INSERT INTO t VALUES (1); ASK q"},
		{"BEGIN ISOLATION LEVEL SERIALIZABLE; ASK q", "", "BEGIN ISOLATION LEVEL SERIALIZABLE; ASK q"},
		{"SAVEPOINT s", "", "SAVEPOINT s"},
		{"SELECT 1", "", "SELECT 1"},
	} {
		prefix, rest := splitTxPrefix(tc.sql, sqlscan.Options{})
		if prefix != tc.prefix || rest != tc.rest {
			t.Errorf("splitTxPrefix(%q) = %q, %q; want %q, %q", tc.sql, prefix, rest, tc.prefix, tc.rest)
		}
	}
}

func TestDeallocateAround(t *testing.T) {
	for _, tc := range []struct {
		sql, prefix, name, suffix string
		ok                        bool
	}{
		{`SAVEPOINT _per_query_svp_;DEALLOCATE "_PLAN0x1";RELEASE _per_query_svp_`, "SAVEPOINT _per_query_svp_;", "_PLAN0x1", "RELEASE _per_query_svp_", true},
		{"DEALLOCATE a1", "", "a1", "", true},
		{"DEALLOCATE PREPARE A1; release s ;", "", "a1", " release s ;", true},
		{"SAVEPOINT s; DEALLOCATE a1; SELECT 1", "", "", "", false},
		{"SAVEPOINT s; DEALLOCATE ALL", "", "", "", false},
		{"SAVEPOINT s; SELECT 1", "", "", "", false},
		{"DEALLOCATE a1 BEGIN", "", "", "", false}, // not one statement: the server's syntax error
		{"DEALLOCATE a1 /* c */", "", "a1", "", true},
	} {
		prefix, name, suffix, ok := deallocateAround(tc.sql, sqlscan.Options{})
		if prefix != tc.prefix || name != tc.name || suffix != tc.suffix || ok != tc.ok {
			t.Errorf("deallocateAround(%q) = %q, %q, %q, %v; want %q, %q, %q, %v", tc.sql, prefix, name, suffix, ok, tc.prefix, tc.name, tc.suffix, tc.ok)
		}
	}
}

func TestMaybeTxPrefix(t *testing.T) {
	for _, tc := range []struct {
		b     string
		whole bool
		want  bool
	}{
		{"BEGIN\x00", true, false},
		{"begin; \n\x00", true, false},
		{"SAVEPOINT s\x00", true, false},
		{"RELEASE s;SAVEPOINT s;/* ask: q */\x00", true, true},
		{"BEGIN;-- ask: q\x00", true, true},
		{"  start transaction; ASK q;\x00", true, true},
		{"RELEASE _EXEC_SVP_0x55d4c1a0;SAVEPOINT _EXEC_SVP_0x55d4c1a0;/* a", false, true},
		{"SELECT 1; SELECT 2\x00", true, false},
		{"BEGINNING", false, true}, // the slow path then finds no prefix
	} {
		if got := maybeTxPrefix([]byte(tc.b), tc.whole); got != tc.want {
			t.Errorf("maybeTxPrefix(%q, %v) = %v, want %v", tc.b, tc.whole, got, tc.want)
		}
	}
}

func FuzzParseLifecycle(f *testing.F) {
	for _, s := range []string{"DEALLOCATE a", `EXECUTE "x"(1)`, "/* */ PREPARE p AS", "DISCARD ALL;"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if prefix, rest := splitTxPrefix(sql, sqlscan.Options{}); prefix+rest != sql {
			t.Fatalf("%q: split into %q and %q", sql, prefix, rest)
		}
		_, _, _, _ = deallocateAround(sql, sqlscan.Options{})
		st := parseLifecycle(sql, sqlscan.Options{}) // must not panic or loop
		if st.kind == lcNone && st.name != "" {
			t.Fatalf("%q: a name without a kind", sql)
		}
	})
}
