package admin

import (
	"context"
	"errors"
	"github.com/nlproxy/nlproxy/internal/askreport"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/internal/metrics"
	"github.com/nlproxy/nlproxy/proxy"
)

func get(t *testing.T, h http.Handler, url string, header ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReadyz(t *testing.T) {
	ok := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name   string
		checks []Check
		code   int
		want   []string
	}{
		{"none", nil, 200, []string{"ready"}},
		{"all ok", []Check{{Name: "upstream", Check: ok}, {Name: "catalog", Check: ok}}, 200, []string{"ready", "upstream: ok", "catalog: ok"}},
		{"one missing", []Check{{Name: "upstream", Check: ok}, {Name: "ollama", Check: func(context.Context) error { return errors.New("connection refused") }}},
			503, []string{"not ready", "upstream: ok", "ollama: connection refused"}},
		// A note under a passing check: the model's system prompt is folded.
		{"ok with a note", []Check{{Name: "ollama", Check: ok, Notes: func() []string {
			return []string{"model base has no chat template: the system prompt is folded into the user message"}
		}}},
			200, []string{"ready", "ollama: ok", "ollama: note: model base has no chat template: the system prompt is folded into the user message"}},
		{"slow check times out", []Check{{Name: "catalog", Check: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}},
			503, []string{"catalog: context deadline exceeded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{Checks: tc.checks, CheckTimeout: 50 * time.Millisecond}
			r := get(t, s.Handler(), "/readyz")
			b := body(t, r)
			if r.StatusCode != tc.code {
				t.Errorf("status %d, want %d: %s", r.StatusCode, tc.code, b)
			}
			for _, w := range tc.want {
				if !strings.Contains(b, w) {
					t.Errorf("body lacks %q: %s", w, b)
				}
			}
		})
	}
}

func TestPageAuth(t *testing.T) {
	const token = "0123456789abcdef-token"
	asks := NewRecent(10)
	asks.Add(&proxy.AskRecord{Time: time.Now(), User: "ann", Database: "shop", Question: "<script>alert(1)</script>",
		Report: &askreport.Report{SQL: "SELECT 1", Stages: []askreport.Stage{{Name: "generate", Note: "picked 1 of 3"}}}})
	// A call from an agent over MCP is listed among the asks, its tool named.
	asks.Add(&proxy.AskRecord{Time: time.Now(), User: "bob", Database: "shop", Client: "10.0.0.7", Tool: "query",
		Report: &askreport.Report{SQL: "SELECT 2", Confidence: -1}})
	s := &Server{Token: token, Asks: asks, Catalogs: func() []catalog.Status { return []catalog.Status{{Database: "shop", Loaded: true, Tables: 4}} }}
	h := s.Handler()
	for _, tc := range []struct {
		name   string
		url    string
		header []string
		code   int
	}{
		{"no token", "/", nil, 401},
		{"wrong bearer", "/", []string{"Authorization", "Bearer nope"}, 401},
		{"wrong query", "/?token=nope", nil, 401},
		{"bearer", "/", []string{"Authorization", "Bearer " + token}, 200},
		{"cookie", "/", []string{"Cookie", cookieName + "=" + token}, 200},
		{"query", "/?token=" + token, nil, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := get(t, h, tc.url, tc.header...)
			b := body(t, r)
			if r.StatusCode != tc.code {
				t.Fatalf("status %d, want %d", r.StatusCode, tc.code)
			}
			if tc.code != 200 {
				if strings.Contains(b, "shop") {
					t.Error("refused page shows data")
				}
				return
			}
			if strings.Contains(b, "<script>") || !strings.Contains(b, "&lt;script&gt;") {
				t.Error("question not escaped")
			}
			for _, w := range []string{"picked 1 of 3", `<tr class="catalog"><td>shop</td>`, "<td>10.0.0.7 (MCP query)</td>"} {
				if !strings.Contains(b, w) {
					t.Errorf("page lacks %q", w)
				}
			}
			if tc.name == "query" && !strings.Contains(r.Header.Get("Set-Cookie"), cookieName+"=") {
				t.Error("token in the query did not set the cookie")
			}
		})
	}
	if r := get(t, (&Server{}).Handler(), "/"); r.StatusCode != 404 {
		t.Errorf("page without a configured token: %d, want 404", r.StatusCode)
	}
}

func TestRecent(t *testing.T) {
	r := NewRecent(3)
	if got := r.List(); len(got) != 0 {
		t.Fatalf("empty ring lists %d", len(got))
	}
	for i := range 5 {
		r.Add(&proxy.AskRecord{Question: string(rune('a' + i))})
	}
	var qs []string
	for _, a := range r.List() {
		qs = append(qs, a.Question)
	}
	if strings.Join(qs, "") != "edc" {
		t.Errorf("newest first = %v, want e d c", qs)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	m := metrics.New()
	m.ObserveAsk(metrics.Ask{Outcome: "failed", Profile: "fast", SQLState: "42N01", Duration: time.Second})
	b := body(t, get(t, (&Server{Metrics: m}).Handler(), "/metrics"))
	if !strings.Contains(b, `nlproxy_asks_total{outcome="failed",profile="fast",sqlstate="42N01"} 1`) {
		t.Errorf("metrics lack the ask:\n%s", b)
	}
	if r := get(t, (&Server{}).Handler(), "/metrics"); r.StatusCode != 404 {
		t.Errorf("/metrics without metrics: %d", r.StatusCode)
	}
}
