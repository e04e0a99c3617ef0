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
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/internal/pg"
)

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
		pkt, err = readStartup(s.cl.cr)
		if errors.Is(err, ErrProtocol) {
			return s.fatal(pg.CodeProtocolViolation, "nlproxy: %v", err)
		}
		if err != nil {
			return err
		}
		switch pkt.Kind {
		case startupSSL:
			if err := s.answerSSL(ctx); err != nil {
				return err
			}
		case startupGSSENC:
			if err := s.sendClient([]byte{sslRefused}); err != nil {
				return err
			}
		case startupCancel:
			s.srv.cancel(ctx, s.log, pkt.PID, pkt.Secret)
			return errQuiet
		case startupMessage:
			return s.startup(ctx, deadline, pkt)
		}
	}
}

// answerSSL answers an SSLRequest: 'N' where the proxy terminates no TLS,
// else 'S' and the client's TLS handshake.
func (s *session) answerSSL(ctx context.Context) error {
	if s.clientTLS {
		return s.fatal(pg.CodeProtocolViolation, "nlproxy: SSLRequest on an encrypted connection")
	}
	// Like Postgres, no TLS over a Unix socket: it never leaves the host.
	if s.srv.TLSConfig == nil || s.local {
		return s.sendClient([]byte{sslRefused})
	}
	if err := s.sendClient([]byte{sslAccepted}); err != nil {
		return err
	}
	// Bytes already here were sent in plaintext after the SSLRequest and
	// would be mistaken for protected data (CVE-2021-23214).
	if s.cl.cr.Buffered() > 0 {
		return s.fatal(pg.CodeProtocolViolation, "nlproxy: received unencrypted data after SSL request")
	}
	// Over a loopConn, so that the event loop can carry the session after
	// the handshake (evloop_tls_linux.go).
	tc := tls.Server(loopable(s.client), s.srv.TLSConfig)
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("client TLS handshake: %w", err)
	}
	s.cl.cr.Reset(tc)
	s.cw.Reset(tc)
	s.clientTLS, s.tlsc = true, tc
	return nil
}

func (s *session) startup(ctx context.Context, deadline time.Time, pkt startupPacket) error {
	if err := s.admit(pkt); err != nil {
		return err
	}
	up, err := s.connectUpstream(ctx, deadline)
	if err != nil {
		return err
	}
	if err := s.sendStartup(pkt); err != nil {
		return err
	}
	if err := s.relayAuth(); err != nil {
		return err
	}
	_ = up.SetDeadline(time.Time{})
	_ = s.client.SetDeadline(time.Time{})
	return nil
}

// admit lets the client have a session (TLS, MaxConns, shutdown) and picks
// its upstream by the startup database.
func (s *session) admit(pkt startupPacket) error {
	if s.srv.RequireTLS && !s.clientTLS && !s.local {
		return s.fatal(pg.CodeInvalidAuthorization, "nlproxy: this proxy requires TLS (connect with sslmode=require)")
	}
	if !s.srv.acquire() {
		return s.fatal(pg.CodeTooManyConnections, "nlproxy: too many connections (limit %d)", s.srv.MaxConns)
	}
	s.sh.setAcquired()
	if s.srv.isShutdown() {
		return s.fatal(pg.CodeCannotConnectNow, "nlproxy: the proxy is shutting down")
	}
	s.user, _ = pkt.get("user")
	db, ok := pkt.get("database")
	if !ok || db == "" {
		db = s.user
	}
	s.database = db
	s.route = s.srv.route(db)
	if s.route == nil {
		return s.fatal(pg.CodeInvalidCatalogName, "nlproxy: no upstream configured for database %q", db)
	}
	s.log = s.log.With(zap.String("user", s.user), zap.String("database", db))
	return nil
}

// connectUpstream dials the session's upstream, with the handshake's buffers
// and deadline. Client-facing errors name no host, address or role of the
// infrastructure; the log line has the detail.
func (s *session) connectUpstream(ctx context.Context, deadline time.Time) (net.Conn, error) {
	dialStart := time.Now()
	up, err := s.route.dial(ctx, loopable)
	if err == nil {
		s.srv.Metrics.UpstreamConnect(time.Since(dialStart))
	}
	if err != nil {
		s.log.Warn("cannot connect to upstream", zap.String("upstream", s.route.Address), zap.Error(err))
		return nil, s.fatal(pg.CodeConnectionRefused, "nlproxy: cannot connect to the database server")
	}
	if s.sh.setUpstream(up) {
		up.Close()
		return nil, errQuiet
	}
	if tc, ok := up.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	_ = up.SetDeadline(deadline)
	s.sv.ur = bufio.NewReaderSize(up, handshakeBufSize)
	s.cl.uw = newOutBuf(up, handshakeBufSize)
	return up, nil
}

