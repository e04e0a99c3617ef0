// Package valuerecall measures how well a value index finds stored values
// from keywords typed the way people type them: wrong case, one or two
// typos, punctuation dropped, initials instead of the full name, or only
// part of a name. The same generator drives the unit tests (with thresholds)
// and the catalog benchmark (with a report).
package valuerecall

import (
	"context"
	"math/rand/v2"
	"strings"
	"unicode"

	"github.com/nlproxy/nlproxy/catalog/embedding"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
)

// Class is a kind of perturbation.
type Class string

// Perturbation classes.
const (
	Case    Class = "case"
	Typo    Class = "typo"
	Punct   Class = "punctuation"
	Abbrev  Class = "abbreviation"
	Partial Class = "partial"
)

// Classes returns the classes in report order.
func Classes() []Class { return []Class{Case, Typo, Punct, Abbrev, Partial} }

// TestCase is one test keyword and the stored value it should find.
type TestCase struct {
	Class                 Class
	Keyword               string
	Schema, Table, Column string
	Value                 string
}

// Generate draws up to perClass cases per class from the index's values,
// deterministically from seed. Values are drawn uniformly over all values,
// so large columns dominate as they would in a real database.
func Generate(ix *valueindex.Index, seed uint64, perClass int) []TestCase {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	cols := ix.Columns()
	total := 0
	for _, c := range cols {
		total += c.Values
	}
	if total == 0 {
		return nil
	}
	// Abbreviations are drawn only from columns of at most AbbrevMaxValues
	// values: people abbreviate places, departments and companies, not the
	// million rows of a people table (nor does the index try to).
	small := 0
	for _, c := range cols {
		if c.Values <= AbbrevMaxValues {
			small += c.Values
		}
	}
	pick := func(cl Class) (valueindex.ColumnStat, string, bool) {
		if cl == Abbrev {
			if small == 0 {
				return valueindex.ColumnStat{}, "", false
			}
			n := rng.IntN(small)
			for i, c := range cols {
				if c.Values > AbbrevMaxValues {
					continue
				}
				if n < c.Values {
					return c, ix.Value(i, n), true
				}
				n -= c.Values
			}
		}
		n := rng.IntN(total)
		for i, c := range cols {
			if n < c.Values {
				return c, ix.Value(i, n), true
			}
			n -= c.Values
		}
		return valueindex.ColumnStat{}, "", false
	}
	ctx := context.Background()
	// Token frequencies, so a partial keyword is the value's most telling
	// word ("Cherry Garcia", not "Ben") as a person would pick it.
	df := make(map[string]int)
	for i, c := range cols {
		for j := 0; j < c.Values; j++ {
			for _, t := range strings.Fields(strings.ToLower(ix.Value(i, j))) {
				df[t]++
			}
		}
	}
	var out []TestCase
	for _, cl := range Classes() {
		got := 0
		for tries := 0; got < perClass && tries < perClass*200; tries++ {
			c, v, ok := pick(cl)
			if !ok {
				continue
			}
			kw, ok := perturb(rng, cl, v, df)
			if !ok || spellsAnother(ctx, ix, c, kw, v) {
				continue
			}
			out = append(out, TestCase{Class: cl, Keyword: kw, Schema: c.Schema, Table: c.Table, Column: c.Column, Value: v})
			got++
		}
	}
	return out
}

// AbbrevMaxValues bounds the columns abbreviation cases are drawn from
// (the index's default AbbrevMaxColumnValues).
const AbbrevMaxValues = 20000

// spellsAnother reports whether kw is, once normalized, another value stored
// in the same column: a typo that lands on a real value cannot be undone, so
// such cases would measure luck, not the index.
func spellsAnother(ctx context.Context, ix *valueindex.Index, c valueindex.ColumnStat, kw, v string) bool {
	for _, m := range ix.Lookup(ctx, []string{kw}, valueindex.LookupOptions{Limit: 50, PerColumn: 50}) {
		if m.Exact && m.Value != v && m.Schema == c.Schema && m.Table == c.Table && m.Column == c.Column {
			return true
		}
	}
	return false
}

func letters(s string) int {
	n := 0
	for _, r := range s {
		if unicode.IsLetter(r) {
			n++
		}
	}
	return n
}

