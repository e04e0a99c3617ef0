//go:build linux

package proxy

import (
	"crypto/tls"
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// TLS on the event loop. A TLS side of a session (client → proxy, proxy →
// upstream, or both) is relayed by the loop like a plaintext one; only the
// bytes between the pipes and the socket go through the session's tls.Conn.
//
// Which conn the tls.Conn reads: crypto/tls has no way to change the
// net.Conn under a tls.Conn, and reaching into its fields (unsafe, reflect)
// would break with any release. So every TLS conn the proxy makes for a
// session is made over a loopConn from the start (answerSSL, Upstream.dial):
// during the handshake and on the goroutine relay it is the socket on Go's
// netpoller, and while the loop relays it reads and writes the loop's
// duplicate of the socket without blocking. The handshake stays on the
// session's goroutine; the tls.Conn, with whatever it has buffered, moves to
// the loop and back unchanged.
//
// Reading: a loopConn on the loop makes at most one read system call per
// readiness event (fairness, as the plaintext loop reads once); after it, or
// on EAGAIN, it returns wouldBlock, a temporary net.Error. crypto/tls keeps
// a partial record when a read fails with a temporary net.Error and does not
// record the error on the conn (Go's crypto/tls/conn.go, readRecordOrCCS:
// "if e, ok := err.(net.Error); !ok || !e.Temporary() { c.in.setErrorLocked(err) }",
// for the record header and the body alike; bytes.Buffer.ReadFrom keeps what
// was read before the error), so the next Read carries on where it stopped.
// epoll only says the socket is readable; the tls.Conn may hold decrypted
// plaintext or whole records beyond what one Read returns (one record a
// Read; several messages a record, several records a socket read). So fill
// reads the tls.Conn until it would block, and when the pipe fills first the
// side is marked more and pumped again, without waiting, once the pipe is
// written out. A wouldBlock from tls.Conn.Read means it holds no complete
// record: what is left of a partial one is still in the socket (or not yet
// sent), and level-triggered epoll says so.
//
// Writing: tls.Conn.Write (and the replies crypto/tls writes from inside
// Read: a KeyUpdate's answer, an alert) always succeeds into the loopConn's
// backlog; the loop writes the backlog out right after, and on EPOLLOUT
// while it is not empty, and reads nothing more for that direction until it
// is (so the backlog holds at most one pipe's worth).
//
// The end: close_notify and EOF come out of Read as io.EOF, a bad record or
// an alert as an error: the session ends as when a plaintext socket closes
// (after what was read before it is passed on). A hand-back to the goroutine
// relay (afterLoop) returns the tls.Conn to the netpoller with its buffered
// input intact, writes the backlog first, and the goroutine relay reads on
// from the tls.Conn.

// wouldBlock is a loopConn's read that found nothing (or already read this
// turn): temporary, so crypto/tls keeps its partial record.
type wouldBlock struct{}

func (wouldBlock) Error() string   { return "proxy: loop socket would block" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

var _ net.Error = wouldBlock{}

func (c *loopConn) Read(p []byte) (int, error) {
	if c.fd < 0 {
		return c.Conn.Read(p)
	}
	if c.read || len(p) == 0 {
		return 0, wouldBlock{}
	}
	c.read = true
	for {
		n, err := rawRead(c.fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return 0, wouldBlock{}
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		if c.count != nil {
			c.count.in.Add(int64(n))
		}
		return n, nil
	}
}

func (c *loopConn) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.fd < 0 {
		return c.Conn.Write(p)
	}
	c.out = append(c.out, p...)
	return len(p), nil
}

func (c *loopConn) backlog() bool { return c.off < len(c.out) }

// enter puts c on the loop's socket fd.
func (c *loopConn) enter(fd int, count *countingConn) {
	c.fd, c.count, c.read = fd, count, false
}

// resume puts c back on the netpoller over inner (no I/O: flushBacklog
// writes what the loop could not).
func (c *loopConn) resume(inner net.Conn) {
	c.Conn, c.fd, c.count = inner, -1, nil
}

// flushBacklog writes, blocking, the records the loop took and could not
// write, before anything else is written.
func (c *loopConn) flushBacklog() error {
	if c.backlog() && c.err == nil {
		_, c.err = c.Conn.Write(c.out[c.off:])
	}
	c.out, c.off = nil, 0
	return c.err
}

// tlsSide returns the tls.Conn and its loopConn of a session's connection,
// or ok false where c is not TLS; loopable false where it is but not over a
// loopConn (cannot go on the loop).
func tlsSide(c net.Conn) (t *loopTLS, loopableTLS bool) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return nil, true
	}
	lc, ok := tc.NetConn().(*loopConn)
	if !ok {
		return nil, false
	}
	return &loopTLS{conn: tc, lc: lc}, true
}

