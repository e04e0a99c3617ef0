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
// stores ('LA'), using the value index. Patterns (LIKE/ILIKE) are left alone.
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
		if lit.Op != "=" && lit.Op != "<>" && lit.Op != "IN" && lit.Op != "NOT IN" {
			continue
		}
		for _, r := range literalTables(a.schema0, checked.Tables, lit) {
			table := a.resolve(r)
			if a.sess != nil && a.sess.secured[table] {
				// Row-level security decides what the role sees; the value
				// index, read by the catalog role, must not say what exists.
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
