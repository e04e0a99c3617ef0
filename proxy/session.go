package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// errQuiet ends a session without further reporting (e.g. a CancelRequest).
var errQuiet = errors.New("proxy: connection done")

// rewrite replaces the sentinel error of response unit `unit` with err.
type rewrite struct {
	unit uint64
	err  *PgError
}

// frame is a captured upstream message (executor path only).
type frame struct {
	typ  byte
	body []byte
}

// session is one client connection and its upstream connection.
//
// Two goroutines relay: the client goroutine (run → clientLoop) owns cr and uw
// and does all marker handling and executor queries; the server goroutine
// (serverLoop) owns ur. Writes to the client go through cw under cwMu; the
// server goroutine holds cwMu while it has buffered input and releases it
// (after flushing) before any read that may block.
type session struct {
	srv    *Server
	log    *zap.Logger
	maxMsg int

	client    net.Conn // the raw accepted connection
	cr        *bufio.Reader
	cw        *bufio.Writer
	cwMu      sync.Mutex
	clientTLS bool

	route *Upstream
	ur    *bufio.Reader
	uw    *outBuf

	database, user string

	ctx    context.Context // ends when the session closes
	cancel context.CancelFunc

	capturing   atomic.Bool  // upstream replies go to the executor
	swallowTags atomic.Int32 // CommandCompletes of a generated query's prelude, not relayed
	hasRewrites atomic.Bool
	execMu      sync.Mutex

	mu          sync.Mutex
	cond        *sync.Cond
	upConn      net.Conn // upstream (plain or TLS), for close
	realPID     uint32
	realSecret  []byte
	key         string
	acquired    bool
	ready       bool
	closing     bool
	draining    bool
	translating bool
	cancelTr    context.CancelFunc
	unitsSent   uint64 // Query/Sync/FunctionCall sent upstream (each yields one ReadyForQuery)
	unitsDone   uint64 // ReadyForQuery received
	txStatus    byte
	lastActive  time.Time
	capture     chan frame
	rewrites    []rewrite

	closeOnce sync.Once

	upstreamFatal bool // server goroutine only: upstream sent a FATAL/PANIC error
}

func newSession(srv *Server, conn net.Conn) *session {
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{
		srv:      srv,
		log:      srv.logger().With(zap.String("client", conn.RemoteAddr().String())),
		maxMsg:   srv.maxMessageSize(),
		client:   conn,
		cr:       bufio.NewReaderSize(conn, bufSize),
		cw:       bufio.NewWriterSize(conn, bufSize),
		ctx:      ctx,
		cancel:   cancel,
		txStatus: 'I',
	}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *session) run() {
	defer s.close()
	hctx, cancel := context.WithTimeout(s.ctx, s.srv.handshakeTimeout())
	err := s.handshake(hctx)
	cancel()
	if err != nil {
		if !errors.Is(err, errQuiet) {
			s.log.Debug("handshake failed", zap.Error(err))
		}
		return
	}
	s.log.Debug("session ready", zap.String("user", s.user), zap.String("upstream", s.route.Address))
	serverDone := make(chan struct{})
	go func() {
		defer close(serverDone)
		s.serverLoop()
	}()
	if err := s.clientLoop(); err != nil && !errors.Is(err, errQuiet) && !s.isClosing() {
		s.log.Debug("client loop ended", zap.Error(err))
	}
	s.close()
	<-serverDone
}

// close tears down both sides once: Terminate upstream, close both sockets.
func (s *session) close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.cond.Broadcast()
		up, key, acquired := s.upConn, s.key, s.acquired
		s.mu.Unlock()
		s.cancel()
		if up != nil {
			_ = up.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = io.WriteString(up, terminateMsg)
			up.Close()
		}
		s.client.Close()
		if key != "" {
			s.srv.unregisterKey(key)
		}
		if acquired {
			s.srv.release()
		}
	})
}

func (s *session) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// sendClient writes complete messages to the client and flushes.
func (s *session) sendClient(b []byte) error {
	s.cwMu.Lock()
	defer s.cwMu.Unlock()
	if _, err := s.cw.Write(b); err != nil {
		return err
	}
	return s.cw.Flush()
}

