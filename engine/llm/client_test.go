package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

const (
	genModel   = "qwen2.5-coder:7b"
	smallModel = "qwen2.5:3b"
	embedModel = "nomic-embed-text"
)

func newClient(t *testing.T, srv *fakeollama.Server, mod func(*llm.Config)) *llm.OllamaClient {
	t.Helper()
	cfg := llm.Config{
		Host:         srv.URL(),
		Models:       map[llm.Role]string{llm.RoleGenerator: genModel, llm.RoleSmall: smallModel, llm.RoleEmbedding: embedModel},
		RetryBackoff: 5 * time.Millisecond,
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := llm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startFake(t *testing.T, rules ...fakeollama.Rule) *fakeollama.Server {
	return fakeollama.New(t, fakeollama.Options{
		Models: []string{genModel, smallModel, embedModel + ":latest"},
		Rules:  rules,
	})
}

func TestChatHappyPath(t *testing.T) {
	srv := startFake(t, fakeollama.Rule{
		Name:           "sql",
		Model:          genModel,
		PromptContains: []string{"How many users?"},
		Reply:          "```sql\nSELECT count(*) FROM users;\n```",
		PromptTokens:   123,
		EvalTokens:     45,
	})
	c := newClient(t, srv, nil)
	resp, err := c.Chat(context.Background(), llm.ChatRequest{
		Role:     llm.RoleGenerator,
		System:   "You write PostgreSQL.",
		Messages: []llm.Message{{Role: llm.SpeakerUser, Content: "How many users?"}},
		Step:     "generate-secret-step-name",
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Content != "```sql\nSELECT count(*) FROM users;\n```" || resp.Model != genModel {
		t.Fatalf("resp = %+v", resp)
	}
	if resp.PromptTokens != 123 || resp.CompletionTokens != 45 || resp.Attempts != 1 || resp.DoneReason != "stop" {
		t.Fatalf("counts: %+v", resp)
	}
	if resp.Duration <= 0 {
		t.Fatalf("duration %v", resp.Duration)
	}
	reqs := srv.RequestsTo(fakeollama.RouteChat)
	if len(reqs) != 1 {
		t.Fatalf("%d chat requests", len(reqs))
	}
	r := reqs[0]
	if !r.Stream {
		t.Error("request was not streaming; want stream=true (early stop needs it)")
	}
	if r.NumCtx != llm.DefaultNumCtx {
		t.Errorf("num_ctx = %d, want %d sent explicitly", r.NumCtx, llm.DefaultNumCtx)
	}
	if r.Temperature == nil || *r.Temperature != 0 {
		t.Errorf("temperature = %v, want explicit 0", r.Temperature)
	}
	if len(r.Format) != 0 {
		t.Errorf("format = %s, want none", r.Format)
	}
	if len(r.Messages) != 2 || r.Messages[0].Role != "system" || r.Messages[0].Content != "You write PostgreSQL." || r.Messages[1].Role != "user" {
		t.Errorf("messages = %+v", r.Messages)
	}
	for _, m := range r.Messages {
		if strings.Contains(m.Content, "secret-step") {
			t.Errorf("step name leaked into the prompt: %q", m.Content)
		}
	}
	if r.KeepAlive != "" || r.Think != "" {
		t.Errorf("keep_alive = %s, think = %s, want both absent by default", r.KeepAlive, r.Think)
	}
}

func TestChatOptions(t *testing.T) {
	srv := startFake(t, fakeollama.Rule{Name: "any", Reply: "ok"})
	noThink := false
	c := newClient(t, srv, func(cfg *llm.Config) { cfg.NumCtx = 4096; cfg.KeepAlive = 10 * time.Minute; cfg.Think = &noThink })
	ctx := context.Background()
	// Small role, per-request num_ctx, temperature and max tokens.
	if _, err := c.Chat(ctx, llm.ChatRequest{Role: llm.RoleSmall, NumCtx: 16384, Temperature: 0.7, MaxTokens: 64,
		Messages: []llm.Message{{Role: "user", Content: "x"}}}); err != nil {
		t.Fatal(err)
	}
	// Explicit model; config num_ctx.
	if _, err := c.Chat(ctx, llm.ChatRequest{Model: genModel, Messages: []llm.Message{{Role: "user", Content: "y"}}}); err != nil {
		t.Fatal(err)
	}
	reqs := srv.RequestsTo(fakeollama.RouteChat)
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	if reqs[0].Model != smallModel || reqs[0].NumCtx != 16384 || *reqs[0].Temperature != 0.7 || reqs[0].Options["num_predict"] != float64(64) {
		t.Errorf("first request: model %s options %v", reqs[0].Model, reqs[0].Options)
	}
	if reqs[1].Model != genModel || reqs[1].NumCtx != 4096 {
		t.Errorf("second request: model %s num_ctx %d", reqs[1].Model, reqs[1].NumCtx)
	}
	if got := reqs[1].Options["num_predict"]; got != float64(llm.DefaultMaxTokens) {
		t.Errorf("num_predict = %v without MaxTokens, want the default %d", got, llm.DefaultMaxTokens)
	}
	if reqs[0].KeepAlive != `"10m0s"` {
		t.Errorf("keep_alive = %s", reqs[0].KeepAlive)
	}
	if reqs[0].Think != "false" {
		t.Errorf("think = %q, want false", reqs[0].Think)
	}
}

func TestChatNoModelForRole(t *testing.T) {
	srv := startFake(t)
	c := newClient(t, srv, func(cfg *llm.Config) { delete(cfg.Models, llm.RoleSmall) })
	_, err := c.Chat(context.Background(), llm.ChatRequest{Role: llm.RoleSmall})
	if !errors.Is(err, llm.ErrNoModel) {
		t.Fatalf("err = %v, want ErrNoModel", err)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

func TestChatJSONPassesSchema(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"keywords":{"type":"array","items":{"type":"string"}}},"required":["keywords"]}`)
	srv := startFake(t, fakeollama.Rule{Name: "kw", Reply: "Sure:\n```json\n{\"keywords\": [\"revenue\", \"2024\",]}\n```", PromptTokens: 10, EvalTokens: 5})
	c := newClient(t, srv, nil)
	var out struct {
		Keywords []string `json:"keywords"`
	}
	resp, err := llm.ChatJSON(context.Background(), c, llm.ChatRequest{Role: llm.RoleSmall, JSONSchema: schema,
		Messages: []llm.Message{{Role: "user", Content: "keywords of: revenue in 2024"}}}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(out.Keywords, ",") != "revenue,2024" {
		t.Fatalf("keywords %v", out.Keywords)
	}
	if resp.PromptTokens != 10 || resp.CompletionTokens != 5 || resp.Attempts != 1 {
		t.Fatalf("resp %+v", resp)
	}
	reqs := srv.RequestsTo(fakeollama.RouteChat)
	if len(reqs) != 1 || string(reqs[0].Format) != string(schema) {
		t.Fatalf("format sent = %s", reqs[0].Format)
	}

	// No schema: Ollama's free-form JSON mode.
	srv.Reset()
	if _, err := llm.ChatJSON(context.Background(), c, llm.ChatRequest{Messages: []llm.Message{{Role: "user", Content: "q"}}}, &out); err != nil {
		t.Fatal(err)
	}
	if f := srv.RequestsTo(fakeollama.RouteChat)[0].Format; string(f) != `"json"` {
		t.Fatalf("format = %s, want \"json\"", f)
	}
}

func TestChatJSONRepairsOnce(t *testing.T) {
	srv := startFake(t,
		fakeollama.Rule{Name: "garbage", Reply: "I think the keywords are revenue and year.", Times: 1, PromptTokens: 7, EvalTokens: 3},
		fakeollama.Rule{Name: "fixed", PromptContains: []string{"could not be parsed as JSON"}, Reply: `{"keywords":["revenue"]}`, PromptTokens: 20, EvalTokens: 4},
	)
	c := newClient(t, srv, nil)
	var out struct{ Keywords []string }
	resp, err := llm.ChatJSON(context.Background(), c, llm.ChatRequest{Messages: []llm.Message{{Role: "user", Content: "q"}}}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Keywords) != 1 || out.Keywords[0] != "revenue" {
		t.Fatalf("out %+v", out)
	}
	if resp.PromptTokens != 27 || resp.CompletionTokens != 7 || resp.Attempts != 2 {
		t.Fatalf("totals %+v", resp)
	}
	reqs := srv.RequestsTo(fakeollama.RouteChat)
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	second := reqs[1].Messages
	if len(second) != 3 || second[1].Role != "assistant" || !strings.Contains(second[1].Content, "I think the keywords") || second[2].Role != "user" {
		t.Fatalf("repair conversation %+v", second)
	}
}

func TestChatJSONGarbageIsBadOutput(t *testing.T) {
	srv := startFake(t, fakeollama.Rule{Name: "garbage", Reply: "<think>hmm</think>no json for you {oops"})
	c := newClient(t, srv, nil)
	var out struct{ Keywords []string }
	_, err := llm.ChatJSON(context.Background(), c, llm.ChatRequest{Step: "keywords", Messages: []llm.Message{{Role: "user", Content: "q"}}}, &out)
	if !errors.Is(err, llm.ErrBadOutput) {
		t.Fatalf("err = %v, want ErrBadOutput", err)
	}
	var le *llm.Error
	t.Logf("error: %v", err)
	if !errors.As(err, &le) || le.Step != "keywords" {
		t.Fatalf("err %v not an *llm.Error with step", err)
	}
	if n := srv.Hits("garbage"); n != 2 {
		t.Fatalf("garbage rule hit %d times, want 2 (one corrective re-ask)", n)
	}
}

func TestChatSQL(t *testing.T) {
	srv := startFake(t,
		fakeollama.Rule{Name: "prose", Reply: "I'm not sure which table holds users.", Times: 1},
		fakeollama.Rule{Name: "sql", PromptContains: []string{"did not contain a SQL query"}, Reply: "```sql\nSELECT count(*) FROM users;\n```"},
	)
	c := newClient(t, srv, nil)
	sql, resp, err := llm.ChatSQL(context.Background(), c, llm.ChatRequest{Messages: []llm.Message{{Role: "user", Content: "how many users"}}})
	if err != nil {
		t.Fatal(err)
	}
	if sql != "SELECT count(*) FROM users" || resp.Attempts != 2 {
		t.Fatalf("sql %q resp %+v", sql, resp)
	}
}

func TestModelMissing(t *testing.T) {
	srv := startFake(t)
	c := newClient(t, srv, nil)
	_, err := c.Chat(context.Background(), llm.ChatRequest{Model: "llama3.1:8b", Messages: []llm.Message{{Role: "user", Content: "x"}}})
	if !errors.Is(err, llm.ErrModelMissing) {
		t.Fatalf("err = %v, want ErrModelMissing", err)
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), "ollama pull llama3.1:8b") {
		t.Fatalf("error lacks the pull hint: %v", err)
	}
	var le *llm.Error
	if !errors.As(err, &le) || le.StatusCode != 404 {
		t.Fatalf("err %#v", err)
	}
	if n := len(srv.RequestsTo(fakeollama.RouteChat)); n != 1 {
		t.Fatalf("a missing model was retried: %d requests", n)
	}
	if _, err := c.Embed(context.Background(), "other-embed", []string{"a"}); !errors.Is(err, llm.ErrModelMissing) {
		t.Fatalf("embed err = %v", err)
	}
}

func TestCheckModels(t *testing.T) {
	srv := startFake(t)
	c := newClient(t, srv, nil)
	ctx := context.Background()
	// Configured "nomic-embed-text" matches the listed "nomic-embed-text:latest".
	if err := llm.CheckModels(ctx, c, c.Config()); err != nil {
		t.Fatalf("all installed: %v", err)
	}
	cfg := c.Config()
	cfg.Models[llm.RoleGenerator] = "sqlcoder:15b"
	cfg.Models[llm.RoleSmall] = "phi4-mini"
	err := llm.CheckModels(ctx, c, cfg)
	if !errors.Is(err, llm.ErrModelMissing) {
		t.Fatalf("err = %v, want ErrModelMissing", err)
	}
	msg := err.Error()
	for _, want := range []string{`generator model "sqlcoder:15b"`, `small model "phi4-mini"`, "`ollama pull sqlcoder:15b`", "`ollama pull phi4-mini`"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, embedModel+`"`) {
		t.Errorf("installed model reported missing: %q", msg)
	}
	// With the tag spelled out on the configured side.
	srv.SetModels("llama3:latest")
	if err := llm.CheckModels(ctx, c, llm.Config{Models: map[llm.Role]string{llm.RoleGenerator: "llama3"}}); err != nil {
		t.Fatalf("llama3 vs llama3:latest: %v", err)
	}
}

func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestUnreachable(t *testing.T) {
	addr := closedAddr(t)
	c, err := llm.New(llm.Config{Host: addr, Models: map[llm.Role]string{llm.RoleGenerator: genModel}, RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Chat(context.Background(), llm.ChatRequest{Messages: []llm.Message{{Role: "user", Content: "x"}}})
	t.Logf("error: %v", err)
	if !errors.Is(err, llm.ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
	var le *llm.Error
	if !errors.As(err, &le) || le.Attempts != 1+llm.DefaultMaxRetries {
		t.Fatalf("attempts: %#v", err)
	}
	err = llm.CheckModels(context.Background(), c, c.Config())
	if !errors.Is(err, llm.ErrUnreachable) || !strings.Contains(err.Error(), "ollama serve") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("CheckModels err = %v", err)
	}
}

func TestHostFromEnvironment(t *testing.T) {
	srv := startFake(t, fakeollama.Rule{Name: "r", Reply: "hi"})
	c, err := llm.New(llm.Config{
		Models: map[llm.Role]string{llm.RoleGenerator: genModel},
		Getenv: func(k string) string {
			if k == "OLLAMA_HOST" {
				return srv.Addr() // scheme-less host:port, as users write it
			}
			return ""
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.BaseURL() != srv.URL() {
		t.Fatalf("base %s, want %s", c.BaseURL(), srv.URL())
	}
	if resp, err := c.Chat(context.Background(), llm.ChatRequest{}); err != nil || resp.Content != "hi" {
		t.Fatalf("%+v %v", resp, err)
	}
}

func TestPerCallTimeout(t *testing.T) {
	srv := startFake(t, fakeollama.Rule{Name: "slow", Reply: "late", Delay: 10 * time.Minute}) // never answers in time
	c := newClient(t, srv, func(cfg *llm.Config) { cfg.CallTimeout = 100 * time.Millisecond; cfg.MaxRetries = 1 })
	_, err := c.Chat(context.Background(), llm.ChatRequest{Step: "gen"})
	if !errors.Is(err, llm.ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	t.Logf("error: %v", err)
	if errors.Is(err, context.Canceled) {
		t.Fatalf("timeout reported as caller cancellation: %v", err)
	}
	if n := srv.Hits("slow"); n != 2 {
		t.Fatalf("%d attempts, want 2 (1 retry)", n)
	}
}

func TestContextCancelReturnsPromptly(t *testing.T) {
	srv := startFake(t, fakeollama.Rule{Name: "slow", Reply: "late", Delay: 10 * time.Minute}) // never answers
	c := newClient(t, srv, nil)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := c.Chat(ctx, llm.ChatRequest{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	t.Logf("error: %v", err)
	if errors.Is(err, llm.ErrTimeout) {
		t.Fatalf("cancel reported as timeout")
	}
	if n := srv.Hits("slow"); n != 1 {
		t.Fatalf("cancelled call was retried: %d requests", n)
	}
	// A deadline on the caller's ctx is the caller's, not a per-call timeout.
	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	if _, err := c.Chat(dctx, llm.ChatRequest{}); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, llm.ErrTimeout) {
		t.Fatalf("caller deadline: err = %v", err)
	}
}

func TestRetriesBounded(t *testing.T) {
	srv := startFake(t, fakeollama.Rule{Name: "boom", Status: 500, Error: "llama runner process has terminated"})
	c := newClient(t, srv, nil)
	_, err := c.Chat(context.Background(), llm.ChatRequest{})
	if !errors.Is(err, llm.ErrServer) {
		t.Fatalf("err = %v, want ErrServer", err)
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), "llama runner process has terminated") {
		t.Fatalf("server message lost: %v", err)
	}
	if n := srv.Hits("boom"); n != 1+llm.DefaultMaxRetries {
		t.Fatalf("%d requests, want %d", n, 1+llm.DefaultMaxRetries)
	}

	// No retries configured.
	srv.Reset()
	c0 := newClient(t, srv, func(cfg *llm.Config) { cfg.MaxRetries = -1 })
	if _, err := c0.Chat(context.Background(), llm.ChatRequest{}); !errors.Is(err, llm.ErrServer) {
		t.Fatal(err)
	}
	if n := srv.Hits("boom"); n != 1 {
		t.Fatalf("%d requests with retries off", n)
	}

	// A 4xx other than a missing model is not retried either.
	srv.SetRules(fakeollama.Rule{Name: "bad", Status: 400, Error: "invalid format"})
	if _, err := c.Chat(context.Background(), llm.ChatRequest{}); !errors.Is(err, llm.ErrServer) {
		t.Fatal(err)
	}
	if n := srv.Hits("bad"); n != 1 {
		t.Fatalf("400 retried: %d", n)
	}
}

func TestRetryRecovers(t *testing.T) {
	tests := []struct {
		name  string
		fault fakeollama.Rule
	}{
		{"500 once", fakeollama.Rule{Status: 503, Error: "busy"}},
		{"garbage body once", fakeollama.Rule{Fault: fakeollama.FaultGarbage}},
		{"connection dropped once", fakeollama.Rule{Fault: fakeollama.FaultDrop}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.fault
			f.Name, f.Times = "fault", 1
			srv := startFake(t, f, fakeollama.Rule{Name: "ok", Reply: "SELECT 1", EvalTokens: 2})
			c := newClient(t, srv, nil)
			resp, err := c.Chat(context.Background(), llm.ChatRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Content != "SELECT 1" || resp.Attempts != 2 || resp.CompletionTokens != 2 {
				t.Fatalf("resp %+v", resp)
			}
			if srv.Hits("fault") != 1 || srv.Hits("ok") != 1 {
				t.Fatalf("hits fault=%d ok=%d", srv.Hits("fault"), srv.Hits("ok"))
			}
		})
	}
}

func TestPersistentGarbageBody(t *testing.T) {
	srv := startFake(t, fakeollama.Rule{Name: "g", Fault: fakeollama.FaultGarbage})
	c := newClient(t, srv, nil)
	_, err := c.Chat(context.Background(), llm.ChatRequest{})
	t.Logf("error: %v", err)
	if err == nil {
		t.Fatal("garbage body accepted")
	}
	var le *llm.Error
	if !errors.As(err, &le) {
		t.Fatalf("err %T %v", err, err)
	}
	if srv.Hits("g") != 1+llm.DefaultMaxRetries {
		t.Fatalf("hits %d", srv.Hits("g"))
	}
}

func TestEmbed(t *testing.T) {
	srv := startFake(t)
	c := newClient(t, srv, func(cfg *llm.Config) { cfg.EmbedBatch = 2 })
	texts := []string{"orders by customer", "customer orders", "weather in paris", "x", "y"}
	emb := c.Embedder("")
	if emb.Model() != embedModel {
		t.Fatalf("model %q", emb.Model())
	}
	vecs, err := emb.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	if len(vecs) != len(texts) {
		t.Fatalf("%d vectors", len(vecs))
	}
	for i, v := range vecs {
		want := fakeollama.Embedding(texts[i], 64)
		if len(v) != 64 || v[0] != want[0] || v[63] != want[63] {
			t.Fatalf("vector %d not the server's (order lost?)", i)
		}
	}
	reqs := srv.RequestsTo(fakeollama.RouteEmbed)
	if len(reqs) != 3 || len(reqs[0].Input) != 2 || len(reqs[2].Input) != 1 || reqs[2].Input[0] != "y" {
		t.Fatalf("batches: %+v", reqs)
	}
	if v, err := c.Embed(context.Background(), "", nil); err != nil || v != nil {
		t.Fatalf("empty input: %v %v", v, err)
	}
	c2 := newClient(t, srv, func(cfg *llm.Config) { delete(cfg.Models, llm.RoleEmbedding) })
	if _, err := c2.Embed(context.Background(), "", []string{"a"}); !errors.Is(err, llm.ErrNoModel) {
		t.Fatalf("err = %v, want ErrNoModel", err)
	}
}

func TestEmbedRetriesServerError(t *testing.T) {
	srv := startFake(t, fakeollama.Rule{Name: "down", Route: fakeollama.RouteEmbed, Status: 500, Times: 1})
	c := newClient(t, srv, nil)
	vecs, err := c.Embed(context.Background(), "", []string{"a", "b"})
	if err != nil || len(vecs) != 2 {
		t.Fatalf("%v %v", vecs, err)
	}
	if n := len(srv.RequestsTo(fakeollama.RouteEmbed)); n != 2 {
		t.Fatalf("%d embed requests", n)
	}
}

func TestListModels(t *testing.T) {
	srv := startFake(t)
	c := newClient(t, srv, nil)
	got, err := c.ListModels(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{genModel, smallModel, embedModel + ":latest"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("got %v want %v", got, want)
	}
}

func TestConcurrentCalls(t *testing.T) {
	srv := startFake(t, fakeollama.Rule{Name: "echo", ReplyFunc: func(v fakeollama.ChatView) string { return "re: " + v.LastUser() }})
	c := newClient(t, srv, nil)
	errs := make(chan error, 16)
	for i := range 16 {
		go func() {
			q := strings.Repeat("q", i+1)
			resp, err := c.Chat(context.Background(), llm.ChatRequest{Messages: []llm.Message{{Role: "user", Content: q}}})
			if err == nil && resp.Content != "re: "+q {
				err = errors.New("crossed answers: " + resp.Content)
			}
			errs <- err
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// An answer that never ends and never repeats is cut at MaxAnswerBytes: a
// clear ErrBadOutput, not retried, and the client holds no more than the cap.
func TestChatEndlessAnswer(t *testing.T) {
	srv := startFake(t, fakeollama.Rule{Name: "endless", Reply: "SELECT 1 UNION ALL", Fault: fakeollama.FaultEndlessVaried})
	c := newClient(t, srv, func(cfg *llm.Config) { cfg.MaxAnswerBytes = 64 << 10; cfg.MaxRetries = 3 })
	_, err := c.Chat(context.Background(), llm.ChatRequest{Messages: []llm.Message{{Role: "user", Content: "x"}}})
	var le *llm.Error
	if !errors.Is(err, llm.ErrBadOutput) || !errors.As(err, &le) || le.Attempts != 1 {
		t.Fatalf("err = %v, want ErrBadOutput after one attempt", err)
	}
	if !strings.Contains(err.Error(), "size limit") {
		t.Errorf("error %q does not say the answer was too long", err)
	}
}
