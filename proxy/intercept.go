package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// Interception: telling an ask from plain SQL on the relay (the untracked
// entry points clientQuery and clientParse, whose fast path decides from a
// few bytes through mightAsk), reading the marker in the client's encoding,
// and handing the question to the translator within the proxy's limits.
// What the answer does on the session is in inject.go; how the client's
// stream is handled while asks are in play is in tracked.go.

// clientQuery relays a simple Query, intercepting marker statements.
func (s *session) clientQuery(n int) error {
	body, complete, err := s.peekBody(n)
	if err != nil {
		return err
	}
	if !mightAsk(feQuery, body, complete) {
		if !complete {
			body = nil
		}
		s.onClient(feQuery, body)
		return relayN(s.cl.cr, s.cl.uw, 5+n, s.cl.uw.Flush)
	}
	msg, err := s.readQuery(n)
	if err != nil {
		return err
	}
	prefix, m, err := s.queryAsk(msg[5 : len(msg)-1])
	switch {
	case err != nil:
		return err
	case m.Kind == MarkerNone:
		s.onClient(feQuery, msg[5:])
		_, err := s.cl.uw.Write(msg)
		return err
	case prefix != "":
		return s.askQueryAfter(prefix, m, msg)
	}
	return s.askQuery(m, msg)
}

// clientParse relays a Parse, intercepting marker statements.
func (s *session) clientParse(n int) error {
	body, complete, err := s.peekBody(n)
	if err != nil {
		return err
	}
	if !mightAsk(feParse, body, complete) {
		if !complete {
			body = nil
		}
		s.onClient(feParse, body)
		return relayN(s.cl.cr, s.cl.uw, 5+n, s.cl.uw.Flush)
	}
	msg, err := s.readMsg(n)
	if err != nil {
		return err
	}
	name, m, tail, err := s.readParse(msg)
	if err != nil {
		return err
	}
	if m.Kind == MarkerNone {
		s.onClient(feParse, msg[5:])
		_, err := s.cl.uw.Write(msg)
		return err
	}
	return s.askParse(m, msg, name, tail)
}

// peekBody looks at the body of the client's next message (n bytes) in the
// read buffer, leaving it there: whole when it fits the buffer, else its
// first bytes (complete false), which is all mightAsk needs of it.
func (s *session) peekBody(n int) (body []byte, complete bool, err error) {
	complete = 5+n <= s.cl.cr.Size()
	k := n
	if !complete {
		k = min(n, mightAskPrefix)
	}
	b, err := s.cl.cr.Peek(5 + k)
	if err != nil {
		return nil, false, err
	}
	return b[5:], complete, nil
}

// readQuery reads a whole Query message.
func (s *session) readQuery(n int) ([]byte, error) {
	msg, err := s.readMsg(n)
	if err != nil {
		return nil, err
	}
	if n == 0 || msg[len(msg)-1] != 0 {
		return nil, s.fatal(pg.CodeProtocolViolation, "nlproxy: malformed Query message")
	}
	return msg, nil
}

// readParse decides on a whole Parse message read by the goroutine relay.
func (s *session) readParse(msg []byte) (name string, m Marker, tail []byte, err error) {
	name, m, tail, err = s.parseAsk(msg[5:])
	if errors.Is(err, ErrProtocol) {
		return "", Marker{}, nil, s.fatal(pg.CodeProtocolViolation, "nlproxy: %v", err)
	}
	return name, m, tail, err
}

// queryAsk is the decision on a whole Query's text (its NUL excluded) that
// mightAsk did not clear, made alike by both relays: m is the ask it
// carries (MarkerNone for plain SQL; a misused table function is an ask
// that fails). prefix, when not "", is transaction control to run before
// the ask (psqlodbc's savepoints, see splitTxPrefix); a table-function ask
// there is one statement of several until the prefix is taken off.
func (s *session) queryAsk(text []byte) (prefix string, m Marker, err error) {
	m, err = s.parseMarker(text)
	if err != nil || (m.Kind != MarkerNone && m.invalid == nil) || !maybeTxPrefix(text, true) {
		return "", m, err
	}
	prefix, rest := splitTxPrefix(string(text), s.sh.scanOptions())
	if prefix == "" {
		return "", m, nil
	}
	pm, err := s.parseMarker([]byte(rest))
	if err != nil {
		return "", m, err
	}
	if pm.Kind != MarkerNone && pm.invalid == nil {
		return prefix, pm, nil
	}
	return "", m, nil
}

// parseAsk is the decision on a whole Parse body that mightAsk did not
// clear, made alike by both relays: m is MarkerNone for plain SQL. A
// malformed body is an ErrProtocol error.
func (s *session) parseAsk(body []byte) (name string, m Marker, tail []byte, err error) {
	name, query, tail, err := splitParse(body)
	if err != nil {
		return "", Marker{}, nil, err
	}
	m, err = s.parseMarker([]byte(query))
	return name, m, tail, err
}

