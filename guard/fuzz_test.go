package guard

import (
	"errors"
	"strings"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// FuzzCheck: Check never panics, refusals are typed, and anything accepted
// is one SELECT (or EXPLAIN of one) with no write or lock node in its tree.
func FuzzCheck(f *testing.F) {
	for _, tc := range corpus {
		if len(tc.sql) < 1000 {
			f.Add(tc.sql, tc.opts.AllowExplain)
		}
	}
	cat := builtins(f)
	f.Fuzz(func(t *testing.T, sql string, explain bool) {
		c, err := Check(sql, Options{AllowExplain: explain, Catalog: cat})
		if err != nil {
			var re *RejectError
			if !errors.As(err, &re) || re.Code == "" {
				t.Fatalf("untyped refusal %v", err)
			}
			return
		}
		tree, err := pg_query.Parse(sql)
		if err != nil || len(tree.Stmts) != 1 {
			t.Fatalf("accepted %q but it does not parse to one statement (%v)", sql, err)
		}
		js, err := pg_query.ParseToJSON(sql)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{`"InsertStmt"`, `"UpdateStmt"`, `"DeleteStmt"`, `"MergeStmt"`, `"IntoClause"`, `"LockingClause"`} {
			if strings.Contains(js, bad) {
				t.Fatalf("accepted %q containing %s", sql, bad)
			}
		}
		if !explain && c.Kind != KindSelect {
			t.Fatalf("kind %s without AllowExplain", c.Kind)
		}
	})
}

func BenchmarkCheck(b *testing.B) {
	sql := "WITH big AS (SELECT customer_id, sum(amount) s FROM orders WHERE status = 'paid' GROUP BY 1) SELECT c.name, b.s, rank() OVER (ORDER BY b.s DESC) FROM big b JOIN customers c ON c.id = b.customer_id WHERE c.city ILIKE '%angeles%' ORDER BY b.s DESC NULLS LAST LIMIT 10"
	for i := 0; i < b.N; i++ {
		if _, err := Check(sql, withCatalog(b, Options{})); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLiterals(b *testing.B) {
	sql := "SELECT * FROM customers c JOIN orders o ON o.customer_id = c.id AND o.status = 'paid' WHERE c.city IN ('LA', 'NYC') AND c.name ILIKE '%bob%'"
	for i := 0; i < b.N; i++ {
		if _, err := Literals(sql); err != nil {
			b.Fatal(err)
		}
	}
}
