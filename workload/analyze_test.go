package workload

import (
	"errors"
	"slices"
	"strings"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func rel(s string) Rel {
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return Rel{Schema: s[:i], Name: s[i+1:]}
	}
	return Rel{Name: s}
}

// col parses "schema.table.col" or "table.col".
func col(s string) Col {
	i := strings.LastIndexByte(s, '.')
	return Col{Rel: rel(s[:i]), Name: s[i+1:]}
}

func cols(ss ...string) []Col {
	var out []Col
	for _, s := range ss {
		out = append(out, col(s))
	}
	return out
}

func rels(ss ...string) []Rel {
	var out []Rel
	for _, s := range ss {
		out = append(out, rel(s))
	}
	return out
}

func join(l, r string) Join { return Join{Left: col(l), Right: col(r)} }

func TestAnalyzeShape(t *testing.T) {
	tests := []struct {
		name                       string
		sql                        string
		rels                       []Rel
		joins                      []Join
		filtered, grouped, ordered []Col
	}{
		{
			name:     "aliases in ON and WHERE",
			sql:      `SELECT c.name, sum(o.total) FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.country = 'FR' AND o.placed > now() - interval '3 days' GROUP BY c.name ORDER BY 2 DESC LIMIT 10`,
			rels:     rels("customers", "orders"),
			joins:    []Join{join("customers.id", "orders.customer_id")},
			filtered: cols("customers.country", "orders.placed"),
			grouped:  cols("customers.name"),
		},
		{
			name:     "schema written, implicit join in WHERE, canonical order",
			sql:      `SELECT * FROM sales.orders o, public.products p WHERE p.id = o.product_id AND o.qty > 3 ORDER BY o.placed`,
			rels:     rels("public.products", "sales.orders"),
			joins:    []Join{join("public.products.id", "sales.orders.product_id")},
			filtered: cols("sales.orders.qty"),
			ordered:  cols("sales.orders.placed"),
		},
		{
			name:     "CTE names are not relations; subquery and correlated outer reference",
			sql:      `WITH big AS (SELECT customer_id FROM orders WHERE total > 100) SELECT name FROM customers c WHERE c.id IN (SELECT customer_id FROM big) AND EXISTS (SELECT 1 FROM payments p WHERE p.customer_id = c.id)`,
			rels:     rels("customers", "orders", "payments"),
			joins:    []Join{join("customers.id", "payments.customer_id")},
			filtered: cols("customers.id", "orders.total"),
		},
		{
			name:  "USING, unqualified column with one relation, output alias in ORDER BY",
			sql:   `SELECT count(*) AS n, region FROM shops JOIN staff USING (shop_id) GROUP BY region ORDER BY n`,
			rels:  rels("shops", "staff"),
			joins: []Join{join("shops.shop_id", "staff.shop_id")},
		},
		{
			name:     "single relation: unqualified columns attributed",
			sql:      `SELECT id FROM t WHERE a = 1 AND b LIKE 'x%' GROUP BY id ORDER BY id`,
			rels:     rels("t"),
			filtered: cols("t.a", "t.b"),
			grouped:  cols("t.id"),
			ordered:  cols("t.id"),
		},
		{
			name:     "self-comparison is no join; subquery alias columns unresolved",
			sql:      `SELECT * FROM a x JOIN (SELECT id FROM b) s ON s.id = x.bid WHERE x.p = x.q`,
			rels:     rels("a", "b"),
			filtered: cols("a.bid", "a.p", "a.q"),
		},
		{
			name: "set operation and quoted names",
			sql:  `SELECT "Id" FROM "Mixed" UNION ALL SELECT id FROM other`,
			rels: rels("Mixed", "other"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Analyze(tt.sql)
			if err != nil {
				t.Fatal(err)
			}
			check := func(what string, got, want any) {
				t.Helper()
				if !equalSlices(got, want) {
					t.Errorf("%s = %v, want %v", what, got, want)
				}
			}
			check("Relations", s.Relations, tt.rels)
			check("Joins", s.Joins, tt.joins)
			check("Filtered", s.Filtered, tt.filtered)
			check("Grouped", s.Grouped, tt.grouped)
			check("Ordered", s.Ordered, tt.ordered)
			if len(s.Fingerprint) != 16 {
				t.Errorf("Fingerprint = %q", s.Fingerprint)
			}
		})
	}
}

func equalSlices(a, b any) bool {
	switch a := a.(type) {
	case []Rel:
		return slices.Equal(a, b.([]Rel))
	case []Join:
		return slices.Equal(a, b.([]Join))
	case []Col:
		return slices.Equal(a, b.([]Col))
	}
	return false
}

func TestAnalyzeFingerprintIgnoresLiteralsAndComments(t *testing.T) {
	a, err := Analyze(`SELECT * FROM t WHERE a = 1 /* alice */ LIMIT 5`)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Analyze("select *\n from t -- bob\n where a = 99999 limit 1")
	if err != nil {
		t.Fatal(err)
	}
	if a.Fingerprint != b.Fingerprint || a.Text != b.Text {
		t.Errorf("differ: %+v vs %+v", a, b)
	}
	if want := "SELECT * FROM t WHERE a = $1 LIMIT $2"; a.Text != want {
		t.Errorf("Text = %q, want %q", a.Text, want)
	}
}

