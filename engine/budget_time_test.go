package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// TestAskSettlesWhenTheNextCallCannotFit: a slow model, as the fake's
// virtual timings report it (eval_count/eval_duration and
// prompt_eval_count/prompt_eval_duration; nothing sleeps), leaves the ask
// too little time for its next call. That call is not started, and the ask
// settles with what it has before its deadline: the candidate it already
// ran, or a clean 57014 saying the time ran out (not the deadline's "timed
// out", which only a cut-off ask gets).
func TestAskSettlesWhenTheNextCallCannotFit(t *testing.T) {
	f := newFixture(t)
	keywords := fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["stores"], "entities": []}`}
	for _, tc := range []struct {
		name string
		// small is the keyword model; "" means the generator plays both.
		small string
		rules []fakeollama.Rule
		// The outcome: the SQL answered, or the error's SQLSTATE.
		wantSQL, wantCode string
		wantSkipped       int
		notSent           []string // rules the fake must not have answered
	}{
		{
			// The generator reads 100 tokens/s and writes 1 token/s: after
			// its candidate (an empty result), a fix of ~40 tokens plus
			// reading its prompt cannot fit the 19 s left. The candidate
			// that ran stands.
			name:  "fix cannot fit: the candidate stands",
			small: "small:1b",
			rules: []fakeollama.Rule{
				{Name: "keywords", Model: "small:1b", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["stores"], "entities": []}`},
				{Name: "cot", Model: "coder:7b", PromptContains: []string{fakeollama.PromptCandidate},
					// A bare statement, not complete before the server's done
					// (which carries the timings): a client-ended stream has none.
					Reply:        "SELECT id FROM stores WHERE city = 'Paris'",
					PromptTokens: 1000, PromptEvalDuration: 10 * time.Second, EvalTokens: 40, EvalDuration: 40 * time.Second},
				{Name: "fix", PromptContains: []string{fakeollama.PromptFixer}, Reply: sqlReply("SELECT id FROM stores")},
			},
			wantSQL:     "Paris",
			wantSkipped: 1,
			notSent:     []string{"fix"},
		},
		{
			// One model plays both roles: the keyword call shows it writes
			// fast (100 tokens/s) but reads 10 tokens/s, so reading the
			// generator's prompt alone would outlast the ask. Nothing is
			// generated; the ask ends with its reserve left.
			name: "generation cannot fit: reading the prompt would take too long",
			rules: []fakeollama.Rule{
				// Prose after the JSON, in one chunk: the answer is not
				// complete before the server's done, which carries the timings.
				{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: "{\"keywords\": [\"stores\"], \"entities\": []}\nThose are the terms.", ChunkSize: 1 << 10,
					PromptTokens: 250, PromptEvalDuration: 25 * time.Second, EvalTokens: 30, EvalDuration: 300 * time.Millisecond},
				{Name: "generate", Reply: sqlReply("SELECT count(*) FROM stores")},
			},
			wantCode:    pg.CodeQueryCanceled,
			wantSkipped: 1,
			notSent:     []string{"generate"},
		},
		{
			// The same model at normal speed answers: the control.
			name:    "fast model: every call runs",
			rules:   []fakeollama.Rule{keywords, {Name: "generate", Reply: sqlReply("SELECT count(*) FROM stores")}},
			wantSQL: "count(*)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := fakeollama.New(t, fakeollama.Options{Rules: tc.rules})
			small := tc.small
			if small == "" {
				small = "coder:7b"
			}
			client, err := llm.New(llm.Config{Host: fake.URL(), Models: map[llm.Role]string{llm.RoleGenerator: "coder:7b", llm.RoleSmall: small},
				CallTimeout: 10 * time.Second, MaxRetries: -1})
			if err != nil {
				t.Fatal(err)
			}
			eng := &Engine{LLM: client, Catalogs: f.cats, TrialTimeout: 10 * time.Second, AskTimeout: 20 * time.Second}
			res, err := eng.Translate(context.Background(), f.ownRequest(t, "which stores are in the city "+tc.name))
			var tr *Trace
			if err != nil {
				var fe *Failed
				if !errors.As(err, &fe) {
					t.Fatalf("error %v is not *Failed", err)
				}
				tr = fe.Trace
				var pe *pg.Error
				if !errors.As(err, &pe) || pe.Code != tc.wantCode {
					t.Fatalf("error %v; want SQLSTATE %q", err, tc.wantCode)
				}
				// Ended by the engine with time left, not cut at the
				// deadline (classify's "timed out after").
				if !strings.Contains(pe.Message, "ran out before the model wrote usable SQL") || pe.Hint == "" {
					t.Errorf("message %q, hint %q; want the out-of-time error with a hint", pe.Message, pe.Hint)
				}
			} else {
				if tc.wantSQL == "" {
					t.Fatalf("answered %s; want SQLSTATE %s", res.SQL(), tc.wantCode)
				}
				if !strings.Contains(res.SQL(), tc.wantSQL) {
					t.Fatalf("SQL %s; want it to contain %q", res.SQL(), tc.wantSQL)
				}
				tr = res.Trace
			}
			if tr.Ends.Skipped != tc.wantSkipped || tr.Ends.Failed != 0 || tr.Ends.TimeCut != 0 {
				t.Errorf("ends %+v; want %d skipped, none failed or cut", tr.Ends, tc.wantSkipped)
			}
			for _, r := range tc.notSent {
				if fake.Hits(r) != 0 {
					t.Errorf("rule %s was sent %d times; the call could not fit", r, fake.Hits(r))
				}
			}
		})
	}
}

