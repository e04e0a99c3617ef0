package compare

import (
	"slices"
	"testing"
)

func TestAlternatives(t *testing.T) {
	tests := []struct {
		gold string
		want []string
	}{
		{"SELECT a FROM t;", []string{"SELECT a FROM t"}},
		{"SELECT 'x;y' FROM t; SELECT b FROM t;", []string{"SELECT 'x;y' FROM t", "SELECT b FROM t"}},
		{"SELECT {t.a, t.b}, count(*) FROM t GROUP BY {}", []string{
			"SELECT t.a, t.b, count(*) FROM t GROUP BY t.a, t.b",
			"SELECT t.b, count(*) FROM t GROUP BY t.b",
			"SELECT t.a, count(*) FROM t GROUP BY t.a",
		}},
		{"SELECT '{not a set}' FROM t", []string{"SELECT '{not a set}' FROM t"}},
		{"SELECT 1 -- a; comment\n;", []string{"SELECT 1 -- a; comment"}},
		{"SELECT {a};SELECT {a}", []string{"SELECT a"}},
	}
	for _, tt := range tests {
		if got := Alternatives(tt.gold); !slices.Equal(got, tt.want) {
			t.Errorf("Alternatives(%q)\n got %q\nwant %q", tt.gold, got, tt.want)
		}
	}
}

func tbl(cols []string, rows ...[]string) Table {
	t := Table{Columns: cols}
	for _, r := range rows {
		row := make([]*string, len(r))
		for i, v := range r {
			if v != "NULL" {
				row[i] = &v
			}
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

func TestSQLEval(t *testing.T) {
	ab := []string{"a", "b"}
	tests := []struct {
		name      string
		gold, gen Side
		ordered   bool
		want      Verdict
	}{
		{"same rows other order", Side{Table: tbl(ab, []string{"1", "x"}, []string{"2", "y"})}, Side{Table: tbl(ab, []string{"2", "y"}, []string{"1", "x"})}, false, Exact},
		{"order matters", Side{Table: tbl(ab, []string{"1", "x"}, []string{"2", "y"})}, Side{Table: tbl(ab, []string{"2", "y"}, []string{"1", "x"})}, true, Wrong},
		{"ties on the key may swap", Side{Table: tbl(ab, []string{"1", "x"}, []string{"1", "y"}, []string{"2", "z"}), Keys: []int{0}},
			Side{Table: tbl(ab, []string{"1", "y"}, []string{"1", "x"}, []string{"2", "z"}), Keys: []int{0}}, true, Exact},
		{"duplicates dropped", Side{Table: tbl(ab, []string{"1", "x"})}, Side{Table: tbl(ab, []string{"1", "x"}, []string{"1", "x"})}, false, Exact},
		{"columns by name", Side{Table: tbl(ab, []string{"1", "x"})}, Side{Table: tbl([]string{"b", "a"}, []string{"x", "1"})}, false, Exact},
		{"numbers 5 and 5.0", Side{Table: tbl([]string{"n"}, []string{"5"})}, Side{Table: tbl([]string{"n"}, []string{"5.000000"})}, false, Exact},
		{"numbers within 1e-5", Side{Table: tbl([]string{"n"}, []string{"0.3333333"})}, Side{Table: tbl([]string{"n"}, []string{"0.33333334"})}, false, Exact},
		{"numbers apart", Side{Table: tbl([]string{"n"}, []string{"0.33"})}, Side{Table: tbl([]string{"n"}, []string{"0.34"})}, false, Wrong},
		{"NULL is not empty text", Side{Table: tbl([]string{"n"}, []string{"NULL"})}, Side{Table: tbl([]string{"n"}, []string{""})}, false, Wrong},
		{"extra column is subset", Side{Table: tbl([]string{"name"}, []string{"x"}, []string{"y"})},
			Side{Table: tbl([]string{"id", "title"}, []string{"1", "x"}, []string{"2", "y"})}, false, Subset},
		{"missing row", Side{Table: tbl(ab, []string{"1", "x"}, []string{"2", "y"})}, Side{Table: tbl(ab, []string{"1", "x"})}, false, Wrong},
		{"empty gold, empty gen", Side{Table: tbl(ab)}, Side{Table: tbl(ab)}, false, Exact},
		{"empty gold is never subset", Side{Table: tbl([]string{"a"})}, Side{Table: tbl(ab)}, false, Wrong},
	}
	for _, tt := range tests {
		if got := SQLEval(tt.gold, tt.gen, tt.ordered); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestBIRD(t *testing.T) {
	a := tbl([]string{"x"}, []string{"1"}, []string{"2"}, []string{"2"})
	if v := BIRD(a, tbl([]string{"y"}, []string{"2"}, []string{"1"})); v != Exact {
		t.Errorf("same set of rows: %v", v)
	}
	if v := BIRD(a, tbl([]string{"x", "z"}, []string{"1", "1"}, []string{"2", "2"})); v != Wrong {
		t.Errorf("extra column: %v (BIRD has no subset rule)", v)
	}
	if v := BIRD(tbl([]string{"x"}, []string{"0.33"}), tbl([]string{"x"}, []string{"0.330001"})); v != Wrong {
		t.Errorf("BIRD compares numbers exactly: %v", v)
	}
}

func TestOrderKeys(t *testing.T) {
	tests := []struct {
		sql  string
		cols []string
		want []int
		ok   bool
	}{
		{"SELECT name, count(*) AS n FROM t GROUP BY name ORDER BY n DESC", []string{"name", "n"}, []int{1}, true},
		{"SELECT name, count(*) FROM t GROUP BY name ORDER BY count(*) DESC, 1", []string{"name", "count"}, []int{1, 0}, true},
		{"SELECT t.name FROM t ORDER BY t.name", []string{"name"}, []int{0}, true},
		{"SELECT name FROM t ORDER BY id", []string{"name"}, nil, false},
		{"SELECT name FROM t", []string{"name"}, nil, false},
	}
	for _, tt := range tests {
		got, ok := OrderKeys(tt.sql, tt.cols)
		if ok != tt.ok || !slices.Equal(got, tt.want) {
			t.Errorf("OrderKeys(%q) = %v, %v; want %v, %v", tt.sql, got, ok, tt.want, tt.ok)
		}
	}
}

func TestOrderMatters(t *testing.T) {
	if !OrderMatters("order_by", "x") || !OrderMatters("group_by", "Sort them by name") || OrderMatters("group_by", "the border") {
		t.Error("sql-eval's order rule")
	}
}
