package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/nlproxy/nlproxy/engine/guard"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// askStmt is a prepared statement the client made from a marker Parse. It
// lives in the proxy's table only: the sealed statement is prepared
// upstream, as the proxy's own statement, just for the Bind or Describe
// that needs it and closed right after, so no name upstream reaches it
// (EXECUTE, a Bind by name) around the read-only scope, and its lifecycle
// (Close, DEALLOCATE, re-Parse) is the proxy's to answer as Postgres would.
type askStmt struct {
	stmt    guard.Statement
	tail    []byte // the client's Parse: parameter types
	timeout time.Duration
	// rows, when set, is an ask-sql answer the proxy serves itself.
	rows *StaticResult
}

// askPortal is a portal bound to an askStmt.
type askPortal struct {
	stmt *askStmt
	// perExecute: bound inside the client's transaction block, so every
	// Execute gets its own read-only savepoint (idle, the batch's implicit
	// transaction was made read-only at the Bind).
	perExecute bool
	// bind, in a transaction block, is the client's Bind, not yet made
	// upstream: each Execute binds the proxy's own portal inside its
	// savepoint, which ends it, so no portal of the ask outlives the scope
	// (FETCH names portals too). A partial Execute (row limit) binds the
	// client's portal for good, as the rows must resume.
	bind    *pgproto3.Bind
	formats []int16 // result formats asked by the Bind (emulated rows)
	pos     int     // emulated rows already sent
}

// ownName names the proxy's own statement and portal; placeholder is a
// statement that never exists. Control characters keep both out of any
// client's way.
const (
	ownName     = "\x01nlproxy"
	placeholder = "\x01nlproxy-none"
)

// ---- untracked entry points: the hot path checks only a few bytes ----

// clientQuery relays a simple Query, intercepting marker statements.
func (s *session) clientQuery(n int) error {
	b, err := s.cr.Peek(5 + min(n, 64))
	if err != nil {
		return err
	}
	if !maybeMarker(b[5:]) && !maybeTxPrefix(b[5:], n <= 64) && !s.mayAskFunc(n) {
		s.observePeek('Q', n)
		s.sent()
		s.batchOpen = false
		err := relayN(s.cr, s.uw, 5+n, s.uw.Flush)
		return err
	}
	msg, m, err := s.readQuery(n)
	if err != nil {
		return err
	}
	if m.Kind == MarkerNone || m.invalid != nil {
		// An ask after transaction control in one Query (psqlodbc's
		// savepoints); a table-function ask there is one statement of
		// several until the prefix is taken off.
		if prefix, pm, err := s.askAfterTxPrefix(msg); err != nil || (pm.Kind != MarkerNone && pm.invalid == nil) {
			if err != nil {
				return err
			}
			return s.askQueryAfter(prefix, pm, msg)
		}
	}
	if m.Kind == MarkerNone {
		s.sent()
		s.batchOpen = false
		_, err := s.uw.Write(msg)
		return err
	}
	return s.askQuery(m, msg)
}

// clientParse relays a Parse, intercepting marker statements.
func (s *session) clientParse(n int) error {
	b, err := s.cr.Peek(5 + min(n, 256))
	if err != nil {
		return err
	}
	body := b[5:]
	if i := bytes.IndexByte(body, 0); i >= 0 && !maybeMarker(body[i+1:min(len(body), i+65)]) && !s.mayAskFunc(n) {
		s.observePeek('P', n)
		s.batchOpen = true
		return relayN(s.cr, s.uw, 5+n, s.uw.Flush)
	}
	msg, name, m, tail, err := s.readParse(n)
	if err != nil {
		return err
	}
	if m.Kind == MarkerNone {
		s.batchOpen = true
		_, err := s.uw.Write(msg)
		return err
	}
	return s.askParse(m, msg, name, tail)
}

func (s *session) readQuery(n int) ([]byte, Marker, error) {
	msg := make([]byte, 5+n)
	if _, err := io.ReadFull(s.cr, msg); err != nil {
		return nil, Marker{}, err
	}
	if n == 0 || msg[len(msg)-1] != 0 {
		return nil, Marker{}, s.fatal("08P01", "nlproxy: malformed Query message")
	}
	m, err := s.parseMarker(msg[5 : len(msg)-1])
	return msg, m, err
}