func perturb(rng *rand.Rand, cl Class, v string, df map[string]int) (string, bool) {
	switch cl {
	case Case:
		if letters(v) < 2 {
			return "", false
		}
		var kw string
		switch rng.IntN(3) {
		case 0:
			kw = strings.ToLower(v)
		case 1:
			kw = strings.ToUpper(v)
		default:
			rs := []rune(v)
			for i, r := range rs {
				if rng.IntN(2) == 0 {
					if unicode.IsUpper(r) {
						rs[i] = unicode.ToLower(r)
					} else {
						rs[i] = unicode.ToUpper(r)
					}
				}
			}
			kw = string(rs)
		}
		return kw, kw != v
	case Typo:
		rs := []rune(v)
		if letters(v) < 4 {
			return "", false
		}
		edits := 1
		if letters(v) >= 8 && rng.IntN(2) == 0 {
			edits = 2
		}
		for e := 0; e < edits; e++ {
			rs = typo(rng, rs)
		}
		return string(rs), string(rs) != v
	case Punct:
		var b strings.Builder
		dropped := false
		for _, r := range v {
			if unicode.IsLetter(r) || unicode.IsDigit(r) || r == ' ' {
				b.WriteRune(r)
			} else {
				dropped = true
			}
		}
		kw := strings.Join(strings.Fields(b.String()), " ")
		return kw, dropped && letters(kw) > 0
	case Abbrev:
		var b strings.Builder
		n := 0
		for _, t := range strings.FieldsFunc(v, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
			r := []rune(t)[0]
			if !unicode.IsLetter(r) {
				return "", false
			}
			if lt := strings.ToLower(t); lt == "of" || lt == "the" || lt == "and" || lt == "for" || lt == "de" {
				continue
			}
			b.WriteRune(unicode.ToUpper(r))
			n++
		}
		return b.String(), n >= 2 && n <= 4
	case Partial:
		toks := strings.Fields(v)
		if len(toks) < 2 {
			return "", false
		}
		best := ""
		for _, t := range toks {
			if letters(t) < 4 {
				continue
			}
			if best == "" || df[strings.ToLower(t)] < df[strings.ToLower(best)] {
				best = t
			}
		}
		return best, best != ""
	}
	return "", false
}

// typo applies one random keyboard-style edit to a letter inside a word of
// three or more letters, not its first letter (people rarely mistype the
// first letter, and changing an initial "J." names another person rather than
// misspelling this one).
func typo(rng *rand.Rand, rs []rune) []rune {
	var pos []int
	for i, r := range rs {
		if i == 0 || !unicode.IsLetter(r) || !unicode.IsLetter(rs[i-1]) {
			continue
		}
		wl := 0 // length of the word around i
		for j := i; j >= 0 && unicode.IsLetter(rs[j]); j-- {
			wl++
		}
		for j := i + 1; j < len(rs) && unicode.IsLetter(rs[j]); j++ {
			wl++
		}
		if wl >= 3 {
			pos = append(pos, i)
		}
	}
	if len(pos) == 0 {
		return rs
	}
	i := pos[rng.IntN(len(pos))]
	const alpha = "abcdefghijklmnopqrstuvwxyz"
	switch rng.IntN(4) {
	case 0: // substitution
		rs[i] = rune(alpha[rng.IntN(26)])
	case 1: // deletion
		rs = append(rs[:i], rs[i+1:]...)
	case 2: // insertion
		rs = append(rs[:i], append([]rune{rune(alpha[rng.IntN(26)])}, rs[i:]...)...)
	default: // transposition with the previous letter
		rs[i-1], rs[i] = rs[i], rs[i-1]
	}
	return rs
}

// Result is the recall of one class.
type Result struct {
	N, At1, At10 int
	ColumnAt1    int // the top match is in the right table.column (any value)
}

// ColumnRecall1 is the fraction of cases whose top match is in the right column.
func (r Result) ColumnRecall1() float64 { return frac(r.ColumnAt1, r.N) }

// Recall1 is the fraction of cases whose value ranked first.
func (r Result) Recall1() float64 { return frac(r.At1, r.N) }

// Recall10 is the fraction of cases whose value ranked in the top 10.
func (r Result) Recall10() float64 { return frac(r.At10, r.N) }

func frac(a, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(a) / float64(n)
}

// Evaluate looks every case up (one keyword per lookup, ranking only: ten
// results, no per-column cap) and counts where the right table.column and
// value landed.
func Evaluate(ctx context.Context, ix *valueindex.Index, cases []TestCase) map[Class]Result {
	return EvaluateWith(ctx, ix, cases, nil)
}

// EvaluateWith is Evaluate with the lexical candidates reranked by emb
// (nil: lexical only), to compare the two paths on the same cases.
func EvaluateWith(ctx context.Context, ix *valueindex.Index, cases []TestCase, emb embedding.Embedder) map[Class]Result {
	out := make(map[Class]Result)
	opts := valueindex.LookupOptions{Limit: 10, PerColumn: 10, MinScore: 0.01, Embedder: emb}
	for _, c := range cases {
		r := out[c.Class]
		r.N++
		ms := ix.Lookup(ctx, []string{c.Keyword}, opts)
		if len(ms) > 0 && ms[0].Schema == c.Schema && ms[0].Table == c.Table && ms[0].Column == c.Column {
			r.ColumnAt1++
		}
		for rank, m := range ms {
			if m.Schema == c.Schema && m.Table == c.Table && m.Column == c.Column && m.Value == c.Value {
				if rank == 0 {
					r.At1++
				}
				r.At10++
				break
			}
		}
		out[c.Class] = r
	}
	return out
}
