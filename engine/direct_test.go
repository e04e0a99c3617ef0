package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

func TestSQLComplete(t *testing.T) {
	for _, tc := range []struct {
		text string
		want bool
	}{
		{"Sub-questions:\n1. x\n```sql\nSELECT 1\n```", true},
		{"Sub-questions:\n1. x\n```sql\nSELECT 1\n", false},
		{"```SQL\nSELECT 1\n```\nCheck: more", true},
		{"```sql\n```", false},
		{"Here it is:\nSELECT count(*) FROM stores;\nThis counts the stores.", true},
		{"SELECT count(*) FROM stores;", false},             // nothing after it yet
		{"SELECT count(*) FROM stores;\n", false},           // maybe more to come
		{"SELECT count(*) FROM WHERE;\nthat is all", false}, // the parser refuses it
		{"```text\nSELECT 1;\nmore", false},                 // another fence is open
		{"UNANSWERABLE: no weather table\n", true},
		{"UNANSWERABLE: no weather", false},
		{"1. count -> count(*)\n2. filter", false},
	} {
		if got := sqlComplete(tc.text); got != tc.want {
			t.Errorf("sqlComplete(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
	for _, tc := range []struct {
		text string
		want bool
	}{
		{`{"sql": "SELECT 1"}`, true},
		{`{"sql": "SELECT 1"`, false},
		{`  {"keywords": ["a"], "entities": []}  `, true},
		{"```json\n{\"sql\": \"SELECT 1\"}\n```", false},
	} {
		if got := jsonComplete(tc.text); got != tc.want {
			t.Errorf("jsonComplete(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

// TestFastProfileDirectForSmallModel: with a model the server says is
// small, the fast profile's generator is the direct one: one JSON-schema
// request for {"sql": …} with the direct prompt's cap, no chain of thought;
// the candidate is named direct. A 7.6B model keeps divide and conquer.
func TestFastProfileDirectForSmallModel(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, tc := range []struct {
		size, wantGen string
	}{{"135M", "direct"}, {"7.6B", "divide"}} {
		t.Run(tc.size, func(t *testing.T) {
			fake := fakeollama.New(t, fakeollama.Options{
				ParameterSizes: map[string]string{"coder:7b": tc.size},
				Rules: []fakeollama.Rule{
					{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["stores"], "entities": []}`},
					{Name: "direct", PromptContains: []string{`{"sql": "<one SELECT statement>"}`}, Reply: `{"sql": "SELECT count(*) FROM stores"}`},
					{Name: "cot", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply("SELECT count(*) FROM stores")},
				},
			})
			client, err := llm.New(llm.Config{Host: fake.URL(), Models: map[llm.Role]string{llm.RoleGenerator: "coder:7b", llm.RoleSmall: "coder:7b"},
				CallTimeout: 10 * time.Second, MaxRetries: -1})
			if err != nil {
				t.Fatal(err)
			}
			eng := &Engine{LLM: client, Catalogs: f.cats, TrialTimeout: 10 * time.Second}
			res, err := eng.Translate(ctx, f.request("how many stores are there "+tc.size))
			if err != nil {
				t.Fatal(err)
			}
			if g := res.Candidates[res.Chosen].Generator; g != tc.wantGen || !strings.Contains(res.SQL(), "count(*)") {
				t.Fatalf("generator %s, SQL %s; want %s", g, res.SQL(), tc.wantGen)
			}
			for _, r := range fake.RequestsTo(fakeollama.RouteChat) {
				if r.Rule != "direct" {
					continue
				}
				if !strings.Contains(string(r.Format), `"sql"`) || r.Options["num_predict"] != float64(320) {
					t.Errorf("direct request: format %s, num_predict %v; want the {sql} schema and 320", r.Format, r.Options["num_predict"])
				}
			}
			if tc.wantGen == "direct" && fake.Hits("cot") != 0 {
				t.Errorf("the chain of thought ran for a small model")
			}
		})
	}
}

// TestOutputCapsPerStep: each call carries its step's declared cap and stop
// sequences, and the operator's override replaces a cap.
func TestOutputCapsPerStep(t *testing.T) {
	f := newFixture(t)
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["stores"], "entities": []}`},
		fakeollama.Rule{Name: "cot", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply("SELECT count(*) FROM stores")},
	)
	eng := f.engine(t)
	eng.OutputCaps = map[string]int{"candidate": 200}
	if _, err := eng.Translate(context.Background(), f.request("how many stores, capped")); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"keywords": 64, "cot": 200}
	// Each step's stop sequences travel with it (prompts.StopSequences).
	wantStop := map[string]string{"keywords": `["\n\n"]`, "cot": "[\"\\n```\\n\" \"```\\n\\n\"]"}
	for _, r := range f.fake.RequestsTo(fakeollama.RouteChat) {
		if r.Options["num_predict"] != want[r.Rule] {
			t.Errorf("%s: num_predict %v, want %v", r.Rule, r.Options["num_predict"], want[r.Rule])
		}
		if got := fmt.Sprintf("%q", r.Options["stop"]); got != wantStop[r.Rule] {
			t.Errorf("%s: stop %s, want %s", r.Rule, got, wantStop[r.Rule])
		}
	}
}

// TestFitCap: the cap a call gets is what the time until its window ends
// allows at the model's measured speed, after reading the prompt at its
// measured reading speed; a call that cannot write minUsefulTokens, or
// whose window has ended, is not started; without a measured speed or a
// deadline the step's cap stands.
func TestFitCap(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	in := func(d time.Duration) time.Time { return now.Add(d) }
	slow := speed{gen: 10, read: 100}
	for _, tc := range []struct {
		name     string
		deadline time.Time
		sp       speed
		want     int
		wantErr  bool
	}{
		{"no speed yet", in(time.Second), speed{}, 1024, false},
		{"no speed, window over", in(-time.Second), speed{}, 0, true},
		{"no deadline", time.Time{}, slow, 1024, false},
		{"plenty of time", in(time.Hour), slow, 1024, false},
		// 60 s left, 10 s reading 1,000 prompt tokens: 0.8 × 50 s × 10/s.
		{"a minute left", in(time.Minute), slow, 400, false},
		// Writing alone would fit 96 tokens in 12 s; reading takes 10 s.
		{"reading eats the time", in(12 * time.Second), slow, 0, true},
		{"reading unknown", in(12 * time.Second), speed{gen: 10}, 96, false},
		{"two seconds left", in(2 * time.Second), slow, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := fitCap(now, tc.deadline, tc.sp, 1000, 1024)
			if tc.wantErr {
				if !errors.Is(err, ErrBudget) || !errors.Is(err, errTimeLeft) {
					t.Fatalf("got %d, %v; want errTimeLeft", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestProgressStages: the engine reports each stage boundary of an ask, in
// order, to Request.Progress (the router turns them into NOTICEs).
func TestProgressStages(t *testing.T) {
	f := newFixture(t)
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["stores"], "entities": []}`},
		fakeollama.Rule{Name: "cot", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply("SELECT count(store_name) FROM stores"), Times: 1},
		fakeollama.Rule{Name: "fix", PromptContains: []string{fakeollama.PromptFixer}, Reply: sqlReply("SELECT count(*) FROM stores")},
	)
	var mu sync.Mutex
	var stages []string
	req := f.request("how many stores, with progress")
	req.Progress = func(s string) { mu.Lock(); stages = append(stages, s); mu.Unlock() }
	if _, err := f.engine(t).Translate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	want := []string{"finding the question's terms", "generating candidate 1/1", "fixing the divide candidate, round 1"}
	if strings.Join(stages, "|") != strings.Join(want, "|") {
		t.Errorf("stages %q, want %q", stages, want)
	}
}