func (s *session) readParse(n int) (msg []byte, name string, m Marker, tail []byte, err error) {
	msg = make([]byte, 5+n)
	if _, err := io.ReadFull(s.cr, msg); err != nil {
		return nil, "", Marker{}, nil, err
	}
	name, query, tail, err := splitParse(msg[5:])
	if err != nil {
		return nil, "", Marker{}, nil, s.fatal("08P01", "nlproxy: %v", err)
	}
	m, err = s.parseMarker([]byte(query))
	return msg, name, m, tail, err
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
	return findAskFunc(utf), nil
}

// mayAskFunc peeks at a whole Query or Parse message of n bytes and says
// whether it may hold the table-function form. A message longer than the
// read buffer cannot be looked at in place: it takes the slow path, read
// whole.
func (s *session) mayAskFunc(n int) bool {
	if 5+n > s.cr.Size() {
		return true
	}
	b, err := s.cr.Peek(5 + n)
	if err != nil {
		return true // the slow path reports it
	}
	return mayHoldAskFunc(b[5:])
}

// ---- tracked mode: every message upstream is queued with its handling ----

// trackedRequest handles one client message while an ask is in play.
func (s *session) trackedRequest(typ byte, n int) error {
	s.applyDiscard()
	if s.skipBatch && typ != 'S' && typ != 'X' {
		// The batch before an ask failed (found when the proxy synced it):
		// the server would skip the rest of it, so the proxy does.
		_, err := s.cr.Discard(5 + n)
		return err
	}
	var err error
	switch typ {
	case 'Q':
		err = s.trackedQuery(n)
	case 'P':
		err = s.trackedParse(n)
	case 'B':
		err = s.trackedBind(n)
	case 'D':
		err = s.trackedDescribe(n)
	case 'E':
		err = s.trackedExecute(n)
	case 'C':
		err = s.trackedClose(n)
	case 'S', 'F':
		s.skipBatch = false
		s.batchOpen = false
		s.replies.push(expect{msg: typ, act: actRelay})
		s.sent()
		err = relayN(s.cr, s.uw, 5+n, s.uw.Flush)
		if typ == 'S' {
			s.dropOwn()
		}
	case 'X':
		return s.terminate(n)
	default: // Flush, COPY data: no reply of their own
		err = relayN(s.cr, s.uw, 5+n, s.uw.Flush)
	}
	if err != nil {
		return err
	}
	s.maybeUntrack()
	return nil
}

// maybeUntrack returns to the plain relay once no ask statement is left
// and no reply is outstanding.
func (s *session) maybeUntrack() {
	if len(s.stmts) == 0 && len(s.portals) == 0 && !s.batchOpen && s.replies.empty() {
		s.tracked.Store(false)
	}
}

func (s *session) trackedQuery(n int) error {
	msg, m, err := s.readQuery(n)
	if err != nil {
		return err
	}
	if m.Kind != MarkerNone && m.invalid == nil {
		return s.askQuery(m, msg)
	}
	if prefix, pm, err := s.askAfterTxPrefix(msg); err != nil || (pm.Kind != MarkerNone && pm.invalid == nil) {
		if err != nil {
			return err
		}
		return s.askQueryAfter(prefix, pm, msg)
	}
	if m.Kind != MarkerNone {
		return s.askQuery(m, msg) // a misused table function: its error
	}
	if lc := parseLifecycle(string(msg[5 : len(msg)-1])); lc.kind != lcNone {
		if done, err := s.lifecycleQuery(lc, msg); done || err != nil {
			return err
		}
	} else if prefix, name, suffix, ok := deallocateAround(string(msg[5 : len(msg)-1])); ok && s.stmts[name] != nil && name != "" {
		if done, err := s.deallocateAround(prefix, name, suffix); done || err != nil {
			return err
		}
	}
	// A simple Query drops the unnamed statement and portal.
	delete(s.stmts, "")
	delete(s.portals, "")
	s.observe('Q', msg[5:])
	s.replies.push(expect{msg: 'Q', act: actRelay})
	s.sent()
	s.batchOpen = false
	_, err = s.uw.Write(msg)
	return err
}

func (s *session) trackedParse(n int) error {
	msg, name, m, tail, err := s.readParse(n)
	if err != nil {
		return err
	}
	if m.Kind != MarkerNone {
		return s.askParse(m, msg, name, tail)
	}
	s.batchOpen = true
	if name != "" && s.stmts[name] != nil {
		return s.failParse(name, tail, duplicateStatement(name))
	}
	delete(s.stmts, name)
	s.observe('P', msg[5:])
	s.replies.push(expect{msg: 'P', act: actRelay})
	_, err = s.uw.Write(msg)
	return err
}

