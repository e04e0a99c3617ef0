package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"go.uber.org/zap"
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
	s.mu.Lock()
	pid := s.realPID
	s.mu.Unlock()
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
	s.mu.Lock()
	pid := s.realPID
	s.mu.Unlock()
	rec := &AskRecord{
		Time: start, Duration: time.Since(start), User: s.user, Database: s.database, Client: s.clientAddr,
		BackendPID: pid, Kind: m.Kind, Question: m.Question, Err: perr,
	}
	rec.Report = tr.Report // a failed ask's too: what the engine did before it failed
	s.srv.OnAsk(rec)
}

// AuditLog writes one JSON line per ask to W. Safe for concurrent use.
type AuditLog struct {
	W io.Writer
	// RedactQuestions replaces the question with a digest (equal questions
	// keep equal digests, so repeats can still be counted).
	RedactQuestions bool
	// RedactLiterals replaces constants in the SQL with $1, $2… and quoted
	// text and numbers in the question with ?.
	RedactLiterals bool

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
	if a.RedactLiterals {
		l.SQL = RedactSQL(l.SQL)
		l.Question = redactQuestionLiterals(l.Question)
		l.Error = "" // server messages quote values
	}
	if a.RedactQuestions {
		l.Question = QuestionDigest(r.Question)
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

// QuestionDigest stands for a redacted question.
func QuestionDigest(q string) string {
	sum := sha256.Sum256([]byte(q))
	return "redacted:" + hex.EncodeToString(sum[:8])
}

// RedactSQL replaces every constant in sql with a parameter symbol, as
// pg_stat_statements shows queries; SQL that does not parse is withheld.
func RedactSQL(sql string) string {
	if sql == "" {
		return ""
	}
	out, err := pg_query.Normalize(sql)
	if err != nil {
		return "[redacted]"
	}
	return out
}

// redactQuestionLiterals replaces quoted text and numbers in a question
// with "?": those are where names, ids and amounts appear.
func redactQuestionLiterals(q string) string {
	var b strings.Builder
	rs := []rune(q)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == '\'' || c == '"' || c == '“' || c == '‘' || c == '«':
			closeWith := map[rune]rune{'\'': '\'', '"': '"', '“': '”', '‘': '’', '«': '»'}[c]
			j := i + 1
			for j < len(rs) && rs[j] != closeWith {
				j++
			}
			if j == len(rs) { // unbalanced: an apostrophe in a word
				b.WriteRune(c)
				continue
			}
			b.WriteString("?")
			i = j
		case unicode.IsDigit(c):
			// 1,250.75 is one number: a separator counts when a digit follows.
			for i+1 < len(rs) && (unicode.IsDigit(rs[i+1]) ||
				(rs[i+1] == '.' || rs[i+1] == ',') && i+2 < len(rs) && unicode.IsDigit(rs[i+2])) {
				i++
			}
			b.WriteString("?")
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}
