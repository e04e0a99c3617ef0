// Package prompts renders the engine's LLM prompts from embedded templates
// (templates/*.tmpl, text/template). Each step has a typed render function
// and a params struct; JSON-producing steps also return the JSON schema the
// answer must follow (for Ollama's `format`), SQL-producing steps ask for the
// final query in a ```sql fence.
//
// Prompts are written for small local models: short instructions, an
// explicit output shape, and PostgreSQL-specific rules.
package prompts

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/template"
)

//go:embed templates/*.tmpl templates/*.schema.json
var files embed.FS

// tmpl is parsed once at init and only executed afterwards (execution is
// safe for concurrent use), so it is not mutable state.
var tmpl = template.Must(template.New("prompts").Funcs(template.FuncMap{
	"sqlstr":  sqlString,
	"oneline": oneLine,
	"trim":    strings.TrimSpace,
	"nodot":   func(s string) string { return strings.TrimRight(s, ". ") },
	"join":    strings.Join,
	"table":   renderSample,
	"cost":    costText,
	"inc":     func(i int) int { return i + 1 },
}).ParseFS(files, "templates/*.tmpl"))

// ErrMissing is wrapped by render functions when a required field is empty.
var ErrMissing = errors.New("prompts: required field missing")

// Prompt is a rendered prompt: a system message, a user message and, for
// steps that answer in JSON, the schema of that answer.
type Prompt struct {
	System string
	User   string
	// JSONSchema is the answer's JSON schema; nil for steps answering in SQL.
	JSONSchema json.RawMessage
	// Step is the template's name ("keywords", "candidate", ...).
	Step string
	// MaxTokens is the answer's output cap, declared by the step (see
	// OutputCap): what the answer needs with room to spare, so a model
	// that rambles is stopped long before the ask's time is gone.
	MaxTokens int
	// Stop sequences end generation on the server (see StopSequences).
	Stop []string
}

// StopSequences are the stop sequences each step's prompt declares, where
// they end a rambling model sooner than the output cap, on the server:
// a JSON step's answer is one object, so a blank line after it begins
// prose; a fenced SQL step's answer ends at its closed ```sql fence, so a
// fence alone on its line (the opening one carries "sql") or one followed
// by a blank line ends it, before prose or a second query. Ending there
// matters beyond the wait: the client stops using an answer once it is
// complete, but reads the rest of it, which the server writes to the cap
// unless a stop ends it. Servers remove a stop sequence from the answer:
// the model client puts back a fence the stop took (llm's restoreStop), and
// a JSON object loses only the blank line.
func StopSequences(step string) []string {
	switch step {
	case "keywords", "literal", "followup", "column_filter", "table_selection", "unittest_eval", "pairwise",
		"askall_context_switch", "askall_return_type":
		return []string{"\n\n"}
	case "candidate", "subsql", "fixer":
		return []string{"\n```\n", "```\n\n"}
	}
	return nil
}

// OutputCap is the output cap, in tokens, each step's prompt declares: a
// few tens for keywords and choices, a few hundred for a direct SQL answer
// or a JSON plan, more for the chain-of-thought generators and the fixer,
// whose reasoning comes before the query.
func OutputCap(step string) int {
	switch step {
	case "keywords", "literal":
		return 64
	case "column_filter", "table_selection", "unittest_eval", "askall_context_switch", "askall_return_type", "followup":
		return 192
	case "schema_selection", "decompose", "pairwise", "workload_example", "optimize_instruction", "direct":
		return 320
	case "unittests", "askall_plan":
		return 512
	case "subsql", "fixer", "synthetic", "askall_answer":
		return 768
	case "candidate", "optimize_rewrite":
		return 1024
	}
	return 512
}

// OutputSteps lists the steps OutputCap knows, for the option that
// overrides their caps.
func OutputSteps() []string {
	return []string{"askall_answer", "askall_context_switch", "askall_plan", "askall_return_type", "candidate",
		"column_filter", "decompose", "direct", "fixer", "followup", "keywords", "literal", "optimize_instruction",
		"optimize_rewrite", "pairwise", "schema_selection", "subsql", "synthetic", "table_selection",
		"unittest_eval", "unittests", "workload_example"}
}

// EstimateTokens is a rough token count (4 bytes per token) used for
// budgeting num_ctx and schema trimming; real tokenizers vary by model.
func EstimateTokens(s string) int { return (len(s) + 3) / 4 }

// Tokens estimates the prompt's size in tokens (system + user).
func (p Prompt) Tokens() int { return EstimateTokens(p.System) + EstimateTokens(p.User) }

// ValueMatch is a stored value found for a word of the question
// (rendered as "customers.city contains 'Los Angeles'").
type ValueMatch struct {
	Table  string
	Column string
	Value  string
}