// hostile holds statements whose literals must not survive; each secret is
// searched for in the normalised text.
var hostile = []struct {
	sql     string
	secrets []string
}{
	{`SELECT * FROM users WHERE email = 'alice@example.com' AND pin = 4321`, []string{"alice", "4321"}},
	{`SELECT * FROM t WHERE note = $tag$s3cr3t 'quoted'$tag$`, []string{"s3cr3t", "quoted"}},
	{`SELECT * FROM t WHERE note = $$plain s3cr3t$$`, []string{"s3cr3t"}},
	{`SELECT * FROM t WHERE note = E'esc\'s3cr3t\n'`, []string{"s3cr3t"}},
	{`SELECT * FROM t WHERE note = U&'d\0061s3cr3t'`, []string{"s3cr3t"}},
	{`SELECT * FROM t WHERE tags = '{s3cr3t,other}'::text[] OR tags && ARRAY['s3cr3t2', 'x']`, []string{"s3cr3t", "s3cr3t2"}},
	{`SELECT * FROM t WHERE ts > now() - interval '31337 days' AND d = DATE '1999-12-31'`, []string{"31337", "1999"}},
	{`SELECT * FROM t WHERE b = B'101101' OR x = X'DEADBEEF' OR f = 2.718281e3 OR n = -8675309`, []string{"101101", "DEADBEEF", "718281", "8675309"}},
	{`SELECT * FROM t WHERE ok = true AND flag IS NOT NULL LIMIT 7777 OFFSET 8888`, []string{"true", "7777", "8888"}},
	{`SELECT * FROM t WHERE ok = false`, []string{"false"}},
	{`SELECT data->>'ssn' FROM t WHERE data @> '{"card":"4111111111111111"}' FETCH FIRST 4242 ROWS ONLY`, []string{"ssn", "4111111111111111", "4242"}},
	{`SELECT 'lit s3cr3t' AS label, coalesce(x, 'fallback-s3cr3t') FROM t /* comment s3cr3t */ -- trailing s3cr3t`, []string{"s3cr3t"}},
	{`SELECT * FROM t WHERE name LIKE 'pre%s3cr3t' ESCAPE '!' AND id IN (111222, 333444) AND v BETWEEN 555666 AND 777888`, []string{"s3cr3t", "111222", "333444", "555666", "777888"}},
	{`SELECT x::varchar(12), CAST('s3cr3t' AS text) FROM t WHERE ts AT TIME ZONE 'Europe/Paris' > '2024-02-29'`, []string{"s3cr3t", "Paris", "2024"}},
	{`WITH c AS (SELECT 'cte s3cr3t' AS v) SELECT * FROM c, LATERAL (SELECT 'lat s3cr3t' FROM t LIMIT 9999) l`, []string{"s3cr3t", "9999"}},
}

func TestAnalyzeNoLiteralSurvives(t *testing.T) {
	for _, h := range hostile {
		s, err := Analyze(h.sql)
		if err != nil {
			t.Errorf("%s: %v", h.sql, err)
			continue
		}
		for _, sec := range h.secrets {
			if strings.Contains(strings.ToLower(s.Text), strings.ToLower(sec)) {
				t.Errorf("%s\n  normalised %q keeps %q", h.sql, s.Text, sec)
			}
		}
	}
}

func TestAnalyzeRefuses(t *testing.T) {
	tests := []struct {
		sql  string
		want error
	}{
		{`SELEC 1`, ErrParse},
		{`SELECT * FROM t WHERE`, ErrParse},
		{`COMMENT ON TABLE t IS 's3cr3t'`, ErrNotQuery},
		{`INSERT INTO t VALUES (1)`, ErrNotQuery},
		{`UPDATE t SET a = 1`, ErrNotQuery},
		{`SET search_path = 'x'`, ErrNotQuery},
		{`SELECT 1; SELECT 2`, ErrNotQuery},
		{"SELECT " + strings.Repeat("1+", MaxLen), ErrNotQuery},
	}
	for _, tt := range tests {
		if _, err := Analyze(tt.sql); !errors.Is(err, tt.want) {
			t.Errorf("Analyze(%.40q) = %v, want %v", tt.sql, err, tt.want)
		}
	}
}

func TestNoLiteralsCatchesSurvivors(t *testing.T) {
	// The check behind Analyze, on text that was never normalised: it must
	// refuse any constant but positions, type sizes and NULL.
	for sql, ok := range map[string]bool{
		`SELECT a FROM t ORDER BY 1 LIMIT $1`:           true,
		`SELECT a FROM t GROUP BY 1, 2`:                 true,
		`SELECT $1::varchar(10) FROM t WHERE a IS NULL`: true,
		`SELECT a FROM t WHERE b = 'x'`:                 false,
		`SELECT a FROM t LIMIT 5`:                       false,
		`SELECT a FROM t GROUP BY a + 1`:                false,
		`SELECT a FROM t ORDER BY a + 1`:                false,
		`SELECT true`:                                   false,
	} {
		tree, err := parseOne(sql)
		if err != nil {
			t.Fatal(err)
		}
		if err := noLiterals(tree); (err == nil) != ok {
			t.Errorf("noLiterals(%s) = %v, want ok=%v", sql, err, ok)
		}
	}
}

func parseOne(sql string) (protoreflect.Message, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return nil, err
	}
	return tree.ProtoReflect(), nil
}
