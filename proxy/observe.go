package proxy

import "bytes"

// StatementObserver sees the plain statements the proxy relays (--learn-workload):
// each simple Query's text and each Parse's statement text that is not an
// ask, with the session's database and login role, and a number telling
// the session apart from others (distinct sessions weigh what is learnt,
// not how many statements one session sends). It is called at one
// point per relay path — the event loop (clientMsg), the goroutine relay
// (clientQuery, clientParse) and its tracked mode after an ask
// (trackedQuery, trackedParse) — between reading a message and passing it
// on, so it must return at once (hand the text to a bounded queue,
// dropping when full). sql is the proxy's read buffer, in the client's
// encoding, valid only during the call: copy what is kept.
//
// Not observed: a statement longer than the read buffer, which the relay
// streams without holding it whole.
type StatementObserver interface {
	Observe(database, role string, session uint64, sql []byte)
}

// observe hands a whole Query or Parse body (after the length word) to
// the observer; with none it is one nil check.
func (s *session) observe(typ byte, body []byte) {
	if o := s.srv.Observer; o != nil {
		// The accept time tells sessions apart without a field of its own.
		observeBody(o, s.database, s.user, uint64(s.started.UnixNano()), typ, body)
	}
}

func observeBody(o StatementObserver, database, role string, session uint64, typ byte, body []byte) {
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
		o.Observe(database, role, session, body)
	}
}
