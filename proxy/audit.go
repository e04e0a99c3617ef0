package proxy

import (
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/internal/askreport"
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
	Err        *PgError          // nil when answered
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
