package proxy

import (
	"bytes"
	"strings"
)

// What each protocol message does to the session's state: onClient and
// onServer, which every relay (goroutine, event loop, tracked) calls, and
// the notes they take (parameters, command tags, DISCARD and DEALLOCATE).

// maxTagInspected bounds a CommandComplete the relay reads to learn from
// its tag (DDL, DISCARD ALL); longer tags are none of those.
const maxTagInspected = 256

// onClient records what frontend message typ, on its way upstream, does to
// the session's state. body is the message's whole body when the relay
// holds it (a Query or Parse is then seen by the workload observer), nil
// when it streams the message. A Query the proxy sends in place of the
// client's (synthQuery, failQuery, …) is recorded here too; the proxy's own
// Syncs (sync, dropOwn) only count a unit (shared.sent), as they leave the
// client's batch as it is.
func (s *session) onClient(typ byte, body []byte) {
	if h := s.srv.stateHook; h != nil {
		h(s, true, typ, false)
	}
	switch typ {
	case feQuery, feSync, feFunctionCall: // each is answered by one ReadyForQuery
		if typ == feQuery && body != nil {
			s.observe(typ, body)
		}
		s.sh.sent()
		s.cl.batchOpen = false
		s.cl.skipBatch = false
	case feParse:
		if body != nil {
			s.observe(typ, body)
		}
		s.cl.batchOpen = true
	case feTerminate:
		// Closing first: the upstream then closes its end, and that must
		// not reach the client as a lost connection.
		s.sh.setClosing()
	case feFlush, feCopyData, feCopyDone, feCopyFail: // open no batch
	default: // Bind, Describe, Execute, Close, …
		s.cl.batchOpen = true
	}
	if h := s.srv.stateHook; h != nil {
		h(s, true, typ, true)
	}
}

// observe hands a whole Query or Parse body (after the length word) to
// the Server's StatementObserver (observe.go); with none it is one nil check.
func (s *session) observe(typ byte, body []byte) {
	if o := s.srv.Observer; o != nil {
		// The accept time tells sessions apart without a field of its own.
		observeBody(o, s.database, s.user, uint64(s.started.UnixNano()), typ, body)
	}
}

// serverInspects reports whether the relay must look into backend message
// typ (body length n) and call onServer with its body; every other message
// passes through unread (onServer with a nil body, or — on the bulk paths
// — not at all, as it changes nothing).
func (s *session) serverInspects(typ byte, n int) bool {
	switch typ {
	case beReadyForQuery, beErrorResponse:
		return true
	case beParameterStatus: // client_encoding
		return n <= maxInspected
	case beCommandComplete: // DDL (OnDDL); DISCARD ALL (conversation); DISCARD/DEALLOCATE ALL while asks are in play
		return (s.srv.watchTags() || s.sig.tracked.Load()) && n <= maxTagInspected
	}
	return false
}

// serverChanges reports whether backend message typ may change the
// session's state, so that a bulk pass-through must stop before it.
func (s *session) serverChanges(typ byte) bool {
	switch typ {
	case beReadyForQuery, beErrorResponse, beParameterStatus, beCopyInResponse, beCopyBothResponse:
		return true
	case beCommandComplete:
		return s.srv.watchTags() || s.sig.tracked.Load()
	}
	return false
}

// onServer records what backend message typ, relayed to the client (or
// answering the proxy's own statement), does to the session's state. body
// is its body where serverInspects asked for it (an ErrorResponse may be a
// prefix of a long one), else nil. drain reports a ReadyForQuery that
// leaves a draining session idle: the relay closes it after passing the
// message on.
func (s *session) onServer(typ byte, body []byte) (drain bool) {
	if h := s.srv.stateHook; h != nil {
		h(s, false, typ, false)
	}
	switch typ {
	case beReadyForQuery:
		s.sv.skipping = false
		failed := s.sv.errInUnit
		s.sv.errInUnit = false
		drain = s.sh.noteReady(body[0], failed)
	case beErrorResponse:
		s.sv.errInUnit = true
		if fatalSeverity(body) {
			s.sv.upstreamFatal = true // Postgres said why it closes; don't add our own error
		}
	case beCopyInResponse, beCopyBothResponse:
		s.sh.noteCopyIn(true)
	case beParameterStatus:
		if body != nil {
			s.noteParameter(body)
		}
	case beCommandComplete:
		if body != nil {
			if s.srv.watchTags() {
				s.noteTag(body)
			}
			if s.sig.tracked.Load() {
				s.noteDiscard(body)
			}
		}
	}
	if h := s.srv.stateHook; h != nil {
		h(s, false, typ, true)
	}
	return drain
}

// noteParameter records a ParameterStatus body.
func (s *session) noteParameter(body []byte) {
	name, rest, ok := cstring(body)
	if !ok {
		return
	}
	value, _, ok := cstring(rest)
	if !ok {
		return
	}
	switch name {
	case "client_encoding":
		s.sh.setEncoding(value)
	case "standard_conforming_strings":
		s.sh.setNonStandardStrings(value == "off")
	}
}

// noteTag acts on a CommandComplete tag: DDL refreshes the catalog, DISCARD
// ALL forgets the session's conversation.
func (s *session) noteTag(tag []byte) {
	tag = bytes.TrimRight(tag, "\x00")
	if string(tag) == "DISCARD ALL" {
		s.conv.Reset()
		return
	}
	if s.srv.OnDDL == nil {
		return
	}
	for _, p := range []string{"CREATE ", "ALTER ", "DROP ", "COMMENT"} {
		if bytes.HasPrefix(tag, []byte(p)) {
			go s.srv.OnDDL(s.database, string(tag))
			return
		}
	}
}

func fatalSeverity(body []byte) bool {
	for len(body) > 1 && body[0] != 0 {
		field := body[0]
		end := bytes.IndexByte(body[1:], 0)
		if end < 0 {
			return false
		}
		if v := string(body[1 : 1+end]); field == 'V' || field == 'S' {
			if v == "FATAL" || v == "PANIC" {
				return true
			}
		}
		body = body[2+end:]
	}
	return false
}

// terminate passes the client's Terminate on and ends the session. The
// session counts as closing first: the upstream then closes its end, and
// that must not reach the client as a lost connection.
func (s *session) terminate(n int) error {
	s.onClient(feTerminate, nil)
	if err := relayN(s.cl.cr, s.cl.uw, 5+n, s.cl.uw.Flush); err != nil {
		return err
	}
	_ = s.cl.uw.Flush()
	return errQuiet
}

// noteDiscard forgets the proxy's prepared ask statements when the client
// drops every prepared statement at once (they are gone upstream too).
func (s *session) noteDiscard(tag []byte) {
	switch strings.TrimRight(string(tag), "\x00") {
	case "DISCARD ALL":
		s.sig.discarded.Store(discardAll)
	case "DEALLOCATE ALL":
		s.sig.discarded.CompareAndSwap(0, deallocateAll)
	}
}

// maxInspected bounds a message the proxy reads whole to look inside
// (errors, notices, parameter status, row descriptions it captures).
const maxInspected = 1 << 20