func (s *session) trackedBind(n int) error {
	msg, err := s.readMsg(n)
	if err != nil {
		return err
	}
	var b pgproto3.Bind
	if err := b.Decode(msg[5:]); err != nil {
		return s.fatal("08P01", "nlproxy: malformed Bind message")
	}
	st := s.stmts[b.PreparedStatement]
	if st == nil || st.rows != nil {
		s.batchOpen = true
	}
	switch {
	case st == nil:
		if b.DestinationPortal == "" {
			// The unnamed portal is replaced; a named one that exists
			// stays, the Bind failing (42P03), so its entry stays too.
			delete(s.portals, "")
		}
		s.replies.push(expect{msg: 'B', act: actRelay})
		_, err = s.uw.Write(msg)
		return err
	case st.rows != nil:
		s.portals[b.DestinationPortal] = &askPortal{stmt: st, formats: append([]int16(nil), b.ResultFormatCodes...)}
		return s.placeholderReply(mustEncode(&pgproto3.BindComplete{}))
	}
	// Running generated SQL starts here: the transaction state must be
	// known exactly, so the batch so far is synced first.
	ok, err := s.settleBatch()
	if errors.Is(err, errCopyIn) {
		return s.passMarker('B', msg)
	}
	if err != nil || !ok {
		return err
	}
	s.batchOpen = true
	p := &askPortal{stmt: st}
	switch tx := s.currentTx(); tx {
	case 'I':
		scope, err := guard.RunScope(pg.TxIdle, st.timeout)
		if err != nil {
			return err
		}
		s.injectAll(scope.Enter, nil)
	case 'T':
		p.perExecute = true
		p.bind = &b
		s.portals[b.DestinationPortal] = p
		return s.placeholderReply(mustEncode(&pgproto3.BindComplete{}))
	default: // failed transaction: the server refuses the Bind itself
	}
	s.portals[b.DestinationPortal] = p
	s.prepareOwn(st)
	b.PreparedStatement = ownName
	s.replies.push(expect{msg: 'B', act: actRelay})
	if _, err := s.uw.Write(mustEncode(&b)); err != nil {
		return err
	}
	s.closeOwn() // the portal keeps its plan
	return nil
}

func (s *session) trackedDescribe(n int) error {
	msg, err := s.readMsg(n)
	if err != nil {
		return err
	}
	var d pgproto3.Describe
	if err := d.Decode(msg[5:]); err != nil {
		return s.fatal("08P01", "nlproxy: malformed Describe message")
	}
	s.batchOpen = true
	switch {
	case d.ObjectType == 'S' && s.stmts[d.Name] != nil:
		st := s.stmts[d.Name]
		if st.rows != nil {
			out := mustEncode(&pgproto3.ParameterDescription{})
			return s.placeholderReply(append(out, s.rowDescription(st.rows, nil)...))
		}
		s.prepareOwn(st)
		d.Name = ownName
		s.replies.push(expect{msg: 'D', act: actRelay})
		if _, err := s.uw.Write(mustEncode(&d)); err != nil {
			return err
		}
		s.closeOwn()
		return nil
	case d.ObjectType == 'P' && s.portals[d.Name] != nil && s.portals[d.Name].stmt.rows != nil:
		p := s.portals[d.Name]
		return s.placeholderReply(s.rowDescription(p.stmt.rows, p.formats))
	case d.ObjectType == 'P' && s.portals[d.Name] != nil && s.portals[d.Name].bind != nil:
		// Described from the proxy's own portal, bound and closed for it,
		// inside a read-only, pinned savepoint: binding plans the statement,
		// and planning may evaluate functions.
		p := s.portals[d.Name]
		scope, err := guard.RunScope(pg.TxInTx, p.stmt.timeout)
		if err != nil {
			return err
		}
		s.injectAll(scope.Enter, nil)
		s.bindOwn(p)
		s.replies.push(expect{msg: 'D', act: actRelay})
		if _, err := s.uw.Write(describeMsg('P', ownName)); err != nil {
			return err
		}
		s.send(expect{msg: 'C', act: actDrop}, closeMsg('P', ownName))
		s.injectAll(scope.Exit, nil)
		return nil
	}
	s.replies.push(expect{msg: 'D', act: actRelay})
	_, err = s.uw.Write(msg)
	return err
}

