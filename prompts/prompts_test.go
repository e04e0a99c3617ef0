package prompts

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/internal/golden"
)

func fixtureSchema(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "schema.sql"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const question = "What was the total revenue of paid orders per store in Los Angeles last month?"

var (
	sampleValues = []ValueMatch{
		{Table: "stores", Column: "city", Value: "Los Angeles"},
		{Table: "customers", Column: "city", Value: "Los Angeles"},
		{Table: "orders", Column: "status", Value: "paid"},
	}
	sampleDescriptions = []Description{
		{Name: "revenue", Text: "sum of quantity * unit_price over order_items;\nrefunded orders excluded"},
		{Name: "orders.store_id", Text: "NULL means the order was placed online"},
	}
)

const badSQL = "SELECT s.name, sum(oi.quantity * oi.price)\nFROM stores s\nJOIN orders o ON o.store_id = s.id\nJOIN order_items oi ON oi.order_id = o.id\nGROUP BY s.name"

// goldenCases renders every template with realistic parameters.
func goldenCases(t *testing.T) map[string]func() (Prompt, error) {
	schema := fixtureSchema(t)
	return map[string]func() (Prompt, error){
		"keywords": func() (Prompt, error) {
			return Keywords(KeywordsParams{Question: question, Hint: "last month = the previous calendar month"})
		},
		"schema_selection": func() (Prompt, error) {
			return SchemaSelection(SchemaSelectionParams{Question: question, Schema: schema, Values: sampleValues, Descriptions: sampleDescriptions})
		},
		"column_filter": func() (Prompt, error) {
			return ColumnFilter(ColumnFilterParams{Question: question, Values: sampleValues, Descriptions: sampleDescriptions, Columns: []string{
				"stores.id (integer)", "stores.city (text): examples 'Los Angeles', 'Chicago'", "orders.status (order_status)",
				"orders.total (numeric): order total in USD", "orders.ordered_at (timestamp with time zone)"}})
		},
		"table_selection": func() (Prompt, error) {
			return TableSelection(TableSelectionParams{Question: question, Schema: schema, Values: sampleValues, Descriptions: sampleDescriptions})
		},
		"direct": func() (Prompt, error) {
			return Direct(DirectParams{Question: question, Schema: schema, Values: sampleValues, ServerVersion: "16",
				Descriptions: append([]Description{{Name: "restaurant", Text: " "}}, sampleDescriptions...)})
		},
		"candidate": func() (Prompt, error) {
			return Candidate(CandidateParams{
				Question: question, Hint: "last month = the previous calendar month", Schema: schema,
				Values: sampleValues, Descriptions: sampleDescriptions, ServerVersion: "16",
				Examples: []Example{{Question: "How many gold customers are there?", SQL: "SELECT count(*)\nFROM customers c\nWHERE c.\"Loyalty Tier\" = 'gold'"}},
				Queries:  []string{"SELECT s.name, sum(o.total)\nFROM orders o JOIN stores s ON s.id = o.store_id\nWHERE o.status = $1 GROUP BY s.name"},
			})
		},
		"fixer_error": func() (Prompt, error) {
			return Fixer(FixerParams{
				Question: question, Schema: schema, Values: sampleValues,
				SQL:   badSQL,
				Error: &ExecError{Message: `column oi.price does not exist`, SQLState: "42703", Hint: `Perhaps you meant to reference the column "oi.unit_price".`, Position: strings.Index(badSQL, "oi.price") + 1},
			})
		},
		"fixer_empty": func() (Prompt, error) {
			return Fixer(FixerParams{
				Question: question, Schema: schema, Values: sampleValues,
				SQL:   "SELECT s.name FROM stores s WHERE s.city = 'LA'",
				Empty: true,
			})
		},
		"fixer_nulls_guard": func() (Prompt, error) {
			return Fixer(FixerParams{
				Question: question, Schema: schema,
				SQL:         "SELECT s.name, o.id FROM stores s LEFT JOIN orders o ON o.id = s.id FOR UPDATE",
				GuardReason: "a locking clause (FOR UPDATE/SHARE) is not allowed.",
				NullColumns: []string{"id"},
				Sample: &Sample{Columns: []string{"name", "id"}, Rows: [][]string{
					{"Downtown LA", "NULL"}, {"Brooklyn Heights", "NULL"}, {"Chicago Loop", "NULL"},
					{"a", "NULL"}, {"b", "NULL"}, {"this row is not shown", "NULL"},
				}},
			})
		},
		"optimize_instruction": func() (Prompt, error) {
			return OptimizeInstruction(optimizeParams())
		},
		"optimize_rewrite": func() (Prompt, error) {
			p := optimizeParams()
			p.Policy, p.Instruction = "merge", "Replace the correlated count(*) subquery with a LEFT JOIN to order counts grouped by customer."
			return OptimizeRewrite(p)
		},
		"optimize_first": func() (Prompt, error) {
			return OptimizeInstruction(OptimizeParams{Original: optOriginal, OriginalCost: 91234.5, Current: optOriginal, CurrentCost: 91234.5})
		},
		"candidate_plan": func() (Prompt, error) {
			return Candidate(CandidateParams{Question: question, Schema: schema, Values: sampleValues, Method: MethodPlan})
		},
		"synthetic": func() (Prompt, error) {
			return Synthetic(SyntheticParams{Question: question, Schema: schema, Count: 3})
		},
		"workload_example": func() (Prompt, error) {
			return WorkloadExample(WorkloadExampleParams{Schema: schema,
				Query:  "SELECT s.name, sum(o.total)\nFROM orders o JOIN stores s ON s.id = o.store_id\nWHERE s.city = $1 AND o.status = $2 GROUP BY s.name",
				Values: []ValueMatch{{Table: "stores", Column: "city", Value: "Los Angeles"}, {Table: "stores", Column: "city", Value: "O'Fallon"}}})
		},
		"decompose": func() (Prompt, error) {
			return Decompose(DecomposeParams{Question: question, Schema: schema, Descriptions: sampleDescriptions})
		},
		"subsql": func() (Prompt, error) {
			return SubSQL(SubSQLParams{
				Question: question, Schema: schema, Values: sampleValues,
				Targets:        []string{"each store's name", "the total revenue of its paid orders"},
				Conditions:     []string{"stores in Los Angeles", "orders with status 'paid'"},
				PreviousSQL:    "SELECT s.name FROM stores s WHERE s.city = 'Los Angeles'",
				PreviousResult: &Sample{Columns: []string{"name"}, Rows: [][]string{{"Downtown LA"}}},
			})
		},
		"pairwise": func() (Prompt, error) {
			return Pairwise(PairwiseParams{
				Question: question, Schema: schema, Descriptions: sampleDescriptions,
				A: badSQL, B: "SELECT s.name FROM stores s",
				ResultA: &Sample{Columns: []string{"name", "sum"}, Rows: [][]string{{"Downtown LA", "120.50"}}},
			})
		},
		"unittests": func() (Prompt, error) {
			return UnitTests(UnitTestsParams{Question: question, Schema: schema, Count: 2, Candidates: []CandidateView{
				{SQL: badSQL, Result: &Sample{Columns: []string{"name", "sum"}, Rows: [][]string{{"Downtown LA", "120.50"}}}},
				{SQL: "SELECT s.name FROM stores s"},
			}})
		},
		"unittest_eval": func() (Prompt, error) {
			return UnitTestEval(UnitTestEvalParams{Question: question, Schema: schema, Test: "returns one row per store in Los Angeles", Candidates: []CandidateView{
				{SQL: badSQL}, {SQL: "SELECT s.name FROM stores s", Result: &Sample{Columns: []string{"name"}, Rows: [][]string{{"Downtown LA"}}}},
			}})
		},
		"literal": func() (Prompt, error) {
			return LiteralCorrection(LiteralParams{
				Question: question, Table: "stores", Column: "city", Literal: "LA",
				Candidates: []string{"Los Angeles", "Las Vegas", "La Jolla"},
				SQL:        "SELECT s.name FROM stores s WHERE s.city = 'LA'",
			})
		},
	}
}

func format(p Prompt) string {
	var b strings.Builder
	b.WriteString("===== system =====\n")
	b.WriteString(p.System)
	b.WriteString("\n===== user =====\n")
	b.WriteString(p.User)
	b.WriteString("\n")
	fmt.Fprintf(&b, "===== output cap: %d tokens =====\n", p.MaxTokens)
	if len(p.Stop) > 0 {
		fmt.Fprintf(&b, "===== stop: %q =====\n", p.Stop)
	}
	if p.JSONSchema != nil {
		b.WriteString("===== json schema =====\n")
		b.Write(p.JSONSchema)
		b.WriteString("\n")
	}
	return b.String()
}

func TestGolden(t *testing.T) {
	for name, fn := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			p, err := fn()
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, name, format(p))
		})
	}
}

