package engine

import (
	"fmt"
	"strings"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/prompts"
)

// selectSchema decides what the model sees: the full schema when it fits the
// budget, else the soft schema — the tables the question points at in
// detail (with the tables that join them, PK/FK and join columns always
// kept; wide tables cut to the columns that matter), and the names of the
// others when they fit. It is deterministic and costs no LLM call, which
// keeps the fast profile at two calls on the happy path.
func (e *Engine) selectSchema(a *ask) {
	e.selectSchemaBudget(a, e.SchemaMaxTokens)
}

// selectSchemaBudget sets a.schema for a budget of tokens and returns the
// tables shown in detail, best first.
func (e *Engine) selectSchemaBudget(a *ask, budget int) []string {
	st := a.trace.begin("schema")
	defer a.trace.end(st)
	opts := a.view.renderOptions(a.values)
	if a.sess != nil {
		// Names outside the asker's search_path are shown qualified, so the
		// model writes SQL that resolves in this session.
		opts.SearchPath = a.sess.searchPath
	}
	lx := e.lex.get(a.schema0).withLearnedJoins(a.learned)
	q := lx.withQuestionWords(questionTerms(a.req.Question, a.keywords))
	// Join paths under the schema: the workload's, then those inferred
	// from names (declared keys are in the tables themselves).
	withJoins := func(text string, shown, relevant []int) string {
		a.joins = lx.joinLinks(a.schema0, a.learned, shown, relevant)
		return text + renderJoins(a.schema0, a.joins, opts.SearchPath)
	}
	if lx.fullTokens+examplesTokens(a.values) <= budget {
		all := make([]int, len(lx.tables))
		for i := range all {
			all[i] = i
		}
		ranked := lx.rank(lx.tableScores(q, a.values, a.descs), q, a.values, a.descs)
		if full := withJoins(a.schema0.RenderFull(opts), all, ranked); estimateTokens(full) <= budget {
			a.schema = full
			st.Note = fmt.Sprintf("full schema, %d tables, ~%d tokens", len(a.schema0.Tables), estimateTokens(full))
			a.queries = lx.workloadQueries(a.learned, ranked, q, budget)
			keys := make([]string, 0, len(lx.tables))
			for _, lt := range lx.tables {
				keys = append(keys, lt.key)
			}
			return keys
		}
	}
	sc := lx.tableScores(q, a.values, a.descs)
	valueCols := a.learned.usedColumns(lx)
	for _, m := range a.values {
		valueCols[m.Schema+"."+m.Table+"."+m.Column] = true
	}

	// The soft schema lists what is not detailed, when the listing leaves
	// most of the budget to the details.
	soft, reserve := softMode(lx, budget, &opts)
	sel := catalog.Selection{}
	var chosen []string
	var idx []int
	used := reserve
	for _, i := range lx.rank(sc, q, a.values, a.descs) {
		key := lx.tables[i].key
		cols := lx.columns(i, q, valueCols)
		size := estimateTokens(a.schema0.RenderSelected(catalog.Selection{key: cols}, opts))
		if used+size > budget && len(chosen) > 0 {
			continue // a smaller table further down may still fit
		}
		sel[key] = cols
		chosen = append(chosen, key)
		idx = append(idx, i)
		used += size
	}
	render := func() string {
		if soft {
			return withJoins(a.schema0.RenderSoft(sel, opts), idx, idx)
		}
		return withJoins(a.schema0.RenderSelected(sel, opts), idx, idx)
	}
	rendered := render()
	// Keys shared between detailed tables, and join paths, add lines: drop
	// from the tail until the rendering fits.
	for estimateTokens(rendered) > budget && len(chosen) > 1 {
		delete(sel, chosen[len(chosen)-1])
		chosen, idx = chosen[:len(chosen)-1], idx[:len(idx)-1]
		rendered = render()
	}
	a.queries = lx.workloadQueries(a.learned, idx, q, budget)
	a.schema = rendered
	kind := "selected"
	if soft {
		kind = "soft schema, detailed"
	}
	st.Note = fmt.Sprintf("%s %s of %d tables, ~%d tokens", kind, strings.Join(chosen, ", "), len(a.schema0.Tables), estimateTokens(rendered))
	return chosen
}

// softMode decides how the tables outside the selection are listed: with
// their columns, by name only, as one summary line per schema none of
// whose tables is detailed (a warehouse too big to name table by table), or
// not at all (soft false); it sets opts accordingly and returns what the
// listing costs.
func softMode(lx *lexicon, budget int, opts *catalog.RenderOptions) (soft bool, reserve int) {
	switch {
	case lx.softTokens <= budget/softShare:
		return true, lx.softTokens
	case lx.namesTokens <= budget/softShare:
		opts.OtherNamesOnly = true
		return true, lx.namesTokens
	case lx.schemas > 1 && lx.schemasTokens <= budget/schemaShare:
		opts.OtherSchemasOnly = true
		return true, lx.schemasTokens
	}
	return false, 0
}

// schemaShare: schema summary lines may take at most 1/schemaShare of the
// budget (they say what exists, the details answer the question).
const schemaShare = 8

// softShare: the soft schema's listing of the other tables may take at most
// 1/softShare of the budget.
const softShare = 4

// examplesTokens estimates what retrieved examples add to a rendering.
func examplesTokens(ms []valueindex.Match) int {
	n := 0
	for _, m := range ms {
		n += len(m.Value) + 4
	}
	return (n + 3) / 4
}

func estimateTokens(s string) int { return prompts.EstimateTokens(s) }

// valueExamples turns retrieved values into per-column examples for the
// rendered schema ("schema.table.column" → values), retrieved ones first.
func valueExamples(ms []valueindex.Match) map[string][]string {
	out := map[string][]string{}
	for _, m := range ms {
		k := m.Schema + "." + m.Table + "." + m.Column
		out[k] = append(out[k], m.Value)
	}
	return out
}

// tableHasColumn reports whether the referenced table has a column.
func tableHasColumn(s *catalog.Schema, ref guard.TableRef, column string) bool {
	name := ref.Name
	if ref.Schema != "" {
		name = ref.Schema + "." + ref.Name
	}
	t := s.Table(name)
	if t == nil {
		return true // unknown table (CTE, view we cannot see): let the index decide
	}
	return t.Column(column) != nil
}