// fatal sends a FATAL ErrorResponse to the client and returns it as an error.
func (s *session) fatal(code, format string, args ...any) error {
	e := &PgError{Severity: "FATAL", Code: code, Message: fmt.Sprintf(format, args...)}
	_ = s.sendClient(encodeError(e))
	return e
}

// ---- startup, TLS and authentication ----

func readStartup(r *bufio.Reader) (startupPacket, error) {
	hdr, err := r.Peek(4)
	if err != nil {
		return startupPacket{}, err
	}
	n := int(int32(binary.BigEndian.Uint32(hdr)))
	if n < 8 || n > maxStartupLen {
		return startupPacket{}, fmt.Errorf("%w: invalid length of startup packet", ErrProtocol)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return startupPacket{}, err
	}
	return parseStartup(buf[4:])
}

func (s *session) handshake(ctx context.Context) error {
	deadline, _ := ctx.Deadline()
	_ = s.client.SetDeadline(deadline)
	var pkt startupPacket
	for {
		var err error
		pkt, err = readStartup(s.cr)
		if errors.Is(err, ErrProtocol) {
			return s.fatal("08P01", "nlproxy: %v", err)
		}
		if err != nil {
			return err
		}
		switch pkt.Kind {
		case startupSSL:
			if s.clientTLS {
				return s.fatal("08P01", "nlproxy: SSLRequest on an encrypted connection")
			}
			if s.srv.TLSConfig == nil {
				if err := s.sendClient([]byte{'N'}); err != nil {
					return err
				}
				continue
			}
			if err := s.sendClient([]byte{'S'}); err != nil {
				return err
			}
			// Bytes already here were sent in plaintext after the SSLRequest and
			// would be mistaken for protected data (CVE-2021-23214).
			if s.cr.Buffered() > 0 {
				return s.fatal("08P01", "nlproxy: received unencrypted data after SSL request")
			}
			tc := tls.Server(s.client, s.srv.TLSConfig)
			if err := tc.HandshakeContext(ctx); err != nil {
				return fmt.Errorf("client TLS handshake: %w", err)
			}
			s.cr.Reset(tc)
			s.cw.Reset(tc)
			s.clientTLS = true
		case startupGSSENC:
			if err := s.sendClient([]byte{'N'}); err != nil {
				return err
			}
		case startupCancel:
			s.srv.cancel(ctx, pkt.PID, pkt.Secret)
			return errQuiet
		case startupMessage:
			return s.startup(ctx, deadline, pkt)
		}
	}
}

func (s *session) startup(ctx context.Context, deadline time.Time, pkt startupPacket) error {
	if s.srv.RequireTLS && !s.clientTLS {
		return s.fatal("28000", "nlproxy: this proxy requires TLS (connect with sslmode=require)")
	}
	if !s.srv.acquire() {
		return s.fatal("53300", "nlproxy: too many connections (limit %d)", s.srv.MaxConns)
	}
	s.mu.Lock()
	s.acquired = true
	s.mu.Unlock()
	if s.srv.isShutdown() {
		return s.fatal("57P03", "nlproxy: the proxy is shutting down")
	}
	s.user, _ = pkt.get("user")
	db, ok := pkt.get("database")
	if !ok || db == "" {
		db = s.user
	}
	s.database = db
	s.route = s.srv.route(db)
	if s.route == nil {
		return s.fatal("3D000", "nlproxy: no upstream configured for database %q", db)
	}
	s.log = s.log.With(zap.String("database", db))

	up, err := s.route.dial(ctx)
	if err != nil {
		s.log.Warn("cannot connect to upstream", zap.String("upstream", s.route.Address), zap.Error(err))
		return s.fatal("08001", "nlproxy: cannot connect to upstream %s: %v", s.route.Address, rootCause(err))
	}
	s.mu.Lock()
	closing := s.closing
	s.upConn = up
	s.mu.Unlock()
	if closing {
		up.Close()
		return errQuiet
	}
	if tc, ok := up.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	_ = up.SetDeadline(deadline)
	s.ur = bufio.NewReaderSize(up, bufSize)
	s.uw = newOutBuf(up, bufSize)

	params := make([]param, 0, len(pkt.Params)+1)
	for _, p := range pkt.Params {
		if p.Name == "database" && s.route.OverrideDatabase != "" {
			continue
		}
		params = append(params, p)
	}
	if s.route.OverrideDatabase != "" {
		params = append(params, param{"database", s.route.OverrideDatabase})
	}
	if _, err := s.uw.Write(encodeStartup(pkt.Version, params)); err != nil {
		return s.fatal("08006", "nlproxy: upstream write: %v", err)
	}
	if err := s.uw.Flush(); err != nil {
		return s.fatal("08006", "nlproxy: upstream write: %v", err)
	}
	if err := s.relayAuth(); err != nil {
		return err
	}
	s.uw.boundary() // nothing of a batch is in flight yet
	_ = up.SetDeadline(time.Time{})
	_ = s.client.SetDeadline(time.Time{})
	return nil
}

