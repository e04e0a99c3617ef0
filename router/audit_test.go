package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/internal/askreport"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/redact"
	"github.com/nlproxy/nlproxy/proxy"
)

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestAuditLogRecord(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	answered := &proxy.AskRecord{Time: at, Duration: 1500 * time.Millisecond, User: "ann", Database: "shop", Client: "10.0.0.9:5000",
		BackendPID: 42, Kind: proxy.MarkerAsk, Question: "orders of 'Ada' over 10",
		Report: &askreport.Report{Role: "analyst", SQL: "SELECT * FROM orders WHERE customer = 'Ada' AND amount > 10", LLMCalls: 2, PromptTokens: 900, CompletionTokens: 40}}
	failed := &proxy.AskRecord{Time: at, User: "ann", Database: "shop", Client: "[local]", Kind: proxy.MarkerAskSQL, Question: "delete 'x'",
		Err: &pg.Error{Code: "42501", Message: "value 'x' is secret"}}
	for _, tc := range []struct {
		name             string
		rec              *proxy.AskRecord
		question, sql    bool
		want             map[string]any
		absent, mustHave []string
	}{
		{name: "plain", rec: answered, want: map[string]any{"user": "ann", "role": "analyst", "database": "shop", "client": "10.0.0.9:5000",
			"backend_pid": 42.0, "outcome": "answered", "duration_ms": 1500.0, "llm_calls": 2.0, "prompt_tokens": 900.0, "completion_tokens": 40.0,
			"question": "orders of 'Ada' over 10", "time": "2026-01-02T03:04:05Z"}},
		{name: "literals", rec: answered, sql: true, want: map[string]any{"question": "orders of ? over ?",
			"sql": "SELECT * FROM orders WHERE customer = $1 AND amount > $2"}, absent: []string{"Ada"}},
		{name: "question", rec: answered, question: true, want: map[string]any{"question": redact.Digest("orders of 'Ada' over 10")},
			mustHave: []string{"'Ada'"}}, // the SQL keeps its literals unless asked
		{name: "failed", rec: failed, want: map[string]any{"outcome": "failed", "sqlstate": "42501", "error": "value 'x' is secret"}},
		{name: "failed redacted", rec: failed, sql: true, question: true, want: map[string]any{"outcome": "failed", "sqlstate": "42501"},
			absent: []string{"secret", "'x'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			a := &AuditLog{W: &buf, RedactQuestions: tc.question, RedactLiterals: tc.sql}
			if err := a.Record(tc.rec); err != nil {
				t.Fatal(err)
			}
			line := buf.String()
			if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
				t.Fatalf("not one line: %q", line)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(line), &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %#v, want %#v", k, got[k], v)
				}
			}
			for _, s := range tc.absent {
				if strings.Contains(line, s) {
					t.Errorf("line contains %q: %s", s, line)
				}
			}
			for _, s := range tc.mustHave {
				if !strings.Contains(line, s) {
					t.Errorf("line lacks %q: %s", s, line)
				}
			}
		})
	}
	if err := (&AuditLog{W: failWriter{}}).Record(answered); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("write failure = %v", err)
	}
}