func (s *session) trackedExecute(n int) error {
	msg, err := s.readMsg(n)
	if err != nil {
		return err
	}
	var e pgproto3.Execute
	if err := e.Decode(msg[5:]); err != nil {
		return s.fatal("08P01", "nlproxy: malformed Execute message")
	}
	s.batchOpen = true
	p := s.portals[e.Portal]
	switch {
	case p != nil && p.stmt.rows != nil:
		return s.placeholderReply(s.emulatedRows(p, int(e.MaxRows)))
	case p != nil && p.perExecute:
		// Inside the client's transaction: a read-only, bounded savepoint
		// around this Execute only, rolled back after it.
		scope, err := guard.RunScope(pg.TxInTx, p.stmt.timeout)
		if err != nil {
			return err
		}
		if p.bind != nil && e.MaxRows > 0 {
			s.prepareOwn(p.stmt)
			b := *p.bind
			b.PreparedStatement = ownName
			s.send(expect{msg: 'B', act: actDrop}, mustEncode(&b))
			s.closeOwn()
			p.bind = nil
		}
		s.injectAll(scope.Enter, nil)
		if p.bind != nil {
			s.bindOwn(p)
			msg = executeMsg(ownName, 0)
		}
		s.replies.push(expect{msg: 'E', act: actRelay})
		if _, err := s.uw.Write(msg); err != nil {
			return err
		}
		if p.bind != nil {
			s.send(expect{msg: 'C', act: actDrop}, closeMsg('P', ownName))
		}
		s.injectAll(scope.Exit, nil)
		return nil
	}
	s.replies.push(expect{msg: 'E', act: actRelay})
	_, err = s.uw.Write(msg)
	return err
}

func (s *session) trackedClose(n int) error {
	msg, err := s.readMsg(n)
	if err != nil {
		return err
	}
	var c pgproto3.Close
	if err := c.Decode(msg[5:]); err != nil {
		return s.fatal("08P01", "nlproxy: malformed Close message")
	}
	s.batchOpen = true
	switch c.ObjectType {
	case 'S':
		if st := s.stmts[c.Name]; st != nil {
			delete(s.stmts, c.Name) // nothing of it is upstream
			return s.placeholderReply(mustEncode(&pgproto3.CloseComplete{}))
		}
	case 'P':
		if p := s.portals[c.Name]; p != nil {
			delete(s.portals, c.Name)
			if p.stmt.rows != nil || p.bind != nil { // not upstream
				return s.placeholderReply(mustEncode(&pgproto3.CloseComplete{}))
			}
		}
	}
	s.replies.push(expect{msg: 'C', act: actRelay})
	_, err = s.uw.Write(msg)
	return err
}

func (s *session) readMsg(n int) ([]byte, error) {
	msg := make([]byte, 5+n)
	_, err := io.ReadFull(s.cr, msg)
	return msg, err
}

// ---- asks ----

// askQuery answers a simple-protocol marker statement.
func (s *session) askQuery(m Marker, msg []byte) error {
	ok, err := s.settleBatch()
	if errors.Is(err, errCopyIn) {
		return s.passMarker('Q', msg)
	}
	if err != nil || !ok {
		return err
	}
	tx := s.currentTx()
	tr, perr := s.ask(m)
	if perr != nil {
		return s.failQuery(perr)
	}
	if err := s.sendNotices(tr); err != nil {
		return err
	}
	return s.answerQuery(tx, &askStmt{stmt: tr.Statement, timeout: tr.Timeout, rows: tr.Rows})
}

// answerQuery answers a simple Query with an ask statement at a synced
// point (transaction status tx): rows the proxy made go to the client as
// rows, never as SQL; a statement runs sealed in the read-only scope.
func (s *session) answerQuery(tx byte, st *askStmt) error {
	// A simple Query drops the unnamed statement and portal, here too.
	delete(s.stmts, "")
	if st.rows != nil {
		out := s.rowDescription(st.rows, nil)
		out = append(out, s.dataRows(st.rows, 0, len(st.rows.Rows))...)
		out = append(out, mustEncode(&pgproto3.CommandComplete{CommandTag: fmt.Appendf(nil, "SELECT %d", len(st.rows.Rows))})...)
		out = append(out, 'Z', 0, 0, 0, 5, tx)
		return s.sendClient(out)
	}
	scope, err := guard.RunScope(pg.TxStatus(tx), st.timeout)
	if err != nil {
		return s.failQuery(translatorError(err))
	}
	s.batchOpen = false
	delete(s.portals, "")
	drop := expect{msg: 'C', act: actDrop}
	s.send(drop, closeMsg('P', ""))
	s.send(drop, closeMsg('S', ""))
	s.injectAll(scope.Enter, nil)
	s.injectStatement(st.stmt, actRelay, nil, 0)
	s.injectAll(scope.Exit, nil)
	s.sync(actRelay, nil)
	return nil
}

