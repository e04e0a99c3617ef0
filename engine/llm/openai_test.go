package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/engine/llm"
)

// oaServer is an OpenAI-compatible endpoint whose chat handler the test
// writes; it records every chat request body it gets.
type oaServer struct {
	*httptest.Server
	chats atomic.Int32
	last  atomic.Value // map[string]any of the latest chat request
	auth  atomic.Value // latest Authorization header
}

func newOAServer(t *testing.T, chat http.HandlerFunc) *oaServer {
	t.Helper()
	s := &oaServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		s.chats.Add(1)
		s.auth.Store(r.Header.Get("Authorization"))
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		s.last.Store(body)
		chat(w, r.WithContext(context.WithValue(r.Context(), bodyKey{}, body)))
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"gen"},{"id":"emb"}]}`)
	})
	mux.HandleFunc("POST /v1/embeddings", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Input []string `json:"input"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		// Out of order on purpose: the client sorts by index.
		var data []string
		for i := len(req.Input) - 1; i >= 0; i-- {
			data = append(data, fmt.Sprintf(`{"index":%d,"embedding":[%d,0.5]}`, i, len(req.Input[i])))
		}
		fmt.Fprintf(w, `{"data":[%s]}`, strings.Join(data, ","))
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

type bodyKey struct{}

func newOAClient(t *testing.T, url string, mod func(*llm.Config)) *llm.OpenAIClient {
	t.Helper()
	cfg := llm.Config{
		API:          llm.APIOpenAI,
		Host:         url,
		Models:       map[llm.Role]string{llm.RoleGenerator: "gen", llm.RoleEmbedding: "emb"},
		RetryBackoff: time.Millisecond,
		CallTimeout:  30 * time.Second,
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := llm.NewOpenAI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sse(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, e := range events {
		fmt.Fprintf(w, "data: %s\n\n", e)
	}
}

func userAsk(q string) llm.ChatRequest {
	return llm.ChatRequest{System: "You write PostgreSQL.", Messages: []llm.Message{{Role: llm.SpeakerUser, Content: q}}, Step: "generate"}
}

func TestOpenAIChatStream(t *testing.T) {
	srv := newOAServer(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w,
			`{"model":"gen-1","choices":[{"delta":{"role":"assistant","content":"SELECT "}}]}`,
			`{"choices":[{"delta":{"content":"1;"},"finish_reason":"stop"}]}`,
			`{"choices":[],"usage":{"prompt_tokens":31,"completion_tokens":4}}`,
			`[DONE]`)
	})
	c := newOAClient(t, srv.URL, func(c *llm.Config) { c.APIKey = "s3cret" })
	resp, err := c.Chat(t.Context(), userAsk("one"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Content != "SELECT 1;" || resp.PromptTokens != 31 || resp.CompletionTokens != 4 || resp.DoneReason != "stop" || resp.Model != "gen-1" || resp.Attempts != 1 {
		t.Fatalf("resp = %+v", resp)
	}
	if got := srv.auth.Load(); got != "Bearer s3cret" {
		t.Fatalf("Authorization = %v", got)
	}
	body := srv.last.Load().(map[string]any)
	if body["stream"] != true || body["model"] != "gen" || body["max_tokens"] != float64(llm.DefaultMaxTokens) {
		t.Fatalf("request = %v", body)
	}
	if so, _ := body["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Fatalf("stream_options = %v", body["stream_options"])
	}
	msgs := body["messages"].([]any)
	if len(msgs) != 2 || msgs[0].(map[string]any)["role"] != "system" {
		t.Fatalf("messages = %v", msgs)
	}
	if _, ok := body["response_format"]; ok {
		t.Fatalf("response_format sent without a schema: %v", body)
	}
}

func TestOpenAIChatNotStreamed(t *testing.T) {
	// A server that ignores stream:true and answers with one completion.
	srv := newOAServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"model":"gen","choices":[{"message":{"role":"assistant","content":"SELECT 2"},"finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":2}}`)
	})
	resp, err := newOAClient(t, srv.URL, nil).Chat(t.Context(), userAsk("two"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Content != "SELECT 2" || resp.DoneReason != "length" || resp.PromptTokens != 9 || resp.CompletionTokens != 2 {
		t.Fatalf("resp = %+v", resp)
	}
}

func TestOpenAIResponseFormat(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"sql":{"type":"string"}},"required":["sql"]}`)
	srv := newOAServer(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w, `{"choices":[{"delta":{"content":"{\"sql\":\"SELECT 1\"}"},"finish_reason":"stop"}]}`, `[DONE]`)
	})
	c := newOAClient(t, srv.URL, nil)
	for _, tc := range []struct {
		schema json.RawMessage
		want   string
	}{
		{schema, `{"json_schema":{"name":"answer","schema":{"properties":{"sql":{"type":"string"}},"required":["sql"],"type":"object"},"strict":true},"type":"json_schema"}`},
		{json.RawMessage(`"json"`), `{"type":"json_object"}`},
	} {
		req := userAsk("json")
		req.JSONSchema = tc.schema
		if _, err := c.Chat(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(srv.last.Load().(map[string]any)["response_format"])
		if string(got) != tc.want {
			t.Fatalf("response_format = %s, want %s", got, tc.want)
		}
	}
}

