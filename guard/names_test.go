package guard

import (
	"errors"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/guard/internal/stmt"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// fakeNames is a Names with fixed answers: relations and types in app and
// public, one unsafe type and one unsafe relation.
type fakeNames struct{}

func (fakeNames) Relation(name string) string {
	switch name {
	case "orders", "moods":
		return "app"
	case "customers":
		return "public"
	}
	return ""
}

func (f fakeNames) Type(name string) string {
	if name == "mood" || name == "checked_text" {
		return "app"
	}
	return f.Relation(name) // a relation's row type
}

func (fakeNames) Function(name string) string {
	if name == "score" {
		return "app"
	}
	return ""
}

func (fakeNames) Unsafe(schema, name string) string {
	switch {
	case name == "checked_text" && (schema == "app" || schema == ""):
		return "its check calls app.chk(text)"
	case name == "moods" && (schema == "app" || schema == ""):
		return "it holds app.checked_text"
	}
	return ""
}

func TestSealQualifiesNames(t *testing.T) {
	tests := []struct {
		name, sql, want string
	}{
		{"relations from the session's path", "SELECT o.id FROM orders o JOIN customers c ON c.id = o.cid",
			"SELECT o.id FROM app.orders o JOIN public.customers c ON c.id = o.cid"},
		{"unknown relation is pg_catalog's", "SELECT relname FROM pg_class", "SELECT relname FROM pg_catalog.pg_class"},
		{"written schema stays", "SELECT * FROM public.orders", "SELECT * FROM public.orders"},
		{"CTE reference stays", "WITH orders AS (SELECT 1 AS id) SELECT id FROM orders",
			"WITH orders AS (SELECT 1 AS id) SELECT id FROM orders"},
		{"a non-recursive CTE's own name inside it is the table", "WITH orders AS (SELECT id FROM orders) SELECT id FROM orders",
			"WITH orders AS (SELECT id FROM app.orders) SELECT id FROM orders"},
		{"later sibling sees earlier CTE", "WITH a AS (SELECT 1 AS x), b AS (SELECT x FROM a) SELECT x FROM b",
			"WITH a AS (SELECT 1 AS x), b AS (SELECT x FROM a) SELECT x FROM b"},
		{"earlier sibling does not see a later CTE", "WITH a AS (SELECT id FROM orders), orders AS (SELECT 1) SELECT * FROM a",
			"WITH a AS (SELECT id FROM app.orders), orders AS (SELECT 1) SELECT * FROM a"},
		{"recursive CTE sees itself", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT n FROM r",
			"WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT n FROM r"},
		{"CTE out of scope in a sibling subquery", "SELECT * FROM orders, (WITH orders AS (SELECT 1) SELECT * FROM orders) s",
			"SELECT * FROM app.orders, (WITH orders AS (SELECT 1) SELECT * FROM orders) s"},
		{"built-in type", "SELECT '1'::text, 2::int", "SELECT '1'::pg_catalog.text, 2::int"},
		{"user type from the path", "SELECT 'a'::mood", "SELECT 'a'::app.mood"},
		{"array of a user type", "SELECT '{a}'::mood[]", "SELECT '{a}'::app.mood[]"},
		{"allowed user function", "SELECT score(1)", "SELECT app.score(1)"},
	}
	opts := withCatalog(t, Options{AllowFunctions: []string{"score"}, Names: fakeNames{}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := Seal(tt.sql, opts)
			if err != nil {
				t.Fatal(err)
			}
			if st.SQL() != tt.want {
				t.Errorf("sealed\n got %s\nwant %s", st.SQL(), tt.want)
			}
		})
	}
}

