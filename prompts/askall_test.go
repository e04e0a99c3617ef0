package prompts

import (
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/internal/golden"
)

const multiQuestion = "Did the EU shop sell more in March 2024 than the US shop?"

func askallCases() map[string]struct {
	render func() (Prompt, error)
	result any
} {
	type c = struct {
		render func() (Prompt, error)
		result any
	}
	return map[string]c{
		"askall_context_switch": {func() (Prompt, error) {
			return ContextSwitch(ContextSwitchParams{Question: "What does ARR mean?", Glossary: []Description{
				{Name: "ARR", Text: "annual recurring revenue:\nsum of active subscriptions' yearly price"},
			}})
		}, ContextSwitchResult{}},
		"askall_plan": {func() (Prompt, error) {
			return Plan(PlanParams{Question: multiQuestion, MaxSteps: 3, Databases: []PlanDatabase{
				{Name: "shop_eu", Schema: "orders(id, placed_at, total_eur) -- orders of the EU shop\ncustomers(id, country)"},
				{Name: "shop_us", Schema: "orders(id, placed_at, total_usd)"},
			}})
		}, PlanResult{}},
		"askall_return_type": {func() (Prompt, error) {
			return ReturnType(ReturnTypeParams{Question: "How many orders did the EU shop get in March 2024?", Database: "shop_eu",
				SQL: "SELECT count(*) FROM orders WHERE placed_at >= DATE '2024-03-01' AND placed_at < DATE '2024-04-01'"})
		}, ReturnTypeResult{}},
		"askall_answer": {func() (Prompt, error) {
			return Answer(AnswerParams{Question: multiQuestion, Steps: []AnswerStep{
				{N: 1, Database: "shop_eu", Goal: "Total sales of the EU shop in March 2024?", SQL: "SELECT sum(total_eur) FROM orders WHERE …",
					Result: &Sample{Columns: []string{"sum"}, Rows: [][]string{{"1200.50"}}}},
				{N: 2, Database: "shop_us", Goal: "Total sales of the US shop in March 2024?", Problem: "permission denied for table orders (SQLSTATE 42501)"},
			}, Computed: []string{"step 1 (shop_eu) = 1200.50"}})
		}, AnswerResult{}},
	}
}

func TestMultidbGolden(t *testing.T) {
	for name, tc := range askallCases() {
		t.Run(name, func(t *testing.T) {
			p, err := tc.render()
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, name, format(p))
			// The JSON contract: schema properties, required fields and the
			// prompt's example all match the result type.
			var schema struct {
				Properties map[string]json.RawMessage `json:"properties"`
				Required   []string                   `json:"required"`
			}
			if err := json.Unmarshal(p.JSONSchema, &schema); err != nil {
				t.Fatal(err)
			}
			var props []string
			for k := range schema.Properties {
				props = append(props, k)
			}
			sort.Strings(props)
			req := append([]string(nil), schema.Required...)
			sort.Strings(req)
			tags := jsonTags(tc.result)
			if !reflect.DeepEqual(props, tags) || !reflect.DeepEqual(req, tags) {
				t.Errorf("schema properties %v required %v, want %v", props, req, tags)
			}
			i := strings.LastIndex(p.User, "\n{")
			if i < 0 {
				t.Fatal("no JSON example in prompt")
			}
			ptr := reflect.New(reflect.TypeOf(tc.result)).Interface()
			if err := json.Unmarshal([]byte(strings.TrimSpace(p.User[i:])), ptr); err != nil {
				t.Errorf("example does not decode: %v", err)
			}
		})
	}
}

func TestPlanDatabaseEnum(t *testing.T) {
	p, err := Plan(PlanParams{Question: "q", Databases: []PlanDatabase{{Name: "a", Schema: "t(x)"}, {Name: "b", Schema: "u(y)"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(p.JSONSchema), `"enum":["a","b"]`) {
		t.Errorf("schema does not restrict databases: %s", p.JSONSchema)
	}
	if !strings.Contains(p.User, "at most 4 steps") {
		t.Errorf("default step bound missing: %s", p.User)
	}
	for _, bad := range []PlanParams{{Question: "q"}, {Question: "q", Databases: []PlanDatabase{{Name: "a"}}}, {Databases: []PlanDatabase{{Name: "a", Schema: "t"}}}} {
		if _, err := Plan(bad); !errors.Is(err, ErrMissing) {
			t.Errorf("%+v: %v, want ErrMissing", bad, err)
		}
	}
	if _, err := Answer(AnswerParams{Question: "q"}); !errors.Is(err, ErrMissing) {
		t.Errorf("answer without steps: %v", err)
	}
}
