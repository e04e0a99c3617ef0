package mcpserver_test

import (
	"encoding/json"
	"testing"

	"github.com/nlproxy/nlproxy/mcpserver"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// TestFollowUpPerSession: an ask in an MCP session can follow that
// session's earlier asks (rewritten, and said so in understood_as); another
// MCP session of the same role starts with none, and profile "new" forgets.
func TestFollowUpPerSession(t *testing.T) {
	f := newFixture(t)
	const (
		q1       = "how many accounts are there in total"
		sql1     = "SELECT count(*) AS n FROM accounts"
		q2       = "and their owners?"
		s2       = "the owners of all accounts"
		sql2     = "SELECT owner FROM accounts ORDER BY owner"
		sqlAlone = "SELECT 1 AS alone"
	)
	rules := []fakeollama.Rule{
		{Name: "followup", PromptContains: []string{"You rewrite a follow-up question", q2}, Reply: `{"question": "` + s2 + `"}`},
		{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["accounts"], "entities": []}`},
	}
	for q, sql := range map[string]string{q1: sql1, s2: sql2, q2: sqlAlone} {
		rules = append(rules, fakeollama.Rule{Name: "candidate " + q, PromptContains: []string{fakeollama.PromptCandidate}, Match: fakeollama.QuestionContains(q), Reply: sqlReply(sql)})
	}
	f.fake.SetRules(rules...)
	askSQL := func(r result) mcpserver.AskOut {
		t.Helper()
		if r.isErr {
			t.Fatalf("ask_sql failed: %s %s", r.err.SQLState, r.err.Message)
		}
		var a mcpserver.AskOut
		if err := json.Unmarshal([]byte(r.raw), &a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := f.session(t, f.analyst, f.password)
	if got := askSQL(call(t, a, mcpserver.ToolAskSQL, map[string]any{"question": q1})); got.SQL != sql1 || got.UnderstoodAs != "" {
		t.Fatalf("first ask: %+v", got)
	}
	if got := askSQL(call(t, a, mcpserver.ToolAskSQL, map[string]any{"question": q2})); got.SQL != sql2 || got.UnderstoodAs != s2 {
		t.Fatalf("follow-up in the same session: sql %q understood as %q, want %q as %q", got.SQL, got.UnderstoodAs, sql2, s2)
	}
	b := f.session(t, f.analyst, f.password)
	if got := askSQL(call(t, b, mcpserver.ToolAskSQL, map[string]any{"question": q2})); got.SQL != sqlAlone || got.UnderstoodAs != "" {
		t.Fatalf("another session of the same role followed the first one: %+v", got)
	}
	if got := askSQL(call(t, a, mcpserver.ToolAskSQL, map[string]any{"question": q2, "profile": mcpserver.ProfileNew})); got.SQL != sqlAlone || got.UnderstoodAs != "" {
		t.Fatalf(`profile "new" kept the conversation: %+v`, got)
	}
}
