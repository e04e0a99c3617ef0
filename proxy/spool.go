package proxy

import (
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// Row-limited Executes of a prepared ask inside a client's transaction.
//
// Every run of an ask inside a transaction block happens in a read-only,
// pinned savepoint that is rolled back after it (sealed.RunScope). A portal
// made inside that savepoint ends with it, yet a row-limited Execute
// (JDBC's fetch size, a cursor-style client) must resume the rows on the
// next Execute. Binding the portal outside the savepoint would plan the
// statement — and run whatever planning runs (a selectivity estimator
// calling an operator's function, constant folding) — in the client's
// writable transaction under its search_path. So the first row-limited
// Execute runs the whole statement inside the scope, as every other run
// does, and keeps its DataRows here; that Execute and the later ones are
// answered from the spool in the portions the client asked for.

// spooledExecute answers an Execute of p's portal with at most maxRows rows
// (0: the rest), running the statement inside the scope on the first one.
func (s *session) spooledExecute(p *askPortal, maxRows int) error {
	if p.spool == nil {
		scope, err := sealed.RunScope(pg.TxInTx, p.stmt.timeout)
		if err != nil {
			return err
		}
		sp := &rowSpool{}
		p.spool = sp
		s.injectAll(scope.Enter, nil)
		s.bindOwn(p)
		// Its error, if any, goes to the client at the Execute's place;
		// the server then skips the rest of the batch, the portion too.
		s.send(expect{msg: feExecute, act: actSpool, spool: sp}, executeMsg(ownName, 0))
		s.send(expect{msg: feClose, act: actDrop}, closeMsg(objPortal, ownName))
		s.injectAll(scope.Exit, nil)
	}
	sp := p.spool
	// The placeholder is a Parse, not a Close: in a transaction the server
	// has aborted it fails with 25P02, as an Execute of the portal would.
	s.replies.push(expect{msg: feParse, act: actSynth, synthFn: func() []byte { return sp.portion(maxRows) }})
	if _, err := s.cl.uw.Write(parseMsg(placeholder, "", []byte{0, 0})); err != nil {
		return err
	}
	s.send(expect{msg: feClose, act: actDrop}, closeMsg(objStatement, placeholder))
	return nil
}

// spoolReply keeps one reply of the spooled Execute (server goroutine).
func (s *session) spoolReply(sp *rowSpool, typ byte, n int) error {
	if typ != beDataRow {
		_, err := s.sv.ur.Discard(5 + n) // CommandComplete: the tags are the portions'
		return err
	}
	if sp.tooLarge || sp.size+n > maxSpoolBytes {
		sp.tooLarge = true
		_, err := s.sv.ur.Discard(5 + n)
		return err
	}
	_, body, err := readFrame(s.sv.ur, 0)
	if err != nil {
		return err
	}
	sp.size += n
	sp.rows = append(sp.rows, appendMsg(nil, beDataRow, body))
	return nil
}
