package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

func (s *session) clientQuery(n int) error {
	b, err := s.cr.Peek(5 + min(n, 64))
	if err != nil {
		return err
	}
	if !maybeMarker(b[5:]) {
		s.sent()
		err := relayN(s.cr, s.uw, 5+n, s.uw.Flush)
		s.uw.boundary()
		return err
	}
	msg := make([]byte, 5+n)
	if _, err := io.ReadFull(s.cr, msg); err != nil {
		return err
	}
	if n == 0 || msg[len(msg)-1] != 0 {
		return s.fatal("08P01", "nlproxy: malformed Query message")
	}
	m := ParseMarker(string(msg[5 : len(msg)-1]))
	if m.Kind == MarkerNone {
		s.sent()
		_, err := s.uw.Write(msg)
		s.uw.boundary()
		return err
	}
	return s.handleMarker(m, false, "", nil)
}

// clientParse relays a Parse, intercepting marker statements.
func (s *session) clientParse(n int) error {
	b, err := s.cr.Peek(5 + min(n, 256))
	if err != nil {
		return err
	}
	body := b[5:]
	if i := bytes.IndexByte(body, 0); i >= 0 && !maybeMarker(body[i+1:min(len(body), i+65)]) {
		return relayN(s.cr, s.uw, 5+n, s.uw.Flush)
	}
	msg := make([]byte, 5+n)
	if _, err := io.ReadFull(s.cr, msg); err != nil {
		return err
	}
	name, query, tail, err := splitParse(msg[5:])
	if err != nil {
		return s.fatal("08P01", "nlproxy: %v", err)
	}
	m := ParseMarker(query)
	if m.Kind == MarkerNone {
		_, err := s.uw.Write(msg)
		return err
	}
	return s.handleMarker(m, true, name, tail)
}

func noEngineError() *PgError {
	return &PgError{Severity: "ERROR", Code: "0A000",
		Message: "natural-language queries need an engine: this nlproxy has no translator configured",
		Hint:    "Configure an engine (Ollama model) for nlproxy, or send plain SQL."}
}

// handleMarker translates a marker statement and forwards the generated SQL in
// its place, or makes the statement fail at its position in the stream.
func (s *session) handleMarker(m Marker, isParse bool, name string, tail []byte) error {
	fail := func(e *PgError) error {
		s.mu.Lock()
		s.rewrites = append(s.rewrites, rewrite{unit: s.unitsSent, err: e})
		s.hasRewrites.Store(true)
		s.mu.Unlock()
		if isParse {
			_, err := s.uw.Write(parseMsg(name, sentinelSQL, tail))
			return err
		}
		s.sent()
		_, err := s.uw.Write(queryMsg(sentinelSQL))
		s.uw.boundary()
		return err
	}
	if s.srv.Translator == nil {
		return fail(noEngineError())
	}
	saved, ok := s.uw.takeBatch()
	if !ok {
		return fail(&PgError{Severity: "ERROR", Code: "0A000",
			Message: "nlproxy: a natural-language statement must not follow unsynchronized messages already sent upstream",
			Hint:    "Send the natural-language Parse at the start of its batch (right after a Sync)."})
	}
	if err := s.uw.Flush(); err != nil {
		return err
	}
	if err := s.waitIdle(); err != nil {
		return err
	}
	tr, err := s.translate(m)
	if _, werr := s.uw.Write(saved); werr != nil {
		return werr
	}
	if err != nil {
		return fail(translatorError(err))
	}
	sql := tr.SQL
	if tr.Rows != nil {
		if len(tr.Rows.Columns) == 0 {
			return fail(&PgError{Severity: "ERROR", Code: "XX000", Message: "nlproxy: engine returned a result without columns"})
		}
		sql = staticSQL(tr.Rows)
	}
	if strings.TrimSpace(sql) == "" {
		return fail(&PgError{Severity: "ERROR", Code: "XX000", Message: "nlproxy: engine returned no SQL"})
	}
	if tr.Notice != "" {
		if err := s.sendClient(encodeNotice(tr.Notice)); err != nil {
			return err
		}
	}
	if isParse {
		_, err := s.uw.Write(parseMsg(name, sql, tail))
		return err
	}
	if prelude, n := finalPrelude(tr, s.currentTx()); n > 0 && tr.Rows == nil {
		// One implicit transaction: the SET LOCALs end with the statement.
		sql = prelude + sql
		s.swallowTags.Add(int32(n))
	}
	s.sent()
	_, err = s.uw.Write(queryMsg(sql))
	s.uw.boundary()
	return err
}

func translatorError(err error) *PgError {
	var pe *PgError
	if errors.As(err, &pe) {
		e := *pe
		if e.Severity == "" || e.Severity == "FATAL" || e.Severity == "PANIC" {
			e.Severity = "ERROR"
		}
		if e.Code == "" {
			e.Code = "XX000"
		}
		return &e
	}
	if errors.Is(err, context.Canceled) {
		return &PgError{Severity: "ERROR", Code: "57014", Message: "canceling statement due to user request"}
	}
	return &PgError{Severity: "ERROR", Code: "XX000", Message: "nlproxy: " + err.Error()}
}

// waitIdle waits until every request sent upstream has been answered.
func (s *session) waitIdle() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.unitsDone != s.unitsSent && !s.closing {
		s.cond.Wait()
	}
	if s.closing {
		return errQuiet
	}
	return nil
}

func (s *session) translate(m Marker) (Translation, error) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	s.mu.Lock()
	s.translating = true
	s.cancelTr = cancel
	tx := s.txStatus
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.translating = false
		s.cancelTr = nil
		s.mu.Unlock()
	}()
	return s.srv.Translator.Translate(ctx, TranslateRequest{
		Marker: m, Database: s.database, User: s.user, TxStatus: tx, Exec: &executor{s: s},
	})
}

// cancelTranslation aborts a running translation (client CancelRequest).
func (s *session) cancelTranslation() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancelTr != nil {
		s.cancelTr()
		return true
	}
	return false
}

func (s *session) cancelUpstream(ctx context.Context) error {
	s.mu.Lock()
	pid, secret := s.realPID, s.realSecret
	s.mu.Unlock()
	if secret == nil {
		return nil
	}
	return sendCancel(ctx, s.route.Address, pid, secret)
}

// drain closes the session now if it is idle, else marks it to close at the
// end of its current transaction.
func finalPrelude(tr Translation, tx byte) (string, int) {
	if tx != 'I' {
		return "", 0
	}
	var b strings.Builder
	n := 0
	if tr.ReadOnly {
		b.WriteString("SET LOCAL transaction_read_only = on; ")
		n++
	}
	if ms := tr.StatementTimeout.Milliseconds(); ms > 0 {
		fmt.Fprintf(&b, "SET LOCAL statement_timeout = %d; ", ms)
		n++
	}
	return b.String(), n
}
