package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// Substrings that tell the profiles' prompts apart (see prompts/templates).
const (
	planPrompt      = "Plan: describe, step by step"
	syntheticPrompt = "practice questions"
	decomposePrompt = "separate what the question wants returned"
	subSQLPrompt    = "You build a query step by step"
	pairwisePrompt  = "decide which one answers the question"
	unitTestsPrompt = "You write unit tests"
	unitEvalPrompt  = "against one unit test"
)

// Three readings of "sales per store": the right one twice (two spellings),
// a wrong one (counts instead of sums).
const (
	sumPerStore   = "SELECT s.city, sum(x.amount) AS total FROM stores s JOIN sales x ON x.store_id = s.id GROUP BY s.city"
	sumPerStore2  = "SELECT st.city, SUM(sa.amount) FROM sales sa JOIN stores st ON st.id = sa.store_id GROUP BY 1"
	countPerStore = "SELECT s.city, count(*) AS total FROM stores s JOIN sales x ON x.store_id = s.id GROUP BY s.city"
)

const unanswerableReply = "Sub-questions: none fit.\nUNANSWERABLE: no table records the weather"

func TestProfileBalancedSelects(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	q := "total sales amount per store city"
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["sales", "store"]}`},
		fakeollama.Rule{Name: "plan", PromptContains: []string{planPrompt}, Reply: "Plan:\n1. scan\n```sql\n" + countPerStore + "\n```"},
		fakeollama.Rule{Name: "divide1", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply(sumPerStore), Times: 1},
		fakeollama.Rule{Name: "divide2", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply(sumPerStore2), Times: 1},
		fakeollama.Rule{Name: "tests", PromptContains: []string{unitTestsPrompt}, Reply: `{"tests": ["sums the amounts", "one row per city", "uses sales.amount"]}`},
		// Every test passes the candidate whose result shows sums (the first
		// cluster: the larger one, numbered 1).
		fakeollama.Rule{Name: "judge", PromptContains: []string{unitEvalPrompt}, Reply: `{"reasoning": "1 sums", "passing": [1]}`},
	)
	eng := f.engine(t)
	req := f.request(q)
	req.Profile = "balanced"
	res, err := eng.Translate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Profile != ProfileBalanced || len(res.Candidates) != 3 {
		t.Fatalf("profile %q, %d candidates", res.Profile, len(res.Candidates))
	}
	chosen := res.Candidates[res.Chosen]
	if !strings.Contains(strings.ToLower(res.SQL()), "sum(") || chosen.Generator == "plan@0.2" {
		t.Fatalf("chose %s: %s", chosen.Generator, res.SQL())
	}
	// Two of three agree and the unit tests all favour them: (2/3 + 1) / 2.
	if res.Confidence < 0.83 || res.Confidence > 0.84 {
		t.Errorf("confidence = %v, want ≈0.83", res.Confidence)
	}
	if f.fake.Hits("tests") != 1 || f.fake.Hits("judge") != 3 {
		t.Errorf("unit tests: %d generated, %d judged", f.fake.Hits("tests"), f.fake.Hits("judge"))
	}
	calls, _, _ := res.Trace.LLMCalls()
	if n := len(f.fake.RequestsTo(fakeollama.RouteChat)); n != calls || n != 1+3+1+3 {
		t.Errorf("model calls: fake saw %d, trace %d, want 8", n, calls)
	}
	// Asked again: the cached answer keeps its confidence.
	again, err := eng.Translate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Cached || again.Confidence != res.Confidence || again.SQL() != res.SQL() {
		t.Errorf("re-asked: cached %v, confidence %v (first %v)", again.Cached, again.Confidence, res.Confidence)
	}
}

func TestProfileMaxUsesEveryGenerator(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["sales"]}`},
		fakeollama.Rule{Name: "synthetic", PromptContains: []string{syntheticPrompt}, Reply: `{"examples": [
			{"question": "How many stores are there?", "sql": "SELECT count(*) FROM stores"},
			{"question": "Delete everything", "sql": "DELETE FROM sales"},
			{"question": "Stores in Mars", "sql": "SELECT id FROM stores WHERE city = 'Mars'"}]}`},
		fakeollama.Rule{Name: "decompose", PromptContains: []string{decomposePrompt}, Reply: `{"targets": ["city", "total amount"], "conditions": ["group by city"]}`},
		fakeollama.Rule{Name: "subsql", PromptContains: []string{subSQLPrompt}, Reply: "```sql\n" + sumPerStore + "\n```"},
		fakeollama.Rule{Name: "plan", PromptContains: []string{planPrompt}, Reply: "Plan:\n1. scan\n```sql\n" + countPerStore + "\n```"},
		fakeollama.Rule{Name: "divide", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply(sumPerStore2)},
		fakeollama.Rule{Name: "pairwise", PromptContains: []string{pairwisePrompt}, ReplyFunc: func(v fakeollama.ChatView) string {
			// The candidate that sums is better, whichever side it is on.
			a := v.LastUser()[strings.Index(v.LastUser(), "Candidate A:"):strings.Index(v.LastUser(), "Candidate B:")]
			if strings.Contains(strings.ToLower(a), "sum(") {
				return `{"reasoning": "A sums", "better": "A"}`
			}
			return `{"reasoning": "B sums", "better": "B"}`
		}},
	)
	eng := f.engine(t)
	req := f.request("total sales amount per store city")
	req.Profile = "MAX"
	res, err := eng.Translate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	gens := map[string]bool{}
	for _, c := range res.Candidates {
		gens[c.Generator] = c.Usable
	}
	for _, g := range []string{"divide", "plan", "synthetic", "decompose", "divide+shuffled@0.8", "plan+shuffled@0.8"} {
		if !gens[g] {
			t.Errorf("generator %s: no usable candidate (%v)", g, gens)
		}
	}
	if !strings.Contains(strings.ToLower(res.SQL()), "sum(") {
		t.Errorf("chose %s", res.SQL())
	}
	if f.fake.Hits("pairwise") != 2 {
		t.Errorf("pairwise comparisons = %d, want 2 (both orders)", f.fake.Hits("pairwise"))
	}
	// The synthetic examples that ran and returned rows reached the
	// generator; the write and the empty one did not.
	var shown bool
	for _, r := range f.fake.RequestsTo(fakeollama.RouteChat) {
		p := r.System + "\n" + r.Messages[len(r.Messages)-1].Content
		if strings.Contains(p, fakeollama.PromptCandidate) && strings.Contains(p, "Questions answered before") {
			shown = true
			if !strings.Contains(p, "How many stores are there?") || strings.Contains(p, "DELETE") || strings.Contains(p, "Mars") {
				t.Errorf("synthetic examples in prompt:\n%s", p)
			}
		}
	}
	if !shown {
		t.Error("no generation saw the synthetic examples")
	}
	if n := len(f.fake.RequestsTo(fakeollama.RouteChat)); n > 30 {
		t.Errorf("max profile made %d model calls, cap 30", n)
	}
}

