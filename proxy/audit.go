package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/internal/redact"
)

// The session audit trail is a few info lines per session (accepted, ready
// or refused, ended), never per message, and never passwords or statement
// text. Asks are audited separately, one JSON line each (AuditLog).

// countingConn counts the bytes a client connection carries: one atomic add
// per read or write system call, which the relay batches anyway.
type countingConn struct {
	net.Conn
	in, out atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}

// auditStartupFailure records why a connection ended before ReadyForQuery.
func (s *session) auditStartupFailure(err error) {
	if errors.Is(err, errQuiet) { // CancelRequest (logged by Server.cancel) or closed by the server
		return
	}
	var pe *PgError
	if !errors.As(err, &pe) {
		s.log.Info("connection closed during startup", zap.Duration("duration", time.Since(s.started)), zap.Error(err))
		return
	}
	s.srv.Metrics.ConnRefused(pe.Code)
	msg := "session refused"
	if strings.HasPrefix(pe.Code, "28") { // invalid_authorization_specification, invalid_password
		msg = "authentication failed"
	}
	// s.log carries user and database once the startup message was read.
	s.log.Info(msg, zap.String("sqlstate", pe.Code), zap.String("error", pe.Message), zap.Bool("tls", s.clientTLS))
}

func (s *session) auditReady() {
	pid, _ := s.sh.backendKey()
	s.log.Info("session ready", zap.Bool("tls", s.clientTLS), zap.Uint32("backend_pid", pid),
		zap.String("upstream", s.route.Address))
}

func (s *session) auditEnd() {
	s.log.Info("session ended", zap.Duration("duration", time.Since(s.started)),
		zap.Int64("bytes_from_client", s.traffic.in.Load()), zap.Int64("bytes_to_client", s.traffic.out.Load()))
}

// AskReport is the engine's account of how it answered a question (the
// bridge fills it from engine.Result), for the audit log, metrics and the
// admin page. Nothing in it reaches the client.
type AskReport struct {
	Role       string // current_user the ask was answered for
	SQL        string // settled SQL as written
	Profile    string
	Cached     bool
	Confidence float64 // in [0, 1]; negative when the engine could not judge it
	LLMCalls   int
	// PromptTokens and CompletionTokens sum over the stages.
	PromptTokens, CompletionTokens int
	Stages                         []AskStage
	Candidates                     []AskCandidate
}

// AskCandidate is one SQL candidate the engine weighed.
type AskCandidate struct {
	Generator string
	SQL       string
	Fixes     int
	Usable    bool
	Cluster   int    // result cluster among usable candidates; -1 when not usable
	Problem   string // why it is unusable or doubtful
	Chosen    bool
}

// AskStage is one engine stage of an ask.
type AskStage struct {
	Name                           string
	Duration                       time.Duration
	LLMCalls                       int
	PromptTokens, CompletionTokens int
	Note                           string // what it chose and why
}

// AskRecord is one natural-language statement and how it ended.
type AskRecord struct {
	Time       time.Time // when the ask started
	Duration   time.Duration
	User       string
	Database   string
	Client     string // client address; "[local]" on a Unix socket
	BackendPID uint32
	Kind       MarkerKind
	Question   string
	Report     *AskReport // nil when the engine did not get to work (or gave no account)
	Err        *PgError   // nil when answered
}

// Outcome is answered, cached or failed.
func (r *AskRecord) Outcome() string {
	switch {
	case r.Err != nil:
		return "failed"
	case r.Report != nil && r.Report.Cached:
		return "cached"
	}
	return "answered"
}

// reportAsk hands a settled ask to Server.OnAsk.
func (s *session) reportAsk(m Marker, start time.Time, tr *Translation, perr *PgError) {
	pid, _ := s.sh.backendKey()
	rec := &AskRecord{
		Time: start, Duration: time.Since(start), User: s.user, Database: s.database, Client: s.clientAddr,
		BackendPID: pid, Kind: m.Kind, Question: m.Question, Err: perr,
	}
	rec.Report = tr.Report // a failed ask's too: what the engine did before it failed
	// Redacted and bounded once, before it reaches any recorder (audit
	// log, admin page, metrics).
	s.srv.OnAsk(RedactRecord(rec, s.srv.Redact))
}

// RedactRecord is r as a recorder may keep it: every text field (question,
// SQL, candidates, stage notes, error) redacted by p and bounded
// (redact.MaxField). r is not changed.
func RedactRecord(r *AskRecord, p redact.Policy) *AskRecord {
	out := *r
	out.Question = p.Question(r.Question)
	if r.Err != nil {
		e := *r.Err
		e.Message, e.Detail, e.Hint = p.Text(e.Message), p.Text(e.Detail), p.Text(e.Hint)
		out.Err = &e
	}
	if r.Report != nil {
		rep := *r.Report
		rep.SQL = p.SQL(rep.SQL)
		rep.Stages = make([]AskStage, len(r.Report.Stages))
		for i, st := range r.Report.Stages {
			st.Note = p.Note(st.Note)
			rep.Stages[i] = st
		}
		rep.Candidates = make([]AskCandidate, len(r.Report.Candidates))
		for i, c := range r.Report.Candidates {
			c.SQL, c.Problem = p.SQL(c.SQL), p.Text(c.Problem)
			rep.Candidates[i] = c
		}
		out.Report = &rep
	}
	return &out
}

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
func (a *AuditLog) Record(r *AskRecord) error {
	r = RedactRecord(r, redact.Policy{Questions: a.RedactQuestions, Literals: a.RedactLiterals})
	l := auditLine{
		Time: r.Time.UTC().Format(time.RFC3339Nano), User: r.User, Database: r.Database, Client: r.Client,
		BackendPID: r.BackendPID, Kind: r.Kind.String(), Question: r.Question, Outcome: r.Outcome(),
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
