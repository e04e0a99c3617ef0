package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/eval/compare"
	"github.com/nlproxy/nlproxy/eval/dataset"
)

// report is the outcome per database and overall ("" key).
type report struct {
	Budgets []int                `json:"budgets"`
	Tables  int                  `json:"relations"` // in the loaded database
	DBs     []string             `json:"databases"`
	Rows    map[string]*dbResult `json:"results"`
	Misses  []miss               `json:"misses,omitempty"`
	Lits    []litMiss            `json:"literal_misses,omitempty"`
}

type dbResult struct {
	Questions int `json:"questions"`
	// Hits[i]: questions whose gold tables were all shown at Budgets[i];
	// Tokens[i] and Tables[i] sum the rendered size and detailed tables.
	Hits   []int `json:"hits"`
	Tokens []int `json:"tokens"`
	Tables []int `json:"tables"`
	// Literals compared with text columns in the gold SQL, and how many
	// value retrieval found.
	Literals      int `json:"literals"`
	LiteralsFound int `json:"literals_found"`
}

type miss struct {
	DB, Question string
	Gold, Got    []string
}

type litMiss struct {
	DB, Question, Column, Value string
}

// naming maps a gold SQL's table (or column) name of a database to the
// loaded one.
type naming func(db, name string, column bool) string

// evaluate runs the selection for every question at every budget, names
// resolved on searchPath and the gold SQL's names mapped by names.
func evaluate(ctx context.Context, snap *catalog.Snapshot, qs []dataset.Question, budgets []int, searchPath []string, names naming) (*report, error) {
	return evaluateWith(ctx, snap, qs, budgets, searchPath, names, nil)
}

// evaluateWith is evaluate with the values scored taken from lookup(the
// question's keywords) instead of what the engine's retrieval found (nil).
func evaluateWith(ctx context.Context, snap *catalog.Snapshot, qs []dataset.Question, budgets []int, searchPath []string, names naming,
	lookup func(context.Context, *catalog.Snapshot, []string) []valueindex.Match) (*report, error) {
	e := &engine.Engine{}
	rep := &report{Budgets: budgets, Tables: len(snap.Schema.Tables), Rows: map[string]*dbResult{}}
	row := func(db string) *dbResult {
		r := rep.Rows[db]
		if r == nil {
			r = &dbResult{Hits: make([]int, len(budgets)), Tokens: make([]int, len(budgets)), Tables: make([]int, len(budgets))}
			rep.Rows[db] = r
			if db != "" {
				rep.DBs = append(rep.DBs, db)
			}
		}
		return r
	}
	for _, q := range qs {
		golds, err := goldTableSets(q.Gold)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", q.DB, q.Question, err)
		}
		for _, ts := range golds {
			for i := range ts {
				ts[i] = q.DB + "." + names(q.DB, ts[i], false)
			}
		}
		alts := compare.Alternatives(q.Gold)
		rows := []*dbResult{row(q.DB), row("")}
		for _, r := range rows {
			r.Questions++
		}
		for bi, b := range budgets {
			ch := e.PreviewSchema(ctx, snap, q.Question, b, searchPath)
			hit := false
			for _, g := range golds {
				if subset(g, ch.Tables) {
					hit = true
				}
			}
			for _, r := range rows {
				r.Tokens[bi] += ch.Tokens
				r.Tables[bi] += len(ch.Tables)
				if hit {
					r.Hits[bi]++
				}
			}
			if bi == len(budgets)-1 && !hit {
				rep.Misses = append(rep.Misses, miss{DB: q.DB, Question: q.Question, Gold: golds[0], Got: ch.Tables})
			}
			if bi != 0 {
				continue
			}
			lits, err := goldLiterals(alts[0])
			if err != nil {
				return nil, fmt.Errorf("%s: gold literals %q: %w", q.DB, alts[0], err)
			}
			values := ch.Values
			if lookup != nil && len(lits) > 0 {
				values = lookup(ctx, snap, ch.Keywords)
			}
			for _, l := range lits {
				l.Column = names(q.DB, l.Column, true)
				if !textColumn(snap.Schema, q.DB, golds[0], l.Column) {
					continue
				}
				found := false
				for _, m := range values {
					if m.Schema == q.DB && m.Column == l.Column && sameValue(m.Value, l) {
						found = true
					}
				}
				for _, r := range rows {
					r.Literals++
					if found {
						r.LiteralsFound++
					}
				}
				if !found {
					rep.Lits = append(rep.Lits, litMiss{DB: q.DB, Question: q.Question, Column: l.Column, Value: l.Value})
				}
			}
		}
	}
	return rep, nil
}