// parseMarker reads statement text in the client's encoding; a marker's
// question goes to the engine as UTF-8.
func (s *session) parseMarker(text []byte) (Marker, error) {
	prefix, fn := maybeMarker(text[:min(len(text), 64)]), mayHoldAskFunc(text)
	if !prefix && !fn {
		return Marker{}, nil
	}
	utf, err := s.fromClient(text)
	if err != nil {
		m := ParseMarker(asciiOnly(string(text)))
		if m.Kind != MarkerNone {
			// A marker whose question cannot be read: say so, rather than
			// let Postgres call it a syntax error.
			m.unreadable = err
		}
		return m, nil
	}
	if m := ParseMarker(utf); m.Kind != MarkerNone || !fn {
		return m, nil
	}
	return findAskFunc(s.askFuncs(), utf), nil
}

// askQuery answers a simple-protocol marker statement.
func (s *session) askQuery(m Marker, msg []byte) error {
	ok, err := s.settleBatch()
	if errors.Is(err, errCopyIn) {
		return s.passMarker(feQuery, msg)
	}
	if err != nil || !ok {
		return err
	}
	tx := s.sh.tx()
	tr, perr := s.ask(m)
	if perr != nil {
		return s.failQuery(perr)
	}
	if err := s.sendNotices(tr); err != nil {
		return err
	}
	return s.answerQuery(tx, &askStmt{stmt: tr.Statement, timeout: tr.Timeout, rows: tr.Rows})
}

// askQueryAfter answers a Query of transaction-control statements and then
// an ask: those statements run first as a Query of their own, all their
// replies but the ReadyForQuery going to the client; the ask runs only if
// they succeed, as the server would skip it otherwise.
func (s *session) askQueryAfter(prefix string, m Marker, msg []byte) error {
	ok, err := s.settleBatch()
	if errors.Is(err, errCopyIn) {
		return s.passMarker(feQuery, msg)
	}
	if err != nil || !ok {
		return err
	}
	s.replies.push(expect{msg: feQuery, act: actRelayBody})
	s.onClient(feQuery, nil)
	if _, err := s.cl.uw.Write(queryMsg(prefix)); err != nil {
		return err
	}
	if err := s.cl.uw.Flush(); err != nil {
		return err
	}
	if err := s.sh.waitIdle(); err != nil {
		return err
	}
	if s.sh.unitFailed() {
		return s.sendClient([]byte{beReadyForQuery, 0, 0, 0, 5, s.sh.tx()})
	}
	return s.askQuery(m, msg)
}

// askParse answers an extended-protocol marker statement: the generated
// statement goes into the proxy's table under the client's name (see
// askStmt), and its every Execute runs in a read-only scope (see
// trackedBind).
func (s *session) askParse(m Marker, msg []byte, name string, tail []byte) error {
	if name != "" && s.cl.stmts[name] != nil {
		return s.failParse(name, tail, duplicateStatement(name))
	}
	ok, err := s.settleBatch()
	if errors.Is(err, errCopyIn) {
		return s.passMarker(feParse, msg)
	}
	if err != nil || !ok {
		return err
	}
	s.onClient(feParse, nil)
	if name != "" {
		if perr, err := s.nameTaken(name); err != nil || perr != nil {
			if err != nil {
				return err
			}
			return s.failParse(name, tail, perr)
		}
	}
	tr, perr := s.ask(m)
	if perr != nil {
		return s.failParse(name, tail, perr)
	}
	if err := s.sendNotices(tr); err != nil {
		return err
	}
	if name == "" {
		// The client's unnamed statement upstream is replaced, as by a Parse.
		s.send(expect{msg: feClose, act: actDrop}, closeMsg(objStatement, ""))
	}
	s.cl.stmts[name] = &askStmt{stmt: tr.Statement, tail: append([]byte(nil), tail...), timeout: tr.Timeout, rows: tr.Rows}
	return s.placeholderReply(mustEncode(&pgproto3.ParseComplete{}))
}

// nameTaken reports, as the error Postgres would give a Parse of that name,
// whether a statement of the client's is prepared upstream under name: the
// name is prepared upstream (never run) and closed again. A Parse that finds
// the name taken fails and so aborts a transaction block, as the client's
// own Parse would.
func (s *session) nameTaken(name string) (*pg.Error, error) {
	k := newSink(pg.Limits{})
	s.send(expect{msg: feParse, act: actDrop, sink: k}, parseMsg(name, "SELECT", []byte{0, 0}))
	s.send(expect{msg: feClose, act: actDrop, sink: k}, closeMsg(objStatement, name))
	s.sync(actDrop, k)
	if err := s.cl.uw.Flush(); err != nil {
		return nil, err
	}
	select {
	case <-k.done:
	case <-s.ctx.Done():
		return nil, errQuiet
	}
	return k.err, nil
}

