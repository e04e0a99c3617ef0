package proxy

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// While an ask is in play the session is "tracked": every message the proxy
// sends upstream — the client's own and the proxy's (trial runs, read-only
// scopes, placeholders for replies the proxy makes itself) — is queued with
// what to do with its replies, and the server loop attributes each reply to
// the head of that queue. This one queue replaces the three mechanisms the
// relay had (error rewrites, swallowed command tags, executor capture).

// trackedReply handles one upstream message in tracked mode: what it does
// to the session is onServer's; here is where it goes (the head of the
// reply queue says). stop reports that the session was closed.
func (s *session) trackedReply(typ byte, n int) (stop bool, err error) {
	switch typ {
	case beParameterStatus:
		return false, s.relayWhole(typ, n)
	case beNotification:
		return false, relayN(s.sv.ur, s.cw.Writer, 5+n, s.cw.Flush)
	case beNoticeResponse:
		if h, ok := s.replies.head(); ok && h.act != actRelay && h.act != actRelayBody {
			_, err := s.sv.ur.Discard(5 + n) // a notice about the proxy's own statement
			return false, err
		}
		return false, relayN(s.sv.ur, s.cw.Writer, 5+n, s.cw.Flush)
	}
	if s.sv.skipping && typ == beReadyForQuery {
		s.replies.skipToSync()
		s.sv.skipping = false
	}
	h, ok := s.replies.head()
	if !ok {
		return false, fmt.Errorf("%w: unexpected message %q from upstream", ErrProtocol, typ)
	}
	switch typ {
	case beErrorResponse:
		return false, s.trackedError(h, n)
	case beReadyForQuery:
		return s.trackedReady(h, n)
	}
	if err := s.trackedOther(h, typ, n); err != nil {
		return false, err
	}
	if ends(h.msg, typ) {
		s.replies.pop()
	}
	return false, nil
}

// relayWhole reads a backend message whole to record it (onServer) and
// passes it on; one larger than maxInspected is passed on unread.
func (s *session) relayWhole(typ byte, n int) error {
	if n > maxInspected {
		s.onServer(typ, nil)
		return relayN(s.sv.ur, s.cw.Writer, 5+n, s.cw.Flush)
	}
	_, body, err := readFrame(s.sv.ur, maxInspected)
	if err != nil {
		return err
	}
	s.onServer(typ, body)
	_, err = s.cw.Write(appendMsg(nil, typ, body))
	return err
}

// trackedReady handles the ReadyForQuery that ends the replies to h.
func (s *session) trackedReady(h expect, n int) (stop bool, err error) {
	if !ends(h.msg, beReadyForQuery) {
		return false, fmt.Errorf("%w: ReadyForQuery while waiting for the reply to %q", ErrProtocol, h.msg)
	}
	status, err := s.readStatus(n)
	if err != nil {
		return false, err
	}
	s.replies.pop()
	drain := s.onServer(beReadyForQuery, []byte{status})
	if h.sink != nil {
		h.sink.finish(status)
	}
	switch h.act {
	case actDrop, actCapture, actRelayBody:
		return false, nil
	case actSynth: // a reply of the proxy's to a Query (see synthQuery)
		if _, err := s.cw.Write(h.synth); err != nil {
			return false, err
		}
	}
	if _, err := s.cw.Write([]byte{beReadyForQuery, 0, 0, 0, 5, status}); err != nil {
		return false, err
	}
	if drain {
		s.drainClose()
		return true, nil
	}
	return false, nil
}

// trackedOther handles any other reply to h: relayed, dropped, replaced
// (actSynth) or captured.
func (s *session) trackedOther(h expect, typ byte, n int) error {
	relay := h.act == actRelay || h.act == actRelayBody
	if s.serverChanges(typ) {
		var body []byte
		if relay && s.serverInspects(typ, n) {
			if b, err := s.sv.ur.Peek(5 + n); err == nil {
				body = b[5:]
			}
		}
		s.onServer(typ, body)
	}
	switch h.act {
	case actRelay, actRelayBody:
		return relayN(s.sv.ur, s.cw.Writer, 5+n, s.cw.Flush)
	case actDrop, actSynth:
		return s.dropReply(h, typ, n)
	case actCapture:
		return s.capture(h.sink, typ, n)
	case actSpool:
		return s.spoolReply(h.spool, typ, n)
	}
	return nil
}

// dropReply drops a reply to the proxy's own message; the one that ends a
// placeholder's replies (actSynth) is replaced by the proxy's.
func (s *session) dropReply(h expect, typ byte, n int) error {
	if _, err := s.sv.ur.Discard(5 + n); err != nil {
		return err
	}
	if h.act != actSynth || !ends(h.msg, typ) {
		return nil
	}
	synth := h.synth
	if h.synthFn != nil {
		synth = h.synthFn()
	}
	_, err := s.cw.Write(synth)
	return err
}

