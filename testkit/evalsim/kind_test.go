package evalsim

import (
	"encoding/json"
	"testing"

	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

func TestCallKindAndQuestion(t *testing.T) {
	schema := func(props ...string) json.RawMessage {
		m := map[string]any{}
		for _, p := range props {
			m[p] = map[string]string{"type": "string"}
		}
		b, _ := json.Marshal(map[string]any{"type": "object", "properties": m})
		return b
	}
	user := "Examples:\nQuestion: how many stores?\nSQL: SELECT count(*) FROM stores\n\nQuestion:\nWhich city has most stores?\nCount distinct ids.\n\nWork in this order:\n5. Finish with the final query in one ```sql code block."
	tests := []struct {
		name   string
		format json.RawMessage
		prompt string
		want   string
	}{
		{"keywords", schema("keywords", "entities"), user, CallKeywords},
		{"schema", schema("reasoning", "tables", "columns"), user, CallSchema},
		{"literal", schema("value"), user, CallLiteral},
		{"pairwise", schema("reasoning", "better"), user, CallSelector},
		{"unit tests", schema("tests"), user, CallTestsGen},
		{"unit test evaluation", schema("reasoning", "passing"), user, CallTestsEval},
		{"synthetic", schema("examples"), user, CallExamples},
		{"decomposition", schema("targets", "conditions"), user, CallDecompose},
		{"sql", nil, user, CallSQL},
		{"new JSON kind", schema("rewrite"), user, CallUnknown},
		{"plain text without a sql fence", nil, "Summarise the table.", CallUnknown},
	}
	for _, tt := range tests {
		v := fakeollama.ChatView{Format: tt.format, Prompt: tt.prompt, Messages: []fakeollama.Message{{Role: "user", Content: tt.prompt}}}
		if got := callKind(v); got != tt.want {
			t.Errorf("%s: kind %q, want %q", tt.name, got, tt.want)
		}
	}
	// The asked question, not the few-shot example's inline "Question: …".
	v := fakeollama.ChatView{Messages: []fakeollama.Message{{Role: "user", Content: user}}}
	if got := askedQuestion(v); got != "Which city has most stores?" {
		t.Errorf("askedQuestion = %q", got)
	}
}

func TestCandidates(t *testing.T) {
	p := "Candidate A:\n```sql\nSELECT 1\n```\nResult of A: no rows\n\nCandidate B:\n```sql\nSELECT 2\n```\n"
	c := candidates(p, []string{"A", "B"})
	if c["A"] != "SELECT 1" || c["B"] != "SELECT 2" {
		t.Errorf("candidates = %q", c)
	}
}

func TestMutationsAndReformats(t *testing.T) {
	schema := schemaInfo{"author": {{Name: "aid", Type: "bigint"}, {Name: "oid", Type: "bigint"}, {Name: "name", Type: "text"}, {Name: "homepage", Type: "text"}}}
	gold := "SELECT author.name, count(*) AS n FROM author WHERE author.oid = 3 AND author.name ILIKE '%a%' GROUP BY author.name ORDER BY n DESC LIMIT 5"
	vs, err := mutations(gold, schema, AllKinds)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, v := range vs {
		seen[v.kind] = true
		if Canonical(v.sql) == Canonical(gold) {
			t.Errorf("%s variant equals the gold: %s", v.kind, v.sql)
		}
	}
	for _, k := range []string{KindColumn, KindDrop, KindOperator, KindLimit, KindLiteral, KindNumber} {
		if !seen[k] {
			t.Errorf("no %s variant of %s", k, gold)
		}
	}
	for _, r := range reformats("SELECT a.name FROM author a JOIN writes w ON a.aid = w.aid WHERE a.name = 'X'") {
		if Canonical(r) == "" {
			t.Errorf("reformat does not parse: %s", r)
		}
	}
}