// clientStream is what the goroutine relay reads and writes the client
// through: the tls.Conn, or the plain connection.
func (s *session) clientStream() net.Conn {
	if s.tlsc != nil {
		return s.tlsc
	}
	return s.client
}

// fillTLS is fill for a TLS side: it reads plaintext from the tls.Conn until
// it would block or the pipe is full.
func (l *eventLoop) fillTLS(ls *loopSess, side int, t *loopTLS) bool {
	pp := ls.pipe(side)
	pp.compact()
	t.more = false
	start := pp.w
	for pp.w < len(pp.buf) && t.rerr == nil {
		n, err := t.conn.Read(pp.buf[pp.w:])
		pp.w += n
		if err != nil {
			if _, ok := err.(wouldBlock); !ok {
				t.rerr = err
			}
			break
		}
		if n == 0 {
			break // not from a non-empty buffer; never spin
		}
	}
	switch {
	case t.rerr != nil && pp.w > start:
		t.more = true // pass on what came first; the next fill ends the side
	case t.rerr != nil:
		if side == 0 {
			return l.finish(ls, loopClientGone, t.rerr)
		}
		return l.finish(ls, loopUpstreamLost, t.rerr)
	case pp.w == len(pp.buf):
		t.more = true
	}
	// A post-handshake message may have made crypto/tls write (a KeyUpdate
	// answer, an alert): out through this socket's backlog.
	return !t.lc.backlog() || l.flushOut(ls, side)
}

// flushTLS is flush for a pipe whose other side is TLS: the parsed bytes go
// through the tls.Conn into that side's backlog, which is then written.
func (l *eventLoop) flushTLS(ls *loopSess, side int, t *loopTLS) bool {
	pp := ls.pipe(side)
	if pp.r < pp.p {
		if _, err := t.conn.Write(pp.buf[pp.r:pp.p]); err != nil {
			return l.finish(ls, loopClientGone, err)
		}
		pp.r = pp.p
	}
	if pp.rem == 0 && pp.p == pp.w {
		pp.r, pp.p, pp.w = 0, 0, 0
	}
	return l.flushOut(ls, 1-side)
}

// flushOut writes the backlog of fdSide's loopConn (0 the client's, 1 the
// upstream's) until the socket would block; false if the session left the
// loop.
func (l *eventLoop) flushOut(ls *loopSess, fdSide int) bool {
	c := ls.tls[fdSide].lc
	for c.off < len(c.out) {
		n, err := rawWrite(c.fd, c.out[c.off:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return true
		}
		if err != nil {
			c.err = err
			return l.finish(ls, loopClientGone, err)
		}
		if c.count != nil {
			c.count.out.Add(int64(n))
		}
		c.off += n
	}
	// Kept for the next batch while small; a large one (a big result's) is
	// not held by a session that may then sit idle.
	if cap(c.out) > bufSize/2 {
		c.out = nil
	}
	c.out, c.off = c.out[:0], 0
	return true
}

// backlog reports whether fdSide's socket has TLS records waiting.
func (ls *loopSess) backlog(fdSide int) bool {
	t := ls.tls[fdSide]
	return t != nil && t.lc.backlog()
}

// blocked reports whether side must not be read now: its parsed bytes, or
// the records made of them, wait to be written to the other side.
func (ls *loopSess) blocked(side int) bool {
	return ls.pipe(side).pending() || ls.backlog(1-side)
}

// pump relays, without waiting for epoll, what a TLS side's tls.Conn holds
// beyond what the last fill took; false if the session left the loop.
func (l *eventLoop) pump(ls *loopSess) bool {
	for side := 0; side < 2; side++ {
		t := ls.tls[side]
		for t != nil && t.more && !ls.blocked(side) {
			if !l.fill(ls, side) || !l.parse(ls, side) || !l.flush(ls, side) {
				return false
			}
		}
	}
	return true
}

// newReadTurn lets a TLS side's loopConn make one read system call.
func (ls *loopSess) newReadTurn(side int) {
	if t := ls.tls[side]; t != nil {
		t.lc.read = false
	}
}
