package prompts

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/internal/golden"
)

func TestFollowupPrompt(t *testing.T) {
	p, err := Followup(FollowupParams{Question: "only in 2024, and their cities?", Turns: []FollowupTurn{
		{Question: "top five customers by revenue", SQL: "SELECT c.name, sum(o.total) AS revenue\nFROM customers c JOIN orders o ON o.customer_id = c.id\nGROUP BY c.name ORDER BY revenue DESC LIMIT 5", Columns: []string{"name", "revenue"}, Rows: 5},
		{Question: "how many orders were placed?", SQL: "SELECT count(*) FROM orders", Columns: []string{"count"}, Rows: 1},
		{Question: "list the orders", SQL: "SELECT * FROM orders", Columns: []string{"id", "total"}, Rows: 50, More: true},
		{Question: "the same for stores", SQL: "SELECT * FROM stores", Rows: -1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "followup", format(p))
	var schema struct {
		Properties map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(p.JSONSchema, &schema); err != nil || len(schema.Properties) != 1 || schema.Properties["question"] == nil {
		t.Errorf("schema %s: %v", p.JSONSchema, err)
	}
	if !strings.Contains(p.User, `{"question": `) {
		t.Error("the prompt shows no example of its answer")
	}
	if _, err := Followup(FollowupParams{Question: "q"}); !errors.Is(err, ErrMissing) {
		t.Errorf("no turns: %v", err)
	}
	if _, err := Followup(FollowupParams{Turns: []FollowupTurn{{Question: "q"}}}); !errors.Is(err, ErrMissing) {
		t.Errorf("no question: %v", err)
	}
}
