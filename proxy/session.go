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

	"github.com/nlproxy/nlproxy/internal/conversation"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// errQuiet ends a session without further reporting (e.g. a CancelRequest).
var errQuiet = errors.New("proxy: connection done")

// session is one client connection and its upstream connection.
//
// Its state is grouped by owner, so that a field's type says who may touch it:
//
//   - the fields of session itself are set before relaying starts (accept,
//     handshake) and only read after that, by anyone;
//   - cl (clientSide) belongs to whoever reads the client: the client goroutine
//     (clientLoop), or the event loop;
//   - sv (serverSide) belongs to whoever reads the upstream: the server
//     goroutine (serverLoop), or the event loop;
//   - sh (shared) is what several goroutines read and write, each field under
//     its one lock, through its methods;
//   - sig holds the few lock-free signals between the sides and the relay's
//     counters;
//   - cw, the writer to the client, is used by whoever holds its lock, and
//     replies, the tracked reply queue, has its own lock (replies.go).
//
// One goroutine (run) does the handshake, owning both sides. A plaintext
// session on Linux is then first relayed by an event loop (evloop_linux.go):
// the loop's one goroutine owns cl and sv while run waits in loopRelay, and
// hands both back with the sockets (through a channel, so what the loop wrote
// is seen) on the first ask or anything unusual. From then on two goroutines
// relay: run itself as the client goroutine, which does all marker handling
// and executor queries, and the server goroutine. The server goroutine holds
// cw's lock while it has buffered input and releases it (after flushing)
// before any read that may block.
type session struct {
	srv    *Server
	log    *zap.Logger
	maxMsg int

	client     net.Conn // the raw accepted connection (counting its bytes)
	clientTLS  bool
	local      bool   // accepted on a Unix socket: no TLS offered, RequireTLS does not apply
	clientAddr string // for the audit log; "[local]" on a Unix socket, as Postgres logs it
	clientHost string // for the per-client limit on concurrent asks
	started    time.Time
	traffic    *countingConn

	route          *Upstream
	database, user string

	ctx       context.Context // ends when the session closes
	cancel    context.CancelFunc
	closeOnce sync.Once

	cl  clientSide
	sv  serverSide
	sh  shared
	sig sideSignals
	cw  clientWriter

	replies replyQueue // what to do with the replies to each message sent upstream
	// conv is the session's recent asks (follow-up questions); reset when
	// the server reports DISCARD ALL (noteTag), dropped with the session.
	conv   conversation.History
	execMu sync.Mutex // one trial run at a time on the session (executor.go)
}

// clientSide is the state of the client → upstream direction: read the
// client, write upstream. An executor's trial run uses it too, while the
// client side waits in Translate (executor.go).
type clientSide struct {
	cr *bufio.Reader
	uw *outBuf

	batchOpen bool                  // messages sent since the last Sync/Query
	skipBatch bool                  // emulating the server's skip-until-Sync
	stmts     map[string]*askStmt   // client statement name → ask statement
	portals   map[string]*askPortal // client portal name → portal of an ask statement
	ownLive   bool                  // the proxy's own statement may exist upstream (see dropOwn)
}

// serverSide is the state of the upstream → client direction.
type serverSide struct {
	ur *bufio.Reader

	skipping      bool // the server skips to Sync after an error
	errInUnit     bool // an ErrorResponse since the last ReadyForQuery
	upstreamFatal bool // upstream sent a FATAL/PANIC error
}

// sideSignals are set by one side and read by the other without a lock.
type sideSignals struct {
	// tracked: every upstream message is attributed to a queued request
	// (an ask is in play). Set by the client side, read by both.
	tracked atomic.Bool
	// swallowZ: untracked, the ReadyForQuery of the proxy's own Sync (see
	// settleBatch), not relayed. Counted up by the client side, down by the
	// server side.
	swallowZ atomic.Int32
	// discarded: the client ran DISCARD ALL (discardAll) / DEALLOCATE ALL
	// (deallocateAll); seen by the server side, applied by the client side.
	discarded atomic.Int32
	// Messages relayed, for metrics: each side counts in a local and
	// publishes once per flush.
	msgsIn, msgsOut atomic.Uint64
}

// clientWriter buffers writes to the client; mu is held for every use.
type clientWriter struct {
	mu sync.Mutex
	*bufio.Writer
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
		local:      local,
		clientAddr: addr,
		started:    time.Now(),
		traffic:    cc,
		ctx:        ctx,
		cancel:     cancel,
		cl: clientSide{
			cr:      bufio.NewReaderSize(cc, handshakeBufSize),
			stmts:   map[string]*askStmt{},
			portals: map[string]*askPortal{},
		},
		cw: clientWriter{Writer: bufio.NewWriterSize(cc, bufSize)},
	}
	s.sh.init()
	// The per-client limit on asks counts by host; a Unix socket is one host.
	s.clientHost = addr
	if host, _, err := net.SplitHostPort(addr); err == nil {
		s.clientHost = host
	}
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
	if err := s.clientLoop(); err != nil && !errors.Is(err, errQuiet) && !s.sh.isClosing() {
		s.log.Debug("client loop ended", zap.Error(err))
	}
	s.close()
	<-serverDone
}

// growBuffers gives the goroutine relay full-size buffers. A reader wraps the
// handshake's (which holds what is already read; with its buffer empty it
// reads straight into the outer one); the upstream writer is empty here.
func (s *session) growBuffers() {
	if s.cl.cr.Size() < bufSize {
		s.cl.cr = bufio.NewReaderSize(s.cl.cr, bufSize)
	}
	if s.sv.ur.Size() < bufSize {
		s.sv.ur = bufio.NewReaderSize(s.sv.ur, bufSize)
	}
	if cap(s.cl.uw.buf) < bufSize && len(s.cl.uw.buf) == 0 {
		s.cl.uw = newOutBuf(s.cl.uw.w, bufSize)
	}
}

// close tears down both sides once: Terminate upstream, close both sockets.
func (s *session) close() {
	s.closeOnce.Do(func() {
		client, up, key, acquired := s.sh.beginClose(s.traffic)
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

// sendClient writes complete messages to the client and flushes.
func (s *session) sendClient(b []byte) error {
	s.cw.mu.Lock()
	defer s.cw.mu.Unlock()
	if _, err := s.cw.Write(b); err != nil {
		return err
	}
	return s.cw.Flush()
}

// fatal sends a FATAL ErrorResponse to the client and returns it as an error.
func (s *session) fatal(code, format string, args ...any) error {
	e := &pg.Error{Severity: "FATAL", Code: code, Message: fmt.Sprintf(format, args...)}
	_ = s.sendClient(encodeError(e))
	return e
}

func shutdownError() *pg.Error {
	return &pg.Error{Severity: "FATAL", Code: pg.CodeAdminShutdown, Message: "terminating connection due to administrator command (nlproxy shutting down)"}
}

// drain ends the session once it is idle (Shutdown): now if it is, else
// at the ReadyForQuery that leaves it idle (noteReady), or, on the event
// loop, when the loop finds it idle.
func (s *session) drain() {
	loop, idle := s.sh.drain()
	switch {
	case loop != nil:
		loop()
	case idle:
		_ = s.sendClient(encodeError(shutdownError()))
		s.close()
	}
}

// cancelUpstream cancels the statement running upstream with the
// backend's own key (an executor's trial run outliving its context).
func (s *session) cancelUpstream(ctx context.Context) error {
	pid, secret := s.sh.backendKey()
	if secret == nil {
		return nil
	}
	return sendCancel(ctx, s.route.Address, pid, secret)
}
