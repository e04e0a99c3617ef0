package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine/guard"
)

// minLiteralScore is how close a stored value must be to replace a literal
// the column does not hold; below it the literal stays and the trial run's
// result (often empty) goes to the fixer instead.
const minLiteralScore = 0.6

// correctLiterals replaces string literals compared with a column
// (col = 'Los Angeles', col IN (…)) by the closest value the column really
// stores ('LA'), using the value index. A pattern (LIKE/ILIKE '%text%') is
// changed only when no stored value it was compared with contains its text
// and the data pairs the text with a code the column stores ('%California%'
// → '%CA%'); its wildcards stay.
func (e *Engine) correctLiterals(ctx context.Context, a *ask, sql string) string {
	if a.snap == nil || a.snap.Values == nil {
		return sql
	}
	lits, err := guard.Literals(sql)
	if err != nil || len(lits) == 0 {
		return sql
	}
	checked, err := guard.Check(sql, e.guardOptions(a))
	if err != nil {
		return sql // the guard stage reports it
	}
	st := a.trace.begin("literals")
	defer a.trace.end(st)
	var reps []guard.Replacement
	var notes []string
	for _, lit := range lits {
		pattern := strings.HasSuffix(lit.Op, "LIKE")
		if !pattern && lit.Op != "=" && lit.Op != "<>" && lit.Op != "IN" && lit.Op != "NOT IN" {
			continue
		}
		for _, r := range literalTables(a.schema0, checked.Tables, lit) {
			table := a.resolve(r)
			if a.sess != nil && a.sess.secured[table] {
				// Row-level security decides what the role sees; the value
				// index, read by the catalog role, must not say what exists.
				break
			}
			if pattern {
				if value, ok := e.correctPattern(ctx, a, table, lit); ok {
					reps = append(reps, guard.Replacement{Literal: lit, Value: value})
					notes = append(notes, fmt.Sprintf("%s.%s: pattern '%s' → '%s' (the data's code)", table, lit.Column, lit.Value, value))
				}
				break
			}
			matches := a.snap.Values.Closest(ctx, table, lit.Column, lit.Value, 1)
			if len(matches) == 0 {
				continue // column not indexed (numeric, skipped, sensitive) or empty
			}
			best := matches[0]
			if best.Value == lit.Value {
				break
			}
			if best.Score >= minLiteralScore {
				reps = append(reps, guard.Replacement{Literal: lit, Value: best.Value})
				notes = append(notes, fmt.Sprintf("%s.%s: '%s' → '%s' (%.2f)", table, lit.Column, lit.Value, best.Value, best.Score))
			}
			break
		}
	}
	if len(reps) == 0 {
		st.Note = fmt.Sprintf("%d literals, all stored", len(lits))
		return sql
	}
	st.Note = strings.Join(notes, "; ")
	return guard.ReplaceLiterals(sql, reps)
}

// correctPattern is the pattern with its text replaced by the code the data
// pairs it with, when the column's stored values near the text do not
// contain it. Only a plain '%text%', 'text%' or '%text' is considered.
func (e *Engine) correctPattern(ctx context.Context, a *ask, table string, lit guard.Literal) (string, bool) {
	text := strings.TrimSuffix(strings.TrimPrefix(lit.Value, "%"), "%")
	if text == "" || strings.ContainsAny(text, `%_\`) {
		return "", false
	}
	fold := strings.Contains(lit.Op, "ILIKE")
	contains := func(v string) bool {
		if fold {
			return strings.Contains(strings.ToLower(v), strings.ToLower(text))
		}
		return strings.Contains(v, text)
	}
	var code string
	for _, m := range a.snap.Values.Closest(ctx, table, lit.Column, text, 5) {
		if contains(m.Value) {
			return "", false // the pattern finds what it looks for
		}
		if m.Alias && code == "" {
			code = m.Value
		}
	}
	if code == "" || strings.ContainsAny(code, `%_\`) {
		return "", false
	}
	return lit.Value[:len(lit.Value)-len(strings.TrimPrefix(lit.Value, "%"))] + code +
		lit.Value[len(strings.TrimSuffix(lit.Value, "%")):], true
}

// literalTables are the referenced tables the literal's column can belong to:
// the one its qualifier names (alias or table name), else every referenced
// table that has a column of that name.
func literalTables(schema *catalog.Schema, refs []guard.TableRef, lit guard.Literal) []guard.TableRef {
	var out []guard.TableRef
	q := strings.ToLower(lit.Qualifier)
	if i := strings.LastIndexByte(q, '.'); i >= 0 {
		q = q[i+1:]
	}
	for _, r := range refs {
		if q != "" && strings.ToLower(r.Alias) != q && strings.ToLower(r.Name) != q {
			continue
		}
		if schema == nil || tableHasColumn(schema, r, lit.Column) {
			out = append(out, r)
		}
	}
	return out
}

// resolve names the catalog table a reference reads ("schema.table"), as the
// asking session's search_path finds it; unknown references keep their name.
func (a *ask) resolve(r guard.TableRef) string {
	name := r.Name
	if r.Schema != "" {
		name = r.Schema + "." + r.Name
	}
	var path []string
	if a.sess != nil {
		path = a.sess.searchPath
	}
	if t := a.schema0.TableOnPath(name, path); t != nil {
		return t.Schema + "." + t.Name
	}
	return name
}
