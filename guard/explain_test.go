package guard

import (
	"errors"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/guard/sealed"
)

func TestExplain(t *testing.T) {
	opts := withCatalog(t, Options{Names: SearchPath{"public"}})
	tests := []struct {
		name string
		sql  string
		want string
	}{
		{"plain", "select id from customers where city = 'LA'", "EXPLAIN (FORMAT JSON) SELECT id FROM public.customers WHERE city = 'LA'"},
		{"functions stay qualified", "SELECT lower(name) FROM customers", "EXPLAIN (FORMAT JSON) SELECT pg_catalog.lower(name) FROM public.customers"},
		{"non-ASCII constant", "SELECT * FROM customers WHERE city = 'München'", `EXPLAIN (FORMAT JSON) SELECT * FROM public.customers WHERE city = E'M\u00FCnchen'`},
		{"with", "WITH x AS (SELECT 1 AS a) SELECT a FROM x", "EXPLAIN (FORMAT JSON) WITH x AS (SELECT 1 AS a) SELECT a FROM x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := Seal(tt.sql, opts)
			if err != nil {
				t.Fatal(err)
			}
			ex, err := Explain(st)
			if err != nil {
				t.Fatal(err)
			}
			if ex.SQL() != tt.want {
				t.Errorf("SQL = %q, want %q", ex.SQL(), tt.want)
			}
			if CheckedOf(ex).Kind != KindExplain {
				t.Errorf("kind = %s", CheckedOf(ex).Kind)
			}
			if !strings.HasSuffix(ex.Display(), tt.sql) {
				t.Errorf("Display = %q", ex.Display())
			}
			// What Explain makes is what the guard itself accepts as EXPLAIN.
			if _, err := Check(ex.SQL(), Options{AllowExplain: true, Catalog: opts.Catalog}); err != nil {
				t.Errorf("guard refuses the derived EXPLAIN: %v", err)
			}
			if _, err := Check(ex.SQL(), opts); err == nil {
				t.Error("guard without AllowExplain accepts it")
			}
		})
	}
}

func TestExplainRefuses(t *testing.T) {
	var re *RejectError
	if _, err := Explain(sealed.Statement{}); !errors.As(err, &re) {
		t.Errorf("zero statement: err = %v", err)
	}
	st, err := Seal("EXPLAIN SELECT 1", Options{AllowExplain: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Explain(st); !errors.As(err, &re) {
		t.Errorf("explain of an EXPLAIN: err = %v", err)
	}
}

func TestExplainOptionsAreJSON(t *testing.T) {
	for sql, want := range map[string]bool{
		"EXPLAIN (FORMAT JSON) SELECT 1":                true,
		"EXPLAIN (FORMAT TEXT) SELECT 1":                false,
		"EXPLAIN (FORMAT JSON, ANALYZE) SELECT 1":       false,
		"EXPLAIN (ANALYZE false, FORMAT JSON) SELECT 1": false,
		"EXPLAIN SELECT 1":                              false,
	} {
		tree, err := parse(sql)
		if err != nil {
			t.Fatal(err)
		}
		if got := explainOptionsAreJSON(tree.GetStmts()[0].GetStmt().GetExplainStmt().GetOptions()); got != want {
			t.Errorf("%s: %v, want %v", sql, got, want)
		}
	}
}