// askAfterTxPrefix finds an ask after leading transaction-control
// statements in a Query's text (see splitTxPrefix).
func (s *session) askAfterTxPrefix(msg []byte) (prefix string, m Marker, err error) {
	text := msg[5 : len(msg)-1]
	if !maybeTxPrefix(text, true) {
		return "", Marker{}, nil
	}
	prefix, rest := splitTxPrefix(string(text))
	if prefix == "" {
		return "", Marker{}, nil
	}
	m, err = s.parseMarker([]byte(rest))
	return prefix, m, err
}

// askQueryAfter answers a Query of transaction-control statements and then
// an ask: those statements run first as a Query of their own, all their
// replies but the ReadyForQuery going to the client; the ask runs only if
// they succeed, as the server would skip it otherwise.
func (s *session) askQueryAfter(prefix string, m Marker, msg []byte) error {
	ok, err := s.settleBatch()
	if errors.Is(err, errCopyIn) {
		return s.passMarker('Q', msg)
	}
	if err != nil || !ok {
		return err
	}
	s.replies.push(expect{msg: 'Q', act: actRelayBody})
	s.sent()
	s.batchOpen = false
	if _, err := s.uw.Write(queryMsg(prefix)); err != nil {
		return err
	}
	if err := s.uw.Flush(); err != nil {
		return err
	}
	if err := s.waitIdle(); err != nil {
		return err
	}
	if s.unitFailed() {
		return s.sendClient([]byte{'Z', 0, 0, 0, 5, s.currentTx()})
	}
	return s.askQuery(m, msg)
}

// askParse answers an extended-protocol marker statement: the generated
// statement goes into the proxy's table under the client's name (see
// askStmt), and its every Execute runs in a read-only scope (see
// trackedBind).
func (s *session) askParse(m Marker, msg []byte, name string, tail []byte) error {
	if name != "" && s.stmts[name] != nil {
		s.batchOpen = true
		return s.failParse(name, tail, duplicateStatement(name))
	}
	ok, err := s.settleBatch()
	if errors.Is(err, errCopyIn) {
		return s.passMarker('P', msg)
	}
	if err != nil || !ok {
		return err
	}
	s.batchOpen = true
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
		s.send(expect{msg: 'C', act: actDrop}, closeMsg('S', ""))
	}
	s.stmts[name] = &askStmt{stmt: tr.Statement, tail: append([]byte(nil), tail...), timeout: tr.Timeout, rows: tr.Rows}
	return s.placeholderReply(mustEncode(&pgproto3.ParseComplete{}))
}

// nameTaken reports, as the error Postgres would give a Parse of that name,
// whether a statement of the client's is prepared upstream under name: the
// name is prepared upstream (never run) and closed again. A Parse that finds
// the name taken fails and so aborts a transaction block, as the client's
// own Parse would.
func (s *session) nameTaken(name string) (*PgError, error) {
	k := newSink(pg.Limits{})
	s.send(expect{msg: 'P', act: actDrop, sink: k}, parseMsg(name, "SELECT", []byte{0, 0}))
	s.send(expect{msg: 'C', act: actDrop, sink: k}, closeMsg('S', name))
	s.sync(actDrop, k)
	if err := s.uw.Flush(); err != nil {
		return nil, err
	}
	select {
	case <-k.done:
	case <-s.ctx.Done():
		return nil, errQuiet
	}
	return k.err, nil
}

// lifecycleQuery answers a simple Query that names an ask statement
// (DEALLOCATE, EXECUTE, PREPARE) as Postgres would, and keeps the table in
// step with DEALLOCATE ALL and DISCARD ALL. done is false when the Query
// is the server's to answer as it is.
func (s *session) lifecycleQuery(lc lifecycleStmt, msg []byte) (done bool, err error) {
	if lc.kind == lcDeallocateAll {
		// The server answers; its tag says whether the asks went too
		// (noteDiscard), and the client's next message must find the
		// table as the server left it.
		delete(s.stmts, "")
		delete(s.portals, "")
		s.replies.push(expect{msg: 'Q', act: actRelay})
		s.sent()
		s.batchOpen = false
		if _, err := s.uw.Write(msg); err != nil {
			return true, err
		}
		if err := s.uw.Flush(); err != nil {
			return true, err
		}
		if err := s.waitIdle(); err != nil && !errors.Is(err, errCopyIn) {
			return true, err
		}
		s.applyDiscard()
		return true, nil
	}
	st := s.stmts[lc.name]
	if st == nil || lc.name == "" {
		return false, nil
	}
	ok, err := s.settleBatch()
	if errors.Is(err, errCopyIn) {
		return false, nil
	}
	if err != nil || !ok {
		return true, err
	}
	tx := s.currentTx()
	if tx == 'E' {
		return false, nil // refused like any statement there (25P02)
	}
	switch lc.kind {
	case lcDeallocate:
		delete(s.stmts, lc.name)
		return true, s.synthQuery(mustEncode(&pgproto3.CommandComplete{CommandTag: []byte("DEALLOCATE")}))
	case lcPrepare:
		return true, s.failQuery(duplicateStatement(lc.name))
	case lcExecute:
		return true, s.answerQuery(tx, st)
	}
	return false, nil
}

