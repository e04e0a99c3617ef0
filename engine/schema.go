package engine

import (
	"fmt"
	"sort"
	"strings"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/engine/guard"
	"github.com/nlproxy/nlproxy/prompts"
)

// maxSelectedTables bounds a selected sub-schema; CHESS finds the answer's
// tables among the top few, and more only crowd a small model's context.
const maxSelectedTables = 8

// selectSchema decides what the model sees: the full schema when it fits the
// budget, else the tables the retrieval points at (plus the tables that join
// them), always with their PK/FK columns. It is deterministic and costs no
// LLM call, which keeps the fast profile at two calls on the happy path.
func (e *Engine) selectSchema(a *ask) {
	st := a.trace.begin("schema")
	defer a.trace.end(st)
	opts := catalog.RenderOptions{Examples: valueExamples(a.values)}
	if a.sess != nil {
		// Names outside the asker's search_path are shown qualified, so the
		// model writes SQL that resolves in this session.
		opts.SearchPath = a.sess.searchPath
	}
	full := a.schema0.RenderFull(opts)
	if prompts.EstimateTokens(full) <= e.SchemaMaxTokens {
		a.schema = full
		st.Note = fmt.Sprintf("full schema, %d tables, ~%d tokens", len(a.schema0.Tables), prompts.EstimateTokens(full))
		return
	}
	ranked := rankTables(a.schema0, a.req.Question, a.keywords, a.values, a.descs)
	var chosen []string
	rendered := ""
	for _, name := range withJoinTables(a.schema0, ranked) {
		if len(chosen) == maxSelectedTables {
			break
		}
		try := a.schema0.RenderSelected(selectionOf(append(chosen, name)), opts)
		if prompts.EstimateTokens(try) > e.SchemaMaxTokens && len(chosen) > 0 {
			continue
		}
		chosen = append(chosen, name)
		rendered = try
	}
	a.schema = rendered
	st.Note = fmt.Sprintf("selected %s of %d tables, ~%d tokens", strings.Join(chosen, ", "), len(a.schema0.Tables), prompts.EstimateTokens(rendered))
}

func selectionOf(tables []string) catalog.Selection {
	sel := catalog.Selection{}
	for _, t := range tables {
		sel[t] = nil // nil: all columns of the table
	}
	return sel
}

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

// rankTables scores every table by how much of the question points at it:
// name and column-name tokens, comments, value matches and description hits.
// It returns qualified table names, best first, only those with a score.
func rankTables(s *catalog.Schema, question string, keywords []string, values []valueindex.Match, descs []descindex.Hit) []string {
	q := map[string]bool{}
	for _, t := range descindex.Tokenize(question + " " + strings.Join(keywords, " ")) {
		q[t] = true
	}
	score := map[string]float64{}
	overlap := func(text string) float64 {
		n := 0.0
		seen := map[string]bool{}
		for _, t := range descindex.Tokenize(text) {
			if q[t] && !seen[t] {
				seen[t] = true
				n++
			}
		}
		return n
	}
	for i := range s.Tables {
		t := &s.Tables[i]
		key := t.Schema + "." + t.Name
		sc := 3 * overlap(t.Name)
		sc += 0.5 * overlap(t.Comment)
		var cols strings.Builder
		for _, c := range t.Columns {
			cols.WriteString(c.Name + " ")
			sc += 0.25 * overlap(c.Comment)
		}
		sc += overlap(cols.String())
		score[key] = sc
	}
	for _, m := range values {
		score[m.Schema+"."+m.Table] += 4 * m.Score
	}
	for rank, h := range descs {
		if h.Table == "" {
			continue
		}
		for _, key := range tableKeys(s, h.Schema, h.Table) {
			score[key] += 2 / float64(rank+1)
		}
	}
	keys := make([]string, 0, len(score))
	for k, v := range score {
		if v > 0 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if score[keys[i]] != score[keys[j]] {
			return score[keys[i]] > score[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

func tableKeys(s *catalog.Schema, schema, table string) []string {
	var out []string
	for i := range s.Tables {
		t := &s.Tables[i]
		if t.Name == table && (schema == "" || t.Schema == schema) {
			out = append(out, t.Schema+"."+t.Name)
		}
	}
	return out
}

// withJoinTables inserts, after the ranked tables it connects, any table that
// references two of them (order_lines between orders and products), so the
// model can write the join.
func withJoinTables(s *catalog.Schema, ranked []string) []string {
	if len(ranked) > maxSelectedTables {
		ranked = ranked[:maxSelectedTables]
	}
	in := map[string]bool{}
	for _, r := range ranked {
		in[r] = true
	}
	out := append([]string(nil), ranked...)
	for i := range s.Tables {
		t := &s.Tables[i]
		key := t.Schema + "." + t.Name
		if in[key] {
			continue
		}
		linked := map[string]bool{}
		for _, fk := range t.ForeignKeys {
			if ref := fk.RefSchema + "." + fk.RefTable; in[ref] {
				linked[ref] = true
			}
		}
		if len(linked) >= 2 {
			out = append(out, key)
			in[key] = true
		}
	}
	// Tables the selected ones reference directly (dimension tables) come last.
	for _, r := range ranked {
		t := s.Table(r)
		if t == nil {
			continue
		}
		for _, fk := range t.ForeignKeys {
			if ref := fk.RefSchema + "." + fk.RefTable; !in[ref] {
				out = append(out, ref)
				in[ref] = true
			}
		}
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
