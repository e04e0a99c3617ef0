package proxy

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// Statement injection: the proxy's own messages on the client's session.
// A generated statement runs only as the sealed sealed.Statement, through the
// proxy's own named statement and portal, between the Enter and Exit of a
// guard scope; every message is queued with what to do with its replies
// (queue.go) before it is written. An ask enters the stream at a synced
// point (settleBatch) or fails at its place in it (failQuery, failParse).

// ownName names the proxy's own statement and portal; placeholder is a
// statement that never exists. Control characters keep both out of any
// client's way.
const (
	ownName     = "\x01nlproxy"
	placeholder = "\x01nlproxy-none"
)

// answerQuery answers a simple Query with an ask statement at a synced
// point (transaction status tx): rows the proxy made go to the client as
// rows, never as SQL; a statement runs sealed in the read-only scope.
func (s *session) answerQuery(tx byte, st *askStmt) error {
	// A simple Query drops the unnamed statement and portal, here too.
	delete(s.cl.stmts, "")
	if st.rows != nil {
		out := s.rowDescription(st.rows, nil)
		out = append(out, s.dataRows(st.rows, 0, len(st.rows.Rows))...)
		out = append(out, mustEncode(&pgproto3.CommandComplete{CommandTag: fmt.Appendf(nil, "SELECT %d", len(st.rows.Rows))})...)
		out = append(out, beReadyForQuery, 0, 0, 0, 5, tx)
		return s.sendClient(out)
	}
	scope, err := sealed.RunScope(pg.TxStatus(tx), st.timeout)
	if err != nil {
		return s.failQuery(translatorError(err))
	}
	s.cl.batchOpen = false
	delete(s.cl.portals, "")
	drop := expect{msg: feClose, act: actDrop}
	s.send(drop, closeMsg(objPortal, ""))
	s.send(drop, closeMsg(objStatement, ""))
	s.injectAll(scope.Enter, nil)
	s.injectStatement(st.stmt, actRelay, nil, 0)
	s.injectAll(scope.Exit, nil)
	s.sync(actRelay, nil)
	return nil
}

// prepareOwn prepares st's sealed statement as the proxy's own statement for
// the one message of the client's that follows (Bind, Describe); closeOwn
// comes right after that message. An error in between (the server skips to
// Sync) leaves the statement to dropOwn.
func (s *session) prepareOwn(st *askStmt) {
	drop := expect{act: actDrop}
	s.send(withMsg(drop, feClose), closeMsg(objStatement, ownName))
	s.send(withMsg(drop, feParse), parseMsg(ownName, st.stmt.SQL(), st.tail))
	s.cl.ownLive = true
}

// bindOwn binds the proxy's own portal as the client bound p (see
// askPortal.bind); the statement is closed again at once.
func (s *session) bindOwn(p *askPortal) {
	s.prepareOwn(p.stmt)
	b := *p.bind
	b.DestinationPortal, b.PreparedStatement = ownName, ownName
	s.send(expect{msg: feClose, act: actDrop}, closeMsg(objPortal, ownName)) // a scope statement's
	s.send(expect{msg: feBind, act: actDrop}, mustEncode(&b))
	s.closeOwn()
}

func (s *session) closeOwn() {
	s.send(expect{msg: feClose, act: actDrop}, closeMsg(objStatement, ownName))
}

// dropOwn closes the proxy's own statement and portal after a batch that
// made them: they hold sealed or scope SQL, and no name upstream may reach
// that outside the ask path. The Closes form a batch of their own, after
// the Sync, so no error before them can make the server skip them.
func (s *session) dropOwn() {
	if !s.cl.ownLive {
		return
	}
	s.cl.ownLive = false
	drop := expect{msg: feClose, act: actDrop}
	s.send(drop, closeMsg(objPortal, ownName))
	s.send(drop, closeMsg(objStatement, ownName))
	s.replies.push(expect{msg: feSync, act: actDrop})
	s.sh.sent() // the proxy's own Sync: the client's batch stays as it is
	_, _ = s.cl.uw.Write(syncMsg)
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
	s.cl.ownLive = true
	drop := expect{act: actDrop, sink: k}
	s.send(withMsg(drop, feClose), closeMsg(objPortal, ownName))
	s.send(withMsg(drop, feClose), closeMsg(objStatement, ownName))
	s.send(withMsg(drop, feParse), parseMsg(ownName, sql, []byte{0, 0}))
	s.send(withMsg(drop, feBind), bindMsg(ownName, ownName))
	s.send(withMsg(drop, feExecute), executeMsg(ownName, 0))
}