// sendNotices sends the translation's notices to the client.
func (s *session) sendNotices(tr Translation) error {
	var out []byte
	for _, n := range append([]string{tr.Notice}, tr.Notices...) {
		if n != "" {
			out = append(out, encodeNotice(s.toClient(n))...)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return s.sendClient(out)
}

// ask translates a marker at a synced point of the stream, within the
// proxy's limits on concurrent asks.
func (s *session) ask(m Marker) (tr Translation, perr *pg.Error) {
	if s.srv.OnAsk != nil {
		start := time.Now()
		defer func() {
			recorded := perr
			if recorded == nil && tr.Failure != nil {
				recorded = translatorError(tr.Failure)
			}
			s.reportAsk(m, start, &tr, recorded)
		}()
	}
	if s.srv.Translator == nil {
		return Translation{}, noEngineError()
	}
	if m.invalid != nil {
		return Translation{}, m.invalid
	}
	if m.unreadable != nil {
		return Translation{}, &pg.Error{Severity: "ERROR", Code: pg.CodeCharacterNotInRepertoire,
			Message: "nlproxy: the question cannot be read in the session's client_encoding (" + s.encoding() + ")",
			Hint:    "Ask in UTF8 (SET client_encoding = 'UTF8') or in one of the encodings the README lists."}
	}
	release, perr := s.srv.acquireAsk(s.user, s.clientHost)
	if perr != nil {
		return Translation{}, perr
	}
	defer release()
	tr, err := s.translate(m)
	if err != nil {
		// The report of a failed ask (what the engine did) is kept for OnAsk.
		return Translation{Report: tr.Report}, translatorError(err)
	}
	if tr.Rows == nil && tr.Statement.IsZero() {
		return Translation{}, &pg.Error{Severity: "ERROR", Code: pg.CodeInternalError, Message: "nlproxy: the engine returned no statement"}
	}
	if tr.Rows != nil && len(tr.Rows.Columns) == 0 {
		return Translation{}, &pg.Error{Severity: "ERROR", Code: pg.CodeInternalError, Message: "nlproxy: the engine returned a result without columns"}
	}
	return tr, nil
}

func noEngineError() *pg.Error {
	return &pg.Error{Severity: "ERROR", Code: pg.CodeFeatureNotSupported,
		Message: "natural-language queries need an engine: this nlproxy has no translator configured",
		Hint:    "Configure an engine (Ollama model) for nlproxy, or send plain SQL."}
}

func (s *session) translate(m Marker) (Translation, error) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	// A client that goes away cancels its ask at once, so the ask's slots
	// (MaxAsks, MaxAsksPerClient) are free again (clientgone_linux.go).
	defer watchClientGone(s.traffic.Conn, func() {
		s.log.Debug("client went away during an ask; cancelling it")
		cancel()
	})()
	tx := s.sh.startTranslation(cancel)
	defer s.sh.endTranslation()
	return s.srv.Translator.Translate(ctx, TranslateRequest{
		Marker: m, Database: s.database, User: s.user, TxStatus: tx, ClientEncoding: s.encoding(), Exec: &executor{s: s},
		Conversation: &s.conv,
		// A NoticeResponse may arrive at any time in either protocol; the
		// client's stream is at a synced point while the ask runs.
		Progress: func(msg string) { _ = s.sendClient(encodeNotice(s.toClient(msg))) },
	})
}

var askFunctions = map[string]MarkerKind{
	"ask":      MarkerAsk,
	"ask_sql":  MarkerAskSQL,
	"optimize": MarkerOptimize,
}

// findAskFunc asks p to parse a statement that mayHoldAskFunc. A statement
// that does not parse, or names no nlproxy.* function, is MarkerNone
// (Postgres answers it as it would). Misuse of the functions is a Marker
// whose ask fails with a clear error.
func findAskFunc(p AskFuncParser, sql string) Marker {
	if p == nil {
		return Marker{}
	}
	f, ok := p.ParseAskFunc(sql)
	if !ok {
		return Marker{}
	}
	m := Marker{Kind: MarkerAsk, Statement: sql, Question: f.Question, Profile: f.Profile, invalid: f.Err}
	if f.Function != "" {
		m.Kind = askFunctions[f.Function]
	}
	return m
}

// askFuncs is Server.AskFuncs, or else the translator as an
// AskFuncParser; nil when neither is set.
func (s *session) askFuncs() AskFuncParser {
	if s.srv.AskFuncs != nil {
		return s.srv.AskFuncs
	}
	p, _ := s.srv.Translator.(AskFuncParser)
	return p
}