// sendStartup passes the client's startup packet upstream, naming the
// route's database where the route overrides the client's.
func (s *session) sendStartup(pkt startupPacket) error {
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
	_, err := s.cl.uw.Write(encodeStartup(pkt.Version, params))
	if err == nil {
		err = s.cl.uw.Flush()
	}
	if err != nil {
		s.log.Warn("upstream lost during startup", zap.String("upstream", s.route.Address), zap.Error(err))
		return s.fatal(pg.CodeConnectionFailure, "nlproxy: lost the connection to the database server during startup")
	}
	return nil
}

// relayAuth relays authentication and the post-auth messages up to the first
// ReadyForQuery, swapping BackendKeyData for the proxy's own key.
func (s *session) relayAuth() error {
	out := make([]byte, 0, 512)
	for {
		typ, body, err := readFrame(s.sv.ur, 0)
		if err != nil {
			if s.sh.isClosing() {
				return errQuiet
			}
			s.log.Warn("upstream lost during startup", zap.String("upstream", s.route.Address), zap.Error(err))
			return s.fatal(pg.CodeConnectionFailure, "nlproxy: the database server closed the connection during startup")
		}
		switch typ {
		case beAuthentication:
			if err := s.relayAuthRequest(out, body); err != nil {
				return err
			}
		case beBackendKeyData:
			if err := s.swapBackendKey(out, body); err != nil {
				return err
			}
		case beErrorResponse:
			_ = s.sendClient(appendMsg(out[:0], typ, body))
			return fmt.Errorf("upstream refused: %w", pgErrorFromBody(body))
		case beReadyForQuery:
			if len(body) != 1 {
				return s.fatal(pg.CodeProtocolViolation, "nlproxy: malformed ReadyForQuery from the database server")
			}
			s.sh.setReady(body[0])
			return s.sendClient(appendMsg(out[:0], typ, body))
		default: // ParameterStatus, NoticeResponse, NegotiateProtocolVersion, …
			if typ == beParameterStatus {
				s.onServer(typ, body)
			}
			s.cw.mu.Lock()
			_, err := s.cw.Write(appendMsg(out[:0], typ, body))
			s.cw.mu.Unlock()
			if err != nil {
				return err
			}
		}
	}
}

// relayAuthRequest passes an authentication request on and, where the
// method asks for one, the client's reply.
func (s *session) relayAuthRequest(out, body []byte) error {
	if len(body) < 4 {
		return s.fatal(pg.CodeProtocolViolation, "nlproxy: malformed authentication request from the database server")
	}
	sub := binary.BigEndian.Uint32(body)
	if sub == 10 { // channel binding cannot span the proxy, TLS to the client or not
		body = stripChannelBinding(body)
	}
	if err := s.sendClient(appendMsg(out[:0], beAuthentication, body)); err != nil {
		return err
	}
	switch sub {
	case 0, 12: // AuthenticationOk, SASLFinal: no reply
		return nil
	case 3, 5, 7, 8, 9, 10, 11: // password, md5, GSS, SSPI, SASL: one client reply
		return s.relayClientAuth()
	}
	return s.fatal(pg.CodeInvalidAuthorization, "nlproxy: unsupported authentication method %d", sub)
}

// swapBackendKey registers the server's BackendKeyData and gives the
// client the proxy's own key instead.
func (s *session) swapBackendKey(out, body []byte) error {
	// Protocol 3.0 secrets are 4 bytes; 3.2 allows up to 256.
	if len(body) < 8 || len(body) > 4+maxSecretLen {
		return s.fatal(pg.CodeProtocolViolation, "nlproxy: malformed BackendKeyData from the database server")
	}
	pid := binary.BigEndian.Uint32(body)
	secret, err := s.srv.registerKey(s, pid, len(body)-4)
	if err != nil {
		s.log.Error("issuing a cancel key", zap.Error(err))
		return s.fatal(pg.CodeInternalError, "nlproxy: cannot issue a cancel key")
	}
	key := cancelKey(pid, secret)
	if s.sh.setBackendKey(pid, body[4:], key) {
		s.srv.unregisterKey(key)
		return errQuiet
	}
	kb := binary.BigEndian.AppendUint32(nil, pid)
	_, err = s.cw.Write(appendMsg(out[:0], beBackendKeyData, append(kb, secret...)))
	return err
}

func (s *session) relayClientAuth() error {
	typ, body, err := readFrame(s.cl.cr, s.maxMsg)
	if errors.Is(err, ErrProtocol) {
		return s.fatal(pg.CodeProtocolViolation, "nlproxy: %v", err)
	}
	if err != nil {
		return err
	}
	if typ != fePassword {
		return s.fatal(pg.CodeProtocolViolation, "nlproxy: expected authentication response, got message type %q", typ)
	}
	if _, err := s.cl.uw.Write(appendMsg(nil, typ, body)); err != nil {
		return err
	}
	return s.cl.uw.Flush()
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