// deallocateAround answers a DEALLOCATE of an ask between
// transaction-control statements in one Query (see deallocateAround in
// lifecycle.go): the statements before it run as a Query of their own, the
// proxy answers the DEALLOCATE, and the statements after it run as the
// Query whose ReadyForQuery ends the client's.
func (s *session) deallocateAround(prefix, name, suffix string) (done bool, err error) {
	ok, err := s.settleBatch()
	if errors.Is(err, errCopyIn) {
		return false, nil
	}
	if err != nil || !ok {
		return true, err
	}
	if s.currentTx() == 'E' {
		return false, nil // refused like any statement there (25P02)
	}
	if prefix != "" {
		s.replies.push(expect{msg: 'Q', act: actRelayBody})
		s.sent()
		if _, err := s.uw.Write(queryMsg(prefix)); err != nil {
			return true, err
		}
		if err := s.uw.Flush(); err != nil {
			return true, err
		}
		if err := s.waitIdle(); err != nil {
			return true, err
		}
		if s.unitFailed() {
			return true, s.sendClient([]byte{'Z', 0, 0, 0, 5, s.currentTx()})
		}
	}
	delete(s.stmts, name)
	tag := mustEncode(&pgproto3.CommandComplete{CommandTag: []byte("DEALLOCATE")})
	if strings.TrimSpace(suffix) == "" {
		return true, s.synthQuery(tag)
	}
	if err := s.sendClient(tag); err != nil {
		return true, err
	}
	s.replies.push(expect{msg: 'Q', act: actRelay})
	s.sent()
	s.batchOpen = false
	_, err = s.uw.Write(queryMsg(suffix))
	return true, err
}

// applyDiscard empties the table after the server dropped every prepared
// statement (DEALLOCATE ALL) or, with DISCARD ALL, every portal too.
func (s *session) applyDiscard() {
	switch s.discarded.Swap(0) {
	case discardAll:
		clear(s.portals)
		clear(s.stmts)
	case deallocateAll:
		clear(s.stmts)
	}
}

// synthQuery answers a simple Query with reply, made by the proxy: an empty
// Query upstream gives the genuine ReadyForQuery after it.
func (s *session) synthQuery(reply []byte) error {
	s.replies.push(expect{msg: 'Q', act: actSynth, synth: reply})
	s.sent()
	s.batchOpen = false
	_, err := s.uw.Write(queryMsg(""))
	return err
}

// prepareOwn prepares st's sealed statement as the proxy's own statement for
// the one message of the client's that follows (Bind, Describe); closeOwn
// comes right after that message. An error in between (the server skips to
// Sync) leaves the statement to dropOwn.
func (s *session) prepareOwn(st *askStmt) {
	drop := expect{act: actDrop}
	s.send(withMsg(drop, 'C'), closeMsg('S', ownName))
	s.send(withMsg(drop, 'P'), parseMsg(ownName, st.stmt.SQL(), st.tail))
	s.ownLive = true
}

// bindOwn binds the proxy's own portal as the client bound p (see
// askPortal.bind); the statement is closed again at once.
func (s *session) bindOwn(p *askPortal) {
	s.prepareOwn(p.stmt)
	b := *p.bind
	b.DestinationPortal, b.PreparedStatement = ownName, ownName
	s.send(expect{msg: 'C', act: actDrop}, closeMsg('P', ownName)) // a scope statement's
	s.send(expect{msg: 'B', act: actDrop}, mustEncode(&b))
	s.closeOwn()
}

func (s *session) closeOwn() {
	s.send(expect{msg: 'C', act: actDrop}, closeMsg('S', ownName))
}