func TestSealRefusesWhatResolutionShows(t *testing.T) {
	tests := []struct {
		name, sql, code, reason string
	}{
		{"temporary relation", "SELECT * FROM pg_temp.orders", pg.CodeInsufficientPrivilege, "temporary"},
		{"another session's temporary schema", "SELECT * FROM pg_temp_3.orders", pg.CodeInsufficientPrivilege, "temporary"},
		{"temporary type", "SELECT 5::pg_temp.mood", pg.CodeInsufficientPrivilege, "temporary"},
		{"cast to a domain whose check calls a user function", "SELECT 'x'::checked_text", pg.CodeInsufficientPrivilege, "app.chk"},
		{"qualified unsafe type", "SELECT CAST('x' AS app.checked_text)", pg.CodeInsufficientPrivilege, "app.chk"},
		{"relation holding an unsafe type", "SELECT * FROM moods", pg.CodeInsufficientPrivilege, "holds"},
		{"row type of an unsafe relation", "SELECT ROW(1)::moods", pg.CodeInsufficientPrivilege, "holds"},
		{"user operator", "SELECT 1 OPERATOR(app.=) 1", pg.CodeInsufficientPrivilege, "operator"},
		{"user operator in ANY", "SELECT 1 OPERATOR(app.=) ANY (ARRAY[1])", pg.CodeInsufficientPrivilege, "operator"},
		{"user operator in a sublink", "SELECT 1 OPERATOR(app.=) ANY (SELECT 1)", pg.CodeInsufficientPrivilege, "operator"},
		{"user operator in ORDER BY USING", "SELECT 1 AS a ORDER BY 1 USING OPERATOR(app.<)", pg.CodeInsufficientPrivilege, "operator"},
		{"field selection calling a denied built-in", "SELECT (42::bigint).pg_advisory_lock", pg.CodeInsufficientPrivilege, "field selection"},
		{"field selection on a column", "SELECT o.pg_advisory_lock FROM orders o", pg.CodeInsufficientPrivilege, "field selection"},
		{"field selection calling a volatile built-in", "SELECT (o).nextval FROM orders o", pg.CodeInsufficientPrivilege, "field selection"},
		{"deep expression", "SELECT " + strings.Repeat("ROW(", 100) + "1" + strings.Repeat(")", 100), pg.CodeProgramLimitExceeded, "nested"},
		{"many CTEs", "WITH " + ctes(40) + " SELECT 1", pg.CodeProgramLimitExceeded, "common table expressions"},
		{"huge repeat", "SELECT pg_catalog.repeat('x', 1000000000)", pg.CodeProgramLimitExceeded, "repeat"},
		{"repeat sized by data", "SELECT repeat('x', id) FROM orders", pg.CodeProgramLimitExceeded, "constant"},
		{"nested repeat", "SELECT repeat(repeat('x', 1000000), 200)", pg.CodeProgramLimitExceeded, "sized input"},
		{"nested repeat through an expression", "SELECT repeat(upper(lpad('x', 1000000) || 'y'), 200)", pg.CodeProgramLimitExceeded, "sized input"},
		{"nested repeat, qualified", "SELECT pg_catalog.repeat(pg_catalog.repeat('ab', 2000), 2000)", pg.CodeProgramLimitExceeded, "sized input"},
		{"huge lpad", "SELECT lpad('x', 2000000000)", pg.CodeProgramLimitExceeded, "lpad"},
		{"huge series", "SELECT * FROM generate_series(1, 1e10)", pg.CodeProgramLimitExceeded, "generate_series"},
	}
	opts := withCatalog(t, Options{Names: fakeNames{}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Seal(tt.sql, opts)
			var re *RejectError
			if !errors.As(err, &re) {
				t.Fatalf("err = %v, want a RejectError", err)
			}
			if re.Code != tt.code || !strings.Contains(re.Reason, tt.reason) {
				t.Errorf("got %s %q, want %s containing %q", re.Code, re.Reason, tt.code, tt.reason)
			}
		})
	}
	// What stays allowed next to these.
	for _, sql := range []string{
		"SELECT o.id, o.total FROM orders o",
		"SELECT repeat('-', 20), lpad('7', 3, '0')",
		"SELECT repeat(repeat('ab', 100), 100)",
		"SELECT * FROM generate_series(1, 1000)",
		"SELECT generate_series(o.a, o.b) FROM orders o",
		"SELECT (o).id FROM orders o",
		"SELECT o.lower FROM orders o", // a column named like a harmless built-in
		"SELECT 1 OPERATOR(pg_catalog.=) 1",
		"WITH " + ctes(10) + " SELECT 1",
	} {
		if _, err := Seal(sql, opts); err != nil {
			t.Errorf("Seal(%q) = %v, want accepted", sql, err)
		}
	}
}

func ctes(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = "c" + strings.Repeat("x", i) + " AS (SELECT 1)"
	}
	return strings.Join(parts, ", ")
}

func TestSessionProbe(t *testing.T) {
	st := SessionProbe()
	if !stmt.IsProbe(st.Body()) || st.IsZero() {
		t.Fatal("SessionProbe is not marked as the probe")
	}
	if strings.Contains(st.SQL(), "::") || strings.Contains(st.SQL(), "=") || strings.Contains(st.SQL(), "FROM") {
		t.Errorf("the unpinned probe names a cast, operator or relation: %s", st.SQL())
	}
	sc, err := sealed.TrialScope(st, 'I', 0)
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := sealed.TrialScope(sealed.Statement{}, 'I', 0)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(sc.Enter, ";"), "search_path") || !strings.Contains(strings.Join(pinned.Enter, ";"), "'search_path', '"+sealed.PinnedSearchPath+"'") {
		t.Errorf("probe scope %q, pinned scope %q", sc.Enter, pinned.Enter)
	}
}