// relayAuth relays authentication and the post-auth messages up to the first
// ReadyForQuery, swapping BackendKeyData for the proxy's own key.
func (s *session) relayAuth() error {
	out := make([]byte, 0, 512)
	for {
		typ, body, err := readFrame(s.ur, 0)
		if err != nil {
			return s.fatal("08006", "nlproxy: upstream closed the connection during startup: %v", rootCause(err))
		}
		switch typ {
		case 'R':
			if len(body) < 4 {
				return s.fatal("08P01", "nlproxy: malformed authentication request from upstream")
			}
			sub := binary.BigEndian.Uint32(body)
			if sub == 10 { // channel binding cannot span the proxy, TLS to the client or not
				body = stripChannelBinding(body)
			}
			if err := s.sendClient(appendMsg(out[:0], typ, body)); err != nil {
				return err
			}
			switch sub {
			case 0, 12: // AuthenticationOk, SASLFinal: no reply
			case 3, 5, 7, 8, 9, 10, 11: // password, md5, GSS, SSPI, SASL: one client reply
				if err := s.relayClientAuth(); err != nil {
					return err
				}
			default:
				return s.fatal("28000", "nlproxy: unsupported authentication method %d", sub)
			}
		case 'K':
			if len(body) < 8 {
				return s.fatal("08P01", "nlproxy: malformed BackendKeyData from upstream")
			}
			pid, secret, err := s.srv.registerKey(s, len(body)-4)
			if err != nil {
				return s.fatal("XX000", "nlproxy: cancel key: %v", err)
			}
			s.mu.Lock()
			s.realPID = binary.BigEndian.Uint32(body)
			s.realSecret = append([]byte(nil), body[4:]...)
			s.key = cancelKey(pid, secret)
			closing := s.closing
			s.mu.Unlock()
			if closing {
				s.srv.unregisterKey(cancelKey(pid, secret))
				return errQuiet
			}
			kb := binary.BigEndian.AppendUint32(nil, pid)
			if _, err := s.cw.Write(appendMsg(out[:0], 'K', append(kb, secret...))); err != nil {
				return err
			}
		case 'E':
			_ = s.sendClient(appendMsg(out[:0], typ, body))
			return fmt.Errorf("upstream refused: %w", pgErrorFromBody(body))
		case 'Z':
			if len(body) != 1 {
				return s.fatal("08P01", "nlproxy: malformed ReadyForQuery from upstream")
			}
			s.mu.Lock()
			s.txStatus = body[0]
			s.ready = true
			s.lastActive = time.Now()
			s.mu.Unlock()
			return s.sendClient(appendMsg(out[:0], typ, body))
		default: // ParameterStatus, NoticeResponse, NegotiateProtocolVersion, …
			s.cwMu.Lock()
			_, err := s.cw.Write(appendMsg(out[:0], typ, body))
			s.cwMu.Unlock()
			if err != nil {
				return err
			}
		}
	}
}

func (s *session) relayClientAuth() error {
	typ, body, err := readFrame(s.cr, s.maxMsg)
	if errors.Is(err, ErrProtocol) {
		return s.fatal("08P01", "nlproxy: %v", err)
	}
	if err != nil {
		return err
	}
	if typ != 'p' {
		return s.fatal("08P01", "nlproxy: expected authentication response, got message type %q", typ)
	}
	if _, err := s.uw.Write(appendMsg(nil, typ, body)); err != nil {
		return err
	}
	return s.uw.Flush()
}