// dropOwn closes the proxy's own statement and portal after a batch that
// made them: they hold sealed or scope SQL, and no name upstream may reach
// that outside the ask path. The Closes form a batch of their own, after
// the Sync, so no error before them can make the server skip them.
func (s *session) dropOwn() {
	if !s.ownLive {
		return
	}
	s.ownLive = false
	drop := expect{msg: 'C', act: actDrop}
	s.send(drop, closeMsg('P', ownName))
	s.send(drop, closeMsg('S', ownName))
	s.replies.push(expect{msg: 'S', act: actDrop})
	s.sent()
	_, _ = s.uw.Write(syncMsg)
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
func (s *session) ask(m Marker) (tr Translation, perr *PgError) {
	if s.srv.OnAsk != nil {
		start := time.Now()
		defer func() { s.reportAsk(m, start, &tr, perr) }()
	}
	if s.srv.Translator == nil {
		return Translation{}, noEngineError()
	}
	if m.invalid != nil {
		return Translation{}, m.invalid
	}
	if m.unreadable != nil {
		return Translation{}, &PgError{Severity: "ERROR", Code: pg.CodeCharacterNotInRepertoire,
			Message: "nlproxy: the question cannot be read in the session's client_encoding (" + s.encoding() + ")",
			Hint:    "Ask in UTF8 (SET client_encoding = 'UTF8') or in one of the encodings the README lists."}
	}
	release, perr := s.srv.acquireAsk(s.clientHost)
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
		return Translation{}, &PgError{Severity: "ERROR", Code: pg.CodeInternalError, Message: "nlproxy: the engine returned no statement"}
	}
	if tr.Rows != nil && len(tr.Rows.Columns) == 0 {
		return Translation{}, &PgError{Severity: "ERROR", Code: pg.CodeInternalError, Message: "nlproxy: the engine returned a result without columns"}
	}
	return tr, nil
}

// settleBatch makes sure nothing of the client's is in flight before an
// ask, so the transaction state is known: a batch the client has not synced
// yet is ended with a Sync of the proxy's (statements before an ask in the
// same pipeline thus commit on their own). ok is false when that batch
// failed: the server would skip the rest of it, ask included, and so does
// the proxy until the client's Sync.
func (s *session) settleBatch() (ok bool, err error) {
	split := s.batchOpen
	if split {
		if s.tracked.Load() {
			s.sync(actDrop, nil)
		} else {
			s.swallowZ.Add(1)
			s.sent()
			if _, err := s.uw.Write(syncMsg); err != nil {
				return false, err
			}
		}
		s.batchOpen = false
	}
	if err := s.uw.Flush(); err != nil {
		return false, err
	}
	if err := s.waitIdle(); err != nil {
		return false, err
	}
	if split && s.unitFailed() {
		s.skipBatch = true
		s.tracked.Store(true)
		return false, nil
	}
	s.tracked.Store(true)
	return true, nil
}

// errCopyIn: the server waits for COPY data, so it will not become idle;
// a marker then is passed on untranslated, and the server answers it with
// the protocol error it is.
var errCopyIn = errors.New("proxy: upstream is in COPY FROM STDIN")

// passMarker forwards a message as the client sent it (see errCopyIn).
func (s *session) passMarker(typ byte, msg []byte) error {
	if s.tracked.Load() {
		s.replies.push(expect{msg: typ, act: actRelay})
	}
	if typ == 'Q' {
		s.sent()
		s.batchOpen = false
	}
	_, err := s.uw.Write(msg)
	if typ == 'Q' {
	}
	return err
}

// failQuery makes a simple-protocol ask fail at its place in the stream
// with Postgres's own error handling: a statement upstream that fails, its
// error replaced by the proxy's.
func (s *session) failQuery(e *PgError) error {
	s.replies.push(expect{msg: 'Q', act: actRelay, sentinel: e})
	s.sent()
	s.batchOpen = false
	_, err := s.uw.Write(queryMsg(sentinelSQL))
	return err
}

// failParse does the same for a Parse: the server then skips the rest of
// the batch, as it would after any failed Parse.
func (s *session) failParse(name string, tail []byte, e *PgError) error {
	s.replies.push(expect{msg: 'P', act: actRelay, sentinel: e})
	_, err := s.uw.Write(parseMsg(name, sentinelSQL, tail))
	return err
}

// placeholderReply queues a reply the proxy makes itself at the current
// place in the stream (see actSynth).
func (s *session) placeholderReply(reply []byte) error {
	s.replies.push(expect{msg: 'C', act: actSynth, synth: reply})
	_, err := s.uw.Write(closeMsg('S', placeholder))
	return err
}

