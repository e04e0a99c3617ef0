package prompts

import "fmt"

// Policy is one of the optimizer's abstract rewrite policies (LaPuda):
// a name the model picks and a sentence or two saying what it covers.
type Policy struct {
	Name string
	Text string
}

// DefaultPolicies are the optimizer's policies: LaPuda's three (operator
// movement, merge, removal) and PostgreSQL-specific ones for patterns its
// planner does not rewrite by itself.
func DefaultPolicies() []Policy {
	return []Policy{
		{"movement", "Operator movement: do cheap, selective work early and expensive work late. Filter rows before joining, grouping or sorting them; push conditions into subqueries and CTEs; evaluate costly expressions and function calls only on the rows that survive the cheap conditions."},
		{"merge", "Operator merge: combine work over the same relation. Several scans or scalar subqueries of one table become one pass (one aggregate with FILTER (WHERE ...) per measure); a correlated subquery evaluated once per row becomes one join to a grouped subquery."},
		{"removal", "Operator removal: drop work that cannot change the result. A join to a table nothing is read from (when a foreign key and a unique key guarantee one match), a DISTINCT on rows that are already unique, an ORDER BY inside a subquery, a repeated condition."},
		{"sargable", "Index-friendly conditions: compare the bare column with a constant or a range instead of wrapping the column in a function, cast or arithmetic, e.g. date_trunc('month', t.created_at) = DATE '2024-03-01' becomes t.created_at >= DATE '2024-03-01' AND t.created_at < DATE '2024-04-01', so an index on the column can be used."},
		{"semijoin", "Semi- and anti-joins: test existence with EXISTS or NOT EXISTS instead of IN or NOT IN over a large subquery, or instead of DISTINCT over a join that only checks for a match. NOT IN differs from NOT EXISTS when the subquery can return NULL: keep the result identical."},
		{"or-split", "OR across tables: a condition like a.x = 1 OR b.y = 2 over two joined tables cannot use an index on either; split it into a UNION of one query per branch (UNION removes duplicates; make sure the rows stay the same)."},
	}
}

// OptimizeStep is a valid rewrite from an earlier step with its planner
// cost, for the history the optimizer shows the model.
type OptimizeStep struct {
	Policy string
	SQL    string
	Cost   float64
}

// OptimizeParams feeds both optimizer steps: the instruction step (which
// policy to apply and how) and the rewrite step (the rewritten query).
type OptimizeParams struct {
	Original     string  // required: the query as the user wrote it
	OriginalCost float64 // planner total cost of the original
	Current      string  // required: the latest valid query, the starting point
	CurrentCost  float64
	Plan         string // the current query's plan, summarized
	Schema       string // tables the query reads: columns, indexes, row estimates
	Question     string // what the query answers, when known
	History      []OptimizeStep
	// Feedback says how the last proposal fared ("" before the first).
	Feedback string
	Policies []Policy // default DefaultPolicies()

	// Rewrite step only: the instruction the model gave itself.
	Policy      string
	Instruction string
}

// InstructionResult is the answer of the instruction step.
type InstructionResult struct {
	Policy      string `json:"policy"`
	Instruction string `json:"instruction"`
}

// OptimizeInstruction renders the instruction step (JSON answer:
// InstructionResult); the policy is restricted to the policies' names.
func OptimizeInstruction(p OptimizeParams) (Prompt, error) {
	if err := required("Original", p.Original, "Current", p.Current); err != nil {
		return Prompt{}, err
	}
	if len(p.Policies) == 0 {
		p.Policies = DefaultPolicies()
	}
	pr, err := render("optimize_instruction", p, "optimize_instruction.schema.json")
	if err != nil {
		return Prompt{}, err
	}
	names := make([]string, len(p.Policies))
	for i, pol := range p.Policies {
		names[i] = pol.Name
	}
	pr.JSONSchema, err = withEnum(pr.JSONSchema, "policy", names)
	return pr, err
}

// OptimizeRewrite renders the rewrite step; the answer ends with the
// rewritten query in a ```sql fence.
func OptimizeRewrite(p OptimizeParams) (Prompt, error) {
	if err := required("Original", p.Original, "Current", p.Current, "Instruction", p.Instruction); err != nil {
		return Prompt{}, err
	}
	if len(p.Policies) == 0 {
		p.Policies = DefaultPolicies()
	}
	return render("optimize_rewrite", p, "")
}

// costText formats a planner cost the way EXPLAIN prints it.
func costText(c float64) string { return fmt.Sprintf("%.2f", c) }
