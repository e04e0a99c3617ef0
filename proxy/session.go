package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/conversation"
	"github.com/nlproxy/nlproxy/internal/pg"
)

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
//     replies, the tracked reply queue, has its own lock (queue.go).
//
// One goroutine (run) does the handshake, owning both sides. A session on
// Linux (plaintext or TLS) is then first relayed by an event loop (evloop_linux.go):
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
	tlsc       *tls.Conn // the client's TLS (over a loopConn where the event loop can carry it)
	local      bool      // accepted on a Unix socket: no TLS offered, RequireTLS does not apply
	clientAddr string    // for the audit log; "[local]" on a Unix socket, as Postgres logs it
	clientHost string    // for the per-client limit on concurrent asks
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

// askStmt is a prepared statement the client made from a marker Parse. It
// lives in the proxy's table only: the sealed statement is prepared
// upstream, as the proxy's own statement, just for the Bind or Describe
// that needs it and closed right after, so no name upstream reaches it
// (EXECUTE, a Bind by name) around the read-only scope, and its lifecycle
// (Close, DEALLOCATE, re-Parse) is the proxy's to answer as Postgres would.
type askStmt struct {
	stmt    sealed.Statement
	tail    []byte // the client's Parse: parameter types
	timeout time.Duration
	// rows, when set, is an ask-sql answer the proxy serves itself.
	rows *StaticResult
}

// askPortal is a portal bound to an askStmt.
type askPortal struct {
	stmt *askStmt
	// perExecute: bound inside the client's transaction block, so every
	// Execute gets its own read-only savepoint (idle, the batch's implicit
	// transaction was made read-only at the Bind).
	perExecute bool
	// bind, in a transaction block, is the client's Bind, never made
	// upstream: each Execute binds the proxy's own portal inside its
	// savepoint, which ends it, so no portal of the ask outlives the scope
	// (FETCH names portals too).
	bind *pgproto3.Bind
	// spool: after a partial Execute (row limit) in a transaction block,
	// the rows its one run inside the scope returned (spool.go).
	spool   *rowSpool
	formats []int16 // result formats asked by the Bind (emulated rows)
	pos     int     // emulated rows already sent
}

// Values of sideSignals.discarded.
const (
	deallocateAll = 1 + iota
	discardAll
)

// drainClose ends a session that the server's draining left idle, after
// the ReadyForQuery that made it so (cw held).
func (s *session) drainClose() {
	_, _ = s.cw.Write(encodeError(shutdownError()))
	_ = s.cw.Flush()
	s.close()
}

func (s *session) readMsg(n int) ([]byte, error) {
	msg := make([]byte, 5+n)
	_, err := io.ReadFull(s.cl.cr, msg)
	return msg, err
}

// upstreamLost reports a broken upstream to the client (unless we are closing).
func (s *session) upstreamLost(locked bool, err error) {
	if !s.sh.isClosing() && !s.sv.upstreamFatal {
		s.log.Info("lost the upstream connection", zap.String("upstream", s.route.Address), zap.Error(err))
		if !locked {
			s.cw.mu.Lock()
		}
		_, _ = s.cw.Write(encodeError(&pg.Error{Severity: "FATAL", Code: pg.CodeConnectionFailure,
			Message: "nlproxy: lost the connection to the database server"}))
		_ = s.cw.Flush()
		if !locked {
			s.cw.mu.Unlock()
		}
	}
	s.close()
}