// injectAll sends the proxy's own statements (scope SQL); their replies are
// dropped, their errors go to k or else to the client.
func (s *session) injectAll(sqls []string, k *sink) {
	for _, sql := range sqls {
		s.inject(sql, k)
	}
}

// inject runs one of the proxy's fixed statements through its own named
// statement and portal (never the client's unnamed ones), closing any left
// from a batch an error cut short.
func (s *session) inject(sql string, k *sink) {
	s.ownLive = true
	drop := expect{act: actDrop, sink: k}
	s.send(withMsg(drop, 'C'), closeMsg('P', ownName))
	s.send(withMsg(drop, 'C'), closeMsg('S', ownName))
	s.send(withMsg(drop, 'P'), parseMsg(ownName, sql, []byte{0, 0}))
	s.send(withMsg(drop, 'B'), bindMsg(ownName, ownName))
	s.send(withMsg(drop, 'E'), executeMsg(ownName, 0))
}

// injectStatement sends a sealed statement — the only way generated SQL
// reaches the server — described and executed with act (relay to the
// client, or capture into k), at most maxRows rows (0: all).
func (s *session) injectStatement(stmt guard.Statement, act replyAct, k *sink, maxRows int) {
	s.ownLive = true
	drop := expect{act: actDrop, sink: k}
	s.send(withMsg(drop, 'C'), closeMsg('P', ownName))
	s.send(withMsg(drop, 'C'), closeMsg('S', ownName))
	s.send(withMsg(drop, 'P'), parseMsg(ownName, stmt.SQL(), []byte{0, 0}))
	s.send(withMsg(drop, 'B'), bindMsg(ownName, ownName))
	s.send(expect{msg: 'D', act: act, sink: k}, describeMsg('P', ownName))
	s.send(expect{msg: 'E', act: act, sink: k}, executeMsg(ownName, maxRows))
}

// sync ends a batch of the proxy's.
func (s *session) sync(act replyAct, k *sink) {
	s.replies.push(expect{msg: 'S', act: act, sink: k})
	s.sent()
	_, _ = s.uw.Write(syncMsg)
	s.dropOwn()
}

// send queues e and writes msg upstream; a write error surfaces at Flush.
func (s *session) send(e expect, msg []byte) {
	s.replies.push(e)
	_, _ = s.uw.Write(msg)
}

func withMsg(e expect, msg byte) expect {
	e.msg = msg
	return e
}

func duplicateStatement(name string) *PgError {
	return &PgError{Severity: "ERROR", Code: pg.CodeDuplicatePreparedStatement, Message: fmt.Sprintf("prepared statement %q already exists", name)}
}

func noEngineError() *PgError {
	return &PgError{Severity: "ERROR", Code: "0A000",
		Message: "natural-language queries need an engine: this nlproxy has no translator configured",
		Hint:    "Configure an engine (Ollama model) for nlproxy, or send plain SQL."}
}

func translatorError(err error) *PgError {
	var pe *PgError
	if errors.As(err, &pe) {
		e := *pe
		if e.Severity == "" || e.Severity == "FATAL" || e.Severity == "PANIC" {
			e.Severity = "ERROR"
		}
		if e.Code == "" {
			e.Code = pg.CodeInternalError
		}
		return &e
	}
	switch {
	case errors.Is(err, context.Canceled):
		return &PgError{Severity: "ERROR", Code: pg.CodeQueryCanceled, Message: "canceling statement due to user request"}
	case errors.Is(err, guard.ErrFailedTransaction):
		return &PgError{Severity: "ERROR", Code: pg.CodeInFailedTransaction, Message: "current transaction is aborted, commands ignored until end of transaction block"}
	}
	return &PgError{Severity: "ERROR", Code: pg.CodeInternalError, Message: "nlproxy: internal error while answering the question"}
}

// waitIdle waits until every request sent upstream has been answered, or
// until the server waits for the client's COPY data (errCopyIn).
func (s *session) waitIdle() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.unitsDone != s.unitsSent && !s.closing && !s.copyIn {
		s.cond.Wait()
	}
	switch {
	case s.closing:
		return errQuiet
	case s.copyIn:
		return errCopyIn
	}
	return nil
}

func (s *session) unitFailed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastUnitFailed
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
		Marker: m, Database: s.database, User: s.user, TxStatus: tx, ClientEncoding: s.encoding(), Exec: &executor{s: s},
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
