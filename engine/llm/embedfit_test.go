package llm_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/engine/llm"
)

// contextServer answers /api/embed and /v1/embeddings as Ollama v0.17.4
// does for all-MiniLM-L6-v2 when a text is too long for the model (400
// "the input length exceeds the context length"; recorded from the real
// server), else one vector per text holding its length in runes.
type contextServer struct {
	limit int // runes
	mu    sync.Mutex
	sent  [][]string
}

func (s *contextServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Input []string `json:"input"`
	}
	b, _ := io.ReadAll(r.Body)
	json.Unmarshal(b, &req)
	s.mu.Lock()
	s.sent = append(s.sent, req.Input)
	s.mu.Unlock()
	for _, t := range req.Input {
		if utf8.RuneCountInString(t) > s.limit {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":"the input length exceeds the context length"}`)
			return
		}
	}
	vecs := make([][]float32, len(req.Input))
	data := make([]map[string]any, len(req.Input))
	for i, t := range req.Input {
		vecs[i] = []float32{float32(utf8.RuneCountInString(t))}
		data[i] = map[string]any{"index": i, "embedding": vecs[i]}
	}
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		json.NewEncoder(w).Encode(map[string]any{"data": data})
		return
	}
	json.NewEncoder(w).Encode(map[string]any{"embeddings": vecs})
}

func TestEmbedCutsTextsTooLongForTheContext(t *testing.T) {
	long := strings.Repeat("Mark’s Bistro — café; ", 50) // 1100 runes
	for _, tt := range []struct {
		name, api, path string
		texts           []string
		limit           int
		want            []float32 // rune counts the server embedded
		requests        int
		fails           bool
	}{
		{"fits", "", "", []string{"short", long}, 2000, []float32{5, 1100}, 1, false},
		{"halved twice", "", "", []string{"short", long}, 300, []float32{5, 275}, 3, false},
		{"first cut", "", "", []string{strings.Repeat("x", 5000), "y"}, 1500, []float32{1024, 1}, 2, false},
		{"openai", llm.APIOpenAI, "/v1", []string{long}, 600, []float32{550}, 2, false},
		// 1100, 550, 275, 137 runes; cutting stops short of 128: the server's
		// limit is then not about length.
		{"gives up", "", "", []string{long}, 10, nil, 4, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := &contextServer{limit: tt.limit}
			hs := httptest.NewServer(srv)
			defer hs.Close()
			c, err := llm.NewPool(llm.Config{Host: hs.URL + tt.path, API: tt.api, Models: map[llm.Role]string{llm.RoleEmbedding: "minilm"},
				MaxRetries: -1, Logger: zap.NewNop()}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			vecs, err := c.Embed(t.Context(), "", tt.texts)
			if tt.fails != (err != nil) {
				t.Fatalf("err = %v, want failure %v", err, tt.fails)
			}
			if len(srv.sent) != tt.requests {
				t.Errorf("%d requests, want %d", len(srv.sent), tt.requests)
			}
			for i, w := range tt.want {
				if vecs[i][0] != w {
					t.Errorf("text %d: the server embedded %v runes, want %v", i, vecs[i][0], w)
				}
			}
		})
	}
}
