package proxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/internal/metrics"
	"github.com/nlproxy/nlproxy/internal/redact"
)

// Defaults of HandshakeTimeout and MaxMessageSize, exported so that
// nlproxy's option table (cmd/nlproxy/options.go) refers to them.
const (
	DefaultHandshakeTimeout = 30 * time.Second
	DefaultMaxMessageSize   = 64 << 20
)

const (
	bufSize = 64 << 10
	// handshakeBufSize sizes the read buffers and upstream writer during the
	// handshake; growBuffers takes them to bufSize when the goroutine relay
	// starts (a session the event loop relays never needs them larger).
	handshakeBufSize = 8 << 10
)

// Server is a PostgreSQL relay, configured by its fields like net/http.Server.
// Fields must not change after Serve starts.
type Server struct {
	// Upstreams is the routing table; the entry with Database=="" (or the only
	// entry) is the default route.
	Upstreams []Upstream
	// TLSConfig enables TLS termination for clients; nil answers SSLRequest with 'N'.
	TLSConfig *tls.Config
	// RequireTLS rejects plaintext clients (SQLSTATE 28000).
	RequireTLS bool
	// MaxConns caps client sessions; 0 is unlimited. Over it: 53300 then close.
	MaxConns int
	// HandshakeTimeout bounds startup+authentication; default 30s.
	HandshakeTimeout time.Duration
	// IdleTimeout closes a client idle outside a transaction; 0 = never.
	IdleTimeout time.Duration
	// IdleInTransactionTimeout closes a client idle inside a transaction; 0 = never.
	IdleInTransactionTimeout time.Duration
	// MaxMessageSize caps client message length; default 64 MiB. Over it: 08P01 then close.
	MaxMessageSize int
	// Translator turns natural-language statements into SQL; nil answers them with 0A000.
	Translator Translator
	// AskFuncs reads the table-function form (nlproxy.ask(…) in FROM);
	// nil: the Translator, when it is an AskFuncParser. Without either the
	// form is ordinary SQL.
	AskFuncs AskFuncParser
	// MaxAsks caps natural-language statements being answered at once by
	// the whole proxy, MaxAsksPerClient by one login role on one client host;
	// over either the ask fails at once with 53400. Zero means the defaults
	// (32 and 4).
	MaxAsks          int
	MaxAsksPerClient int
	// OnDDL is called in its own goroutine when a CREATE/ALTER/DROP/COMMENT
	// CommandComplete passes to a client.
	OnDDL func(database string, commandTag string)
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
	// Metrics, when set, counts connections and upstream connects; pass it
	// the Server (WatchRelay) for the relay's totals. nil: no metrics.
	Metrics *metrics.Metrics
	// OnAsk, when set, is called once per natural-language statement when
	// its answer (or error) is settled, on the asking session's goroutine:
	// it must not block for long (audit log, metrics, admin page).
	OnAsk func(*AskRecord)
	// Redact is what every AskRecord given to OnAsk withholds
	// (--audit-redact); its text fields are bounded whatever it says.
	Redact redact.Policy
	// GoroutineRelay relays every session with two goroutines on Go's
	// netpoller; by default (Linux) sessions without idle timeouts,
	// plaintext or TLS, are relayed by event loops (evloop_linux.go,
	// evloop_tls_linux.go) until an ask.
	GoroutineRelay bool
	// RelayLoop chooses how the event loops do their I/O (Linux): epoll
	// and read/write, or io_uring for plaintext sessions, falling back to
	// epoll where the kernel refuses it (evloop_uring_linux.go). Zero is
	// RelayAuto: io_uring where the kernel has it (it costs less CPU per
	// transaction from 8 clients on, the same at one; docs/benchmarks.md).
	RelayLoop RelayLoop
	// Observer, when set, sees the plain statements relayed (observe.go).
	Observer StatementObserver

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*session]struct{}
	sessions  int                 // sessions past startup, counted against MaxConns
	keys      map[string]*session // cancelKey(real pid, proxy secret) → session
	asks      int                 // asks being answered (MaxAsks)
	asksBy    map[string]int      // … per role and client host (MaxAsksPerClient)
	shutdown  bool
	wg        sync.WaitGroup
	ended     metrics.RelayTotals // totals of sessions that have ended
	evloops   eventLoops

	keyRand io.Reader // cancel secrets; nil is crypto/rand (tests force collisions)
	// stateHook, when set (tests), sees the session before and after
	// onClient or onServer records a message, on the goroutine that relays
	// that direction.
	stateHook func(s *session, client bool, typ byte, after bool)
}

// RelayLoop is the event loops' kind of I/O.
type RelayLoop string

