package asktest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// Prompt substrings of engine v2's stages (see prompts/templates).
const (
	planPrompt      = "Plan: describe, step by step"
	unitTestsPrompt = "You write unit tests"
	unitEvalPrompt  = "against one unit test"
)

func testProfiles(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const q = "total sales amount per store city"
	sum := "SELECT s.city, sum(x.amount) AS total FROM stores s JOIN store_sales x ON x.store_id = s.id GROUP BY s.city"
	sum2 := "SELECT st.city, SUM(sa.amount) FROM store_sales sa JOIN stores st ON st.id = sa.store_id GROUP BY 1"
	count := "SELECT s.city, count(*) AS total FROM stores s JOIN store_sales x ON x.store_id = s.id GROUP BY s.city"
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: keywordsReply([]string{"sales", "store"}, nil)},
		fakeollama.Rule{Name: "plan", PromptContains: []string{planPrompt}, Reply: "Plan:\n1. scan\n```sql\n" + count + "\n```"},
		fakeollama.Rule{Name: "divide1", PromptContains: []string{fakeollama.PromptCandidate, q}, Reply: sqlReply(sum), Times: 1},
		fakeollama.Rule{Name: "divide2", PromptContains: []string{fakeollama.PromptCandidate, q}, Reply: sqlReply(sum2), Times: 1},
		fakeollama.Rule{Name: "tests", PromptContains: []string{unitTestsPrompt}, Reply: `{"tests": ["sums the amounts", "one row per city", "uses amount"]}`},
		fakeollama.Rule{Name: "judge", PromptContains: []string{unitEvalPrompt}, Reply: `{"reasoning": "1 sums", "passing": [1]}`},
		fakeollama.Rule{Name: "weather", PromptContains: []string{fakeollama.PromptCandidate, "weather"}, Reply: "UNANSWERABLE: no table records the weather"},
	)
	f.fake.Reset()
	c := f.connect(t, f.proxy)

	// ask-sql with a profile: the columns the evaluation harness reads.
	rows, err := c.Query(ctx, "/* ask-sql(balanced): "+q+" */", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*string{}
	for rows.Next() {
		for i, fd := range rows.FieldDescriptions() {
			if v := rows.RawValues()[i]; v != nil {
				s := string(v)
				got[fd.Name] = &s
			} else {
				got[fd.Name] = nil
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if got["profile"] == nil || *got["profile"] != "balanced" || got["confidence"] == nil || *got["confidence"] != "0.83" {
		t.Fatalf("ask-sql(balanced) = %v", deref(got))
	}
	if !strings.Contains(strings.ToLower(*got["sql"]), "sum(") {
		t.Errorf("chose %s", *got["sql"])
	}
	var stages []struct {
		Stage    string `json:"stage"`
		LLMCalls int    `json:"llm_calls"`
	}
	if err := json.Unmarshal([]byte(*got["trace"]), &stages); err != nil {
		t.Fatalf("trace %q: %v", *got["trace"], err)
	}
	calls, selector := 0, false
	for _, s := range stages {
		calls += s.LLMCalls
		selector = selector || s.Stage == "selector"
	}
	if !selector || got["llm_calls"] == nil || *got["llm_calls"] != "8" || calls != 8 {
		t.Errorf("trace %s, llm_calls %v", *got["trace"], deref(got)["llm_calls"])
	}

	// The plain ask in the same profile runs the chosen SQL and says so
	// (reworded: the same question would be answered from the cache).
	f.fake.Reset() // re-arm the Times:1 rules
	out, err := queryText(ctx, c.Conn, "-- ask(balanced): "+q+", please", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	if want := f.direct(t, sum+" ORDER BY 1"); !sameRows(out, want) {
		t.Errorf("rows %q, want %q", out, want)
	}
	var noticed bool
	for _, n := range c.Notices() {
		noticed = noticed || strings.Contains(n, "confidence 0.83")
	}
	if !noticed {
		t.Errorf("notices %q lack the confidence", c.Notices())
	}

	// An unknown profile and an abstention are errors with SQLSTATEs; the
	// session stays usable.
	_, err = queryText(ctx, c.Conn, "ASK(turbo) "+q, pgx.QueryExecModeSimpleProtocol)
	if code := pgCode(err); code != "22023" {
		t.Fatalf("unknown profile: err = %v, want 22023", err)
	}
	_, err = queryText(ctx, c.Conn, "/* ask: what was the weather in LA yesterday? */", pgx.QueryExecModeSimpleProtocol)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42N02" || !strings.Contains(pe.Detail, "weather") || pe.Hint == "" {
		t.Fatalf("abstention: err = %#v, want 42N02 with detail and hint", err)
	}
	assertUsable(ctx, t, c)

	// psql shows the abstention's DETAIL and HINT.
	_, stderr, err := psql(ctx, t, f.proxy, "-c", "/* ask(fast): what was the weather in LA yesterday? */")
	if err == nil || !strings.Contains(stderr, "42N02") && !strings.Contains(stderr, "does not seem to answer") || !strings.Contains(stderr, "DETAIL:") || !strings.Contains(stderr, "HINT:") {
		t.Errorf("psql: err %v, stderr %q", err, stderr)
	}
}

func deref(m map[string]*string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if v == nil {
			out[k] = "NULL"
		} else {
			out[k] = *v
		}
	}
	return out
}

// sameRows compares ";"-joined rows as sets of lines.
func sameRows(a, b string) bool {
	as, bs := strings.Split(a, ";"), strings.Split(b, ";")
	if len(as) != len(bs) {
		return false
	}
	seen := map[string]int{}
	for _, r := range as {
		seen[r]++
	}
	for _, r := range bs {
		seen[r]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}
