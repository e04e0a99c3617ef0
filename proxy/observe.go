package proxy

import "bytes"

// StatementObserver sees the plain statements the proxy relays (--learn-workload):
// each simple Query's text and each Parse's statement text that is not an
// ask, with the session's database and login role. It is called at one
// point per relay path — the event loop (clientMsg), the goroutine relay
// (clientQuery, clientParse) and its tracked mode after an ask
// (trackedQuery, trackedParse) — between reading a message and passing it
// on, so it must return at once (hand the text to a bounded queue,
// dropping when full). sql is the proxy's read buffer, in the client's
// encoding, valid only during the call: copy what is kept.
//
// Not observed: a statement longer than the read buffer, and a Query the
// untracked goroutine relay reads whole to look for an ask inside it
// (after BEGIN; or with ask( in it) that then holds none.
type StatementObserver interface {
	Observe(database, role string, sql []byte)
}

// observe hands a whole Query or Parse body (after the length word) to
// the observer; with none it is one nil check.
func (s *session) observe(typ byte, body []byte) {
	if o := s.srv.Observer; o != nil {
		observeBody(o, s.database, s.user, typ, body)
	}
}

// observePeek is observe for the goroutine relay, which has not read the
// message yet: it looks at it in the read buffer, where clientQuery and
// clientParse have already peeked it.
func (s *session) observePeek(typ byte, n int) {
	if o := s.srv.Observer; o != nil && 5+n <= s.cr.Size() {
		if b, err := s.cr.Peek(5 + n); err == nil {
			observeBody(o, s.database, s.user, typ, b[5:])
		}
	}
}

func observeBody(o StatementObserver, database, role string, typ byte, body []byte) {
	switch typ {
	case 'Q': // text NUL
		body = body[:max(len(body)-1, 0)]
	case 'P': // name NUL text NUL …
		i := bytes.IndexByte(body, 0)
		if i < 0 {
			return
		}
		body = body[i+1:]
		j := bytes.IndexByte(body, 0)
		if j < 0 {
			return
		}
		body = body[:j]
	default:
		return
	}
	if len(body) > 0 {
		o.Observe(database, role, body)
	}
}
