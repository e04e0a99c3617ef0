package guard

import (
	"errors"
	"reflect"
	"testing"

	"github.com/nlproxy/nlproxy/internal/pg"
)

func TestLiterals(t *testing.T) {
	type lit struct{ Qualifier, Column, Op, Value, Token string }
	tests := []struct {
		name string
		sql  string
		want []lit
	}{
		{
			name: "equality both sides and qualified",
			sql:  "SELECT * FROM customers c JOIN orders o ON o.customer_id = c.id AND o.status = 'shipped' WHERE c.city = 'LA' AND 'Bob' = name",
			want: []lit{
				{"o", "status", "=", "shipped", "'shipped'"},
				{"c", "city", "=", "LA", "'LA'"},
				{"", "name", "=", "Bob", "'Bob'"},
			},
		},
		{
			name: "in list, not in, like, ilike, not ilike, <>",
			sql:  "SELECT 1 FROM t WHERE a IN ('x', 'y''s', 3) AND b NOT IN ('z') AND c LIKE 'p%' AND d ILIKE '%q%' AND e NOT ILIKE 'r' AND f <> 's' AND g != 'u'",
			want: []lit{
				{"", "a", "IN", "x", "'x'"},
				{"", "a", "IN", "y's", "'y''s'"},
				{"", "b", "NOT IN", "z", "'z'"},
				{"", "c", "LIKE", "p%", "'p%'"},
				{"", "d", "ILIKE", "%q%", "'%q%'"},
				{"", "e", "NOT ILIKE", "r", "'r'"},
				{"", "f", "<>", "s", "'s'"},
				{"", "g", "<>", "u", "'u'"},
			},
		},
		{
			name: "casts, escapes, schema-qualified column, multibyte before",
			sql:  "SELECT 'Zürich' AS z FROM public.t WHERE public.t.city::text = E'K\\'oln' AND name = 'São Paulo'::text AND note = U&'d\\0061ta'",
			want: []lit{
				{"public.t", "city", "=", "K'oln", `E'K\'oln'`},
				{"", "name", "=", "São Paulo", "'São Paulo'"},
				{"", "note", "=", "data", `U&'d\0061ta'`},
			},
		},
		{
			name: "subquery, cte and having conditions",
			sql:  "WITH x AS (SELECT * FROM t WHERE kind = 'a') SELECT k, count(*) FROM x WHERE id IN (SELECT id FROM u WHERE u.tag = 'b') GROUP BY k HAVING k = 'c'",
			want: []lit{
				{"", "kind", "=", "a", "'a'"},
				{"u", "tag", "=", "b", "'b'"},
				{"", "k", "=", "c", "'c'"},
			},
		},
		{
			name: "not reported: target list, functions, numbers, ranges, column-column",
			sql:  "SELECT 'x' = name, lower(city) = 'la' FROM t WHERE id = 3 AND d > '2020-01-01' AND a = b AND c BETWEEN 'a' AND 'b' AND name = $1",
			want: nil,
		},
		{
			name: "continued across newline, UESCAPE skipped",
			sql:  "SELECT 1 FROM t WHERE name = 'New'\n  ' York' AND tag = U&'d!0061ta' UESCAPE '!'",
			want: []lit{{"", "name", "=", "New York", "'New'\n  ' York'"}},
		},
		{
			name: "dollar quoted",
			sql:  "SELECT 1 FROM t WHERE name = $$O'Hara$$",
			want: []lit{{"", "name", "=", "O'Hara", "$$O'Hara$$"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lits, err := Literals(tt.sql)
			if err != nil {
				t.Fatal(err)
			}
			var got []lit
			for _, l := range lits {
				got = append(got, lit{l.Qualifier, l.Column, l.Op, l.Value, tt.sql[l.Location : l.Location+l.Length]})
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Literals:\n got  %q\n want %q", got, tt.want)
			}
		})
	}
}

func TestLiteralsSyntaxError(t *testing.T) {
	_, err := Literals("SELECT * FROM WHERE")
	var re *RejectError
	if !errors.As(err, &re) || re.Code != pg.CodeSyntaxError {
		t.Fatalf("want syntax RejectError, got %v", err)
	}
}

func TestReplaceLiteral(t *testing.T) {
	tests := []struct {
		name  string
		sql   string
		index int // which literal to replace
		value string
		want  string
	}{
		{"plain", "SELECT * FROM c WHERE city = 'la' AND name = 'bob'", 0, "Los Angeles", "SELECT * FROM c WHERE city = 'Los Angeles' AND name = 'bob'"},
		{"second", "SELECT * FROM c WHERE city = 'la' AND name = 'bob'", 1, "Bob", "SELECT * FROM c WHERE city = 'la' AND name = 'Bob'"},
		{"quote in value", "SELECT * FROM c WHERE name = 'oneil'", 0, "O'Neil", "SELECT * FROM c WHERE name = 'O''Neil'"},
		{"backslash in value", "SELECT * FROM c WHERE path = 'x'", 0, `C:\dir`, `SELECT * FROM c WHERE path = E'C:\\dir'`},
		{"escape string replaced whole", `SELECT * FROM c WHERE name = E'a\'b' LIMIT 1`, 0, "ab", "SELECT * FROM c WHERE name = 'ab' LIMIT 1"},
		{"multibyte before", "SELECT 'é' FROM c WHERE name = 'x'", 0, "Ünïcode", "SELECT 'é' FROM c WHERE name = 'Ünïcode'"},
		{"dollar quoted", "SELECT 1 FROM c WHERE name = $$x$$", 0, "y", "SELECT 1 FROM c WHERE name = 'y'"},
		{"tagged dollar quoted", "SELECT 1 FROM c WHERE name = $q$x$$y$q$", 0, "y", "SELECT 1 FROM c WHERE name = 'y'"},
		{"continued literal", "SELECT 1 FROM c WHERE name = 'a'\n'b' LIMIT 1", 0, "ab", "SELECT 1 FROM c WHERE name = 'ab' LIMIT 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lits, err := Literals(tt.sql)
			if err != nil {
				t.Fatal(err)
			}
			got := ReplaceLiteral(tt.sql, lits[tt.index], tt.value)
			if got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			// The result must still parse and carry the new value.
			after, err := Literals(got)
			if err != nil {
				t.Fatal(err)
			}
			if after[tt.index].Value != tt.value {
				t.Errorf("re-parsed value %q, want %q", after[tt.index].Value, tt.value)
			}
		})
	}
}

func TestReplaceLiterals(t *testing.T) {
	sql := "SELECT * FROM c WHERE city IN ('la', 'ny') AND name = 'bob'"
	lits, err := Literals(sql)
	if err != nil {
		t.Fatal(err)
	}
	got := ReplaceLiterals(sql, []Replacement{
		{lits[0], "Los Angeles"}, {lits[2], "Bob"}, {lits[1], "New York"},
		{lits[1], "dup ignored"},
	})
	want := "SELECT * FROM c WHERE city IN ('Los Angeles', 'New York') AND name = 'Bob'"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// Stale locations leave the SQL alone.
	stale := Literal{Location: 100, Length: 4}
	if got := ReplaceLiteral(sql, stale, "x"); got != sql {
		t.Errorf("stale replacement changed SQL: %s", got)
	}
	notQuoted := Literal{Location: 0, Length: 6} // "SELECT"
	if got := ReplaceLiteral(sql, notQuoted, "x"); got != sql {
		t.Errorf("replacement of a non-literal changed SQL: %s", got)
	}
}