func TestAbstain(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()

	t.Run("the model says the data cannot answer", func(t *testing.T) {
		f.fake.SetRules(
			fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["weather"]}`},
			fakeollama.Rule{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate}, Reply: unanswerableReply},
		)
		_, err := f.engine(t).Translate(ctx, f.request("what was the weather in LA yesterday?"))
		var ee *pg.Error
		if !errors.As(err, &ee) || ee.Code != pg.CodeAbstained || !strings.Contains(ee.Detail, "weather") || ee.Hint == "" {
			t.Fatalf("err = %#v, want %s with the reason", err, pg.CodeAbstained)
		}
	})

	t.Run("candidates disagree", func(t *testing.T) {
		f.fake.SetRules(
			fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["sales"]}`},
			fakeollama.Rule{Name: "a", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply(sumPerStore), Times: 1},
			fakeollama.Rule{Name: "b", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply(countPerStore), Times: 1},
			fakeollama.Rule{Name: "c", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply("SELECT s.city, max(x.amount) FROM stores s JOIN sales x ON x.store_id = s.id GROUP BY s.city"), Times: 1},
		)
		eng := f.engine(t)
		eng.Profiles = map[string]*Profile{"split": {
			Name:         "split",
			Generators:   []Generator{cotGenerator{method: methodDivide}, cotGenerator{method: methodDivide, temperature: 0.5}, cotGenerator{method: methodDivide, temperature: 0.9}},
			AbstainBelow: 0.4,
		}}
		req := f.request("sales by city")
		req.Profile = "split"
		_, err := eng.Translate(ctx, req)
		var ee *pg.Error
		if !errors.As(err, &ee) || ee.Code != pg.CodeAbstained || strings.Count(ee.Detail, "\n") != 3 {
			t.Fatalf("err = %#v, want %s listing 3 readings", err, pg.CodeAbstained)
		}
	})

	// "Unanswerable" is one reading: it wins when no answer has more
	// support, ties included; an answer two candidates agree on outvotes it.
	for _, tc := range []struct {
		name    string
		replies []string
		abstain bool
	}{
		{"unanswerable ties the largest answer", []string{sqlReply(sumPerStore), unanswerableReply, sqlReply(countPerStore)}, true},
		{"unanswerable outvotes", []string{unanswerableReply, sqlReply(sumPerStore), unanswerableReply}, true},
		{"an agreed answer outvotes unanswerable", []string{sqlReply(sumPerStore), unanswerableReply, sqlReply(sumPerStore2)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules := []fakeollama.Rule{{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["sales"]}`}}
			for i, r := range tc.replies {
				rules = append(rules, fakeollama.Rule{Name: fmt.Sprint("c", i), PromptContains: []string{fakeollama.PromptCandidate}, Reply: r, Times: 1})
			}
			f.fake.SetRules(rules...)
			eng := f.engine(t)
			eng.Profiles = map[string]*Profile{"three": {
				Name: "three",
				// Which generator gets which reply does not matter: only the counts do.
				Generators: []Generator{cotGenerator{method: methodDivide}, cotGenerator{method: methodDivide, temperature: 0.5}, cotGenerator{method: methodDivide, temperature: 0.9}},
			}}
			req := f.request("sales per city, or the weather")
			req.Profile = "three"
			res, err := eng.Translate(ctx, req)
			var ee *pg.Error
			switch {
			case tc.abstain && (!errors.As(err, &ee) || ee.Code != pg.CodeAbstained || !strings.Contains(ee.Detail, "weather")):
				t.Fatalf("err = %v, want %s saying what is missing", err, pg.CodeAbstained)
			case !tc.abstain && err != nil:
				t.Fatalf("err = %v, want the agreed answer", err)
			case !tc.abstain && !strings.Contains(strings.ToLower(res.SQL()), "sum("):
				t.Fatalf("chose %s", res.SQL())
			}
		})
	}

	t.Run("unknown profile", func(t *testing.T) {
		req := f.request("sales by city")
		req.Profile = "turbo"
		_, err := f.engine(t).Translate(ctx, req)
		var ee *pg.Error
		if !errors.As(err, &ee) || ee.Code != pg.CodeInvalidParameterValue || !strings.Contains(ee.Hint, "balanced") {
			t.Fatalf("err = %#v, want %s", err, pg.CodeInvalidParameterValue)
		}
	})
}

func TestRememberedPairs(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["stores"]}`},
		fakeollama.Rule{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply("SELECT count(*) FROM stores")},
	)
	eng := f.engine(t)
	if err := eng.AddPair(ctx, "postgres", "How many sales were there?", "SELECT count(*) FROM sales"); err != nil {
		t.Fatal(err)
	}
	if err := eng.AddPair(ctx, "postgres", "wipe", "DELETE FROM sales"); err == nil {
		t.Fatal("a pair that writes was accepted")
	}
	// Pairs the asker must not see: another role's accepted question, and
	// one reading a table outside the asker's schema.
	_ = eng.Pairs.AddPair(ctx, "postgres", memory.Pair{Question: "How many stores sell to secret client X?", SQL: "SELECT count(*) FROM stores WHERE city = 'X'", Source: memory.PairAccepted, Role: "someone_else"})
	_ = eng.Pairs.AddPair(ctx, "postgres", memory.Pair{Question: "How many stores are in the hidden table?", SQL: "SELECT count(*) FROM hidden_stores", Source: memory.PairOperator})
	if _, err := eng.Translate(ctx, f.request("How many stores are there?")); err != nil {
		t.Fatal(err)
	}
	var seen bool
	for _, r := range f.fake.RequestsTo(fakeollama.RouteChat) {
		p := r.Messages[len(r.Messages)-1].Content
		if strings.Contains(p, "SQL: SELECT count(*) FROM sales") {
			seen = true
		}
		if strings.Contains(p, "secret client") || strings.Contains(p, "hidden_stores") {
			t.Errorf("a pair the asker may not see reached the prompt:\n%s", p)
		}
	}
	if !seen {
		t.Fatal("the operator's pair was not shown as an example")
	}
	// Asking again unchanged is an accepted answer.
	if res, err := eng.Translate(ctx, f.request("How many stores are there?")); err != nil || !res.Cached {
		t.Fatalf("second ask: %v, cached=%v", err, res != nil && res.Cached)
	}
	pairs, _ := eng.Pairs.Pairs(ctx, "postgres")
	var accepted bool
	for _, p := range pairs {
		if p.Source == memory.PairAccepted && p.Question == "How many stores are there?" {
			accepted = true
		}
	}
	if !accepted {
		t.Fatalf("pairs = %+v, want the re-run question accepted", pairs)
	}
}

// With an embedding model, remembered pairs are ranked by meaning: a pair
// that shares no word with the question (so the word ranking shows
// nothing) is still shown when its question is the nearest.
func TestRememberedPairsByEmbedding(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["citywide"]}`},
		fakeollama.Rule{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply("SELECT count(*) FROM stores")},
	)
	const question = "citywide?"
	for _, tc := range []struct {
		name     string
		embedder bool
		want     []string // SQL of the examples shown, in order
	}{
		{"words only", false, nil},
		{"by meaning", true, []string{"SELECT city, sum(amount) FROM sales JOIN stores ON stores.id = sales.store_id GROUP BY city", "SELECT count(*) FROM sales"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := f.engine(t)
			mp := &MemoryPairs{}
			if tc.embedder {
				client, err := llm.New(llm.Config{Host: f.fake.URL(), Models: map[llm.Role]string{llm.RoleGenerator: "coder:7b"}, MaxRetries: -1})
				if err != nil {
					t.Fatal(err)
				}
				mp.Embedder = llm.NewEmbedder(client, "nomic-embed-text")
			}
			eng.Pairs = mp
			for _, p := range [][2]string{
				{"Sales per city", "SELECT city, sum(amount) FROM sales JOIN stores ON stores.id = sales.store_id GROUP BY city"},
				{"How many sales were there?", "SELECT count(*) FROM sales"},
			} {
				if err := eng.AddPair(ctx, "postgres", p[0], p[1]); err != nil {
					t.Fatal(err)
				}
			}
			f.fake.Reset()
			if _, err := eng.Translate(ctx, f.request(question)); err != nil {
				t.Fatal(err)
			}
			var prompt string
			for _, r := range f.fake.RequestsTo(fakeollama.RouteChat) {
				if p := r.Messages[len(r.Messages)-1].Content; strings.Contains(p, fakeollama.PromptCandidate) || strings.Contains(r.System, fakeollama.PromptCandidate) {
					prompt = r.System + "\n" + p
				}
			}
			last := -1
			for _, sql := range tc.want {
				i := strings.Index(prompt, "SQL: "+sql)
				if i < 0 || i < last {
					t.Fatalf("example %q missing or out of order in:\n%s", sql, prompt)
				}
				last = i
			}
			if tc.want == nil && strings.Contains(prompt, "FROM sales") {
				t.Errorf("an example reached the prompt without an embedding model:\n%s", prompt)
			}
		})
	}
}

func TestResultKey(t *testing.T) {
	s := func(v string) *string { return &v }
	rows := func(cols []string, vals ...[]*string) *pg.Rows { return &pg.Rows{Columns: cols, Values: vals} }
	base := rows([]string{"city", "n"}, []*string{s("LA"), s("10")}, []*string{s("NYC"), s("2")})
	tests := []struct {
		name  string
		other *pg.Rows
		equal bool
	}{
		{"same", rows([]string{"city", "n"}, []*string{s("LA"), s("10")}, []*string{s("NYC"), s("2")}), true},
		{"rows reordered", rows([]string{"city", "n"}, []*string{s("NYC"), s("2")}, []*string{s("LA"), s("10")}), true},
		{"columns reordered and renamed", rows([]string{"total", "c"}, []*string{s("10"), s("LA")}, []*string{s("2"), s("NYC")}), true},
		{"numeric forms", rows([]string{"city", "n"}, []*string{s("LA"), s("10.000")}, []*string{s("NYC"), s("2.0")}), true},
		{"different value", rows([]string{"city", "n"}, []*string{s("LA"), s("11")}, []*string{s("NYC"), s("2")}), false},
		{"duplicate row", rows([]string{"city", "n"}, []*string{s("LA"), s("10")}, []*string{s("NYC"), s("2")}, []*string{s("NYC"), s("2")}), false},
		{"extra column", rows([]string{"city", "n", "x"}, []*string{s("LA"), s("10"), nil}, []*string{s("NYC"), s("2"), nil}), false},
		{"NULL is not the string NULL", rows([]string{"city", "n"}, []*string{s("LA"), s("10")}, []*string{s("NYC"), nil}), false},
		{"empty", rows([]string{"city", "n"}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resultKey(base) == resultKey(tt.other); got != tt.equal {
				t.Errorf("equal = %v, want %v", got, tt.equal)
			}
		})
	}
	if resultKey(rows([]string{"a"})) != resultKey(nil) {
		t.Error("empty results differ")
	}
	if canonicalValue("2024-03-01 00:00:00") != canonicalValue("2024-03-01") {
		t.Error("midnight timestamp differs from its date")
	}
}

func TestNoUsableSQLCode(t *testing.T) {
	denied := &Candidate{Problem: "failed: permission denied for table payroll", Code: pg.CodeInsufficientPrivilege}
	guarded := &Candidate{Problem: "rejected by the guard: DELETE is not allowed"}
	broken := &Candidate{Problem: "failed: column nope does not exist", Code: "42703"}
	for _, tc := range []struct {
		name  string
		cands []*Candidate
		code  string
	}{
		{"every attempt was refused by the guard", []*Candidate{guarded, guarded}, pg.CodeInsufficientPrivilege},
		{"every attempt read what the role may not", []*Candidate{denied, denied}, pg.CodeInsufficientPrivilege},
		{"one attempt was merely wrong", []*Candidate{denied, broken}, pg.CodeNoUsableSQL},
		{"nothing was produced", nil, pg.CodeNoUsableSQL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ee *pg.Error
			if err := noUsableSQL(2, tc.cands, "ask-sql:"); !errors.As(err, &ee) || ee.Code != tc.code || !errors.Is(err, ErrNoUsableSQL) {
				t.Fatalf("err = %v, want %s", err, tc.code)
			}
		})
	}
	// The hint names the client's way to see the attempt, and none where
	// the client has none (MCP) or is already looking at it (ask-sql:).
	for _, form := range []string{"ask-sql:", ""} {
		var ee *pg.Error
		_ = errors.As(noUsableSQL(2, []*Candidate{broken}, form), &ee)
		var de *pg.Error
		_ = errors.As(abstainDisagreement(0.4, broken, []*Candidate{denied}, form), &de)
		for _, h := range []string{ee.Hint, de.Hint} {
			if named := strings.Contains(h, "ask-sql"); named != (form != "") {
				t.Errorf("form %q: hint %q", form, h)
			}
		}
	}
}
