package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/prompts"
)

// maxFilterLines bounds the column filter prompt: the candidate columns
// listed for the model, best tables first.
const maxFilterLines = 400

// selectSchemaWithModel refines the deterministic selection with the model,
// as CHESS's schema selector does, in three calls: filter the candidate
// tables' columns, select tables from the schema cut to the kept columns,
// select columns of those tables. PK/FK and join columns are always kept and
// tables that join two selected ones are added, so the join path survives
// whatever the model drops. An unusable answer at any step degrades to the
// step's input; if nothing usable comes back, a.schema (the deterministic
// selection, which must have run) stays as it is. Profiles with
// ModelSchemaSelection (balanced, max) run it when the whole schema does not
// fit the budget: 3 calls.
func (e *Engine) selectSchemaWithModel(ctx context.Context, a *ask) error {
	opts := a.view.renderOptions(a.values)
	if a.sess != nil {
		opts.SearchPath = a.sess.searchPath
	}
	if lx := e.lex.get(a.schema0); lx.fullTokens+examplesTokens(a.values) <= e.SchemaMaxTokens {
		return nil // the whole schema fits: nothing to select
	}
	st := a.trace.begin("schema-model")
	defer a.trace.end(st)
	small, gen := e.model(a, st, llm.RoleSmall), e.model(a, st, llm.RoleGenerator)
	call := func(m Model, p prompts.Prompt, out any) error {
		return m.JSON(ctx, p, 0, out)
	}
	// An unusable answer, or a spent budget, degrades a step to its input.
	degraded := func(err error) bool { return errors.Is(err, llm.ErrBadOutput) || errors.Is(err, ErrBudget) }
	lx := e.lex.get(a.schema0).withLearnedJoins(a.learned)
	q := lx.withQuestionWords(questionTerms(a.req.Question, a.keywords))
	sc := lx.tableScores(q, a.values, a.descs)
	cands := lx.rank(sc, q, a.values, a.descs)
	if len(cands) == 0 {
		st.Note = "no candidate tables; deterministic selection kept"
		return nil
	}
	names := newDisplayNames(a.schema0, opts.SearchPath)
	valueCols := a.learned.usedColumns(lx)
	for _, m := range a.values {
		valueCols[m.Schema+"."+m.Table+"."+m.Column] = true
	}
	var notes []string

	// 1. Filter columns.
	var lines []string
	type colRef struct{ table, column string }
	byLine := map[string]colRef{}
	size := 0
	// Best tables first, whole tables only, within the schema budget.
	for _, i := range cands {
		t := a.schema0.Table(lx.tables[i].key)
		tn := names.of(t)
		var tl []string
		ts := 0
		for _, c := range t.Columns {
			ref := tn + "." + c.Name
			l := columnLine(ref, t, &c, opts.Examples)
			tl = append(tl, l)
			ts += estimateTokens(l) + 1
		}
		if len(lines) > 0 && (size+ts > e.SchemaMaxTokens || len(lines)+len(tl) > maxFilterLines) {
			break
		}
		for j, c := range t.Columns {
			byLine[strings.ToLower(tn+"."+c.Name)] = colRef{lx.tables[i].key, c.Name}
			lines = append(lines, tl[j])
		}
		size += ts
	}
	kept := map[string][]string{} // table key → kept columns
	p, err := prompts.ColumnFilter(prompts.ColumnFilterParams{Question: a.req.Question, Columns: lines,
		Values: promptValues(a.values), Descriptions: promptDescriptions(a.descs)})
	if err != nil {
		return err
	}
	var filtered prompts.ColumnFilterResult
	switch err := call(small, p, &filtered); {
	case degraded(err):
		notes = append(notes, "filter: unusable answer, all columns kept")
		for _, i := range cands {
			kept[lx.tables[i].key] = nil
		}
	case err != nil:
		return err
	default:
		for _, s := range filtered.Columns {
			if r, ok := byLine[strings.ToLower(strings.Trim(strings.TrimSpace(s), `"`))]; ok && !slices.Contains(kept[r.table], r.column) {
				kept[r.table] = append(kept[r.table], r.column)
			}
		}
		notes = append(notes, fmt.Sprintf("filter: %d of %d columns", len(filtered.Columns), len(lines)))
	}
	if len(kept) == 0 {
		st.Note = strings.Join(append(notes, "no column kept; deterministic selection kept"), "; ")
		return nil
	}

	// 2. Select tables, shown the schema cut to the kept columns.
	sel := catalog.Selection{}
	for k, cols := range kept {
		sel[k] = cols
	}
	p, err = prompts.TableSelection(prompts.TableSelectionParams{Question: a.req.Question, Schema: e.fitted(a, sel, cands, opts),
		Values: promptValues(a.values), Descriptions: promptDescriptions(a.descs)})
	if err != nil {
		return err
	}
	var tablesAns prompts.TableSelectionResult
	var tables []int
	switch err := call(gen, p, &tablesAns); {
	case degraded(err):
		notes = append(notes, "tables: unusable answer, filtered tables kept")
		for _, i := range cands {
			if _, ok := kept[lx.tables[i].key]; ok {
				tables = append(tables, i)
			}
		}
	case err != nil:
		return err
	default:
		for _, name := range tablesAns.Tables {
			if t := a.schema0.TableOnPath(strings.Trim(strings.TrimSpace(name), `"`), opts.SearchPath); t != nil {
				if i, ok := lx.index[t.Schema+"."+t.Name]; ok && !slices.Contains(tables, i) {
					tables = append(tables, i)
				}
			}
		}
	}
	if len(tables) == 0 {
		st.Note = strings.Join(append(notes, "no known table chosen; deterministic selection kept"), "; ")
		return nil
	}
	tables = lx.withJoinPaths(tables, sc)

	// 3. Select columns of the chosen tables, shown whole.
	sel = catalog.Selection{}
	for _, i := range tables {
		sel[lx.tables[i].key] = nil
	}
	p, err = prompts.SchemaSelection(prompts.SchemaSelectionParams{Question: a.req.Question, Schema: e.fitted(a, sel, tables, opts),
		Values: promptValues(a.values), Descriptions: promptDescriptions(a.descs)})
	if err != nil {
		return err
	}
	var colsAns prompts.SchemaSelectionResult
	chosenCols := map[int][]string{}
	switch err := call(gen, p, &colsAns); {
	case degraded(err):
		notes = append(notes, "columns: unusable answer, all columns of the chosen tables")
	case err != nil:
		return err
	default:
		for name, cols := range colsAns.Columns {
			t := a.schema0.TableOnPath(strings.Trim(strings.TrimSpace(name), `"`), opts.SearchPath)
			if t == nil {
				continue
			}
			i, ok := lx.index[t.Schema+"."+t.Name]
			if !ok || !slices.Contains(tables, i) {
				continue
			}
			for _, c := range cols {
				if c = strings.Trim(strings.TrimSpace(c), `"`); t.Column(c) != nil && !slices.Contains(chosenCols[i], c) {
					chosenCols[i] = append(chosenCols[i], c)
				}
			}
		}
	}
	sel = catalog.Selection{}
	var chosen []string
	for _, i := range tables {
		lt := &lx.tables[i]
		var cols []string
		if len(chosenCols[i]) > 0 {
			cols = chosenCols[i]
			// Keys and join columns, and columns holding a retrieved value,
			// stay whatever the model said.
			for _, c := range lt.cols {
				if (lt.keys[c.name] || valueCols[lt.key+"."+c.name]) && !slices.Contains(cols, c.name) {
					cols = append(cols, c.name)
				}
			}
		}
		sel[lt.key] = cols
		chosen = append(chosen, lt.key)
	}
	soft, _ := softMode(lx, e.SchemaMaxTokens, &opts)
	rendered := a.schema0.RenderSelected(sel, opts)
	if soft {
		rendered = a.schema0.RenderSoft(sel, opts)
	}
	joins := lx.joinLinks(a.schema0, a.learned, tables, tables)
	rendered += renderJoins(a.schema0, joins, opts.SearchPath)
	if estimateTokens(rendered) > e.SchemaMaxTokens {
		st.Note = strings.Join(append(notes, fmt.Sprintf("choice of ~%d tokens exceeds the budget; deterministic selection kept", estimateTokens(rendered))), "; ")
		return nil
	}
	a.schema, a.joins = rendered, joins
	a.queries = lx.workloadQueries(a.learned, tables, q, e.SchemaMaxTokens)
	st.Note = strings.Join(append(notes, fmt.Sprintf("chosen %s, ~%d tokens", strings.Join(chosen, ", "), estimateTokens(rendered))), "; ")
	return nil
}

