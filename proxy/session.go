package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// errQuiet ends a session without further reporting (e.g. a CancelRequest).
var errQuiet = errors.New("proxy: connection done")

// session is one client connection and its upstream connection.
//
// A plaintext session on Linux is first relayed by an event loop
// (evloop_linux.go), which hands it to the goroutine relay on the first ask
// or anything unusual. Two goroutines relay: the client goroutine (run → clientLoop) owns cr and uw
// and does all marker handling and executor queries; the server goroutine
// (serverLoop) owns ur. Writes to the client go through cw under cwMu; the
// server goroutine holds cwMu while it has buffered input and releases it
// (after flushing) before any read that may block.
type session struct {
	srv    *Server
	log    *zap.Logger
	maxMsg int

	client     net.Conn // the raw accepted connection (counting its bytes)
	cr         *bufio.Reader
	cw         *bufio.Writer
	cwMu       sync.Mutex
	clientTLS  bool
	local      bool   // accepted on a Unix socket: no TLS offered, RequireTLS does not apply
	clientAddr string // for the audit log; "[local]" on a Unix socket, as Postgres logs it
	started    time.Time
	traffic    *countingConn

	route *Upstream
	ur    *bufio.Reader
	uw    *outBuf

	database, user string

	ctx    context.Context // ends when the session closes
	cancel context.CancelFunc

	// Ask machinery (see replies.go and ask.go).
	tracked   atomic.Bool  // every upstream message is attributed to a queued request
	replies   replyQueue   // what to do with the replies to each message sent upstream
	swallowZ  atomic.Int32 // untracked: ReadyForQuery of the proxy's own Sync, not relayed
	discarded atomic.Int32 // the client ran DISCARD ALL (discardAll) / DEALLOCATE ALL (deallocateAll)
	execMu    sync.Mutex   // one trial run at a time on the session
	// client goroutine only:
	batchOpen bool                  // messages sent since the last Sync/Query
	skipBatch bool                  // emulating the server's skip-until-Sync
	stmts     map[string]*askStmt   // client statement name → ask statement
	portals   map[string]*askPortal // client portal name → portal of an ask statement
	ownLive   bool                  // the proxy's own statement may exist upstream (see dropOwn)
	// server goroutine only:
	skipping  bool // the server skips to Sync after an error
	errInUnit bool // an ErrorResponse since the last ReadyForQuery

	clientHost string // for the per-client limit on concurrent asks

	mu             sync.Mutex
	cond           *sync.Cond
	upConn         net.Conn // upstream (plain or TLS), for close
	realPID        uint32
	realSecret     []byte
	key            string
	acquired       bool
	ready          bool
	closing        bool
	draining       bool
	translating    bool
	cancelTr       context.CancelFunc
	unitsSent      uint64 // Query/Sync/FunctionCall sent upstream (each yields one ReadyForQuery)
	unitsDone      uint64 // ReadyForQuery received
	txStatus       byte
	lastActive     time.Time
	lastUnitFailed bool   // the unit the last ReadyForQuery ended had an error
	copyIn         bool   // the server waits for COPY data from the client
	clientEncoding string // from ParameterStatus

	closeOnce sync.Once

	// loopDrain, set while an event loop relays the session, asks the loop
	// to end it if idle (Shutdown); the loop owns the sockets meanwhile.
	loopDrain func()
	// connsClosed: close has closed the connections it found (under mu).
	connsClosed bool

	upstreamFatal bool // server goroutine only: upstream sent a FATAL/PANIC error

	// Messages relayed, for metrics: each loop counts in a local and
	// publishes once per flush. xacts (under mu) counts returns to idle.
	msgsIn, msgsOut atomic.Uint64
	xacts           uint64
}

func newSession(srv *Server, conn net.Conn) *session {
	ctx, cancel := context.WithCancel(context.Background())
	cc := &countingConn{Conn: conn}
	local := conn.LocalAddr().Network() == "unix"
	addr := conn.RemoteAddr().String()
	if local {
		addr = "[local]"
	}
	s := &session{
		srv:        srv,
		log:        srv.logger().With(zap.String("client", addr)),
		maxMsg:     srv.maxMessageSize(),
		client:     cc,
		cr:         bufio.NewReaderSize(cc, handshakeBufSize),
		cw:         bufio.NewWriterSize(cc, bufSize),
		local:      local,
		clientAddr: addr,
		started:    time.Now(),
		traffic:    cc,
		ctx:        ctx,
		cancel:     cancel,
		txStatus:   'I',
		stmts:      map[string]*askStmt{},
		portals:    map[string]*askPortal{},
	}
	// The per-client limit on asks counts by host; a Unix socket is one host.
	s.clientHost = addr
	if host, _, err := net.SplitHostPort(addr); err == nil {
		s.clientHost = host
	}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *session) run() {
	defer s.close()
	s.log.Info("connection accepted")
	hctx, cancel := context.WithTimeout(s.ctx, s.srv.handshakeTimeout())
	err := s.handshake(hctx)
	cancel()
	if err != nil {
		s.auditStartupFailure(err)
		return
	}
	s.auditReady()
	defer s.auditEnd()
	if !s.loopRelay() {
		return
	}
	s.growBuffers()
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

// growBuffers gives the goroutine relay full-size buffers. A reader wraps the
// handshake's (which holds what is already read; with its buffer empty it
// reads straight into the outer one); the upstream writer is empty here.
func (s *session) growBuffers() {
	if s.cr.Size() < bufSize {
		s.cr = bufio.NewReaderSize(s.cr, bufSize)
	}
	if s.ur.Size() < bufSize {
		s.ur = bufio.NewReaderSize(s.ur, bufSize)
	}
	if cap(s.uw.buf) < bufSize && len(s.uw.buf) == 0 {
		s.uw = newOutBuf(s.uw.w, bufSize)
	}
}

// close tears down both sides once: Terminate upstream, close both sockets.
func (s *session) close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.connsClosed = true
		s.cond.Broadcast()
		up, key, acquired := s.upConn, s.key, s.acquired
		client := s.traffic.Conn // the event loop may swap it (afterLoop)
		s.mu.Unlock()
		s.cancel()
		if up != nil {
			_ = up.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = io.WriteString(up, terminateMsg)
			up.Close()
		}
		client.Close()
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

func shutdownError() *PgError {
	return &PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command (nlproxy shutting down)"}
}

// noteReady records a ReadyForQuery; it reports whether the session should
// now be closed because the server is draining.
func (s *session) drain() {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.draining = true
	if f := s.loopDrain; f != nil {
		s.mu.Unlock()
		f()
		return
	}
	idle := s.ready && s.unitsDone == s.unitsSent && s.txStatus == 'I' && !s.translating
	s.mu.Unlock()
	if idle {
		_ = s.sendClient(encodeError(shutdownError()))
		s.close()
	}
}

// fatalSeverity reports whether an ErrorResponse body (possibly truncated)
// has severity FATAL or PANIC.
func (s *session) currentTx() byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.txStatus
}

// finalPrelude is what runs before a generated simple query outside a
// transaction block: SET LOCALs that make the implicit transaction of the
// Query message read-only and time-bounded. Inside a client transaction a
// SET LOCAL would outlive the statement, so none is added there.

func (s *session) cancelUpstream(ctx context.Context) error {
	s.mu.Lock()
	pid, secret := s.realPID, s.realSecret
	s.mu.Unlock()
	if secret == nil {
		return nil
	}
	return sendCancel(ctx, s.route.Address, pid, secret)
}