func TestOpenAIResponseFormatUnsupported(t *testing.T) {
	// The first request with response_format is refused; the client asks
	// again without it, and leaves it out from then on.
	srv := newOAServer(t, func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Context().Value(bodyKey{}).(map[string]any)["response_format"]; ok {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"message":"unsupported parameter: response_format","type":"invalid_request_error"}}`)
			return
		}
		sse(w, `{"choices":[{"delta":{"content":"{}"},"finish_reason":"stop"}]}`, `[DONE]`)
	})
	c := newOAClient(t, srv.URL, nil)
	req := userAsk("json")
	req.JSONSchema = json.RawMessage(`"json"`)
	for i := range 2 {
		resp, err := c.Chat(t.Context(), req)
		if err != nil || resp.Content != "{}" {
			t.Fatalf("call %d: %+v, %v", i, resp, err)
		}
	}
	if n := srv.chats.Load(); n != 3 {
		t.Fatalf("server saw %d chat requests, want 3 (refused, retried, then without)", n)
	}
}

func TestOpenAIHostileServers(t *testing.T) {
	endless := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		// Never the same text twice: the repetition check does not end it.
		for i := 0; r.Context().Err() == nil; i++ {
			if _, err := fmt.Fprintf(w, `data: {"choices":[{"delta":{"content":"SELECT %d, "}}]}`+"\n\n", i); err != nil {
				return
			}
		}
	}
	for _, tc := range []struct {
		name     string
		handler  http.HandlerFunc
		kind     error
		attempts int // requests the client makes (0: not checked)
	}{
		{"garbage", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {not json\n\n")
		}, llm.ErrBadOutput, 3},
		{"garbage json body", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "<html>proxy error</html>")
		}, llm.ErrBadOutput, 3},
		{"endless stream", endless, llm.ErrBadOutput, 1},
		{"endless keep-alives", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			for r.Context().Err() == nil {
				if _, err := io.WriteString(w, ": keep-alive\n"); err != nil {
					return
				}
			}
		}, llm.ErrBadOutput, 1},
		{"oversized line", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: "+strings.Repeat("x", 3<<20)+"\n\n")
		}, llm.ErrBadOutput, 1},
		{"cut off", func(w http.ResponseWriter, r *http.Request) {
			sse(w, `{"choices":[{"delta":{"content":"SELECT"}}]}`)
		}, llm.ErrServer, 3},
		{"error event", func(w http.ResponseWriter, r *http.Request) {
			sse(w, `{"error":{"message":"out of memory"}}`)
		}, llm.ErrServer, 3},
		{"model missing", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"message":"model \"gen\" not found, try pulling it first"}}`)
		}, llm.ErrModelMissing, 1},
		{"unauthorized", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":"invalid api key"}`)
		}, llm.ErrServer, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newOAServer(t, tc.handler)
			c := newOAClient(t, srv.URL, func(c *llm.Config) { c.MaxAnswerBytes = 1 << 10 })
			_, err := c.Chat(t.Context(), userAsk("q"))
			if !errors.Is(err, tc.kind) {
				t.Fatalf("err = %v, want kind %v", err, tc.kind)
			}
			if n := srv.chats.Load(); tc.attempts > 0 && int(n) != tc.attempts {
				t.Fatalf("%d requests, want %d (err %v)", n, tc.attempts, err)
			}
		})
	}
}

