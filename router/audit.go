package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nlproxy/nlproxy/internal/redact"
	"github.com/nlproxy/nlproxy/proxy"
)

// AuditLog writes one JSON line per ask to W. Safe for concurrent use.
// Records from a Server come redacted by Server.Redact already; the flags
// are for records from elsewhere (redact.Policy says what each does).
type AuditLog struct {
	W               io.Writer
	RedactQuestions bool
	RedactLiterals  bool

	mu  sync.Mutex
	buf bytes.Buffer
}

// auditLine is the JSON shape of one ask; field names are part of the
// interface operators parse, so they only ever grow.
type auditLine struct {
	Time             string   `json:"time"`
	User             string   `json:"user"`
	Role             string   `json:"role,omitempty"`
	Database         string   `json:"database"`
	Client           string   `json:"client"`
	BackendPID       uint32   `json:"backend_pid,omitempty"`
	Kind             string   `json:"kind"`
	Tool             string   `json:"mcp_tool,omitempty"`
	Question         string   `json:"question"`
	SQL              string   `json:"sql,omitempty"`
	Outcome          string   `json:"outcome"`
	SQLState         string   `json:"sqlstate,omitempty"`
	Error            string   `json:"error,omitempty"`
	Profile          string   `json:"profile,omitempty"`
	Cached           bool     `json:"cached,omitempty"`
	Confidence       *float64 `json:"confidence,omitempty"`
	DurationMS       int64    `json:"duration_ms"`
	LLMCalls         int      `json:"llm_calls"`
	PromptTokens     int      `json:"prompt_tokens"`
	CompletionTokens int      `json:"completion_tokens"`
}

// Record writes r as one line. A failed write is returned; the ask itself
// is not affected.
func (a *AuditLog) Record(r *proxy.AskRecord) error {
	r = proxy.RedactRecord(r, redact.Policy{Questions: a.RedactQuestions, Literals: a.RedactLiterals})
	l := auditLine{
		Time: r.Time.UTC().Format(time.RFC3339Nano), User: r.User, Database: r.Database, Client: r.Client,
		BackendPID: r.BackendPID, Kind: r.Kind.String(), Tool: r.Tool, Question: r.Question, Outcome: r.Outcome(),
		DurationMS: r.Duration.Milliseconds(),
	}
	if r.Err != nil {
		l.SQLState, l.Error = r.Err.Code, r.Err.Message
	}
	if rep := r.Report; rep != nil {
		l.Role, l.SQL, l.Profile, l.Cached = rep.Role, rep.SQL, rep.Profile, rep.Cached
		if rep.Confidence >= 0 {
			c := rep.Confidence
			l.Confidence = &c
		}
		l.LLMCalls, l.PromptTokens, l.CompletionTokens = rep.LLMCalls, rep.PromptTokens, rep.CompletionTokens
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.buf.Reset()
	enc := json.NewEncoder(&a.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&l); err != nil { // Encode ends the line with '\n'
		return fmt.Errorf("audit: %w", err)
	}
	if _, err := a.W.Write(a.buf.Bytes()); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}