// fitted renders sel, dropping its tables from the end of order until the
// rendering fits the schema budget (one table is always shown).
func (e *Engine) fitted(a *ask, sel catalog.Selection, order []int, opts catalog.RenderOptions) string {
	lx := e.lex.get(a.schema0)
	out := a.schema0.RenderSelected(sel, opts)
	for k := len(order) - 1; k > 0 && estimateTokens(out) > e.SchemaMaxTokens; k-- {
		key := lx.tables[order[k]].key
		if _, ok := sel[key]; !ok {
			continue
		}
		delete(sel, key)
		out = a.schema0.RenderSelected(sel, opts)
	}
	return out
}

// withJoinPaths adds, for each two chosen tables that do not join directly
// and have no chosen table between them, the best-scoring table that joins
// both.
func (lx *lexicon) withJoinPaths(tables []int, sc []float64) []int {
	in := map[int]bool{}
	for _, t := range tables {
		in[t] = true
	}
	out := slices.Clone(tables)
	for x := 0; x < len(tables); x++ {
		for y := x + 1; y < len(tables); y++ {
			a, b := tables[x], tables[y]
			if slices.Contains(lx.adj[a], b) {
				continue
			}
			if br := lx.bridge(a, b, sc, in); br >= 0 {
				out = append(out, br)
				in[br] = true
			}
		}
	}
	return out
}