// injectStatement sends a sealed statement — the only way generated SQL
// reaches the server — described and executed with act (relay to the
// client, or capture into k), at most maxRows rows (0: all).
func (s *session) injectStatement(stmt sealed.Statement, act replyAct, k *sink, maxRows int) {
	s.cl.ownLive = true
	drop := expect{act: actDrop, sink: k}
	s.send(withMsg(drop, feClose), closeMsg(objPortal, ownName))
	s.send(withMsg(drop, feClose), closeMsg(objStatement, ownName))
	s.send(withMsg(drop, feParse), parseMsg(ownName, stmt.SQL(), []byte{0, 0}))
	s.send(withMsg(drop, feBind), bindMsg(ownName, ownName))
	s.send(expect{msg: feDescribe, act: act, sink: k}, describeMsg(objPortal, ownName))
	s.send(expect{msg: feExecute, act: act, sink: k}, executeMsg(ownName, maxRows))
}

// sync ends a batch of the proxy's.
func (s *session) sync(act replyAct, k *sink) {
	s.replies.push(expect{msg: feSync, act: act, sink: k})
	s.sh.sent() // the proxy's own Sync: the client's batch stays as it is
	_, _ = s.cl.uw.Write(syncMsg)
	s.dropOwn()
}

// send queues e and writes msg upstream; a write error surfaces at Flush.
func (s *session) send(e expect, msg []byte) {
	s.replies.push(e)
	_, _ = s.cl.uw.Write(msg)
}

func withMsg(e expect, msg byte) expect {
	e.msg = msg
	return e
}

// settleBatch makes sure nothing of the client's is in flight before an
// ask, so the transaction state is known: a batch the client has not synced
// yet is ended with a Sync of the proxy's (statements before an ask in the
// same pipeline thus commit on their own). ok is false when that batch
// failed: the server would skip the rest of it, ask included, and so does
// the proxy until the client's Sync.
func (s *session) settleBatch() (ok bool, err error) {
	split := s.cl.batchOpen
	if split {
		if s.sig.tracked.Load() {
			s.sync(actDrop, nil)
		} else {
			s.sig.swallowZ.Add(1)
			s.sh.sent() // the proxy's own Sync
			if _, err := s.cl.uw.Write(syncMsg); err != nil {
				return false, err
			}
		}
		s.cl.batchOpen = false
	}
	if err := s.cl.uw.Flush(); err != nil {
		return false, err
	}
	if err := s.sh.waitIdle(); err != nil {
		return false, err
	}
	if split && s.sh.unitFailed() {
		s.cl.skipBatch = true
		s.sig.tracked.Store(true)
		return false, nil
	}
	s.sig.tracked.Store(true)
	return true, nil
}

// passMarker forwards a message as the client sent it (see errCopyIn).
func (s *session) passMarker(typ byte, msg []byte) error {
	if s.sig.tracked.Load() {
		s.replies.push(expect{msg: typ, act: actRelay})
	}
	if typ == feQuery {
		s.onClient(feQuery, nil)
	}
	_, err := s.cl.uw.Write(msg)
	return err
}

// failQuery makes a simple-protocol ask fail at its place in the stream
// with Postgres's own error handling: a statement upstream that fails, its
// error replaced by the proxy's.
func (s *session) failQuery(e *pg.Error) error {
	s.replies.push(expect{msg: feQuery, act: actRelay, sentinel: e})
	s.onClient(feQuery, nil)
	_, err := s.cl.uw.Write(queryMsg(sentinelSQL))
	return err
}

// failParse does the same for a Parse: the server then skips the rest of
// the batch, as it would after any failed Parse.
func (s *session) failParse(name string, tail []byte, e *pg.Error) error {
	s.replies.push(expect{msg: feParse, act: actRelay, sentinel: e})
	s.onClient(feParse, nil)
	_, err := s.cl.uw.Write(parseMsg(name, sentinelSQL, tail))
	return err
}

// placeholderReply queues a reply the proxy makes itself at the current
// place in the stream (see actSynth).
func (s *session) placeholderReply(reply []byte) error {
	s.replies.push(expect{msg: feClose, act: actSynth, synth: reply})
	_, err := s.cl.uw.Write(closeMsg(objStatement, placeholder))
	return err
}

func duplicateStatement(name string) *pg.Error {
	return &pg.Error{Severity: "ERROR", Code: pg.CodeDuplicatePreparedStatement, Message: fmt.Sprintf("prepared statement %q already exists", name)}
}