func TestOpenAIPerCallTimeout(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv := newOAServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	c := newOAClient(t, srv.URL, func(c *llm.Config) { c.CallTimeout = 50 * time.Millisecond; c.MaxRetries = -1 })
	_, err := c.Chat(t.Context(), userAsk("slow"))
	if !errors.Is(err, llm.ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
}

func TestOpenAIEmbedAndList(t *testing.T) {
	srv := newOAServer(t, func(w http.ResponseWriter, r *http.Request) {})
	c := newOAClient(t, srv.URL+"/v1/", func(c *llm.Config) { c.EmbedBatch = 2 })
	vecs, err := c.Embed(t.Context(), "", []string{"a", "bb", "ccc"})
	if err != nil {
		t.Fatal(err)
	}
	if len(vecs) != 3 || vecs[0][0] != 1 || vecs[1][0] != 2 || vecs[2][0] != 3 {
		t.Fatalf("vectors = %v", vecs)
	}
	models, err := c.ListModels(t.Context())
	if err != nil || strings.Join(models, ",") != "gen,emb" {
		t.Fatalf("models = %v, %v", models, err)
	}
	// Bare ids match configured names (both get Ollama's implicit tag).
	if err := llm.CheckModels(t.Context(), c, c.Config()); err != nil {
		t.Fatalf("CheckModels = %v", err)
	}
}

func TestOpenAIEmbedWrongCount(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/embeddings", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"data":[{"index":0,"embedding":[1]}]}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	_, err := newOAClient(t, srv.URL, nil).Embed(t.Context(), "", []string{"a", "b"})
	if !errors.Is(err, llm.ErrBadOutput) {
		t.Fatalf("err = %v, want ErrBadOutput", err)
	}
}

func TestNewBackend(t *testing.T) {
	for _, tc := range []struct {
		api, host, want string
		wantErr         bool
	}{
		{"", "127.0.0.1:11434", "http://127.0.0.1:11434", false},
		{"openai", "http://127.0.0.1:8080", "http://127.0.0.1:8080/v1", false},
		{"openai", "http://127.0.0.1:8080/api/v1/", "http://127.0.0.1:8080/api/v1", false},
		{"grpc", "127.0.0.1", "", true},
	} {
		b, err := llm.NewBackend(llm.Config{API: tc.api, Host: tc.host})
		if tc.wantErr {
			if err == nil {
				t.Fatalf("%s: no error", tc.api)
			}
			continue
		}
		if err != nil || b.BaseURL() != tc.want {
			t.Fatalf("%s %s: %v, %v; want %s", tc.api, tc.host, b, err, tc.want)
		}
	}
}

func TestOpenAIPoolFailsOver(t *testing.T) {
	down := newOAServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"message":"loading model"}}`)
	})
	up := newOAServer(t, func(w http.ResponseWriter, r *http.Request) {
		sse(w, `{"choices":[{"delta":{"content":"SELECT 1"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`, `[DONE]`)
	})
	p, err := llm.NewPool(llm.Config{API: llm.APIOpenAI, Models: map[llm.Role]string{llm.RoleGenerator: "gen"}, RetryBackoff: time.Millisecond},
		[]string{down.URL, up.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		resp, err := p.Chat(t.Context(), userAsk("q"))
		if err != nil || resp.Content != "SELECT 1" || resp.PromptTokens != 3 {
			t.Fatalf("call %d: %+v, %v", i, resp, err)
		}
	}
	if down.chats.Load() == 0 || up.chats.Load() != 3 {
		t.Fatalf("down saw %d, up %d chats; want down tried and up answering all 3", down.chats.Load(), up.chats.Load())
	}
	if got := p.BaseURL(); got != down.URL+"/v1,"+up.URL+"/v1" {
		t.Fatalf("BaseURL = %s", got)
	}
}
