package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// serverLoop relays upstream → client. Untracked (no ask in play) it
// forwards runs of messages with one write and inspects only
// ReadyForQuery, ErrorResponse, ParameterStatus and (for DDL refresh)
// CommandComplete; tracked, every message is attributed to the request that
// caused it (see replies.go).
func (s *session) serverLoop() {
	locked := false
	var msgs uint64 // relayed since the last flush (metrics)
	defer func() {
		if locked {
			_ = s.cw.Flush()
			s.cw.mu.Unlock()
		}
		s.sig.msgsOut.Add(msgs)
	}()
	for {
		if locked && s.sv.ur.Buffered() < 5 {
			err := s.cw.Flush()
			s.cw.mu.Unlock()
			locked = false
			s.sig.msgsOut.Add(msgs)
			msgs = 0
			if err != nil {
				s.close()
				return
			}
		}
		hdr, err := s.sv.ur.Peek(5)
		if err != nil {
			s.upstreamLost(locked, err)
			return
		}
		if !locked {
			s.cw.mu.Lock()
			locked = true
		}
		typ := hdr[0]
		n := int(int32(binary.BigEndian.Uint32(hdr[1:]))) - 4
		if n < 0 {
			s.upstreamLost(locked, fmt.Errorf("%w: invalid message length from upstream", ErrProtocol))
			return
		}
		msgs++
		if s.sig.tracked.Load() {
			stop, err := s.trackedReply(typ, n)
			if err != nil {
				s.upstreamLost(locked, err)
				return
			}
			if stop {
				return
			}
			continue
		}
		// Fast path: pass every complete message in the read buffer that
		// needs no inspection with a single write.
		if span, k := s.plainSpan(); span > 0 {
			msgs += uint64(k) - 1 // the first was counted above
			b, _ := s.sv.ur.Peek(span)
			if _, err := s.cw.Write(b); err != nil {
				s.close()
				return
			}
			_, _ = s.sv.ur.Discard(span)
			continue
		}
		switch typ {
		case 'Z':
			b, err := s.sv.ur.Peek(6)
			if err != nil || n != 1 {
				s.upstreamLost(locked, fmt.Errorf("%w: bad ReadyForQuery", ErrProtocol))
				return
			}
			status := b[5]
			s.sv.skipping = false
			if s.sig.swallowZ.Load() > 0 {
				// The Sync the proxy sent to end a client's batch before an
				// ask (see split); the client did not ask for it.
				s.sig.swallowZ.Add(-1)
				s.noteReady(status)
				_, _ = s.sv.ur.Discard(6)
				continue
			}
			drain := s.noteReady(status)
			if err := relayN(s.sv.ur, s.cw.Writer, 6, s.cw.Flush); err != nil {
				s.close()
				return
			}
			if drain {
				_, _ = s.cw.Write(encodeError(shutdownError()))
				_ = s.cw.Flush()
				s.close()
				return
			}
			continue
		case 'E':
			s.sv.errInUnit = true
			if b, err := s.sv.ur.Peek(min(5+n, s.sv.ur.Size())); err == nil && fatalSeverity(b[5:]) {
				s.sv.upstreamFatal = true // Postgres said why it closes; don't add our own error
			}
		case 'G', 'W':
			s.sh.noteCopyIn(true)
		case 'S':
			if err := s.relayParameterStatus(n); err != nil {
				s.upstreamLost(locked, err)
				return
			}
			continue
		case 'C':
			if s.srv.watchTags() && n <= 256 {
				if b, err := s.sv.ur.Peek(5 + n); err == nil {
					s.noteTag(b[5:])
				}
			}
		}
		if err := relayN(s.sv.ur, s.cw.Writer, 5+n, s.cw.Flush); err != nil {
			s.close()
			return
		}
	}
}

// plainSpan returns the length of the run of complete, uninspected messages
// at the start of the upstream read buffer, and how many messages it holds.
func (s *session) plainSpan() (span, msgs int) {
	buf, _ := s.sv.ur.Peek(s.sv.ur.Buffered())
	ddl := s.srv.watchTags()
	off := 0
	for off+5 <= len(buf) {
		switch buf[off] {
		case 'Z', 'E', 'S', 'G', 'W':
			// ReadyForQuery: transaction status; ErrorResponse: FATAL before
			// upstream closes; ParameterStatus: client_encoding; Copy In /
			// Copy Both: the server now waits for the client.
			return off, msgs
		case 'C':
			if ddl {
				return off, msgs
			}
		}
		n := int(int32(binary.BigEndian.Uint32(buf[off+1:])))
		if n < 4 || n > len(buf)-off-1 {
			return off, msgs
		}
		off += 1 + n
		msgs++
	}
	return off, msgs
}

// relayParameterStatus records a ParameterStatus the proxy needs to know
// (client_encoding) and passes it on.
func (s *session) relayParameterStatus(n int) error {
	if n > maxInspected {
		return relayN(s.sv.ur, s.cw.Writer, 5+n, s.cw.Flush)
	}
	typ, body, err := readFrame(s.sv.ur, maxInspected)
	if err != nil {
		return err
	}
	s.noteParameter(body)
	_, err = s.cw.Write(appendMsg(nil, typ, body))
	return err
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
	if name == "client_encoding" {
		s.sh.setEncoding(value)
	}
}

