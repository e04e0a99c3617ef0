package proxy

// The protocol's message types, and the one place that says what each
// message passed through the relay does to the session's state: onClient for
// a frontend message on its way upstream, onServer for a backend message on
// its way to the client. Every relay calls them — the goroutine relay
// (clientLoop, serverLoop), the event loop (clientMsg, serverMsg) and
// tracked mode (trackedRequest and its handlers, trackedReply) — so a
// change to message handling is made here once and holds on all of them.
// The relays differ only in how they read and write (bufio readers,
// the loop's pipes, whole messages queued with their replies).

// Frontend (client → server) message types.
const (
	feBind         byte = 'B'
	feClose        byte = 'C'
	feCopyData     byte = 'd'
	feCopyDone     byte = 'c'
	feCopyFail     byte = 'f'
	feDescribe     byte = 'D'
	feExecute      byte = 'E'
	feFlush        byte = 'H'
	feFunctionCall byte = 'F'
	feParse        byte = 'P'
	fePassword     byte = 'p' // also SASL responses and GSS data
	feQuery        byte = 'Q'
	feSync         byte = 'S'
	feTerminate    byte = 'X'
)

// Backend (server → client) message types.
const (
	beAuthentication      byte = 'R'
	beBackendKeyData      byte = 'K'
	beBindComplete        byte = '2'
	beCloseComplete       byte = '3'
	beCommandComplete     byte = 'C'
	beCopyBothResponse    byte = 'W'
	beCopyInResponse      byte = 'G'
	beDataRow             byte = 'D'
	beEmptyQueryResponse  byte = 'I'
	beErrorResponse       byte = 'E'
	beNoData              byte = 'n'
	beNoticeResponse      byte = 'N'
	beNotification        byte = 'A'
	beParameterStatus     byte = 'S'
	beParseComplete       byte = '1'
	bePortalSuspended     byte = 's'
	beReadyForQuery       byte = 'Z'
	beRowDescription      byte = 'T'
	beParameterDescriptor byte = 't'
)

// The one-byte answers to an SSLRequest.
const (
	sslAccepted byte = 'S'
	sslRefused  byte = 'N'
)

// Object types of Describe and Close.
const (
	objStatement byte = 'S'
	objPortal    byte = 'P'
)

// Transaction status of ReadyForQuery.
const (
	txIdle   byte = 'I'
	txInTx   byte = 'T'
	txFailed byte = 'E'
)

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
