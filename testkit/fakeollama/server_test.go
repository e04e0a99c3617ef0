package fakeollama_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

func apiClient(t *testing.T, s *fakeollama.Server) *api.Client {
	t.Helper()
	u, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	return api.NewClient(u, &http.Client{})
}

func TestStreamingChatWithOfficialClient(t *testing.T) {
	reply := "SELECT name, count(*) FROM users GROUP BY name — ünïcode ok"
	s := fakeollama.New(t, fakeollama.Options{Rules: []fakeollama.Rule{{
		Name: "sql", Model: "qwen2.5-coder:7b", PromptContains: []string{"users"}, Reply: reply, ChunkSize: 5, EvalTokens: 17,
	}}})
	c := apiClient(t, s)
	var got strings.Builder
	var chunks, done int
	var final api.ChatResponse
	err := c.Chat(context.Background(), &api.ChatRequest{
		Model:    "qwen2.5-coder:7b",
		Messages: []api.Message{{Role: "system", Content: "be terse"}, {Role: "user", Content: "list users"}},
		Options:  map[string]any{"num_ctx": 2048},
	}, func(r api.ChatResponse) error {
		chunks++
		got.WriteString(r.Message.Content)
		if r.Done {
			done++
			final = r
		} else if r.Message.Role != "assistant" {
			t.Errorf("chunk role %q", r.Message.Role)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != reply {
		t.Fatalf("reassembled %q", got.String())
	}
	if chunks < 10 || done != 1 {
		t.Fatalf("chunks=%d done=%d: not streamed", chunks, done)
	}
	if final.DoneReason != "stop" || final.EvalCount != 17 || final.PromptEvalCount == 0 || final.TotalDuration == 0 || final.Model != "qwen2.5-coder:7b" || final.CreatedAt.IsZero() {
		t.Fatalf("final chunk %+v", final)
	}
	rec := s.RequestsTo(fakeollama.RouteChat)
	if len(rec) != 1 || !rec[0].Stream || rec[0].NumCtx != 2048 || rec[0].System != "be terse" || rec[0].Rule != "sql" {
		t.Fatalf("recorded %+v", rec)
	}
}

func TestGenerateStreamingAndNot(t *testing.T) {
	s := fakeollama.New(t, fakeollama.Options{Rules: []fakeollama.Rule{{Name: "gen", Route: fakeollama.RouteGenerate, Reply: "hello world from fake"}}})
	c := apiClient(t, s)
	for _, stream := range []bool{true, false} {
		var got strings.Builder
		calls := 0
		err := c.Generate(context.Background(), &api.GenerateRequest{Model: "m", Prompt: "say hi", System: "sys", Stream: &stream}, func(r api.GenerateResponse) error {
			calls++
			got.WriteString(r.Response)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != "hello world from fake" {
			t.Fatalf("stream=%v got %q", stream, got.String())
		}
		if stream == (calls == 1) {
			t.Fatalf("stream=%v but %d callbacks", stream, calls)
		}
	}
	rec := s.RequestsTo(fakeollama.RouteGenerate)
	if len(rec) != 2 || rec[0].Prompt != "say hi" || rec[0].System != "sys" || !rec[0].Stream || rec[1].Stream {
		t.Fatalf("recorded %+v", rec)
	}
	// A chat request does not match a generate-only rule.
	err := c.Chat(context.Background(), &api.ChatRequest{Model: "m"}, func(api.ChatResponse) error { return nil })
	var se api.StatusError
	if !errors.As(err, &se) || se.StatusCode != 500 {
		t.Fatalf("err = %v", err)
	}
}

// The exact JSON field names Ollama uses, checked on the raw bytes.
func TestRawJSONShape(t *testing.T) {
	s := fakeollama.New(t, fakeollama.Options{Models: []string{"m:1b"}, Rules: []fakeollama.Rule{{Name: "r", Reply: "ok"}}})
	body := `{"model":"m:1b","messages":[{"role":"user","content":"x"}],"stream":false,"format":{"type":"object"}}`
	resp, err := http.Post(s.URL()+"/api/chat", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"model", "created_at", "message", "done", "done_reason", "total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration"} {
		if _, ok := m[k]; !ok {
			t.Errorf("missing field %q in %v", k, m)
		}
	}
	if msg, _ := m["message"].(map[string]any); msg["role"] != "assistant" || msg["content"] != "ok" {
		t.Errorf("message %v", m["message"])
	}
	if got := string(s.RequestsTo(fakeollama.RouteChat)[0].Format); got != `{"type":"object"}` {
		t.Errorf("format recorded %s", got)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("content-type %q", ct)
	}

	// Streaming is the default when "stream" is absent: NDJSON lines.
	resp2, err := http.Post(s.URL()+"/api/chat", "application/json", strings.NewReader(`{"model":"m:1b","messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	if ct := resp2.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("stream content-type %q", ct)
	}
	sc := bufio.NewScanner(resp2.Body)
	var lines []map[string]any
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	if len(lines) < 2 || lines[len(lines)-1]["done"] != true || lines[0]["done"] != false {
		t.Fatalf("lines %v", lines)
	}
	if _, ok := lines[len(lines)-1]["eval_count"]; !ok {
		t.Fatalf("final line lacks counts: %v", lines[len(lines)-1])
	}
}

func TestModelNotFound(t *testing.T) {
	s := fakeollama.New(t, fakeollama.Options{Models: []string{"llama3", "qwen2.5:3b"}, Rules: []fakeollama.Rule{{Name: "r", Reply: "ok"}}})
	c := apiClient(t, s)
	ctx := context.Background()
	// "llama3" is installed as llama3:latest; both spellings work.
	for _, m := range []string{"llama3", "llama3:latest", "qwen2.5:3b"} {
		if err := c.Chat(ctx, &api.ChatRequest{Model: m}, func(api.ChatResponse) error { return nil }); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}
	err := c.Chat(ctx, &api.ChatRequest{Model: "qwen2.5:7b"}, func(api.ChatResponse) error { return nil })
	var se api.StatusError
	if !errors.As(err, &se) || se.StatusCode != 404 || se.ErrorMessage != `model "qwen2.5:7b" not found, try pulling it first` {
		t.Fatalf("err = %#v", err)
	}
	if _, err := c.Show(ctx, &api.ShowRequest{Model: "nope"}); !errors.As(err, &se) || se.StatusCode != 404 {
		t.Fatalf("show err = %v", err)
	}
	if _, err := c.Embed(ctx, &api.EmbedRequest{Model: "nope", Input: "x"}); !errors.As(err, &se) || se.StatusCode != 404 {
		t.Fatalf("embed err = %v", err)
	}
}

func TestTagsShowVersion(t *testing.T) {
	s := fakeollama.New(t, fakeollama.Options{Models: []string{"qwen2.5-coder:7b", "nomic-embed-text"}})
	c := apiClient(t, s)
	ctx := context.Background()
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Models) != 2 || list.Models[0].Name != "qwen2.5-coder:7b" || list.Models[1].Name != "nomic-embed-text:latest" || list.Models[0].Details.Format != "gguf" || list.Models[0].Digest == "" {
		t.Fatalf("list %+v", list.Models)
	}
	show, err := c.Show(ctx, &api.ShowRequest{Model: "nomic-embed-text"})
	if err != nil {
		t.Fatal(err)
	}
	if show.Details.Family != "nomic-bert" || len(show.Capabilities) != 1 || show.Capabilities[0] != "embedding" || show.ModelInfo == nil {
		t.Fatalf("show %+v", show)
	}
	v, err := c.Version(ctx)
	if err != nil || v != fakeollama.Version {
		t.Fatalf("version %q %v", v, err)
	}
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	s.SetModels()
	if list, err := c.List(ctx); err != nil || len(list.Models) != 0 {
		t.Fatalf("empty list %+v %v", list, err)
	}
}

func TestEmbeddings(t *testing.T) {
	s := fakeollama.New(t, fakeollama.Options{EmbedDim: 32})
	c := apiClient(t, s)
	ctx := context.Background()
	resp, err := c.Embed(ctx, &api.EmbedRequest{Model: "e", Input: []string{"total revenue by month", "monthly revenue totals", "cat pictures"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Embeddings) != 3 || len(resp.Embeddings[0]) != 32 || resp.Model != "e" || resp.PromptEvalCount == 0 {
		t.Fatalf("resp %+v", resp)
	}
	cos := func(a, b []float32) float64 {
		var d float64
		for i := range a {
			d += float64(a[i]) * float64(b[i])
		}
		return d
	}
	for i, v := range resp.Embeddings {
		if n := cos(v, v); math.Abs(n-1) > 1e-5 {
			t.Fatalf("vector %d not normalized: %v", i, n)
		}
	}
	if near, far := cos(resp.Embeddings[0], resp.Embeddings[1]), cos(resp.Embeddings[0], resp.Embeddings[2]); near <= far {
		t.Fatalf("related texts not closer: %v <= %v", near, far)
	}
	// Deterministic across calls and equal to the exported function.
	single, err := c.Embed(ctx, &api.EmbedRequest{Model: "e", Input: "cat pictures"})
	if err != nil {
		t.Fatal(err)
	}
	want := fakeollama.Embedding("cat pictures", 32)
	for i := range want {
		if single.Embeddings[0][i] != want[i] || resp.Embeddings[2][i] != want[i] {
			t.Fatal("embedding not deterministic")
		}
	}
	legacy, err := c.Embeddings(ctx, &api.EmbeddingRequest{Model: "e", Prompt: "cat pictures"})
	if err != nil {
		t.Fatal(err)
	}
	if len(legacy.Embedding) != 32 || float32(legacy.Embedding[5]) != want[5] {
		t.Fatalf("legacy %v", legacy.Embedding)
	}
	if rec := s.RequestsTo(fakeollama.RouteEmbed); len(rec) != 2 || len(rec[0].Input) != 3 || rec[1].Input[0] != "cat pictures" {
		t.Fatalf("recorded %+v", rec)
	}
}

func TestUnmatchedFailsLoudly(t *testing.T) {
	s := fakeollama.New(t, fakeollama.Options{Rules: []fakeollama.Rule{{Name: "other", PromptContains: []string{"never"}}}})
	c := apiClient(t, s)
	stream := false
	err := c.Chat(context.Background(), &api.ChatRequest{Model: "m", Stream: &stream, Messages: []api.Message{{Role: "user", Content: "What is the total revenue?"}}}, func(api.ChatResponse) error { return nil })
	var se api.StatusError
	if !errors.As(err, &se) || se.StatusCode != 500 || !strings.Contains(se.ErrorMessage, "no rule matched") || !strings.Contains(se.ErrorMessage, "What is the total revenue?") {
		t.Fatalf("err = %v", err)
	}
	// A default rule catches the rest.
	s.SetDefault(&fakeollama.Rule{Name: "fallback", Reply: "default"})
	var got string
	if err := c.Chat(context.Background(), &api.ChatRequest{Model: "m", Stream: &stream}, func(r api.ChatResponse) error { got = r.Message.Content; return nil }); err != nil || got != "default" {
		t.Fatalf("%q %v", got, err)
	}
	if s.Hits("fallback") != 1 || s.Hits("other") != 0 {
		t.Fatalf("hits")
	}
}

func TestRuleOrderTimesAndMatch(t *testing.T) {
	s := fakeollama.New(t, fakeollama.Options{Rules: []fakeollama.Rule{
		{Name: "first-two", Reply: "a", Times: 2},
		{Name: "by-func", Match: func(v fakeollama.ChatView) bool { return strings.HasPrefix(v.LastUser(), "fn:") }, ReplyFunc: func(v fakeollama.ChatView) string { return strings.ToUpper(v.LastUser()) }},
		{Name: "rest", Reply: "b"},
	}})
	c := apiClient(t, s)
	stream := false
	ask := func(q string) string {
		var out string
		if err := c.Chat(context.Background(), &api.ChatRequest{Model: "m", Stream: &stream, Messages: []api.Message{{Role: "user", Content: q}}}, func(r api.ChatResponse) error { out = r.Message.Content; return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	got := []string{ask("fn:x"), ask("q"), ask("fn:y"), ask("q")}
	want := []string{"a", "a", "FN:Y", "b"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("got %v want %v", got, want)
	}
	s.Reset()
	if len(s.Requests()) != 0 || ask("q") != "a" {
		t.Fatal("Reset did not clear hits/requests")
	}
}

func TestDelayHonoursClientContext(t *testing.T) {
	s := fakeollama.New(t, fakeollama.Options{Rules: []fakeollama.Rule{{Name: "slow", Reply: "x", Delay: 30 * time.Second}}})
	c := apiClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Chat(ctx, &api.ChatRequest{Model: "m"}, func(api.ChatResponse) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("took %v", time.Since(start))
	}
}

func TestCloseAbortsInFlight(t *testing.T) {
	s, err := fakeollama.Start(fakeollama.Options{Rules: []fakeollama.Rule{{Name: "slow", Reply: "x", Delay: 30 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	c := apiClient(t, s)
	errc := make(chan error, 1)
	go func() {
		errc <- c.Chat(context.Background(), &api.ChatRequest{Model: "m"}, func(api.ChatResponse) error { return nil })
	}()
	for len(s.Requests()) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	s.Close()
	s.Close() // idempotent
	if time.Since(start) > 30*time.Second {
		t.Fatalf("Close took %v", time.Since(start))
	}
	select {
	case <-errc:
	case <-time.After(30 * time.Second):
		t.Fatal("client still waiting after Close")
	}
}

func TestFaults(t *testing.T) {
	s := fakeollama.New(t, fakeollama.Options{Rules: []fakeollama.Rule{
		{Name: "drop-stream", PromptContains: []string{"drop"}, Reply: "SELECT 1 FROM a_long_table_name", Fault: fakeollama.FaultDrop, ChunkSize: 4},
		{Name: "garbage", PromptContains: []string{"garbage"}, Fault: fakeollama.FaultGarbage},
		{Name: "status", PromptContains: []string{"status"}, Status: 503, Error: "server busy"},
		{Name: "embed-drop", Route: fakeollama.RouteEmbed, Fault: fakeollama.FaultDrop},
	}})
	// Raw HTTP: a dropped stream ends without the done line and with a
	// read error.
	resp, err := http.Post(s.URL()+"/api/chat", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"drop"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || strings.Contains(string(body), `"done":true`) {
		t.Fatalf("drop: err=%v body=%q", err, body)
	}
	// Non-streaming drop: a truncated JSON body.
	resp, err = http.Post(s.URL()+"/api/chat", "application/json", strings.NewReader(`{"model":"m","stream":false,"messages":[{"role":"user","content":"drop"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || json.Valid(body) {
		t.Fatalf("non-stream drop: err=%v body=%q", err, body)
	}

	c := apiClient(t, s)
	err = c.Chat(context.Background(), &api.ChatRequest{Model: "m", Messages: []api.Message{{Role: "user", Content: "garbage"}}}, func(api.ChatResponse) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "502 bad gateway") {
		t.Fatalf("garbage: %v", err)
	}
	err = c.Chat(context.Background(), &api.ChatRequest{Model: "m", Messages: []api.Message{{Role: "user", Content: "status"}}}, func(api.ChatResponse) error { return nil })
	var se api.StatusError
	if !errors.As(err, &se) || se.StatusCode != 503 || se.ErrorMessage != "server busy" {
		t.Fatalf("status: %v", err)
	}
	if _, err := c.Embed(context.Background(), &api.EmbedRequest{Model: "e", Input: "x"}); err == nil {
		t.Fatal("embed drop succeeded")
	}
}

func TestChatViewQuestion(t *testing.T) {
	tests := []struct{ user, want string }{
		{"Schema...\n\nQuestions answered before on this database:\n\nQuestion: old one\nSQL: SELECT 1\n\nQuestion:\nthe new one\n\nWork in this order:", "the new one"},
		{"Question:\nfirst line\nmore", "first line"},
		{"Question: inline only", ""},
		{"no question", ""},
	}
	for _, tt := range tests {
		v := fakeollama.ChatView{Messages: []fakeollama.Message{{Role: "user", Content: tt.user}}}
		if got := v.Question(); got != tt.want {
			t.Errorf("Question(%q) = %q, want %q", tt.user, got, tt.want)
		}
	}
}

// TestModelBehaviours: what the fake offers a client under test of the
// issue-29 machinery: a stream without end that never repeats, one that
// repeats itself, one the server ends without done (its repeat guard), and
// /api/show's template and size per model.
func TestModelBehaviours(t *testing.T) {
	s := fakeollama.New(t, fakeollama.Options{
		Templates:      map[string]string{"base": fakeollama.NoTemplate},
		ParameterSizes: map[string]string{"base": "270M"},
		Rules: []fakeollama.Rule{
			{Name: "varied", PromptContains: []string{"varied"}, Reply: "x", Fault: fakeollama.FaultEndlessVaried},
			{Name: "loop", PromptContains: []string{"loop"}, Reply: "again and again ", Fault: fakeollama.FaultEndless},
			{Name: "abort", PromptContains: []string{"abort"}, Reply: "SELECT SELECT", Fault: fakeollama.FaultAbortRepetition},
		},
	})
	c := apiClient(t, s)
	read := func(prompt string, max int) (text string, chunks int, done bool) {
		var b strings.Builder
		stop := errors.New("enough")
		err := c.Chat(context.Background(), &api.ChatRequest{Model: "m", Messages: []api.Message{{Role: "user", Content: prompt}}},
			func(r api.ChatResponse) error {
				b.WriteString(r.Message.Content)
				chunks++
				done = done || r.Done
				if chunks >= max {
					return stop
				}
				return nil
			})
		if err != nil && !errors.Is(err, stop) {
			t.Fatalf("%s: %v", prompt, err)
		}
		return b.String(), chunks, done
	}
	if text, n, done := read("varied", 200); n != 200 || done || strings.Count(text, text[len(text)-40:]) != 1 {
		t.Errorf("varied: %d chunks, done %v, tail repeated", n, done)
	}
	if text, n, _ := read("loop", 200); n != 200 || strings.Count(text, "again and again") < 50 {
		t.Errorf("loop: %d chunks %q…", n, text[:40])
	}
	if text, _, done := read("abort", 1000); done || text != "SELECT SELECT" {
		t.Errorf("abort: %q, done %v; want the reply and no done", text, done)
	}
	show, err := c.Show(context.Background(), &api.ShowRequest{Model: "base"})
	if err != nil || show.Template != fakeollama.NoTemplate || show.Details.ParameterSize != "270M" {
		t.Errorf("show base: %+v, %v", show, err)
	}
	show, err = c.Show(context.Background(), &api.ShowRequest{Model: "other"})
	if err != nil || show.Template != fakeollama.ChatMLTemplate || show.Details.ParameterSize != "7.6B" {
		t.Errorf("show other: %+v, %v", show, err)
	}
}

// TestStopAndVirtualTimings: the fake ends an answer at the request's first
// stop sequence and leaves it out, as Ollama does, and reports a rule's
// virtual timings (nothing waits for them).
func TestStopAndVirtualTimings(t *testing.T) {
	s := fakeollama.New(t, fakeollama.Options{Rules: []fakeollama.Rule{{Name: "r",
		Reply:              "```sql\nSELECT 1\n```\n\nThis selects one.",
		PromptEvalDuration: 30 * time.Second, EvalDuration: time.Minute}}})
	for _, tc := range []struct {
		name string
		stop []string
		want string
	}{
		{"no stop", nil, "```sql\nSELECT 1\n```\n\nThis selects one."},
		{"after the fence", []string{"```\n\n"}, "```sql\nSELECT 1\n"},
		{"the first of two", []string{"one", "\n\n"}, "```sql\nSELECT 1\n```"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream := false
			req := &api.ChatRequest{Model: "m", Stream: &stream, Messages: []api.Message{{Role: "user", Content: "x"}}}
			if tc.stop != nil {
				req.Options = map[string]any{"stop": tc.stop}
			}
			var got api.ChatResponse
			if err := apiClient(t, s).Chat(context.Background(), req, func(r api.ChatResponse) error { got = r; return nil }); err != nil {
				t.Fatal(err)
			}
			if got.Message.Content != tc.want || got.PromptEvalDuration != 30*time.Second || got.EvalDuration != time.Minute {
				t.Errorf("content %q, prompt %s, eval %s; want %q, 30s, 1m", got.Message.Content, got.PromptEvalDuration, got.EvalDuration, tc.want)
			}
		})
	}
}