// The kinds: auto (and "") is io_uring where the kernel has it, else epoll.
const (
	RelayEpoll   RelayLoop = "epoll"
	RelayIOUring RelayLoop = "io_uring"
	RelayAuto    RelayLoop = "auto"
)

// ring reports whether the loops should try io_uring.
func (k RelayLoop) ring() bool { return k != RelayEpoll }

func (s *Server) logger() *zap.Logger {
	if s.Logger == nil {
		return zap.NewNop()
	}
	return s.Logger
}

func (s *Server) handshakeTimeout() time.Duration {
	if s.HandshakeTimeout > 0 {
		return s.HandshakeTimeout
	}
	return DefaultHandshakeTimeout
}

func (s *Server) maxMessageSize() int {
	if s.MaxMessageSize > 0 {
		return s.MaxMessageSize
	}
	return DefaultMaxMessageSize
}

func (s *Server) isShutdown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutdown
}

// route picks the upstream for a client database.
func (s *Server) route(database string) *Upstream {
	var def *Upstream
	for i := range s.Upstreams {
		u := &s.Upstreams[i]
		if u.Database == database && database != "" {
			return u
		}
		if u.Database == "" {
			def = u
		}
	}
	if def == nil && len(s.Upstreams) == 1 {
		return &s.Upstreams[0]
	}
	return def
}

// acquire counts a session against MaxConns.
func (s *Server) acquire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.MaxConns > 0 && s.sessions >= s.MaxConns {
		return false
	}
	s.sessions++
	return true
}

func (s *Server) release() {
	s.mu.Lock()
	s.sessions--
	s.mu.Unlock()
}

// registerKey issues the client's BackendKeyData: the backend's real PID (so
// pg_terminate_backend(PID()) and NOTIFY sender PIDs mean what the client
// expects) and a secret of the proxy's own, as long as the upstream's. Two
// upstream servers can hand out the same PID, so the map key is (pid, secret);
// a colliding secret is drawn again.
func (s *Server) registerKey(sess *session, pid uint32, secretLen int) ([]byte, error) {
	rnd := s.keyRand
	if rnd == nil {
		rnd = rand.Reader
	}
	secret := make([]byte, secretLen)
	for {
		if _, err := io.ReadFull(rnd, secret); err != nil {
			return nil, fmt.Errorf("cancel secret: %w", err)
		}
		k := cancelKey(pid, secret)
		s.mu.Lock()
		if s.keys == nil {
			s.keys = map[string]*session{}
		}
		if _, dup := s.keys[k]; !dup {
			s.keys[k] = sess
			s.mu.Unlock()
			return secret, nil
		}
		s.mu.Unlock()
	}
}

func (s *Server) unregisterKey(k string) {
	s.mu.Lock()
	delete(s.keys, k)
	s.mu.Unlock()
}

func cancelKey(pid uint32, secret []byte) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], pid)
	return string(b[:]) + string(secret)
}

// cancel forwards a client CancelRequest to the upstream backend it names,
// with that backend's real secret. Unknown keys are ignored silently towards
// the client, as Postgres does.
func (s *Server) cancel(ctx context.Context, log *zap.Logger, pid uint32, secret []byte) {
	s.mu.Lock()
	sess := s.keys[cancelKey(pid, secret)]
	s.mu.Unlock()
	if sess == nil {
		log.Info("cancel request for an unknown key ignored", zap.Uint32("backend_pid", pid))
		return
	}
	// During a translation the executor forwards the cancel itself if one of
	// its queries is running; the client's statement is not upstream yet.
	if sess.sh.cancelTranslation() {
		log.Info("cancel request: translation aborted", zap.Uint32("backend_pid", pid))
		return
	}
	if err := sess.cancelUpstream(ctx); err != nil {
		log.Warn("forwarding cancel request", zap.Uint32("backend_pid", pid),
			zap.String("upstream", sess.route.Address), zap.Error(err))
		return
	}
	log.Info("cancel request forwarded", zap.Uint32("backend_pid", pid))
}

// sendCancel sends a CancelRequest for (pid, secret) to addr and waits for the
// server to close the connection, as libpq does.
func sendCancel(ctx context.Context, addr string, pid uint32, secret []byte) error {
	network := "tcp"
	if len(addr) > 0 && addr[0] == '/' {
		network = "unix"
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(encodeCancel(pid, secret)); err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	_, _ = io.Copy(io.Discard, conn)
	return nil
}

// watchTags: command tags are read when DDL refreshes the catalog or a
// session may hold a conversation (DISCARD ALL empties it).
func (srv *Server) watchTags() bool { return srv.OnDDL != nil || srv.Translator != nil }