// Description is a catalog description or glossary entry relevant to the
// question. Name is what it describes ("orders.status", "churn"); it may be
// empty.
type Description struct {
	Name string
	Text string
}

// Example is a remembered question and the SQL that answered it (few-shot).
type Example struct {
	Question string
	SQL      string
}

// KeywordsParams feeds the keyword/entity extraction step.
type KeywordsParams struct {
	Question string // required
	Hint     string
}

// KeywordsResult is the answer of the keywords step.
type KeywordsResult struct {
	Keywords []string `json:"keywords"`
	Entities []string `json:"entities"`
}

// Keywords renders the keyword/entity extraction prompt (JSON answer:
// KeywordsResult).
func Keywords(p KeywordsParams) (Prompt, error) {
	if err := required("Question", p.Question); err != nil {
		return Prompt{}, err
	}
	return render("keywords", p, "keywords.schema.json")
}

// SchemaSelectionParams feeds the schema selection step.
type SchemaSelectionParams struct {
	Question     string // required
	Hint         string
	Schema       string // required: rendered CREATE TABLE text (full or soft schema)
	Values       []ValueMatch
	Descriptions []Description
}

// SchemaSelectionResult is the answer of the schema selection step.
type SchemaSelectionResult struct {
	Reasoning string              `json:"reasoning"`
	Tables    []string            `json:"tables"`
	Columns   map[string][]string `json:"columns"`
}

// SchemaSelection renders the table/column selection prompt (JSON answer:
// SchemaSelectionResult).
func SchemaSelection(p SchemaSelectionParams) (Prompt, error) {
	if err := required("Question", p.Question, "Schema", p.Schema); err != nil {
		return Prompt{}, err
	}
	return render("schema_selection", p, "schema_selection.schema.json")
}

// ColumnFilterParams feeds the column filter step (CHESS: filter columns).
type ColumnFilterParams struct {
	Question string // required
	Hint     string
	// Columns are the candidate columns, each "table.column (type): notes".
	Columns      []string // required
	Values       []ValueMatch
	Descriptions []Description
}

// ColumnFilterResult is the answer of the column filter step.
type ColumnFilterResult struct {
	Columns []string `json:"columns"`
}

// ColumnFilter renders the column filter prompt (JSON answer:
// ColumnFilterResult).
func ColumnFilter(p ColumnFilterParams) (Prompt, error) {
	if err := required("Question", p.Question); err != nil {
		return Prompt{}, err
	}
	if len(p.Columns) == 0 {
		return Prompt{}, fmt.Errorf("%w: Columns", ErrMissing)
	}
	return render("column_filter", p, "column_filter.schema.json")
}

// TableSelectionParams feeds the table selection step (CHESS: select
// tables), shown the schema cut to the filtered columns.
type TableSelectionParams struct {
	Question     string // required
	Hint         string
	Schema       string // required
	Values       []ValueMatch
	Descriptions []Description
}

// TableSelectionResult is the answer of the table selection step.
type TableSelectionResult struct {
	Reasoning string   `json:"reasoning"`
	Tables    []string `json:"tables"`
}

// TableSelection renders the table selection prompt (JSON answer:
// TableSelectionResult).
func TableSelection(p TableSelectionParams) (Prompt, error) {
	if err := required("Question", p.Question, "Schema", p.Schema); err != nil {
		return Prompt{}, err
	}
	return render("table_selection", p, "table_selection.schema.json")
}

// CandidateParams feeds divide-and-conquer candidate generation.
type CandidateParams struct {
	Question     string // required
	Hint         string
	Schema       string // required
	Values       []ValueMatch
	Descriptions []Description
	Examples     []Example
	// Queries are statements the database runs over these tables,
	// normalised (literals are $n parameters), with no question attached.
	Queries       []string
	ServerVersion string // e.g. "16"; optional
	// Method is the chain of thought asked for: MethodDivide (default) or
	// MethodPlan.
	Method string
}

// Candidate renders the divide-and-conquer chain-of-thought generation
// prompt; the answer ends with the query in a ```sql fence.
func Candidate(p CandidateParams) (Prompt, error) {
	if err := required("Question", p.Question, "Schema", p.Schema); err != nil {
		return Prompt{}, err
	}
	switch p.Method {
	case "":
		p.Method = MethodDivide
	case MethodDivide, MethodPlan:
	default:
		return Prompt{}, fmt.Errorf("prompts: unknown candidate method %q", p.Method)
	}
	return render("candidate", p, "")
}

// ExecError is a PostgreSQL error raised by a trial run.
type ExecError struct {
	Message  string // required
	SQLState string
	Detail   string
	Hint     string
	// Position is the 1-based character position in the SQL, 0 if unknown;
	// the prompt quotes the text around it.
	Position int
}

