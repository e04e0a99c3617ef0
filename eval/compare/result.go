package compare

import (
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Table is a query result as text: nil is NULL.
type Table struct {
	Columns []string    `json:"columns"`
	Rows    [][]*string `json:"rows"`
}

// Verdict is how a generated result relates to the gold.
type Verdict int

const (
	// Wrong: no alternative matches.
	Wrong Verdict = iota
	// Subset: every gold column appears among the generated columns (sql-eval's
	// "subset-correct": extra columns are tolerated).
	Subset
	// Exact: equal to some alternative under the rules.
	Exact
)

func (v Verdict) String() string {
	switch v {
	case Exact:
		return "correct"
	case Subset:
		return "subset"
	}
	return "wrong"
}

// Rtol and Atol are the tolerances numbers are compared with (pandas'
// assert_series_equal defaults, which sql-eval's subset check uses).
const (
	Rtol = 1e-5
	Atol = 1e-8
)

var orderWords = regexp.MustCompile(`(?i)\b(order|sort|arrange)\b`)

// OrderMatters is sql-eval's rule: row order counts when the category is
// order_by or the question says order, sort or arrange.
func OrderMatters(category, question string) bool {
	return category == "order_by" || orderWords.MatchString(question)
}

// Side is one result with what is known about its query.
type Side struct {
	Table Table
	// Keys are the result columns the query's ORDER BY sorts on (see
	// OrderKeys); rows that tie on them may come in any order. Nil with
	// an ordered comparison means every row keeps its place.
	Keys []int
}

// SQLEval compares gen with one gold result by sql-eval's rules.
func SQLEval(gold, gen Side, ordered bool) Verdict {
	if rawEqual(gold.Table, gen.Table) {
		return Exact
	}
	g := normalize(gold, ordered)
	n := normalize(gen, ordered)
	if len(g.Columns) == len(n.Columns) && rowsEqual(g.Rows, n.Rows, Rtol, Atol) {
		return Exact
	}
	if subset(gold, gen, ordered) {
		return Subset
	}
	return Wrong
}

// BIRD compares as BIRD's evaluation does: the sets of rows are equal
// (duplicates and order ignored, columns by position, numbers exactly).
func BIRD(gold, gen Table) Verdict {
	if len(gold.Rows) > 0 && len(gen.Rows) > 0 && len(gold.Rows[0]) != len(gen.Rows[0]) {
		return Wrong
	}
	a, b := dedupe(gold.Rows), dedupe(gen.Rows)
	sortRows(a)
	sortRows(b)
	if rowsEqual(a, b, 0, 0) {
		return Exact
	}
	return Wrong
}

func rawEqual(a, b Table) bool {
	return len(a.Columns) == len(b.Columns) && rowsEqual(a.Rows, b.Rows, 0, 0)
}

// normalize drops duplicate rows, orders columns by name and sorts rows —
// all of them, or, when order matters, only within runs that tie on the
// ORDER BY keys.
func normalize(s Side, ordered bool) Table {
	t := s.Table
	rows := dedupe(t.Rows)
	perm := make([]int, len(t.Columns))
	for i := range perm {
		perm[i] = i
	}
	slices.SortStableFunc(perm, func(a, b int) int { return strings.Compare(t.Columns[a], t.Columns[b]) })
	out := Table{Columns: make([]string, len(perm)), Rows: make([][]*string, len(rows))}
	for i, p := range perm {
		out.Columns[i] = t.Columns[p]
	}
	for r, row := range rows {
		nr := make([]*string, len(perm))
		for i, p := range perm {
			if p < len(row) {
				nr[i] = row[p]
			}
		}
		out.Rows[r] = nr
	}
	if !ordered {
		sortRows(out.Rows)
		return out
	}
	if len(s.Keys) == 0 {
		return out
	}
	keys := make([]int, 0, len(s.Keys))
	for _, k := range s.Keys {
		if i := slices.Index(perm, k); i >= 0 {
			keys = append(keys, i)
		}
	}
	for start := 0; start < len(out.Rows); {
		end := start + 1
		for end < len(out.Rows) && sameKeys(out.Rows[start], out.Rows[end], keys) {
			end++
		}
		sortRows(out.Rows[start:end])
		start = end
	}
	return out
}

func sameKeys(a, b []*string, keys []int) bool {
	for _, k := range keys {
		if !valueEqual(a[k], b[k], 0, 0) {
			return false
		}
	}
	return true
}

// subset is sql-eval's subset_df(gold, gen): each gold column equals (as a
// sorted list of values) a different generated column, and the generated
// result cut down to those columns equals the gold after normalizing.
func subset(gold, gen Side, ordered bool) bool {
	g, n := gold.Table, gen.Table
	if len(g.Rows) == 0 || len(g.Columns) == 0 || len(g.Rows) != len(n.Rows) {
		return false
	}
	used := make([]bool, len(n.Columns))
	match := make([]int, len(g.Columns))
	for gi := range g.Columns {
		gcol := sortedColumn(g.Rows, gi)
		match[gi] = -1
		for ni := range n.Columns {
			if used[ni] {
				continue
			}
			if rowsEqual(singleton(gcol), singleton(sortedColumn(n.Rows, ni)), Rtol, Atol) {
				used[ni], match[gi] = true, ni
				break
			}
		}
		if match[gi] < 0 {
			return false
		}
	}
	cut := Table{Columns: append([]string(nil), g.Columns...), Rows: make([][]*string, len(n.Rows))}
	for r, row := range n.Rows {
		nr := make([]*string, len(match))
		for i, m := range match {
			nr[i] = row[m]
		}
		cut.Rows[r] = nr
	}
	// The generated query's ORDER BY keys carried over to the cut columns.
	var keys []int
	for _, k := range gen.Keys {
		if i := slices.Index(match, k); i >= 0 {
			keys = append(keys, i)
		}
	}
	a := normalize(gold, ordered)
	b := normalize(Side{Table: cut, Keys: keys}, ordered)
	return rowsEqual(a.Rows, b.Rows, Rtol, Atol)
}

func sortedColumn(rows [][]*string, i int) []*string {
	col := make([]*string, len(rows))
	for r, row := range rows {
		col[r] = row[i]
	}
	slices.SortStableFunc(col, compareValues)
	return col
}

// singleton turns a column into rows of one value, to reuse rowsEqual.
func singleton(col []*string) [][]*string {
	out := make([][]*string, len(col))
	for i, v := range col {
		out[i] = []*string{v}
	}
	return out
}

func dedupe(rows [][]*string) [][]*string {
	out := make([][]*string, 0, len(rows))
	seen := map[string]bool{}
	for _, r := range rows {
		k := rowKey(r)
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, r)
	}
	return out
}