// TestOptionalStageWindow: the keyword call is optional (lexical keywords
// stand in), so it gets at most a quarter of the ask's time; a model that
// does not answer in it is cut there and the generator gets the rest.
func TestOptionalStageWindow(t *testing.T) {
	f := newFixture(t)
	fake := fakeollama.New(t, fakeollama.Options{Rules: []fakeollama.Rule{
		// Delay: the model has not started answering when the window ends.
		{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["stores"], "entities": []}`, Delay: time.Hour},
		{Name: "generate", Reply: sqlReply("SELECT count(*) FROM stores")},
	}})
	client, err := llm.New(llm.Config{Host: fake.URL(), Models: map[llm.Role]string{llm.RoleGenerator: "coder:7b", llm.RoleSmall: "coder:7b"},
		CallTimeout: time.Hour, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	eng := &Engine{LLM: client, Catalogs: f.cats, TrialTimeout: 10 * time.Second, AskTimeout: 8 * time.Second}
	res, err := eng.Translate(context.Background(), f.ownRequest(t, "how many stores, keywords cut"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.SQL(), "count(*)") || res.Trace.Ends.TimeCut != 1 {
		t.Fatalf("SQL %s, ends %+v; want the answer after one call cut at its window", res.SQL(), res.Trace.Ends)
	}
	for _, st := range res.Trace.Stages {
		if st.Name == "keywords" && !strings.Contains(st.Note, "lexical") {
			t.Errorf("keywords note %q; want the lexical fallback", st.Note)
		}
	}
}

// TestBudgetWindow: where each call's window ends, for an ask of 20 s
// (reserve 1 s; an optional stage's call gets at most 5 s).
func TestBudgetWindow(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(20*time.Second))
	defer cancel()
	c := budgetClient{reserve: reserveFor(20 * time.Second), optional: time.Duration(float64(20*time.Second) * optionalShare)}
	for _, tc := range []struct {
		step string
		at   time.Duration // after the ask started
		want time.Duration // the window's end, after the ask started
	}{
		{"generate", 0, 19 * time.Second},
		{"fix", 12 * time.Second, 19 * time.Second},
		{"keywords", 0, 5 * time.Second},
		{"followup", 0, 5 * time.Second},
		{"keywords", 16 * time.Second, 19 * time.Second}, // the reserve still holds
	} {
		if got := c.window(ctx, tc.step, now.Add(tc.at)).Sub(now); got != tc.want {
			t.Errorf("%s at %s: window ends at %s, want %s", tc.step, tc.at, got, tc.want)
		}
	}
	if got := c.window(context.Background(), "generate", now); !got.IsZero() {
		t.Errorf("no deadline: window %v, want none", got)
	}
	for _, tc := range []struct{ timeout, want time.Duration }{
		{time.Second, minReserve}, {30 * time.Second, 1500 * time.Millisecond}, {10 * time.Minute, maxReserve},
	} {
		if got := reserveFor(tc.timeout); got != tc.want {
			t.Errorf("reserveFor(%s) = %s, want %s", tc.timeout, got, tc.want)
		}
	}
}

// TestSpeedsObserve: the server's timings when it gave them; else the
// client's clock (an answer the client ended early has no server timings:
// before, such calls taught the engine nothing); several attempts teach
// nothing; speeds are kept per model, whichever role measured them.
func TestSpeedsObserve(t *testing.T) {
	clientEnded := llm.ChatResponse{Model: "m", PromptTokens: 500, FirstChunk: 10 * time.Second, CompletionTokens: 41, Streaming: 20 * time.Second, Attempts: 1, DoneReason: llm.DoneComplete}
	for _, tc := range []struct {
		name  string
		resps []llm.ChatResponse // observed in turn
		want  speed
	}{
		{"server timings", []llm.ChatResponse{{Model: "m", PromptTokens: 500, PromptDuration: 5 * time.Second, CompletionTokens: 40, EvalDuration: 20 * time.Second, Attempts: 1}},
			speed{gen: 2, read: 100, warm: true}},
		// The first piece of a cold model's first answer came after
		// loading it: its reading is not measured, its writing is.
		{"ended by the client, cold model", []llm.ChatResponse{clientEnded}, speed{gen: 2, warm: true}},
		{"ended by the client, warm model", []llm.ChatResponse{clientEnded, clientEnded}, speed{gen: 2, read: 50, warm: true}},
		{"retried", []llm.ChatResponse{{Model: "m", PromptTokens: 500, FirstChunk: 10 * time.Second, CompletionTokens: 41, Streaming: 20 * time.Second, Attempts: 2}},
			speed{warm: true}},
		{"cut before the first piece", []llm.ChatResponse{{Model: "m", PromptTokens: 500, Duration: 7 * time.Second, Attempts: 1}},
			speed{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s speeds
			for _, r := range tc.resps {
				s.observe(llm.RoleSmall, r)
			}
			got := s.of("m", llm.RoleGenerator)
			got.at = time.Time{}
			if got != tc.want {
				t.Errorf("speeds %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestSlowModelNextAsk: after an ask showed the model reads too slowly for
// its time, the next ask does not spend a quarter of its time on the
// optional keyword call (lexical keywords stand in); its generator call,
// the ask's first essential call, still runs on its window alone, so a
// slow spell that has passed does not refuse every ask after it.
func TestSlowModelNextAsk(t *testing.T) {
	f := newFixture(t)
	fake := fakeollama.New(t, fakeollama.Options{Rules: []fakeollama.Rule{
		// Reads 10 tokens/s (virtual): the keyword prompt alone takes ~25 s.
		{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: "{\"keywords\": [\"stores\"], \"entities\": []}\nThose are the terms.", ChunkSize: 1 << 10,
			PromptTokens: 250, PromptEvalDuration: 25 * time.Second, EvalTokens: 30, EvalDuration: 300 * time.Millisecond, Times: 1},
		{Name: "generate", Reply: sqlReply("SELECT count(*) FROM stores")},
	}})
	client, err := llm.New(llm.Config{Host: fake.URL(), Models: map[llm.Role]string{llm.RoleGenerator: "coder:7b", llm.RoleSmall: "coder:7b"},
		CallTimeout: 10 * time.Second, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	eng := &Engine{LLM: client, Catalogs: f.cats, TrialTimeout: 10 * time.Second, AskTimeout: 20 * time.Second}
	// The first ask measures the slow reading and cannot fit its generator.
	if _, err := eng.Translate(context.Background(), f.ownRequest(t, "how many stores, slow 1")); err == nil {
		t.Fatal("the first ask answered; want it out of time")
	}
	res, err := eng.Translate(context.Background(), f.ownRequest(t, "how many stores, slow 2"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.SQL(), "count(*)") || res.Trace.Ends.Skipped != 1 || fake.Hits("keywords") != 1 {
		t.Fatalf("SQL %s, ends %+v, %d keyword calls; want the answer with the keyword call skipped", res.SQL(), res.Trace.Ends, fake.Hits("keywords"))
	}
	for _, st := range res.Trace.Stages {
		if st.Name == "keywords" && !strings.Contains(st.Note, "lexical") {
			t.Errorf("keywords note %q; want the lexical fallback", st.Note)
		}
	}
}