// Sample is the head of a result set, already formatted as text.
type Sample struct {
	Columns []string
	Rows    [][]string
}

// FixerParams feeds the fixer. At least one problem (GuardReason, Error,
// Empty, NullColumns) must be set.
type FixerParams struct {
	Question     string // required
	Hint         string
	Schema       string // required
	Values       []ValueMatch
	Descriptions []Description
	SQL          string // required: the query that failed

	GuardReason string     // the guard refused the query
	Error       *ExecError // execution failed
	Empty       bool       // it returned no rows
	NullColumns []string   // these columns were mostly NULL
	Sample      *Sample    // optional rows to show with NullColumns
}

// fixerView adds derived fields the template shows.
type fixerView struct {
	FixerParams
	Error *execView
}

type execView struct {
	ExecError
	Near string
	Tip  string
}

// Fixer renders the repair prompt; the answer ends with the corrected query
// in a ```sql fence.
func Fixer(p FixerParams) (Prompt, error) {
	if err := required("Question", p.Question, "Schema", p.Schema, "SQL", p.SQL); err != nil {
		return Prompt{}, err
	}
	if p.GuardReason == "" && p.Error == nil && !p.Empty && len(p.NullColumns) == 0 {
		return Prompt{}, fmt.Errorf("%w: fixer needs a problem (GuardReason, Error, Empty or NullColumns)", ErrMissing)
	}
	v := fixerView{FixerParams: p}
	if p.Error != nil {
		if err := required("Error.Message", p.Error.Message); err != nil {
			return Prompt{}, err
		}
		v.Error = &execView{ExecError: *p.Error, Near: near(p.SQL, p.Error.Position), Tip: errorTip(p.Error.SQLState)}
	}
	return render("fixer", v, "")
}

// LiteralParams feeds literal correction: a literal in the query matches no
// stored value of its column.
type LiteralParams struct {
	Question   string // required
	Table      string
	Column     string   // required
	Literal    string   // required: the value as the query has it
	Candidates []string // required: closest stored values, best first
	SQL        string   // optional context
}

// LiteralResult is the answer of the literal correction step.
type LiteralResult struct {
	Value string `json:"value"`
}

// LiteralCorrection renders the literal correction prompt (JSON answer:
// LiteralResult). The returned schema restricts "value" to the candidates
// and the original literal, so a constrained decoder cannot invent a value.
func LiteralCorrection(p LiteralParams) (Prompt, error) {
	if err := required("Question", p.Question, "Column", p.Column, "Literal", p.Literal); err != nil {
		return Prompt{}, err
	}
	if len(p.Candidates) == 0 {
		return Prompt{}, fmt.Errorf("%w: Candidates", ErrMissing)
	}
	pr, err := render("literal", p, "literal.schema.json")
	if err != nil {
		return Prompt{}, err
	}
	enum := append([]string{}, p.Candidates...)
	if !contains(enum, p.Literal) {
		enum = append(enum, p.Literal)
	}
	pr.JSONSchema, err = withEnum(pr.JSONSchema, "value", enum)
	return pr, err
}

func render(name string, data any, schemaFile string) (Prompt, error) {
	var sys, user bytes.Buffer
	if err := tmpl.ExecuteTemplate(&sys, name+".system", data); err != nil {
		return Prompt{}, fmt.Errorf("prompts: render %s system: %w", name, err)
	}
	if err := tmpl.ExecuteTemplate(&user, name+".user", data); err != nil {
		return Prompt{}, fmt.Errorf("prompts: render %s user: %w", name, err)
	}
	p := Prompt{System: strings.TrimSpace(sys.String()), User: strings.TrimSpace(user.String()), Step: name, MaxTokens: OutputCap(name), Stop: StopSequences(name)}
	if schemaFile != "" {
		b, err := files.ReadFile("templates/" + schemaFile)
		if err != nil {
			return Prompt{}, fmt.Errorf("prompts: schema %s: %w", schemaFile, err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, b); err != nil {
			return Prompt{}, fmt.Errorf("prompts: schema %s: %w", schemaFile, err)
		}
		p.JSONSchema = compact.Bytes()
	}
	return p, nil
}

// required takes name, value pairs and reports the first empty value.
func required(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if strings.TrimSpace(pairs[i+1]) == "" {
			return fmt.Errorf("%w: %s", ErrMissing, pairs[i])
		}
	}
	return nil
}

func withEnum(schema json.RawMessage, prop string, enum []string) (json.RawMessage, error) {
	var s map[string]any
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("prompts: schema: %w", err)
	}
	props, _ := s["properties"].(map[string]any)
	p, ok := props[prop].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("prompts: schema has no property %q", prop)
	}
	p["enum"] = enum
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("prompts: schema: %w", err)
	}
	return b, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
