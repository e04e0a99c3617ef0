package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/askreport"
	"github.com/nlproxy/nlproxy/internal/conversation"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/redact"
)

// Translator turns a natural-language question into SQL. The engine implements it.
type Translator interface {
	Translate(ctx context.Context, req TranslateRequest) (Translation, error)
}

// TranslateRequest is what the proxy knows about the asking session.
type TranslateRequest struct {
	Marker   Marker
	Database string // client startup database
	User     string // client startup user (whose privileges apply is asked of the session)
	TxStatus byte   // 'I', 'T' or 'E' from the last ReadyForQuery
	// ClientEncoding is the session's client_encoding ("" until reported).
	ClientEncoding string
	Exec           sealed.Executor // runs sealed statements on this client's own upstream session
	// Conversation is this session's recent asks, for follow-up questions:
	// the session's own, emptied by DISCARD ALL and gone with the session.
	Conversation *conversation.History
	// Progress sends msg to the client at once as a NOTICE while the ask
	// runs (psql and most drivers show notices as they arrive; JDBC and
	// psycopg keep them with the statement).
	Progress func(msg string)
}

// Translation is the engine's answer.
type Translation struct {
	// Statement runs in place of the marker text. The proxy runs it only
	// inside sealed.RunScope: read-only and under Timeout, whatever the
	// protocol path, transaction state or number of executions.
	Statement sealed.Statement
	// Timeout is the statement_timeout of each run of Statement.
	Timeout time.Duration
	// Notice, when set, is sent as a NoticeResponse (severity NOTICE) before the rows.
	Notice string
	// Notices are sent after Notice, one NoticeResponse each (a question
	// across databases names each database and its SQL).
	Notices []string
	// Rows, when non-nil, is returned instead of running SQL (ask-sql): the
	// proxy sends them as rows, never as SQL text.
	Rows *StaticResult
	// Report, when set, tells how the answer was reached (audit log,
	// metrics, admin page); it never reaches the client.
	Report *askreport.Report
	// Failure, when set, is why the ask failed although the client gets
	// Rows as a normal result (a failed ask-sql: shows its attempt as its
	// row): the recorders (audit log, metrics, admin page) count the ask
	// failed with it.
	Failure error
}

// StaticResult is a small text-typed result the proxy returns as if a query
// produced it.
type StaticResult struct {
	Columns []string
	Rows    [][]*string // nil: NULL
}

// TextRows makes StaticResult rows from strings (none NULL).
func TextRows(rows ...[]string) [][]*string {
	out := make([][]*string, len(rows))
	for i, r := range rows {
		out[i] = make([]*string, len(r))
		for j := range r {
			out[i][j] = &r[j]
		}
	}
	return out
}

// ErrExecutorClosed is returned by Executor.Trial outside a translation or
// after the session closed.
var ErrExecutorClosed = errors.New("proxy: executor not available (no translation in progress or session closed)")

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
	Report     *askreport.Report // nil when the engine did not get to work (or gave no account)
	Err        *pg.Error         // nil when answered
	// Tool is the MCP tool of a call that came over MCP (ask, query, …);
	// "" for the wire.
	Tool string
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
		rep.Stages = make([]askreport.Stage, len(r.Report.Stages))
		for i, st := range r.Report.Stages {
			st.Note = p.Note(st.Note)
			rep.Stages[i] = st
		}
		rep.Candidates = make([]askreport.Candidate, len(r.Report.Candidates))
		for i, c := range r.Report.Candidates {
			c.SQL, c.Problem = p.SQL(c.SQL), p.Text(c.Problem)
			rep.Candidates[i] = c
		}
		out.Report = &rep
	}
	return &out
}
