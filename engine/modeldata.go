package engine

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/prompts"
)

// ModelData says what of a database's data may reach the model. The schema
// (names, types, comments, the semantic layer) always does; stored values
// and result rows only when the operator allows them. Whatever it says,
// literal correction and linking still use the value index locally: they
// need no model.
type ModelData string

// The levels of ModelData, each adding to the one before.
const (
	// ModelDataSchema: names, types, comments and the semantic layer; no
	// stored value, no literal taken from data, no result row.
	ModelDataSchema ModelData = "schema"
	// ModelDataValues adds stored values: value-index hits and the
	// catalog's most common values, shown as column examples.
	ModelDataValues ModelData = "values"
	// ModelDataRows adds result rows (the fixer's and the selectors'
	// samples, server errors quoting data, ask(all)'s prose answer): what
	// nlproxy did before the switch existed, and the default.
	ModelDataRows ModelData = "rows"
)

// DefaultModelData is the level when none is configured.
const DefaultModelData = ModelDataRows

// ParseModelData reads schema, values or rows ("" is the default).
func ParseModelData(s string) (ModelData, error) {
	switch ModelData(strings.ToLower(strings.TrimSpace(s))) {
	case "":
		return DefaultModelData, nil
	case ModelDataSchema:
		return ModelDataSchema, nil
	case ModelDataValues:
		return ModelDataValues, nil
	case ModelDataRows:
		return ModelDataRows, nil
	}
	return "", fmt.Errorf("model data %q: want schema, values or rows", s)
}

// Values reports whether stored values may reach the model.
func (d ModelData) Values() bool { return d == "" || d == ModelDataValues || d == ModelDataRows }

// Rows reports whether result rows may reach the model.
func (d ModelData) Rows() bool { return d == "" || d == ModelDataRows }

// modelView is what one ask may show the model, by the engine's ModelData;
// every prompt built from data goes through it.
type modelView struct{ data ModelData }

// sample is the head of a result for a prompt, or nil when rows may not
// reach the model.
func (v modelView) sample(rows *pg.Rows, n int) *prompts.Sample {
	if !v.data.Rows() {
		return nil
	}
	return SampleOf(rows, n)
}

// values are the value-index hits for a prompt, or none.
func (v modelView) values(in []prompts.ValueMatch) []prompts.ValueMatch {
	if !v.data.Values() {
		return nil
	}
	return in
}

// sql is a settled candidate's SQL as the model may see it: below rows,
// the literals literal correction took from the data are put back as the
// model wrote them (the correction is redone locally after any rewrite).
func (v modelView) sql(sql string, rewrites []memory.LiteralRewrite) string {
	if v.data.Values() {
		return sql
	}
	for i := len(rewrites) - 1; i >= 0; i-- {
		r := rewrites[i]
		sql = strings.ReplaceAll(sql, sqlString(r.To), sqlString(r.From))
	}
	return sql
}

// quoted finds the quoted parts of a server message: the server quotes
// both names ("orders") and data (invalid input syntax …: "abc").
var quoted = regexp.MustCompile(`"(?:[^"]|"")*"`)

// execError is a server error for a prompt. Below rows, what the server
// quoted that the SQL does not contain is data (a value a cast failed on, a
// key in a detail) and is withheld, and the detail is dropped; names the
// SQL wrote stay, so the fixer still learns which column is wrong.
func (v modelView) execError(se *pg.Error, sql string) *prompts.ExecError {
	out := &prompts.ExecError{Message: se.Message, SQLState: se.Code, Detail: se.Detail, Hint: se.Hint, Position: se.Position}
	if v.data.Rows() {
		return out
	}
	lower := strings.ToLower(sql)
	mask := func(s string) string {
		return quoted.ReplaceAllStringFunc(s, func(q string) string {
			inner := strings.ReplaceAll(q[1:len(q)-1], `""`, `"`)
			if inner != "" && strings.Contains(lower, strings.ToLower(inner)) {
				return q
			}
			return `"…"`
		})
	}
	out.Message, out.Hint, out.Detail = mask(out.Message), mask(out.Hint), ""
	return out
}

// examples are remembered pairs for a prompt. In schema mode a string
// literal of an example's SQL that its question does not spell is withheld
// (an accepted answer's literal may be a stored value literal correction
// chose).
func (v modelView) examples(in []prompts.Example) []prompts.Example {
	if v.data.Values() {
		return in
	}
	out := make([]prompts.Example, 0, len(in))
	for _, ex := range in {
		out = append(out, prompts.Example{Question: ex.Question, SQL: maskLiterals(ex.SQL, ex.Question)})
	}
	return out
}

// stringLiteral matches a standard-conforming SQL string constant.
var stringLiteral = regexp.MustCompile(`'(?:[^']|'')*'`)

// maskLiterals replaces the string constants of sql that keep does not
// contain by '?'.
func maskLiterals(sql, keep string) string {
	lower := strings.ToLower(keep)
	return stringLiteral.ReplaceAllStringFunc(sql, func(l string) string {
		inner := strings.ReplaceAll(l[1:len(l)-1], "''", "'")
		if strings.TrimSpace(inner) != "" && strings.Contains(lower, strings.ToLower(inner)) {
			return l
		}
		return "'?'"
	})
}

// renderOptions are the schema rendering options for an ask: retrieved
// values as column examples, or no value at all.
func (v modelView) renderOptions(values []valueindex.Match) catalog.RenderOptions {
	if !v.data.Values() {
		return catalog.RenderOptions{NoValues: true}
	}
	return catalog.RenderOptions{Examples: valueExamples(values)}
}

// ModelSQL is a result's SQL as the model may see it by ModelData (for
// stages outside the engine that show settled SQL to the model).
func (e *Engine) ModelSQL(res *Result) string {
	return modelView{e.ModelData}.sql(res.SQL(), res.Rewrites())
}
