package prompts

import (
	"encoding/json"
	"fmt"
)

// Prompts of questions across databases (engine/askall): the context
// switch, the retrieval plan, the return-type decision and the answer.

// ContextSwitchParams feeds the context switch: does the question need data?
type ContextSwitchParams struct {
	Question string // required
	Glossary []Description
}

// ContextSwitchResult is the context switch's answer.
type ContextSwitchResult struct {
	NeedsData bool   `json:"needs_data"`
	Answer    string `json:"answer"`
}

// ContextSwitch renders the context switch prompt (JSON answer:
// ContextSwitchResult).
func ContextSwitch(p ContextSwitchParams) (Prompt, error) {
	if err := required("Question", p.Question); err != nil {
		return Prompt{}, err
	}
	return render("askall_context_switch", p, "askall_context_switch.schema.json")
}

// PlanDatabase is a candidate database as the planner sees it.
type PlanDatabase struct {
	Name   string // required
	Schema string // required: compact list of the tables the asker may read
}

// PlanParams feeds the retrieval plan.
type PlanParams struct {
	Question  string // required
	Databases []PlanDatabase
	MaxSteps  int
}

// PlanStep is one goal for one database.
type PlanStep struct {
	Database string `json:"database"`
	Goal     string `json:"goal"`
}

// PlanResult is the retrieval plan.
type PlanResult struct {
	Steps   []PlanStep `json:"steps"`
	Combine string     `json:"combine"`
}

// Plan renders the retrieval plan prompt (JSON answer: PlanResult). The
// schema restricts database names to the candidates.
func Plan(p PlanParams) (Prompt, error) {
	if err := required("Question", p.Question); err != nil {
		return Prompt{}, err
	}
	if len(p.Databases) == 0 {
		return Prompt{}, fmt.Errorf("%w: Databases", ErrMissing)
	}
	names := make([]string, 0, len(p.Databases))
	for _, d := range p.Databases {
		if err := required("Database.Name", d.Name, "Database.Schema", d.Schema); err != nil {
			return Prompt{}, err
		}
		names = append(names, d.Name)
	}
	if p.MaxSteps <= 0 {
		p.MaxSteps = 4
	}
	pr, err := render("askall_plan", p, "askall_plan.schema.json")
	if err != nil {
		return Prompt{}, err
	}
	pr.JSONSchema, err = withStepEnum(pr.JSONSchema, names)
	return pr, err
}

// ReturnTypeParams feeds the return-type decision.
type ReturnTypeParams struct {
	Question string // required
	Database string
	SQL      string // required
}

// ReturnTypeResult says whether the SQL's rows are the answer.
type ReturnTypeResult struct {
	Answers bool `json:"answers"`
}

// ReturnType renders the return-type decision prompt (JSON answer:
// ReturnTypeResult).
func ReturnType(p ReturnTypeParams) (Prompt, error) {
	if err := required("Question", p.Question, "SQL", p.SQL); err != nil {
		return Prompt{}, err
	}
	return render("askall_return_type", p, "askall_return_type.schema.json")
}

// AnswerStep is one step's outcome as the answer prompt shows it: a
// result, or the problem that left it unanswered.
type AnswerStep struct {
	N        int
	Database string
	Goal     string
	SQL      string
	Result   *Sample
	Problem  string
}

// AnswerParams feeds the answer generation.
type AnswerParams struct {
	Question string // required
	Steps    []AnswerStep
	// Computed are figures the code computed from the results (differences,
	// comparisons): the model is told to use them rather than compute.
	Computed []string
}

// AnswerResult is the prose answer.
type AnswerResult struct {
	Answer string `json:"answer"`
}

// Answer renders the answer prompt (JSON answer: AnswerResult).
func Answer(p AnswerParams) (Prompt, error) {
	if err := required("Question", p.Question); err != nil {
		return Prompt{}, err
	}
	if len(p.Steps) == 0 {
		return Prompt{}, fmt.Errorf("%w: Steps", ErrMissing)
	}
	return render("askall_answer", p, "askall_answer.schema.json")
}

// withStepEnum restricts steps[].database to names.
func withStepEnum(schema []byte, names []string) ([]byte, error) {
	var s map[string]any
	if err := jsonUnmarshal(schema, &s); err != nil {
		return nil, err
	}
	props, _ := s["properties"].(map[string]any)
	steps, _ := props["steps"].(map[string]any)
	items, _ := steps["items"].(map[string]any)
	ip, _ := items["properties"].(map[string]any)
	db, ok := ip["database"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("prompts: plan schema has no steps[].database")
	}
	db["enum"] = names
	return jsonMarshal(s)
}

func jsonUnmarshal(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("prompts: schema: %w", err)
	}
	return nil
}

func jsonMarshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("prompts: schema: %w", err)
	}
	return b, nil
}
