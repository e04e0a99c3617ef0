package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// minLiteralScore is how close a stored value must be to replace a literal
// the column does not hold; below it the literal stays and the trial run's
// result (often empty) goes to the fixer instead.
const minLiteralScore = 0.6

// rewriteKind classifies a rewrite of a plain literal.
func rewriteKind(from, to string) string {
	switch {
	case strings.Join(strings.Fields(from), " ") == strings.Join(strings.Fields(to), " "):
		return memory.RewriteSpace
	case strings.EqualFold(from, to):
		return memory.RewriteCase
	}
	return memory.RewriteValue
}

// sqlString quotes s as an SQL string constant (standard conforming).
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// correctLiterals replaces string literals compared with a column
// (col = 'Los Angeles', col IN (…)) by the closest value the column really
// stores ('LA'), using the value index. A pattern (LIKE/ILIKE '%text%') is
// changed only when no stored value it was compared with contains its text
// and the data pairs the text with a code the column stores ('%California%'
// → '%CA%'); its wildcards stay. A literal is changed only when the column,
// asked on the server as the asking session, holds no row it matches (the
// index may be stale, sampled or cut): a query that already finds what it
// compares with is never changed. It returns the SQL and what it changed;
// Engine.NoLiteralCorrection turns it off.
func (e *Engine) correctLiterals(ctx context.Context, a *ask, sql string) (string, []memory.LiteralRewrite) {
	if e.NoLiteralCorrection || a.snap == nil || a.snap.Values == nil || a.exec == nil {
		return sql, nil
	}
	lits, err := guard.Literals(sql)
	if err != nil || len(lits) == 0 {
		return sql, nil
	}
	checked, err := guard.Check(sql, e.guardOptions(a))
	if err != nil {
		return sql, nil // the guard stage reports it
	}
	st := a.trace.begin("literals")
	defer a.trace.end(st)
	var reps []guard.Replacement
	var done []memory.LiteralRewrite
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
			var rw memory.LiteralRewrite
			if pattern {
				value, ok := e.correctPattern(ctx, a, table, lit)
				if !ok {
					break
				}
				rw = memory.LiteralRewrite{Table: table, Column: lit.Column, From: lit.Value, To: value, Kind: memory.RewriteCode}
			} else {
				matches := a.snap.Values.Closest(ctx, table, lit.Column, lit.Value, 1)
				if len(matches) == 0 {
					continue // column not indexed (numeric, skipped, sensitive) or empty
				}
				best := matches[0]
				if best.Value == lit.Value || best.Score < minLiteralScore {
					break
				}
				rw = memory.LiteralRewrite{Table: table, Column: lit.Column, From: lit.Value, To: best.Value, Kind: rewriteKind(lit.Value, best.Value)}
			}
			found, err := e.storedOnServer(ctx, a, table, lit)
			switch {
			case err != nil:
				if ctx.Err() != nil {
					return sql, nil
				}
				notes = append(notes, fmt.Sprintf("%s kept: the column could not be checked (%v)", sqlString(lit.Value), err))
			case found:
				notes = append(notes, fmt.Sprintf("%s kept: %s.%s holds it", sqlString(lit.Value), table, lit.Column))
			default:
				reps = append(reps, guard.Replacement{Literal: lit, Value: rw.To})
				done = append(done, rw)
				notes = append(notes, rw.String())
			}
			break
		}
	}
	if len(notes) == 0 {
		st.Note = fmt.Sprintf("%d literals, all stored", len(lits))
		return sql, nil
	}
	st.Note = strings.Join(notes, "; ")
	if len(reps) == 0 {
		return sql, nil
	}
	return guard.ReplaceLiterals(sql, reps), done
}

// storedOnServer reports whether table's column holds a row the literal
// matches (= for a value, the pattern's own LIKE/ILIKE for a pattern), asked
// on the asking session like every trial run: sealed by the guard, read-only,
// under the trial limits.
func (e *Engine) storedOnServer(ctx context.Context, a *ask, table string, lit guard.Literal) (bool, error) {
	op := "="
	if strings.HasSuffix(lit.Op, "LIKE") {
		op = strings.TrimPrefix(lit.Op, "NOT ")
	}
	t := a.schema0.Table(table)
	if t == nil {
		return false, fmt.Errorf("unknown table %s", table)
	}
	q := fmt.Sprintf("SELECT 1 FROM %s.%s WHERE %s %s %s LIMIT 1",
		quoteIdent(t.Schema), quoteIdent(t.Name), quoteIdent(lit.Column), op, sqlString(lit.Value))
	stmt, err := guard.Seal(q, e.guardOptions(a))
	if err != nil {
		return false, err
	}
	rows, err := a.exec.Trial(ctx, stmt, pg.Limits{Timeout: e.TrialTimeout, MaxRows: 1, MaxBytes: e.TrialMaxBytes})
	var se *pg.Error
	if errors.As(err, &se) && se.Code == pg.CodeInvalidTextRepresentation {
		return false, nil // not even a value of the column's type ('Shipped' for an enum of 'shipped')
	}
	if err != nil {
		return false, err
	}
	return rows != nil && len(rows.Values) > 0, nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

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
