package proxy

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// Tracked mode: while an ask is in play (a prepared ask in the table, a
// reply outstanding), every client message is read whole and queued with
// the handling of its replies, so the server side can attribute each reply
// (replies.go). Here too is the table of prepared asks and its lifecycle
// (Bind, Describe, Execute, Close, DEALLOCATE, EXECUTE). Where an ask enters
// the stream (settleBatch) or fails at its place in it is in inject.go.

// trackedRequest handles one client message while an ask is in play.
func (s *session) trackedRequest(typ byte, n int) error {
	s.applyDiscard()
	if s.cl.skipBatch && typ != feSync && typ != feTerminate {
		// The batch before an ask failed (found when the proxy synced it):
		// the server would skip the rest of it, so the proxy does.
		_, err := s.cl.cr.Discard(5 + n)
		return err
	}
	var err error
	switch typ {
	case feQuery:
		err = s.trackedQuery(n)
	case feParse:
		err = s.trackedParse(n)
	case feBind:
		err = s.trackedBind(n)
	case feDescribe:
		err = s.trackedDescribe(n)
	case feExecute:
		err = s.trackedExecute(n)
	case feClose:
		err = s.trackedClose(n)
	case feSync, feFunctionCall:
		s.replies.push(expect{msg: typ, act: actRelay})
		s.onClient(typ, nil)
		err = relayN(s.cl.cr, s.cl.uw, 5+n, s.cl.uw.Flush)
		if typ == feSync {
			s.dropOwn()
		}
	case feTerminate:
		return s.terminate(n)
	default: // Flush, COPY data: no reply of their own
		s.onClient(typ, nil)
		err = relayN(s.cl.cr, s.cl.uw, 5+n, s.cl.uw.Flush)
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
	if len(s.cl.stmts) == 0 && len(s.cl.portals) == 0 && !s.cl.batchOpen && s.replies.empty() {
		s.sig.tracked.Store(false)
	}
}

func (s *session) trackedQuery(n int) error {
	msg, err := s.readQuery(n)
	if err != nil {
		return err
	}
	prefix, m, err := s.queryAsk(msg[5 : len(msg)-1])
	switch {
	case err != nil:
		return err
	case prefix != "":
		return s.askQueryAfter(prefix, m, msg)
	case m.Kind != MarkerNone:
		return s.askQuery(m, msg) // a misused table function too: its error
	}
	if lc := parseLifecycle(string(msg[5:len(msg)-1]), s.sh.scanOptions()); lc.kind != lcNone {
		if done, err := s.lifecycleQuery(lc, msg); done || err != nil {
			return err
		}
	} else if prefix, name, suffix, ok := deallocateAround(string(msg[5:len(msg)-1]), s.sh.scanOptions()); ok && s.cl.stmts[name] != nil && name != "" {
		if done, err := s.deallocateAround(prefix, name, suffix); done || err != nil {
			return err
		}
	}
	// A simple Query drops the unnamed statement and portal.
	delete(s.cl.stmts, "")
	delete(s.cl.portals, "")
	s.replies.push(expect{msg: feQuery, act: actRelay})
	s.onClient(feQuery, msg[5:])
	_, err = s.cl.uw.Write(msg)
	return err
}

func (s *session) trackedParse(n int) error {
	msg, err := s.readMsg(n)
	if err != nil {
		return err
	}
	name, m, tail, err := s.readParse(msg)
	if err != nil {
		return err
	}
	if m.Kind != MarkerNone {
		return s.askParse(m, msg, name, tail)
	}
	if name != "" && s.cl.stmts[name] != nil {
		return s.failParse(name, tail, duplicateStatement(name))
	}
	delete(s.cl.stmts, name)
	s.replies.push(expect{msg: feParse, act: actRelay})
	s.onClient(feParse, msg[5:])
	_, err = s.cl.uw.Write(msg)
	return err
}

func (s *session) trackedBind(n int) error {
	msg, err := s.readMsg(n)
	if err != nil {
		return err
	}
	var b pgproto3.Bind
	if err := b.Decode(msg[5:]); err != nil {
		return s.fatal(pg.CodeProtocolViolation, "nlproxy: malformed Bind message")
	}
	st := s.cl.stmts[b.PreparedStatement]
	if st == nil || st.rows != nil {
		s.onClient(feBind, nil)
	}
	switch {
	case st == nil:
		if b.DestinationPortal == "" {
			// The unnamed portal is replaced; a named one that exists
			// stays, the Bind failing (42P03), so its entry stays too.
			delete(s.cl.portals, "")
		}
		s.replies.push(expect{msg: feBind, act: actRelay})
		_, err = s.cl.uw.Write(msg)
		return err
	case st.rows != nil:
		s.cl.portals[b.DestinationPortal] = &askPortal{stmt: st, formats: append([]int16(nil), b.ResultFormatCodes...)}
		return s.placeholderReply(mustEncode(&pgproto3.BindComplete{}))
	}
	// Running generated SQL starts here: the transaction state must be
	// known exactly, so the batch so far is synced first.
	ok, err := s.settleBatch()
	if errors.Is(err, errCopyIn) {
		return s.passMarker(feBind, msg)
	}
	if err != nil || !ok {
		return err
	}
	s.onClient(feBind, nil)
	return s.bindAsk(st, b)
}

// bindAsk binds the client's portal to an ask statement at a synced point:
// idle, inside the read-only scope the batch's implicit transaction becomes;
// in a transaction block, per Execute (askPortal.bind).
func (s *session) bindAsk(st *askStmt, b pgproto3.Bind) error {
	p := &askPortal{stmt: st}
	switch tx := s.sh.tx(); tx {
	case txIdle:
		scope, err := sealed.RunScope(pg.TxIdle, st.timeout)
		if err != nil {
			return err
		}
		s.injectAll(scope.Enter, nil)
	case txInTx:
		p.perExecute = true
		p.bind = &b
		s.cl.portals[b.DestinationPortal] = p
		return s.placeholderReply(mustEncode(&pgproto3.BindComplete{}))
	default: // failed transaction: the server refuses the Bind itself
	}
	s.cl.portals[b.DestinationPortal] = p
	s.prepareOwn(st)
	b.PreparedStatement = ownName
	s.replies.push(expect{msg: feBind, act: actRelay})
	if _, err := s.cl.uw.Write(mustEncode(&b)); err != nil {
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
		return s.fatal(pg.CodeProtocolViolation, "nlproxy: malformed Describe message")
	}
	s.onClient(feDescribe, nil)
	switch {
	case d.ObjectType == objStatement && s.cl.stmts[d.Name] != nil:
		st := s.cl.stmts[d.Name]
		if st.rows != nil {
			out := mustEncode(&pgproto3.ParameterDescription{})
			return s.placeholderReply(append(out, s.rowDescription(st.rows, nil)...))
		}
		s.prepareOwn(st)
		d.Name = ownName
		s.replies.push(expect{msg: feDescribe, act: actRelay})
		if _, err := s.cl.uw.Write(mustEncode(&d)); err != nil {
			return err
		}
		s.closeOwn()
		return nil
	case d.ObjectType == objPortal && s.cl.portals[d.Name] != nil && s.cl.portals[d.Name].stmt.rows != nil:
		p := s.cl.portals[d.Name]
		return s.placeholderReply(s.rowDescription(p.stmt.rows, p.formats))
	case d.ObjectType == objPortal && s.cl.portals[d.Name] != nil && s.cl.portals[d.Name].bind != nil:
		return s.describeBoundPortal(s.cl.portals[d.Name])
	}
	s.replies.push(expect{msg: feDescribe, act: actRelay})
	_, err = s.cl.uw.Write(msg)
	return err
}

func (s *session) trackedExecute(n int) error {
	msg, err := s.readMsg(n)
	if err != nil {
		return err
	}
	var e pgproto3.Execute
	if err := e.Decode(msg[5:]); err != nil {
		return s.fatal(pg.CodeProtocolViolation, "nlproxy: malformed Execute message")
	}
	s.onClient(feExecute, nil)
	p := s.cl.portals[e.Portal]
	switch {
	case p != nil && p.stmt.rows != nil:
		return s.placeholderReply(s.emulatedRows(p, int(e.MaxRows)))
	case p != nil && p.perExecute:
		// Inside the client's transaction: a read-only, bounded savepoint
		// around this Execute only, rolled back after it.
		scope, err := sealed.RunScope(pg.TxInTx, p.stmt.timeout)
		if err != nil {
			return err
		}
		if p.spool != nil || (p.bind != nil && e.MaxRows > 0) {
			return s.spooledExecute(p, int(e.MaxRows))
		}
		s.injectAll(scope.Enter, nil)
		if p.bind != nil {
			s.bindOwn(p)
			msg = executeMsg(ownName, 0)
		}
		s.replies.push(expect{msg: feExecute, act: actRelay})
		if _, err := s.cl.uw.Write(msg); err != nil {
			return err
		}
		if p.bind != nil {
			s.send(expect{msg: feClose, act: actDrop}, closeMsg(objPortal, ownName))
		}
		s.injectAll(scope.Exit, nil)
		return nil
	}
	s.replies.push(expect{msg: feExecute, act: actRelay})
	_, err = s.cl.uw.Write(msg)
	return err
}

func (s *session) trackedClose(n int) error {
	msg, err := s.readMsg(n)
	if err != nil {
		return err
	}
	var c pgproto3.Close
	if err := c.Decode(msg[5:]); err != nil {
		return s.fatal(pg.CodeProtocolViolation, "nlproxy: malformed Close message")
	}
	s.onClient(feClose, nil)
	switch c.ObjectType {
	case objStatement:
		if st := s.cl.stmts[c.Name]; st != nil {
			delete(s.cl.stmts, c.Name) // nothing of it is upstream
			return s.placeholderReply(mustEncode(&pgproto3.CloseComplete{}))
		}
	case objPortal:
		if p := s.cl.portals[c.Name]; p != nil {
			delete(s.cl.portals, c.Name)
			if p.stmt.rows != nil || p.bind != nil { // not upstream
				return s.placeholderReply(mustEncode(&pgproto3.CloseComplete{}))
			}
		}
	}
	s.replies.push(expect{msg: feClose, act: actRelay})
	_, err = s.cl.uw.Write(msg)
	return err
}

// describeBoundPortal describes a portal bound inside the client's
// transaction (askPortal.bind) from the proxy's own portal, bound and closed
// for it, inside a read-only, pinned savepoint: binding plans the statement,
// and planning may evaluate functions.
func (s *session) describeBoundPortal(p *askPortal) error {
	scope, err := sealed.RunScope(pg.TxInTx, p.stmt.timeout)
	if err != nil {
		return err
	}
	s.injectAll(scope.Enter, nil)
	s.bindOwn(p)
	s.replies.push(expect{msg: feDescribe, act: actRelay})
	if _, err := s.cl.uw.Write(describeMsg(objPortal, ownName)); err != nil {
		return err
	}
	s.send(expect{msg: feClose, act: actDrop}, closeMsg(objPortal, ownName))
	s.injectAll(scope.Exit, nil)
	return nil
}

// lifecycleQuery answers a simple Query that names an ask statement
// (DEALLOCATE, EXECUTE, PREPARE) as Postgres would, and keeps the table in
// step with DEALLOCATE ALL and DISCARD ALL. done is false when the Query
// is the server's to answer as it is.
func (s *session) lifecycleQuery(lc lifecycleStmt, msg []byte) (done bool, err error) {
	if lc.kind == lcDeallocateAll {
		return true, s.deallocateAllQuery(msg)
	}
	st := s.cl.stmts[lc.name]
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
	tx := s.sh.tx()
	if tx == txFailed {
		return false, nil // refused like any statement there (25P02)
	}
	switch lc.kind {
	case lcDeallocate:
		delete(s.cl.stmts, lc.name)
		return true, s.synthQuery(mustEncode(&pgproto3.CommandComplete{CommandTag: []byte("DEALLOCATE")}))
	case lcPrepare:
		return true, s.failQuery(duplicateStatement(lc.name))
	case lcExecute:
		return true, s.answerQuery(tx, st)
	}
	return false, nil
}

// deallocateAllQuery passes DEALLOCATE ALL or DISCARD ALL on: the server
// answers; its tag says whether the asks went too (noteDiscard), and the
// client's next message must find the table as the server left it.
func (s *session) deallocateAllQuery(msg []byte) error {
	delete(s.cl.stmts, "")
	delete(s.cl.portals, "")
	s.replies.push(expect{msg: feQuery, act: actRelay})
	s.onClient(feQuery, nil)
	if _, err := s.cl.uw.Write(msg); err != nil {
		return err
	}
	if err := s.cl.uw.Flush(); err != nil {
		return err
	}
	if err := s.sh.waitIdle(); err != nil && !errors.Is(err, errCopyIn) {
		return err
	}
	s.applyDiscard()
	return nil
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
	if s.sh.tx() == txFailed {
		return false, nil // refused like any statement there (25P02)
	}
	if prefix != "" {
		s.replies.push(expect{msg: feQuery, act: actRelayBody})
		s.onClient(feQuery, nil)
		if _, err := s.cl.uw.Write(queryMsg(prefix)); err != nil {
			return true, err
		}
		if err := s.cl.uw.Flush(); err != nil {
			return true, err
		}
		if err := s.sh.waitIdle(); err != nil {
			return true, err
		}
		if s.sh.unitFailed() {
			return true, s.sendClient([]byte{beReadyForQuery, 0, 0, 0, 5, s.sh.tx()})
		}
	}
	delete(s.cl.stmts, name)
	tag := mustEncode(&pgproto3.CommandComplete{CommandTag: []byte("DEALLOCATE")})
	if strings.TrimSpace(suffix) == "" {
		return true, s.synthQuery(tag)
	}
	if err := s.sendClient(tag); err != nil {
		return true, err
	}
	s.replies.push(expect{msg: feQuery, act: actRelay})
	s.onClient(feQuery, nil)
	_, err = s.cl.uw.Write(queryMsg(suffix))
	return true, err
}

// applyDiscard empties the table after the server dropped every prepared
// statement (DEALLOCATE ALL) or, with DISCARD ALL, every portal too.
func (s *session) applyDiscard() {
	switch s.sig.discarded.Swap(0) {
	case discardAll:
		clear(s.cl.portals)
		clear(s.cl.stmts)
	case deallocateAll:
		clear(s.cl.stmts)
	}
}

// synthQuery answers a simple Query with reply, made by the proxy: an empty
// Query upstream gives the genuine ReadyForQuery after it.
func (s *session) synthQuery(reply []byte) error {
	s.replies.push(expect{msg: feQuery, act: actSynth, synth: reply})
	s.onClient(feQuery, nil)
	_, err := s.cl.uw.Write(queryMsg(""))
	return err
}