// stripChannelBinding removes SCRAM-SHA-256-PLUS from an AuthenticationSASL
// body: channel binding cannot work when TLS is terminated at the proxy.
func stripChannelBinding(body []byte) []byte {
	out := append([]byte(nil), body[:4]...)
	rest := body[4:]
	for len(rest) > 0 && rest[0] != 0 {
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			return body
		}
		if mech := string(rest[:i]); !strings.HasSuffix(mech, "-PLUS") {
			out = append(out, rest[:i+1]...)
		}
		rest = rest[i+1:]
	}
	return append(out, 0)
}

// rootCause digs the syscall error out of a dial error for a short message.
func rootCause(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err
	}
	var sc *os.SyscallError
	if errors.As(err, &sc) {
		err = sc.Err
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// ---- relay: server → client ----

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

func shutdownError() *PgError {
	return &PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command (nlproxy shutting down)"}
}

// noteReady records a ReadyForQuery; it reports whether the session should
// now be closed because the server is draining.
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

// ---- relay: client → server ----

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
func (s *session) clientQuery(n int) error {
	b, err := s.cr.Peek(5 + min(n, 64))
	if err != nil {
		return err
	}
	if !maybeMarker(b[5:]) {
		s.sent()
		err := relayN(s.cr, s.uw, 5+n, s.uw.Flush)
		s.uw.boundary()
		return err
	}
	msg := make([]byte, 5+n)
	if _, err := io.ReadFull(s.cr, msg); err != nil {
		return err
	}
	if n == 0 || msg[len(msg)-1] != 0 {
		return s.fatal("08P01", "nlproxy: malformed Query message")
	}
	m := ParseMarker(string(msg[5 : len(msg)-1]))
	if m.Kind == MarkerNone {
		s.sent()
		_, err := s.uw.Write(msg)
		s.uw.boundary()
		return err
	}
	return s.handleMarker(m, false, "", nil)
}

// clientParse relays a Parse, intercepting marker statements.
func (s *session) clientParse(n int) error {
	b, err := s.cr.Peek(5 + min(n, 256))
	if err != nil {
		return err
	}
	body := b[5:]
	if i := bytes.IndexByte(body, 0); i >= 0 && !maybeMarker(body[i+1:min(len(body), i+65)]) {
		return relayN(s.cr, s.uw, 5+n, s.uw.Flush)
	}
	msg := make([]byte, 5+n)
	if _, err := io.ReadFull(s.cr, msg); err != nil {
		return err
	}
	name, query, tail, err := splitParse(msg[5:])
	if err != nil {
		return s.fatal("08P01", "nlproxy: %v", err)
	}
	m := ParseMarker(query)
	if m.Kind == MarkerNone {
		_, err := s.uw.Write(msg)
		return err
	}
	return s.handleMarker(m, true, name, tail)
}

func noEngineError() *PgError {
	return &PgError{Severity: "ERROR", Code: "0A000",
		Message: "natural-language queries need an engine: this nlproxy has no translator configured",
		Hint:    "Configure an engine (Ollama model) for nlproxy, or send plain SQL."}
}

// handleMarker translates a marker statement and forwards the generated SQL in
// its place, or makes the statement fail at its position in the stream.
func (s *session) handleMarker(m Marker, isParse bool, name string, tail []byte) error {
	fail := func(e *PgError) error {
		s.mu.Lock()
		s.rewrites = append(s.rewrites, rewrite{unit: s.unitsSent, err: e})
		s.hasRewrites.Store(true)
		s.mu.Unlock()
		if isParse {
			_, err := s.uw.Write(parseMsg(name, sentinelSQL, tail))
			return err
		}
		s.sent()
		_, err := s.uw.Write(queryMsg(sentinelSQL))
		s.uw.boundary()
		return err
	}
	if s.srv.Translator == nil {
		return fail(noEngineError())
	}
	saved, ok := s.uw.takeBatch()
	if !ok {
		return fail(&PgError{Severity: "ERROR", Code: "0A000",
			Message: "nlproxy: a natural-language statement must not follow unsynchronized messages already sent upstream",
			Hint:    "Send the natural-language Parse at the start of its batch (right after a Sync)."})
	}
	if err := s.uw.Flush(); err != nil {
		return err
	}
	if err := s.waitIdle(); err != nil {
		return err
	}
	tr, err := s.translate(m)
	if _, werr := s.uw.Write(saved); werr != nil {
		return werr
	}
	if err != nil {
		return fail(translatorError(err))
	}
	sql := tr.SQL
	if tr.Rows != nil {
		if len(tr.Rows.Columns) == 0 {
			return fail(&PgError{Severity: "ERROR", Code: "XX000", Message: "nlproxy: engine returned a result without columns"})
		}
		sql = staticSQL(tr.Rows)
	}
	if strings.TrimSpace(sql) == "" {
		return fail(&PgError{Severity: "ERROR", Code: "XX000", Message: "nlproxy: engine returned no SQL"})
	}
	if tr.Notice != "" {
		if err := s.sendClient(encodeNotice(tr.Notice)); err != nil {
			return err
		}
	}
	if isParse {
		_, err := s.uw.Write(parseMsg(name, sql, tail))
		return err
	}
	if prelude, n := finalPrelude(tr, s.currentTx()); n > 0 && tr.Rows == nil {
		// One implicit transaction: the SET LOCALs end with the statement.
		sql = prelude + sql
		s.swallowTags.Add(int32(n))
	}
	s.sent()
	_, err = s.uw.Write(queryMsg(sql))
	s.uw.boundary()
	return err
}

func translatorError(err error) *PgError {
	var pe *PgError
	if errors.As(err, &pe) {
		e := *pe
		if e.Severity == "" || e.Severity == "FATAL" || e.Severity == "PANIC" {
			e.Severity = "ERROR"
		}
		if e.Code == "" {
			e.Code = "XX000"
		}
		return &e
	}
	if errors.Is(err, context.Canceled) {
		return &PgError{Severity: "ERROR", Code: "57014", Message: "canceling statement due to user request"}
	}
	return &PgError{Severity: "ERROR", Code: "XX000", Message: "nlproxy: " + err.Error()}
}

// waitIdle waits until every request sent upstream has been answered.
func (s *session) waitIdle() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.unitsDone != s.unitsSent && !s.closing {
		s.cond.Wait()
	}
	if s.closing {
		return errQuiet
	}
	return nil
}