func subset(want, got []string) bool {
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}

// textColumn reports whether a gold table of the question has a text-like
// column of that name (what the value index indexes).
func textColumn(s *catalog.Schema, db string, tables []string, column string) bool {
	for _, t := range tables {
		tb := s.Table(t)
		if tb == nil {
			continue
		}
		if c := tb.Column(column); c != nil && (strings.HasPrefix(c.Type, "text") || strings.HasPrefix(c.Type, "character")) {
			return true
		}
	}
	return false
}

func fold(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func sameValue(stored string, l goldLiteral) bool {
	if l.Like {
		return strings.Contains(fold(stored), fold(l.Value))
	}
	return fold(stored) == fold(l.Value)
}

func pct(n, d int) float64 {
	if d == 0 {
		return 0
	}
	return 100 * float64(n) / float64(d)
}

func (rep *report) print(w io.Writer, verbose bool) {
	fmt.Fprintf(w, "gold-table recall (all gold tables shown in detail), lexical keywords, no model; %d relations\n", rep.Tables)
	fmt.Fprintf(w, "%-12s %4s", "database", "n")
	for _, b := range rep.Budgets {
		fmt.Fprintf(w, " %14s", fmt.Sprintf("@%d (tok,tbl)", b))
	}
	fmt.Fprintf(w, " %14s\n", "values found")
	for _, db := range append(slices.Clone(rep.DBs), "") {
		r := rep.Rows[db]
		name := db
		if name == "" {
			name = "overall"
		}
		fmt.Fprintf(w, "%-12s %4d", name, r.Questions)
		for i := range rep.Budgets {
			fmt.Fprintf(w, " %5.1f%% %4d %2.0f", pct(r.Hits[i], r.Questions), r.Tokens[i]/max(r.Questions, 1), float64(r.Tables[i])/float64(max(r.Questions, 1)))
		}
		fmt.Fprintf(w, " %5.1f%% (%d/%d)\n", pct(r.LiteralsFound, r.Literals), r.LiteralsFound, r.Literals)
	}
	// The floor: the worst database's recall at each budget.
	fmt.Fprintf(w, "%-12s %4s", "floor", "")
	for i := range rep.Budgets {
		low, at := 101.0, ""
		for _, db := range rep.DBs {
			if p := pct(rep.Rows[db].Hits[i], rep.Rows[db].Questions); p < low {
				low, at = p, db
			}
		}
		fmt.Fprintf(w, " %5.1f%% %-8s", low, at)
	}
	fmt.Fprintln(w)
	if !verbose {
		return
	}
	fmt.Fprintf(w, "\nmissed at %d tokens:\n", rep.Budgets[len(rep.Budgets)-1])
	for _, m := range rep.Misses {
		fmt.Fprintf(w, "  [%s] %s\n     gold %v\n     got  %v\n", m.DB, m.Question, m.Gold, m.Got)
	}
	fmt.Fprintf(w, "\nliterals not retrieved:\n")
	for _, l := range rep.Lits {
		fmt.Fprintf(w, "  [%s] %s = %q  (%s)\n", l.DB, l.Column, l.Value, l.Question)
	}
}