// TestContracts checks each prompt's output contract: JSON steps carry a
// valid schema whose properties are exactly the result struct's fields and
// show a matching example; SQL steps ask for a ```sql fence.
func TestContracts(t *testing.T) {
	cases := goldenCases(t)
	jsonSteps := map[string]any{
		"keywords":             KeywordsResult{},
		"schema_selection":     SchemaSelectionResult{},
		"column_filter":        ColumnFilterResult{},
		"table_selection":      TableSelectionResult{},
		"literal":              LiteralResult{},
		"synthetic":            SyntheticResult{},
		"workload_example":     WorkloadExampleResult{},
		"decompose":            DecomposeResult{},
		"pairwise":             PairwiseResult{},
		"unittests":            UnitTestsResult{},
		"unittest_eval":        UnitTestEvalResult{},
		"optimize_instruction": InstructionResult{},
		"optimize_first":       InstructionResult{},
		"direct":               DirectResult{},
	}
	for name, fn := range cases {
		p, err := fn()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		result, isJSON := jsonSteps[name]
		if !isJSON {
			if p.JSONSchema != nil {
				t.Errorf("%s: SQL step has a JSON schema", name)
			}
			if !strings.Contains(p.User, "```sql") {
				t.Errorf("%s: SQL step does not ask for a ```sql fence", name)
			}
			if !strings.Contains(p.System, "NULLS LAST") || !strings.Contains(p.System, "ILIKE") {
				t.Errorf("%s: PostgreSQL rules missing from system prompt", name)
			}
			continue
		}
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(p.JSONSchema, &schema); err != nil {
			t.Fatalf("%s: schema: %v", name, err)
		}
		var props []string
		for k := range schema.Properties {
			props = append(props, k)
		}
		sort.Strings(props)
		req := append([]string(nil), schema.Required...)
		sort.Strings(req)
		tags := jsonTags(result)
		if schema.Type != "object" || !reflect.DeepEqual(props, tags) || !reflect.DeepEqual(req, tags) {
			t.Errorf("%s: schema properties %v required %v, want %v", name, props, req, tags)
		}
		// The example object in the prompt must decode into the result type
		// with every field present.
		i := strings.LastIndex(p.User, "\n{")
		if i < 0 {
			t.Fatalf("%s: no JSON example in prompt", name)
		}
		var ex map[string]json.RawMessage
		if err := json.Unmarshal([]byte(strings.TrimSpace(p.User[i:])), &ex); err != nil {
			t.Fatalf("%s: example is not JSON: %v", name, err)
		}
		var exKeys []string
		for k := range ex {
			exKeys = append(exKeys, k)
		}
		sort.Strings(exKeys)
		if !reflect.DeepEqual(exKeys, tags) {
			t.Errorf("%s: example keys %v, want %v", name, exKeys, tags)
		}
	}
}