// rowKey identifies a row exactly; numbers in canonical form so that 5 and
// 5.0 are one row, as in pandas.
func rowKey(r []*string) string {
	var b strings.Builder
	for _, v := range r {
		switch {
		case v == nil:
			b.WriteString("\x00N")
		default:
			if f, ok := number(*v); ok {
				b.WriteString("\x00F" + strconv.FormatFloat(f, 'g', -1, 64))
			} else {
				b.WriteString("\x00S" + *v)
			}
		}
		b.WriteByte(0x1f)
	}
	return b.String()
}

func sortRows(rows [][]*string) {
	slices.SortStableFunc(rows, func(a, b []*string) int {
		for i := range min(len(a), len(b)) {
			if c := compareValues(a[i], b[i]); c != 0 {
				return c
			}
		}
		return len(a) - len(b)
	})
}

// compareValues orders NULL first, then numbers by value, then text.
func compareValues(a, b *string) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	fa, na := number(*a)
	fb, nb := number(*b)
	switch {
	case na && nb:
		if fa < fb {
			return -1
		} else if fa > fb {
			return 1
		}
		return 0
	case na:
		return -1
	case nb:
		return 1
	}
	return strings.Compare(*a, *b)
}

func rowsEqual(a, b [][]*string, rtol, atol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if !valueEqual(a[i][j], b[i][j], rtol, atol) {
				return false
			}
		}
	}
	return true
}

func valueEqual(a, b *string, rtol, atol float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if *a == *b {
		return true
	}
	fa, na := number(*a)
	fb, nb := number(*b)
	if !na || !nb {
		return false
	}
	return fa == fb || math.Abs(fa-fb) <= atol+rtol*math.Abs(fb)
}

// number parses Postgres's text form of a number (integers, numeric, float,
// including NaN and Infinity).
func number(s string) (float64, bool) {
	if s == "" || len(s) > 64 {
		return 0, false
	}
	c := s[0]
	if !(c >= '0' && c <= '9') && c != '-' && c != '+' && c != '.' && c != 'N' && c != 'I' {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}

// String shows a table on one line: columns, then rows ("NULL" for NULL).
func (t *Table) String() string {
	if t == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("(" + strings.Join(t.Columns, ", ") + ")")
	for _, r := range t.Rows {
		b.WriteString(" [")
		for i, v := range r {
			if i > 0 {
				b.WriteString(", ")
			}
			if v == nil {
				b.WriteString("NULL")
			} else {
				b.WriteString(*v)
			}
		}
		b.WriteString("]")
	}
	return b.String()
}