// columnLine is one column as the filter step lists it:
// "table.column (type): comment; examples 'a', 'b'".
func columnLine(ref string, t *catalog.Table, c *catalog.Column, retrieved map[string][]string) string {
	var notes []string
	if c.Comment != "" {
		notes = append(notes, strings.Join(strings.Fields(c.Comment), " "))
	}
	ex := slices.Clone(retrieved[t.Schema+"."+t.Name+"."+c.Name])
	if c.Stats != nil {
		for _, v := range c.Stats.Examples {
			if len(ex) < 3 && !slices.Contains(ex, v) {
				ex = append(ex, v)
			}
		}
	}
	if len(ex) > 0 {
		q := make([]string, len(ex))
		for i, v := range ex {
			q[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		}
		notes = append(notes, "examples "+strings.Join(q, ", "))
	}
	line := ref + " (" + c.Type + ")"
	if len(notes) > 0 {
		line += ": " + strings.Join(notes, "; ")
	}
	return line
}

// displayNames spells tables as the renderer does for a search path: bare
// when that name finds the table, schema-qualified otherwise.
type displayNames struct {
	s    *catalog.Schema
	path []string
}

func newDisplayNames(s *catalog.Schema, path []string) displayNames {
	if len(path) == 0 {
		path = []string{"public"}
	}
	return displayNames{s, path}
}

func (n displayNames) of(t *catalog.Table) string {
	if slices.Contains(n.path, t.Schema) {
		if u := n.s.TableOnPath(t.Name, n.path); u != nil && u.Schema == t.Schema {
			return t.Name
		}
	}
	return t.Schema + "." + t.Name
}