// upstreamLost reports a broken upstream to the client (unless we are closing).
func (s *session) upstreamLost(locked bool, err error) {
	if !s.sh.isClosing() && !s.sv.upstreamFatal {
		s.log.Info("lost the upstream connection", zap.String("upstream", s.route.Address), zap.Error(err))
		if !locked {
			s.cw.mu.Lock()
		}
		_, _ = s.cw.Write(encodeError(&PgError{Severity: "FATAL", Code: pg.CodeConnectionFailure,
			Message: "nlproxy: lost the connection to the database server"}))
		_ = s.cw.Flush()
		if !locked {
			s.cw.mu.Unlock()
		}
	}
	s.close()
}

// noteReady records a ReadyForQuery (server side); it reports whether the
// session should now be closed because the server is draining.
func (s *session) noteReady(status byte) bool {
	failed := s.sv.errInUnit
	s.sv.errInUnit = false
	return s.sh.noteReady(status, failed)
}

// watchTags: command tags are read when DDL refreshes the catalog or a
// session may hold a conversation (DISCARD ALL empties it).
func (srv *Server) watchTags() bool { return srv.OnDDL != nil || srv.Translator != nil }

// noteTag acts on a CommandComplete tag: DDL refreshes the catalog, DISCARD
// ALL forgets the session's conversation, whichever relay saw it.
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

func (s *session) clientLoop() error {
	var msgs uint64 // relayed since the last flush (metrics)
	defer func() { s.sig.msgsIn.Add(msgs) }()
	for {
		if s.cl.cr.Buffered() == 0 {
			s.sig.msgsIn.Add(msgs)
			msgs = 0
			if err := s.cl.uw.Flush(); err != nil {
				return err
			}
			if err := s.waitClient(); err != nil {
				return err
			}
		}
		hdr, err := s.cl.cr.Peek(5)
		if err != nil {
			return err
		}
		typ := hdr[0]
		n := int(int32(binary.BigEndian.Uint32(hdr[1:]))) - 4
		if n < 0 || n > s.maxMsg {
			return s.fatal(pg.CodeProtocolViolation, "nlproxy: invalid message length %d (type %q, limit %d)", n+4, typ, s.maxMsg)
		}
		msgs++
		if (typ == 'Q' || typ == 'P') && s.bigAskLimit() > 0 && n > s.bigAskLimit() && !(s.sig.tracked.Load() && s.cl.skipBatch) {
			handled, err := s.refuseBigAsk(typ, n)
			if err != nil {
				return err
			}
			if handled {
				continue
			}
		}
		if s.sig.tracked.Load() {
			if err := s.trackedRequest(typ, n); err != nil {
				return err
			}
			continue
		}
		switch typ {
		case 'Q':
			err = s.clientQuery(n)
		case 'P':
			err = s.clientParse(n)
		case 'S', 'F': // Sync, FunctionCall: each is answered by one ReadyForQuery
			s.sent()
			s.cl.batchOpen = false
			err = relayN(s.cl.cr, s.cl.uw, 5+n, s.cl.uw.Flush)
		case 'X':
			return s.terminate(n)
		case 'H', 'd', 'c', 'f': // Flush and COPY data open no batch
			err = relayN(s.cl.cr, s.cl.uw, 5+n, s.cl.uw.Flush)
		default:
			s.cl.batchOpen = true
			err = relayN(s.cl.cr, s.cl.uw, 5+n, s.cl.uw.Flush)
		}
		if err != nil {
			return err
		}
	}
}

// terminate passes the client's Terminate on and ends the session. The
// session counts as closing first: the upstream then closes its end, and
// that must not reach the client as a lost connection.
func (s *session) terminate(n int) error {
	s.sh.setClosing()
	if err := relayN(s.cl.cr, s.cl.uw, 5+n, s.cl.uw.Flush); err != nil {
		return err
	}
	_ = s.cl.uw.Flush()
	return errQuiet
}

func (s *session) sent() { s.sh.sent() }

// waitClient blocks until the client sends something, enforcing idle timeouts.
func (s *session) waitClient() error {
	idleT, txT := s.srv.IdleTimeout, s.srv.IdleInTransactionTimeout
	if idleT <= 0 && txT <= 0 {
		_, err := s.cl.cr.Peek(1)
		return err
	}
	poll := idleT
	if poll <= 0 || (txT > 0 && txT < poll) {
		poll = txT
	}
	for {
		idle, tx, last := s.sh.idleState()
		limit := idleT
		if tx != 'I' {
			limit = txT
		}
		deadline := time.Now().Add(poll)
		if idle && limit > 0 {
			deadline = last.Add(limit)
		}
		_ = s.client.SetReadDeadline(deadline)
		_, err := s.cl.cr.Peek(1)
		if err == nil {
			_ = s.client.SetReadDeadline(time.Time{})
			s.sh.touch()
			return nil
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return err
		}
		if idle && limit > 0 && !time.Now().Before(deadline) {
			if tx == 'I' {
				return s.fatal(pg.CodeIdleSessionTimeout, "terminating connection due to idle-session timeout (nlproxy)")
			}
			return s.fatal(pg.CodeIdleInTransactionTimeout, "terminating connection due to idle-in-transaction timeout (nlproxy)")
		}
	}
}