func jsonTags(v any) []string {
	var out []string
	rt := reflect.TypeOf(v)
	for i := 0; i < rt.NumField(); i++ {
		out = append(out, strings.Split(rt.Field(i).Tag.Get("json"), ",")[0])
	}
	sort.Strings(out)
	return out
}

func TestLiteralEnum(t *testing.T) {
	p, err := LiteralCorrection(LiteralParams{Question: "q", Column: "city", Literal: "LA", Candidates: []string{"Los Angeles", "LA ", "Lagos"}})
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties struct {
			Value struct {
				Enum []string `json:"enum"`
			} `json:"value"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(p.JSONSchema, &s); err != nil {
		t.Fatal(err)
	}
	if want := []string{"Los Angeles", "LA ", "Lagos", "LA"}; !reflect.DeepEqual(s.Properties.Value.Enum, want) {
		t.Errorf("enum = %q, want %q", s.Properties.Value.Enum, want)
	}
}

// TestZeroOptional renders every template with only the required fields.
func TestZeroOptional(t *testing.T) {
	tests := map[string]func() (Prompt, error){
		"keywords": func() (Prompt, error) { return Keywords(KeywordsParams{Question: "q?"}) },
		"schema_selection": func() (Prompt, error) {
			return SchemaSelection(SchemaSelectionParams{Question: "q?", Schema: "CREATE TABLE t (a int);"})
		},
		"column_filter": func() (Prompt, error) {
			return ColumnFilter(ColumnFilterParams{Question: "q?", Columns: []string{"t.a (integer)"}})
		},
		"table_selection": func() (Prompt, error) {
			return TableSelection(TableSelectionParams{Question: "q?", Schema: "CREATE TABLE t (a int);"})
		},
		"direct": func() (Prompt, error) {
			return Direct(DirectParams{Question: "q?", Schema: "CREATE TABLE t (a int);"})
		},
		"candidate": func() (Prompt, error) {
			return Candidate(CandidateParams{Question: "q?", Schema: "CREATE TABLE t (a int);"})
		},
		"fixer": func() (Prompt, error) {
			return Fixer(FixerParams{Question: "q?", Schema: "CREATE TABLE t (a int);", SQL: "SELECT 1", Empty: true})
		},
		"fixer_error": func() (Prompt, error) {
			return Fixer(FixerParams{Question: "q?", Schema: "CREATE TABLE t (a int);", SQL: "SELECT 1", Error: &ExecError{Message: "boom"}})
		},
		"literal": func() (Prompt, error) {
			return LiteralCorrection(LiteralParams{Question: "q?", Column: "c", Literal: "x", Candidates: []string{"y"}})
		},
	}
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := fn()
			if err != nil {
				t.Fatal(err)
			}
			all := p.System + "\n" + p.User
			for _, bad := range []string{"<no value>", "Hint:", "Notes about the data", "Values stored", "answered before", "SQLSTATE", "Detail:", "near:", "\n\n\n"} {
				if strings.Contains(all, bad) {
					t.Errorf("rendered %q with empty optional fields:\n%s", bad, all)
				}
			}
			if strings.Contains(p.System, "PostgreSQL ") && strings.Contains(p.System, "PostgreSQL .") {
				t.Errorf("empty server version left a gap: %s", p.System)
			}
		})
	}
}

func TestRequired(t *testing.T) {
	tests := map[string]func() (Prompt, error){
		"keywords question":  func() (Prompt, error) { return Keywords(KeywordsParams{Hint: "h"}) },
		"selection schema":   func() (Prompt, error) { return SchemaSelection(SchemaSelectionParams{Question: "q"}) },
		"filter columns":     func() (Prompt, error) { return ColumnFilter(ColumnFilterParams{Question: "q"}) },
		"filter question":    func() (Prompt, error) { return ColumnFilter(ColumnFilterParams{Columns: []string{"t.c"}}) },
		"tables schema":      func() (Prompt, error) { return TableSelection(TableSelectionParams{Question: "q"}) },
		"candidate question": func() (Prompt, error) { return Candidate(CandidateParams{Schema: "s"}) },
		"fixer no problem":   func() (Prompt, error) { return Fixer(FixerParams{Question: "q", Schema: "s", SQL: "SELECT 1"}) },
		"fixer no sql":       func() (Prompt, error) { return Fixer(FixerParams{Question: "q", Schema: "s", Empty: true}) },
		"fixer empty error": func() (Prompt, error) {
			return Fixer(FixerParams{Question: "q", Schema: "s", SQL: "x", Error: &ExecError{}})
		},
		"literal candidates": func() (Prompt, error) {
			return LiteralCorrection(LiteralParams{Question: "q", Column: "c", Literal: "x"})
		},
		"literal blank": func() (Prompt, error) {
			return LiteralCorrection(LiteralParams{Question: "q", Column: " ", Literal: "x", Candidates: []string{"y"}})
		},
	}
	for name, fn := range tests {
		if _, err := fn(); !errors.Is(err, ErrMissing) {
			t.Errorf("%s: err = %v, want ErrMissing", name, err)
		}
	}
}

// TestTokenBudget bounds each template's own overhead: the prompt minus the
// schema must stay small so the schema gets the context window, and the
// estimate must grow with the schema, not faster.
func TestTokenBudget(t *testing.T) {
	const maxOverhead = 900 // tokens (len/4) of instructions, values, question
	schema := fixtureSchema(t)
	big := strings.Repeat(schema+"\n", 10)
	for name, fn := range goldenCases(t) {
		p, err := fn()
		if err != nil {
			t.Fatal(err)
		}
		overhead := p.Tokens()
		if strings.Contains(p.User, "<schema>") {
			overhead -= EstimateTokens(schema)
		}
		t.Logf("%s: %d tokens, overhead %d", name, p.Tokens(), overhead)
		if overhead > maxOverhead {
			t.Errorf("%s: overhead %d tokens > %d", name, overhead, maxOverhead)
		}
	}
	small, err := Candidate(CandidateParams{Question: question, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	large, err := Candidate(CandidateParams{Question: question, Schema: big})
	if err != nil {
		t.Fatal(err)
	}
	if grow, want := large.Tokens()-small.Tokens(), EstimateTokens(big)-EstimateTokens(schema); grow > want+2 {
		t.Errorf("prompt grew by %d tokens for %d tokens of schema", grow, want)
	}
}

func TestFormatHelpers(t *testing.T) {
	if got := sqlString("O'Neil"); got != "'O''Neil'" {
		t.Errorf("sqlString = %s", got)
	}
	if got := near("SELECT é, price FROM t", 11); got != "`price FROM t`" {
		t.Errorf("near = %s", got)
	}
	if near("SELECT 1", 0) != "" || near("SELECT 1", 99) != "" {
		t.Error("near with bad position should be empty")
	}
	s := renderSample(&Sample{Columns: []string{"a"}, Rows: [][]string{{strings.Repeat("x", 100)}}})
	if !strings.Contains(s, "…") || len([]rune(s)) > 60 {
		t.Errorf("cell not truncated: %q", s)
	}
}

const optOriginal = "SELECT c.name, (SELECT count(*) FROM orders o WHERE o.customer_id = c.customer_id) AS n\nFROM customers c\nWHERE c.segment = 'SMB'"

func optimizeParams() OptimizeParams {
	current := "SELECT c.name, count(o.order_id) AS n FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id WHERE c.segment = 'SMB' GROUP BY c.customer_id, c.name"
	return OptimizeParams{
		Original: optOriginal, OriginalCost: 91234.5,
		Current: current, CurrentCost: 1830.25,
		Plan:     "HashAggregate (cost 1830.25, rows 120)\n  Hash Right Join (cost 1700.00, rows 3000)",
		Schema:   "CREATE TABLE customers (customer_id integer PRIMARY KEY, name text NOT NULL, segment text); -- ~600 rows",
		Question: "orders per SMB customer",
		History:  []OptimizeStep{{Policy: "merge", SQL: current, Cost: 1830.25}},
		Feedback: "the proposal returned different rows than the original (2 of 120 rows differ); it was discarded.",
	}
}

func TestOptimizeRefuses(t *testing.T) {
	if _, err := OptimizeInstruction(OptimizeParams{Current: "SELECT 1"}); !errors.Is(err, ErrMissing) {
		t.Errorf("no original: %v", err)
	}
	if _, err := OptimizeRewrite(OptimizeParams{Original: "SELECT 1", Current: "SELECT 1"}); !errors.Is(err, ErrMissing) {
		t.Errorf("no instruction: %v", err)
	}
	p, err := OptimizeInstruction(optimizeParams())
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]struct {
			Enum []string `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(p.JSONSchema, &schema); err != nil {
		t.Fatal(err)
	}
	if got := schema.Properties["policy"].Enum; len(got) != len(DefaultPolicies()) || got[0] != "movement" {
		t.Errorf("policy enum = %v", got)
	}
}
