// Package compare decides whether a generated query's result matches the
// gold query's, with sql-eval's rules (alternatives, `{}` column subsets,
// duplicates dropped, row order only when asked, subset-correct) or BIRD's
// (the same set of rows).
package compare

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// maxAlternatives bounds the expansion of `{}` column sets.
const maxAlternatives = 512

// Alternatives expands a sql-eval gold query into the queries any of which
// is accepted: statements separated by ';' (outside quotes and comments),
// each `{a, b}` in a select list replaced by every non-empty subset of its
// columns, and each empty `{}` (GROUP BY {}) by the columns chosen for the
// nearest non-empty set before it. Duplicates are dropped.
func Alternatives(gold string) []string {
	var out []string
	seen := map[string]bool{}
	for _, stmt := range SplitStatements(gold) {
		for _, q := range expandBraces(stmt) {
			if !seen[q] {
				seen[q] = true
				out = append(out, q)
			}
		}
	}
	return out
}

// SplitStatements splits on ';' outside string literals, quoted identifiers
// and comments (Postgres's own scanner), dropping empty statements. Text the
// scanner cannot read (an unterminated quote) is one statement.
func SplitStatements(sql string) []string {
	parts, err := pg_query.SplitWithScanner(sql, true)
	if err != nil {
		parts = []string{sql}
	}
	var out []string
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// braceSet is one `{…}` in a query: where it is and what it lists.
type braceSet struct {
	start, end int // s[start:end] is the whole {…}
	cols       []string
}

// findBraces finds the `{…}` sets with Postgres's own scanner, so braces
// in string literals, quoted identifiers and comments are text, not sets.
// Text the scanner cannot read (an unterminated quote) has none.
func findBraces(s string) []braceSet {
	res, err := pg_query.Scan(s)
	if err != nil {
		return nil
	}
	toks := res.Tokens
	text := func(k int) string { return s[toks[k].Start:toks[k].End] }
	var out []braceSet
	for i := 0; i < len(toks); i++ {
		if text(i) != "{" {
			continue
		}
		j := i + 1
		for j < len(toks) && text(j) != "}" {
			j++
		}
		if j == len(toks) {
			return out
		}
		start, end := int(toks[i].Start), int(toks[j].End)
		var cols []string
		for _, c := range strings.Split(s[start+1:end-1], ",") {
			if c = strings.TrimSpace(c); c != "" {
				cols = append(cols, c)
			}
		}
		out = append(out, braceSet{start: start, end: end, cols: cols})
		i = j
	}
	return out
}

func expandBraces(stmt string) []string {
	sets := findBraces(stmt)
	if len(sets) == 0 {
		return []string{stmt}
	}
	// choices[k] = the chosen subset for each non-empty set, in order.
	var nonEmpty []int
	for i, b := range sets {
		if len(b.cols) > 0 {
			nonEmpty = append(nonEmpty, i)
		}
	}
	combos := [][]string{nil} // per combination, the replacement text of each set
	combos[0] = make([]string, len(sets))
	for _, si := range nonEmpty {
		subs := subsets(sets[si].cols)
		var next [][]string
		for _, c := range combos {
			for _, sub := range subs {
				if len(next) >= maxAlternatives {
					break
				}
				n := append([]string(nil), c...)
				n[si] = strings.Join(sub, ", ")
				next = append(next, n)
			}
		}
		combos = next
	}
	out := make([]string, 0, len(combos))
	for _, c := range combos {
		var b strings.Builder
		last, prev := "", 0
		for i, s := range sets {
			b.WriteString(stmt[prev:s.start])
			if len(s.cols) > 0 {
				last = c[i]
			}
			b.WriteString(last)
			prev = s.end
		}
		b.WriteString(stmt[prev:])
		out = append(out, b.String())
	}
	return out
}

// subsets lists every non-empty subset of cols, keeping their order, the
// full set first.
func subsets(cols []string) [][]string {
	n := len(cols)
	if n > 8 {
		n = 8 // 255 subsets; more is not a column set anyone writes
	}
	var out [][]string
	for mask := (1 << n) - 1; mask > 0; mask-- {
		var sub []string
		for i := 0; i < n; i++ {
			if mask&(1<<i) != 0 {
				sub = append(sub, cols[i])
			}
		}
		out = append(out, sub)
	}
	return out
}

// Full is the gold query with every `{}` set expanded to all its columns:
// the first alternative, the one a person would write.
func Full(gold string) string {
	alts := Alternatives(gold)
	if len(alts) == 0 {
		return ""
	}
	return alts[0]
}
