package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"go.uber.org/zap"
)

func (s *session) serverLoop() {
	locked := false
	defer func() {
		if locked {
			_ = s.cw.Flush()
			s.cwMu.Unlock()
		}
	}()
	for {
		if locked && s.ur.Buffered() < 5 {
			err := s.cw.Flush()
			s.cwMu.Unlock()
			locked = false
			if err != nil {
				s.close()
				return
			}
		}
		hdr, err := s.ur.Peek(5)
		if err != nil {
			s.upstreamLost(locked, err)
			return
		}
		if !locked {
			s.cwMu.Lock()
			locked = true
		}
		if !s.capturing.Load() {
			// Fast path: pass every complete message in the read buffer that
			// needs no inspection with a single write.
			if span := s.plainSpan(); span > 0 {
				b, _ := s.ur.Peek(span)
				if _, err := s.cw.Write(b); err != nil {
					s.close()
					return
				}
				_, _ = s.ur.Discard(span)
				continue
			}
		}
		typ := hdr[0]
		n := int(int32(binary.BigEndian.Uint32(hdr[1:]))) - 4
		if n < 0 {
			s.upstreamLost(locked, fmt.Errorf("%w: invalid message length from upstream", ErrProtocol))
			return
		}
		if s.capturing.Load() && typ != 'A' && typ != 'S' {
			if err := s.deliverCaptured(); err != nil {
				s.upstreamLost(locked, err)
				return
			}
			continue
		}
		switch typ {
		case 'Z':
			s.swallowTags.Store(0) // a prelude that failed leaves nothing to swallow
			b, err := s.ur.Peek(6)
			if err != nil || n != 1 {
				s.upstreamLost(locked, fmt.Errorf("%w: bad ReadyForQuery", ErrProtocol))
				return
			}
			drain := s.noteReady(b[5])
			if err := relayN(s.ur, s.cw, 6, s.cw.Flush); err != nil {
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
			if s.hasRewrites.Load() {
				if err := s.rewriteError(); err != nil {
					s.upstreamLost(locked, err)
					return
				}
				continue
			}
			if b, err := s.ur.Peek(min(5+n, s.ur.Size())); err == nil && fatalSeverity(b[5:]) {
				s.upstreamFatal = true // Postgres said why it closes; don't add our own error
			}
		case 'C':
			if s.swallowTags.Load() > 0 {
				// A tag of the proxy's own prelude to a generated query.
				s.swallowTags.Add(-1)
				if _, err := s.ur.Discard(5 + n); err != nil {
					s.upstreamLost(locked, err)
					return
				}
				continue
			}
			if s.srv.OnDDL != nil && n <= 256 {
				if b, err := s.ur.Peek(5 + n); err == nil {
					s.noteTag(b[5:])
				}
			}
		}
		if err := relayN(s.ur, s.cw, 5+n, s.cw.Flush); err != nil {
			s.close()
			return
		}
	}
}

// plainSpan returns the length of the run of complete, uninspected messages
// at the start of the upstream read buffer.
func (s *session) plainSpan() int {
	buf, _ := s.ur.Peek(s.ur.Buffered())
	ddl := s.srv.OnDDL != nil
	off := 0
	for off+5 <= len(buf) {
		switch buf[off] {
		case 'Z':
			return off
		case 'C':
			if ddl || s.swallowTags.Load() > 0 {
				return off
			}
		case 'E':
			return off // inspected: rewrites, and FATAL before upstream closes
		}
		n := int(int32(binary.BigEndian.Uint32(buf[off+1:])))
		if n < 4 || n > len(buf)-off-1 {
			return off
		}
		off += 1 + n
	}
	return off
}

// upstreamLost reports a broken upstream to the client (unless we are closing).
func (s *session) upstreamLost(locked bool, err error) {
	if !s.isClosing() && !s.upstreamFatal {
		s.log.Debug("upstream lost", zap.Error(err))
		if !locked {
			s.cwMu.Lock()
		}
		_, _ = s.cw.Write(encodeError(&PgError{Severity: "FATAL", Code: "08006",
			Message: fmt.Sprintf("nlproxy: lost connection to upstream %s: %v", s.route.Address, rootCause(err))}))
		_ = s.cw.Flush()
		if !locked {
			s.cwMu.Unlock()
		}
	}
	s.close()
}

func (s *session) noteReady(status byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.txStatus = status
	if s.unitsDone < s.unitsSent {
		s.unitsDone++
	}
	for len(s.rewrites) > 0 && s.rewrites[0].unit < s.unitsDone {
		s.rewrites = s.rewrites[1:]
	}
	s.hasRewrites.Store(len(s.rewrites) > 0)
	s.lastActive = time.Now()
	idle := s.unitsDone == s.unitsSent
	if idle {
		s.cond.Broadcast()
	}
	return s.draining && idle && status == 'I' && !s.translating
}

func (s *session) noteTag(tag []byte) {
	tag = bytes.TrimRight(tag, "\x00")
	for _, p := range []string{"CREATE ", "ALTER ", "DROP ", "COMMENT"} {
		if bytes.HasPrefix(tag, []byte(p)) {
			go s.srv.OnDDL(s.database, string(tag))
			return
		}
	}
}

// rewriteError replaces the sentinel error of a failed marker statement with
// the proxy's error; other errors pass unchanged.
func (s *session) rewriteError() error {
	typ, body, err := readFrame(s.ur, 0)
	if err != nil {
		return err
	}
	msg := appendMsg(nil, typ, body)
	s.mu.Lock()
	if len(s.rewrites) > 0 && s.rewrites[0].unit == s.unitsDone {
		if pe := pgErrorFromBody(body); pe.Code == "42601" && strings.Contains(pe.Message, sentinelSQL) {
			msg = encodeError(s.rewrites[0].err)
			s.rewrites = s.rewrites[1:]
			s.hasRewrites.Store(len(s.rewrites) > 0)
		}
	}
	s.mu.Unlock()
	_, err = s.cw.Write(msg)
	return err
}

// deliverCaptured hands one upstream message to the running executor query.
func (s *session) deliverCaptured() error {
	typ, body, err := readFrame(s.ur, 0)
	if err != nil {
		return err
	}
	s.mu.Lock()
	ch := s.capture
	if typ == 'Z' {
		s.capture = nil
		s.capturing.Store(false)
	}
	s.mu.Unlock()
	if typ == 'Z' && len(body) == 1 {
		s.noteReady(body[0])
	}
	if ch == nil {
		return nil
	}
	select {
	case ch <- frame{typ, body}:
	case <-s.ctx.Done():
	}
	return nil
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
	for {
		if s.cr.Buffered() == 0 {
			if err := s.uw.Flush(); err != nil {
				return err
			}
			if err := s.waitClient(); err != nil {
				return err
			}
		}
		hdr, err := s.cr.Peek(5)
		if err != nil {
			return err
		}
		typ := hdr[0]
		n := int(int32(binary.BigEndian.Uint32(hdr[1:]))) - 4
		if n < 0 || n > s.maxMsg {
			return s.fatal("08P01", "nlproxy: invalid message length %d (type %q, limit %d)", n+4, typ, s.maxMsg)
		}
		switch typ {
		case 'Q':
			err = s.clientQuery(n)
		case 'P':
			err = s.clientParse(n)
		case 'S', 'F': // Sync, FunctionCall: each is answered by one ReadyForQuery
			s.sent()
			err = relayN(s.cr, s.uw, 5+n, s.uw.Flush)
			s.uw.boundary()
		case 'X':
			if err := relayN(s.cr, s.uw, 5+n, s.uw.Flush); err != nil {
				return err
			}
			_ = s.uw.Flush()
			return errQuiet
		default:
			err = relayN(s.cr, s.uw, 5+n, s.uw.Flush)
		}
		if err != nil {
			return err
		}
	}
}

func (s *session) sent() {
	s.mu.Lock()
	s.unitsSent++
	s.mu.Unlock()
}

// waitClient blocks until the client sends something, enforcing idle timeouts.
func (s *session) waitClient() error {
	idleT, txT := s.srv.IdleTimeout, s.srv.IdleInTransactionTimeout
	if idleT <= 0 && txT <= 0 {
		_, err := s.cr.Peek(1)
		return err
	}
	poll := idleT
	if poll <= 0 || (txT > 0 && txT < poll) {
		poll = txT
	}
	for {
		s.mu.Lock()
		idle := s.unitsDone == s.unitsSent && !s.translating
		tx, last := s.txStatus, s.lastActive
		s.mu.Unlock()
		limit := idleT
		if tx != 'I' {
			limit = txT
		}
		deadline := time.Now().Add(poll)
		if idle && limit > 0 {
			deadline = last.Add(limit)
		}
		_ = s.client.SetReadDeadline(deadline)
		_, err := s.cr.Peek(1)
		if err == nil {
			_ = s.client.SetReadDeadline(time.Time{})
			s.mu.Lock()
			s.lastActive = time.Now()
			s.mu.Unlock()
			return nil
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return err
		}
		if idle && limit > 0 && !time.Now().Before(deadline) {
			if tx == 'I' {
				return s.fatal("57P05", "terminating connection due to idle-session timeout (nlproxy)")
			}
			return s.fatal("25P03", "terminating connection due to idle-in-transaction timeout (nlproxy)")
		}
	}
}

// clientQuery relays a simple Query, intercepting marker statements.
