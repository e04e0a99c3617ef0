package proxy

import "bytes"

// StatementObserver sees the plain statements the proxy relays (--learn-workload):
// each simple Query's text and each Parse's statement text that is not an
// ask, with the session's database and login role, and a number telling
// the session apart from others (distinct sessions weigh what is learnt,
// not how many statements one session sends). It is called from one
// place, onClient (handlers.go), which every relay calls between reading a
// message and passing it on, so it must return at once and cost little:
// count a text seen recently, hand a new one to a bounded queue, drop when
// full (workload.Collector: a hash and a count per statement). sql is the proxy's read buffer, in the client's
// encoding, valid only during the call: copy what is kept.
//
// Not observed: a statement longer than the read buffer, which the relay
// streams without holding it whole.
type StatementObserver interface {
	Observe(database, role string, session uint64, sql []byte)
}

func observeBody(o StatementObserver, database, role string, session uint64, typ byte, body []byte) {
	switch typ {
	case feQuery: // text NUL
		body = body[:max(len(body)-1, 0)]
	case feParse: // name NUL text NUL …
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
