package prompts

import "fmt"

// SQL generation methods (CHASE-SQL's chain-of-thought variants).
const (
	// MethodDivide: divide and conquer — sub-questions, pseudo-SQL for each,
	// then one query (the default).
	MethodDivide = "divide"
	// MethodPlan: query-plan reasoning — the steps a database executor takes
	// (which tables to scan, how to join, filter, group, order), then SQL.
	MethodPlan = "plan"
)

// SyntheticParams asks for example question→SQL pairs over the schema
// (CHASE-SQL's online synthetic examples).
type SyntheticParams struct {
	Question string // required: the user's question, whose features to cover
	Schema   string // required
	Count    int    // how many pairs; default 4
}

// SyntheticResult is the model's answer to Synthetic.
type SyntheticResult struct {
	Examples []struct {
		Question string `json:"question"`
		SQL      string `json:"sql"`
	} `json:"examples"`
}

// Synthetic renders the synthetic-example prompt.
func Synthetic(p SyntheticParams) (Prompt, error) {
	if err := required("Question", p.Question, "Schema", p.Schema); err != nil {
		return Prompt{}, err
	}
	if p.Count <= 0 {
		p.Count = 4
	}
	return render("synthetic", p, "synthetic.schema.json")
}

// WorkloadExampleParams asks to turn a normalised workload query into a
// question→SQL pair (CHASE-SQL's online synthetic examples, grounded in a
// query the database runs rather than invented).
type WorkloadExampleParams struct {
	Schema string // required
	Query  string // required: the normalised query, $n for its values
	// Values are stored values of the columns the query filters, for its
	// parameters.
	Values []ValueMatch
}

// WorkloadExampleResult is the model's answer to WorkloadExample.
type WorkloadExampleResult struct {
	Question string `json:"question"`
	SQL      string `json:"sql"`
}

// WorkloadExample renders the workload-example prompt.
func WorkloadExample(p WorkloadExampleParams) (Prompt, error) {
	if err := required("Schema", p.Schema, "Query", p.Query); err != nil {
		return Prompt{}, err
	}
	return render("workload_example", p, "workload_example.schema.json")
}

// DecomposeParams asks to split a question into targets and conditions
// (MAG-SQL).
type DecomposeParams struct {
	Question     string // required
	Schema       string // required
	Descriptions []Description
}

// DecomposeResult is the model's answer to Decompose.
type DecomposeResult struct {
	Targets    []string `json:"targets"`
	Conditions []string `json:"conditions"`
}

// Decompose renders the targets–conditions decomposition prompt.
func Decompose(p DecomposeParams) (Prompt, error) {
	if err := required("Question", p.Question, "Schema", p.Schema); err != nil {
		return Prompt{}, err
	}
	return render("decompose", p, "decompose.schema.json")
}

// SubSQLParams asks for the SQL of one step of a decomposition: the targets
// under the conditions so far, building on the previous step's SQL.
type SubSQLParams struct {
	Question       string // required
	Schema         string // required
	Values         []ValueMatch
	Descriptions   []Description
	Targets        []string
	Conditions     []string // the conditions this step covers
	PreviousSQL    string
	PreviousResult *Sample
	Final          bool // the last step: the answer to the whole question
}

// SubSQL renders one decomposition step.
func SubSQL(p SubSQLParams) (Prompt, error) {
	if err := required("Question", p.Question, "Schema", p.Schema); err != nil {
		return Prompt{}, err
	}
	return render("subsql", p, "")
}

// PairwiseParams asks which of two queries answers the question (CHASE-SQL's
// selection agent).
type PairwiseParams struct {
	Question     string // required
	Schema       string // required
	Descriptions []Description
	A, B         string // required: the two queries
	ResultA      *Sample
	ResultB      *Sample
}

// PairwiseResult is the model's verdict: "A" or "B".
type PairwiseResult struct {
	Reasoning string `json:"reasoning"`
	Better    string `json:"better"`
}

// Pairwise renders the pairwise comparison prompt.
func Pairwise(p PairwiseParams) (Prompt, error) {
	if err := required("Question", p.Question, "Schema", p.Schema, "A", p.A, "B", p.B); err != nil {
		return Prompt{}, err
	}
	return render("pairwise", p, "pairwise.schema.json")
}

// CandidateView is one candidate as a selector prompt shows it.
type CandidateView struct {
	SQL    string
	Result *Sample
}

// UnitTestsParams asks for unit tests that tell candidates apart (CHESS).
type UnitTestsParams struct {
	Question   string // required
	Schema     string // required
	Candidates []CandidateView
	Count      int // default 3
}

// UnitTestsResult is the model's list of tests.
type UnitTestsResult struct {
	Tests []string `json:"tests"`
}

// UnitTests renders the unit-test generation prompt.
func UnitTests(p UnitTestsParams) (Prompt, error) {
	if err := required("Question", p.Question, "Schema", p.Schema); err != nil {
		return Prompt{}, err
	}
	if len(p.Candidates) < 2 {
		return Prompt{}, fmt.Errorf("%w: at least two Candidates", ErrMissing)
	}
	if p.Count <= 0 {
		p.Count = 3
	}
	return render("unittests", p, "unittests.schema.json")
}

// UnitTestEvalParams asks which candidates pass one unit test.
type UnitTestEvalParams struct {
	Question   string // required
	Schema     string // required
	Test       string // required
	Candidates []CandidateView
}

// UnitTestEvalResult lists the candidates (numbered from 1) that pass.
type UnitTestEvalResult struct {
	Reasoning string `json:"reasoning"`
	Passing   []int  `json:"passing"`
}

// UnitTestEval renders the judgement of one unit test on all candidates.
func UnitTestEval(p UnitTestEvalParams) (Prompt, error) {
	if err := required("Question", p.Question, "Schema", p.Schema, "Test", p.Test); err != nil {
		return Prompt{}, err
	}
	if len(p.Candidates) < 2 {
		return Prompt{}, fmt.Errorf("%w: at least two Candidates", ErrMissing)
	}
	return render("unittest_eval", p, "unittest_eval.schema.json")
}

// DirectParams feeds the direct generator: schema and question, no chain of
// thought, the answer a JSON object {"sql": …} (the schema constrains the
// decoder where the server can), for small or slow models.
type DirectParams struct {
	Question      string // required
	Schema        string // required
	Values        []ValueMatch
	Descriptions  []Description
	Examples      []Example
	ServerVersion string
}

// DirectResult is the direct generator's answer.
type DirectResult struct {
	SQL string `json:"sql"`
}

// Direct renders the direct generation prompt (JSON answer: DirectResult).
func Direct(p DirectParams) (Prompt, error) {
	if err := required("Question", p.Question, "Schema", p.Schema); err != nil {
		return Prompt{}, err
	}
	return render("direct", p, "direct.schema.json")
}