func (s *session) translate(m Marker) (Translation, error) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	s.mu.Lock()
	s.translating = true
	s.cancelTr = cancel
	tx := s.txStatus
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.translating = false
		s.cancelTr = nil
		s.mu.Unlock()
	}()
	return s.srv.Translator.Translate(ctx, TranslateRequest{
		Marker: m, Database: s.database, User: s.user, TxStatus: tx, Exec: &executor{s: s},
	})
}

// cancelTranslation aborts a running translation (client CancelRequest).
func (s *session) cancelTranslation() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancelTr != nil {
		s.cancelTr()
		return true
	}
	return false
}

func (s *session) cancelUpstream(ctx context.Context) error {
	s.mu.Lock()
	pid, secret := s.realPID, s.realSecret
	s.mu.Unlock()
	if secret == nil {
		return nil
	}
	return sendCancel(ctx, s.route.Address, pid, secret)
}

// drain closes the session now if it is idle, else marks it to close at the
// end of its current transaction.
func (s *session) drain() {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.draining = true
	idle := s.ready && s.unitsDone == s.unitsSent && s.txStatus == 'I' && !s.translating
	s.mu.Unlock()
	if idle {
		_ = s.sendClient(encodeError(shutdownError()))
		s.close()
	}
}

// fatalSeverity reports whether an ErrorResponse body (possibly truncated)
// has severity FATAL or PANIC.
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

func (s *session) currentTx() byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.txStatus
}

// finalPrelude is what runs before a generated simple query outside a
// transaction block: SET LOCALs that make the implicit transaction of the
// Query message read-only and time-bounded. Inside a client transaction a
// SET LOCAL would outlive the statement, so none is added there.
func finalPrelude(tr Translation, tx byte) (string, int) {
	if tx != 'I' {
		return "", 0
	}
	var b strings.Builder
	n := 0
	if tr.ReadOnly {
		b.WriteString("SET LOCAL transaction_read_only = on; ")
		n++
	}
	if ms := tr.StatementTimeout.Milliseconds(); ms > 0 {
		fmt.Fprintf(&b, "SET LOCAL statement_timeout = %d; ", ms)
		n++
	}
	return b.String(), n
}