func (s *session) readStatus(n int) (byte, error) {
	b, err := s.sv.ur.Peek(6)
	if err != nil || n != 1 {
		return 0, fmt.Errorf("%w: bad ReadyForQuery", ErrProtocol)
	}
	status := b[5]
	_, _ = s.sv.ur.Discard(6)
	return status, nil
}

// trackedError handles an ErrorResponse: it goes to the sink, is replaced
// (sentinel), or is relayed; then, in an extended-protocol batch, the
// server skips everything up to Sync and so does the queue.
func (s *session) trackedError(h expect, n int) error {
	body, err := s.readBounded(n)
	if err != nil {
		return err
	}
	s.onServer(beErrorResponse, body)
	switch {
	case h.sink != nil:
		h.sink.fail(pgErrorFromBody(body))
	case h.sentinel != nil && isSentinelError(body):
		if _, err := s.cw.Write(encodeError(s.clientText(h.sentinel))); err != nil {
			return err
		}
	default:
		if _, err := s.cw.Write(appendMsg(nil, beErrorResponse, body)); err != nil {
			return err
		}
	}
	switch h.msg {
	case feSync, feQuery, feFunctionCall:
		// A simple Query, FunctionCall or the Sync itself: ReadyForQuery follows.
	default:
		s.replies.pop()
		s.sv.skipping = true
	}
	return nil
}

// readBounded reads a message body the proxy must inspect; an oversized one
// (a server error quoting a huge value) is cut down, never held whole.
func (s *session) readBounded(n int) ([]byte, error) {
	if n <= maxInspected {
		_, body, err := readFrame(s.sv.ur, maxInspected)
		return body, err
	}
	b, err := s.sv.ur.Peek(5 + min(n, s.sv.ur.Size()-5))
	if err != nil && len(b) < 5 {
		return nil, err
	}
	pe := pgErrorFromBody(b[5:]) // may be incomplete: fields cut off are lost
	if _, err := s.sv.ur.Discard(5 + n); err != nil {
		return nil, err
	}
	if pe.Code == "" || pe.Code == pg.CodeInternalError {
		pe = &pg.Error{Severity: "ERROR", Code: pg.CodeProgramLimitExceeded, Message: "nlproxy: the server's error message was too large to pass on"}
	}
	out, _ := (&pgproto3.ErrorResponse{Severity: pe.Severity, SeverityUnlocalized: pe.Severity, Code: pe.Code, Message: truncate(pe.Message, 1024)}).Encode(nil)
	return out[5:], nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func isSentinelError(body []byte) bool {
	pe := pgErrorFromBody(body)
	return pe.Code == pg.CodeSyntaxError && strings.Contains(pe.Message, sentinelSQL)
}

// capture hands one reply of a trial run's statement to its sink, keeping
// at most lim.MaxRows rows and lim.MaxBytes bytes of row data: a larger row
// is skipped in the read buffer without being held.
func (s *session) capture(k *sink, typ byte, n int) error {
	switch typ {
	case beDataRow:
		return s.captureRow(k, n)
	case beRowDescription:
		_, body, err := readFrame(s.sv.ur, maxInspected)
		if err != nil {
			return err
		}
		var rd pgproto3.RowDescription
		if err := rd.Decode(body); err != nil {
			return fmt.Errorf("%w: bad RowDescription: %v", ErrProtocol, err)
		}
		k.rows.Columns = make([]string, len(rd.Fields))
		k.rows.Types = make([]uint32, len(rd.Fields))
		for i, fd := range rd.Fields {
			k.rows.Columns[i] = string(fd.Name)
			k.rows.Types[i] = fd.DataTypeOID
		}
		return nil
	case beCommandComplete:
		_, body, err := readFrame(s.sv.ur, maxInspected)
		if err != nil {
			return err
		}
		k.rows.Tag = strings.TrimRight(string(body), "\x00")
		return nil
	case bePortalSuspended:
		k.rows.Truncated = true
	}
	_, err := s.sv.ur.Discard(5 + n)
	return err
}

// captureRow keeps one DataRow of a trial run within the sink's limits.
func (s *session) captureRow(k *sink, n int) error {
	if k.tooLarge || (k.lim.MaxRows > 0 && len(k.rows.Values) >= k.lim.MaxRows) {
		_, err := s.sv.ur.Discard(5 + n)
		return err
	}
	if k.lim.MaxBytes > 0 && k.size+n > k.lim.MaxBytes {
		k.tooLarge = true
		_, err := s.sv.ur.Discard(5 + n)
		return err
	}
	k.size += n
	_, body, err := readFrame(s.sv.ur, 0)
	if err != nil {
		return err
	}
	var dr pgproto3.DataRow
	if err := dr.Decode(body); err != nil {
		return fmt.Errorf("%w: bad DataRow: %v", ErrProtocol, err)
	}
	row := make([]*string, len(dr.Values))
	for i, v := range dr.Values {
		if v != nil {
			str := string(v)
			row[i] = &str
		}
	}
	k.rows.Values = append(k.rows.Values, row)
	return nil
}
