package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// serverLoop relays upstream → client. Untracked (no ask in play) it
// forwards runs of messages with one write and inspects only the messages
// that change the session's state (serverChanges); tracked, every message is
// attributed to the request that caused it (see replies.go). Either way
// onServer says what a message does to the session.
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
		msgs++
		var stop bool
		switch {
		case n < 0:
			err = fmt.Errorf("%w: invalid message length from upstream", ErrProtocol)
		case s.sig.tracked.Load():
			stop, err = s.trackedReply(typ, n)
		default:
			var more int
			more, stop, err = s.plainReply(typ, n)
			msgs += uint64(more)
		}
		if err != nil {
			s.upstreamLost(locked, err)
			return
		}
		if stop {
			return
		}
	}
}

// plainReply relays untracked: every complete message at the head of the
// read buffer that changes nothing with one write (more counts those past
// the first), else the one message typ (body length n) through onServer.
// stop reports that the session was closed; err that the upstream broke.
func (s *session) plainReply(typ byte, n int) (more int, stop bool, err error) {
	if span, k := s.plainSpan(); span > 0 {
		b, _ := s.sv.ur.Peek(span)
		if _, err := s.cw.Write(b); err != nil {
			s.close()
			return 0, true, nil
		}
		_, _ = s.sv.ur.Discard(span)
		return k - 1, false, nil
	}
	switch {
	case typ == beReadyForQuery && s.sig.swallowZ.Load() > 0:
		return 0, false, s.swallowReady(n)
	case typ == beParameterStatus:
		return 0, false, s.relayWhole(typ, n)
	}
	body, err := s.peekInspected(typ, n)
	if err != nil {
		return 0, false, err
	}
	drain := false
	if s.serverChanges(typ) {
		drain = s.onServer(typ, body)
	}
	if err := relayN(s.sv.ur, s.cw.Writer, 5+n, s.cw.Flush); err != nil {
		s.close()
		return 0, true, nil
	}
	if drain {
		s.drainClose()
		return 0, true, nil
	}
	return 0, false, nil
}

// swallowReady records the ReadyForQuery of the Sync the proxy sent to end
// a client's batch before an ask (see settleBatch); the client did not ask
// for it, so it is not relayed.
func (s *session) swallowReady(n int) error {
	status, err := s.readStatus(n)
	if err != nil {
		return err
	}
	s.sig.swallowZ.Add(-1)
	s.onServer(beReadyForQuery, []byte{status})
	return nil
}

// peekInspected returns the body of the upstream's next message where
// serverInspects asks for it, left in the read buffer; an ErrorResponse
// longer than the buffer gives its prefix.
func (s *session) peekInspected(typ byte, n int) ([]byte, error) {
	if typ == beReadyForQuery && n != 1 {
		return nil, fmt.Errorf("%w: bad ReadyForQuery", ErrProtocol)
	}
	if !s.serverInspects(typ, n) {
		return nil, nil
	}
	b, err := s.sv.ur.Peek(min(5+n, s.sv.ur.Size()))
	if err != nil {
		if typ == beReadyForQuery {
			return nil, fmt.Errorf("%w: bad ReadyForQuery", ErrProtocol)
		}
		return nil, nil // passed on as far as it comes, as before the read failed
	}
	return b[5:], nil
}

// plainSpan returns the length of the run of complete messages at the start
// of the upstream read buffer that change nothing (serverChanges), and how
// many messages it holds.
func (s *session) plainSpan() (span, msgs int) {
	buf, _ := s.sv.ur.Peek(s.sv.ur.Buffered())
	off := 0
	for off+5 <= len(buf) {
		if s.serverChanges(buf[off]) {
			return off, msgs
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

// clientLoop relays client → upstream: untracked through clientRequest,
// tracked through trackedRequest; either way onClient says what a message
// does to the session.
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
		if handled, err := s.bigAsk(typ, n); handled || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		if s.sig.tracked.Load() {
			err = s.trackedRequest(typ, n)
		} else {
			err = s.clientRequest(typ, n)
		}
		if err != nil {
			return err
		}
	}
}

// bigAsk refuses a Query or Parse larger than the question limit that is
// an ask (refuseBigAsk); handled is false for anything else.
func (s *session) bigAsk(typ byte, n int) (handled bool, err error) {
	if typ != feQuery && typ != feParse {
		return false, nil
	}
	limit := s.bigAskLimit()
	if limit <= 0 || n <= limit || (s.sig.tracked.Load() && s.cl.skipBatch) {
		return false, nil
	}
	return s.refuseBigAsk(typ, n)
}

// clientRequest relays one client message untracked.
func (s *session) clientRequest(typ byte, n int) error {
	switch typ {
	case feQuery:
		return s.clientQuery(n)
	case feParse:
		return s.clientParse(n)
	case feTerminate:
		return s.terminate(n)
	}
	s.onClient(typ, nil)
	return relayN(s.cl.cr, s.cl.uw, 5+n, s.cl.uw.Flush)
}

// waitClient blocks until the client sends something, enforcing idle timeouts.
func (s *session) waitClient() error {
	idleT, txT := s.srv.IdleTimeout, s.srv.IdleInTransactionTimeout
	if idleT <= 0 && txT <= 0 {
		_, err := s.cl.cr.Peek(1)
		return err
	}
	poll := minTimeout(idleT, txT)
	for {
		idle, tx, last := s.sh.idleState()
		limit := idleT
		if tx != txIdle {
			limit = txT
		}
		deadline := time.Now().Add(poll)
		if idle && limit > 0 {
			deadline = last.Add(limit)
		}
		if done, err := s.peekClient(deadline); done {
			return err
		}
		if idle && limit > 0 && !time.Now().Before(deadline) {
			return s.idleTimeout(tx)
		}
	}
}

// peekClient waits until deadline for the client's next byte. done: it came
// (err nil), or the read failed for another reason than the deadline.
func (s *session) peekClient(deadline time.Time) (done bool, err error) {
	_ = s.client.SetReadDeadline(deadline)
	_, err = s.cl.cr.Peek(1)
	if err == nil {
		_ = s.client.SetReadDeadline(time.Time{})
		s.sh.touch()
		return true, nil
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return true, err
	}
	return false, nil
}

// idleTimeout ends a session idle past its limit, with Postgres's own code
// for the state it idled in.
func (s *session) idleTimeout(tx byte) error {
	if tx == txIdle {
		return s.fatal(pg.CodeIdleSessionTimeout, "terminating connection due to idle-session timeout (nlproxy)")
	}
	return s.fatal(pg.CodeIdleInTransactionTimeout, "terminating connection due to idle-in-transaction timeout (nlproxy)")
}

// minTimeout is the shorter of two timeouts, where zero or less is none.
func minTimeout(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}
