package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/internal/redact"
)

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestAuditLogRecord(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	answered := &AskRecord{Time: at, Duration: 1500 * time.Millisecond, User: "ann", Database: "shop", Client: "10.0.0.9:5000",
		BackendPID: 42, Kind: MarkerAsk, Question: "orders of 'Ada' over 10",
		Report: &AskReport{Role: "analyst", SQL: "SELECT * FROM orders WHERE customer = 'Ada' AND amount > 10", LLMCalls: 2, PromptTokens: 900, CompletionTokens: 40}}
	failed := &AskRecord{Time: at, User: "ann", Database: "shop", Client: "[local]", Kind: MarkerAskSQL, Question: "delete 'x'",
		Err: &PgError{Code: "42501", Message: "value 'x' is secret"}}
	for _, tc := range []struct {
		name             string
		rec              *AskRecord
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

func TestRedactRecord(t *testing.T) {
	const secret = "Ada-4711"
	rec := &AskRecord{User: "ann", Kind: MarkerAsk, Question: "orders of '" + secret + "' " + strings.Repeat("please ", 1<<20),
		Err: &PgError{Code: "22P02", Message: `invalid input syntax for type integer: "` + secret + `"`},
		Report: &AskReport{SQL: "SELECT * FROM orders WHERE customer = '" + secret + "'",
			Stages:     []AskStage{{Name: "keywords", Note: "orders, " + secret}, {Name: "trial", Note: "guard: function " + secret + " refused"}},
			Candidates: []AskCandidate{{SQL: "SELECT '" + secret + "'", Problem: `column "` + secret + `" does not exist`}}}}
	orig, _ := json.Marshal(rec)
	for _, tc := range []struct {
		name string
		p    redact.Policy
		hide bool
	}{
		{"off: bounded only", redact.Policy{}, false},
		{"question and literals", redact.Policy{Questions: true, Literals: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := json.Marshal(RedactRecord(rec, tc.p))
			if err != nil {
				t.Fatal(err)
			}
			if len(out) > 8*redact.MaxField {
				t.Errorf("record is %d bytes", len(out))
			}
			if got := strings.Contains(string(out), secret); got == tc.hide {
				t.Errorf("secret shown: %v, want %v: %s", got, !tc.hide, out)
			}
			if tc.hide && !strings.Contains(string(out), `"Note":"guard: [redacted]"`) {
				t.Errorf("the guard note lost its label: %s", out)
			}
		})
	}
	if now, _ := json.Marshal(rec); string(now) != string(orig) {
		t.Error("RedactRecord changed its argument")
	}
}
