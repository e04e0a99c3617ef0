package proxy

import (
	"errors"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// The session audit trail is a few info lines per session (accepted, ready
// or refused, ended), never per message, and never passwords or statement
// text. Asks are audited separately, one JSON line each (AuditLog).

// auditStartupFailure records why a connection ended before ReadyForQuery.
func (s *session) auditStartupFailure(err error) {
	if errors.Is(err, errQuiet) { // CancelRequest (logged by Server.cancel) or closed by the server
		return
	}
	var pe *pg.Error
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

// reportAsk hands a settled ask to Server.OnAsk.
func (s *session) reportAsk(m Marker, start time.Time, tr *Translation, perr *pg.Error) {
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
