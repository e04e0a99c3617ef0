// Package mcpserver serves nlproxy to AI agents over the Model Context
// Protocol (the official Go SDK): Streamable HTTP and stdio. It sits beside
// the router: every tool call runs on the calling role's own upstream
// session, through the engine's entry points and the guard's sealed scope,
// as the wire path's asks do; nothing runs with nlproxy's own credentials.
//
// Identity over HTTP is HTTP Basic (meant over TLS), passed through to the
// upstream's own authentication: the session is opened as that user with
// that password, so the server checks it. Over stdio it is the role of the
// DSN given. See docs/mcp.md.
package mcpserver

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/internal/askreport"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// Defaults of the optional Config fields; nlproxy's option table refers to
// them.
const (
	DefaultMaxRows     = 500
	DefaultMaxBytes    = 256 << 10
	DefaultMaxSessions = 100
	DefaultMaxAsks     = 32
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultStatementTimeout bounds a run when the configuration gives none.
	DefaultStatementTimeout = time.Minute
	// DefaultMaxSQLBytes bounds a question or a statement.
	DefaultMaxSQLBytes = 16 << 10
	// Path is where the HTTP handler serves MCP.
	Path = "/mcp"
)

// Config configures a Server. Engine is required.
type Config struct {
	Engine *engine.Engine
	// StatementTimeout bounds each run of a query, an ask's answer or an
	// EXPLAIN (default DefaultStatementTimeout; never unbounded).
	StatementTimeout time.Duration
	// MaxRows and MaxBytes cap the rows a result returns to the agent; more
	// are cut off and the result says so (truncated).
	MaxRows, MaxBytes int
	// MaxSQLBytes bounds a question or a statement (54000 beyond).
	MaxSQLBytes int
	// MaxAsks bounds the ask and ask_sql calls answered at once (53400
	// beyond; default DefaultMaxAsks), as --max-asks bounds the wire's.
	MaxAsks int
	// MaxSessions bounds the identities holding an upstream session at once
	// (53300 beyond); IdleTimeout closes one unused this long.
	MaxSessions int
	IdleTimeout time.Duration
	// Database is the HTTP default when the URL names none (?database=);
	// "" means the user's name, as libpq defaults it.
	Database string
	// Connect opens a role's session for HTTP; stdio serves one session
	// given to ServeStdio.
	Connect Connector
	// OnCall, when set, receives every finished tool call.
	OnCall  func(*Call)
	Logger  *zap.Logger
	Version string
}

// Call is one finished tool call, for the audit log, metrics and the admin
// page (cmd/nlproxy turns it into the wire path's record, redacted there by
// the same policy).
type Call struct {
	Time     time.Time
	Duration time.Duration
	Tool     string
	User     string
	Database string
	Client   string
	// Question is an ask's question; the SQL an agent sent is in
	// Report.SQL.
	Question string
	Report   *askreport.Report
	Err      *pg.Error
}

// Server is an MCP server over the engine. Safe for concurrent use.
type Server struct {
	cfg   Config
	mcp   *mcp.Server
	pool  *pool
	types typeNames
	// stdio is the one session of ServeStdio.
	stdio *upstream
	// asks bounds the ask and ask_sql calls answered at once.
	asks chan struct{}
	// convs: each MCP session's follow-up history, by *mcp.ServerSession.
	convs sync.Map
	done  chan struct{}
	once  sync.Once
}

// New builds the server and registers its tools.
func New(cfg Config) *Server {
	if cfg.StatementTimeout <= 0 {
		cfg.StatementTimeout = DefaultStatementTimeout
	}
	if cfg.MaxRows <= 0 {
		cfg.MaxRows = DefaultMaxRows
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxSQLBytes <= 0 {
		cfg.MaxSQLBytes = DefaultMaxSQLBytes
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.MaxAsks <= 0 {
		cfg.MaxAsks = DefaultMaxAsks
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	s := &Server{cfg: cfg, pool: &pool{connect: cfg.Connect, max: cfg.MaxSessions, idle: cfg.IdleTimeout, conns: map[key]*upstream{}},
		asks: make(chan struct{}, cfg.MaxAsks), done: make(chan struct{})}
	go s.pool.sweep(s.done)
	s.types.m = pgtype.NewMap()
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "nlproxy", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		// Nothing is logged to the agent: its role's errors come back as
		// tool results.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	s.addTools()
	return s
}

// instructions tell an agent what the tools are for, once per session.
const instructions = "Read-only access to one PostgreSQL database as your own role. " +
	"ask answers a question in plain language; query runs your own single SELECT. " +
	"Every call is read-only, time-bounded and capped; errors carry the SQLSTATE."

// Close closes every upstream session.
func (s *Server) Close() {
	s.once.Do(func() { close(s.done) })
	s.pool.close()
	if s.stdio != nil {
		closeConn(s.stdio)
	}
}

// ServeStdio serves one agent on in and out (its process's stdin and
// stdout) until it disconnects or ctx ends, as the role conn was opened
// with.
func (s *Server) ServeStdio(ctx context.Context, conn *pgconn.PgConn, id Identity) error {
	s.stdio = &upstream{conn: conn, id: id}
	return s.mcp.Run(ctx, &mcp.StdioTransport{})
}

// Run serves one agent on transport t (tests use in-memory transports) as
// the role conn was opened with.
func (s *Server) Run(ctx context.Context, t mcp.Transport, conn *pgconn.PgConn, id Identity) error {
	s.stdio = &upstream{conn: conn, id: id}
	return s.mcp.Run(ctx, t)
}

// Handler serves Streamable HTTP at Path. A request must carry HTTP Basic
// credentials; the first request of an MCP session opens (or reuses) the
// role's upstream session, so a wrong password is refused with 401 before
// any tool runs. The database is ?database= of the URL, else
// Config.Database, else the user's name.
func (s *Server) Handler() http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		SessionTimeout: s.cfg.IdleTimeout,
	})
	mux := http.NewServeMux()
	mux.HandleFunc(Path, func(w http.ResponseWriter, r *http.Request) {
		user, _, ok := basicAuth(r.Header)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="nlproxy", charset="UTF-8"`)
			http.Error(w, "nlproxy: HTTP Basic credentials of a database role are required", http.StatusUnauthorized)
			return
		}
		db := r.URL.Query().Get("database")
		if db == "" {
			db = s.cfg.Database
		}
		if db == "" {
			db = user
		}
		r.Header.Set(databaseHeader, db)
		r.Header.Set(clientHeader, clientAddr(r.RemoteAddr))
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			// A new MCP session: prove the identity now.
			id, err := identityFromHeader(r.Header)
			if err == nil {
				_, err = s.pool.get(r.Context(), id)
			}
			if err != nil {
				var pe *pg.Error
				status := http.StatusServiceUnavailable
				msg := "nlproxy: cannot open a session to the database"
				if errors.As(err, &pe) {
					msg = pe.Error()
					if strings.HasPrefix(pe.Code, "28") || pe.Code == pg.CodeInvalidCatalogName {
						status = http.StatusUnauthorized
					}
				}
				if status == http.StatusUnauthorized {
					w.Header().Set("WWW-Authenticate", `Basic realm="nlproxy", charset="UTF-8"`)
				}
				http.Error(w, msg, status)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
	// Browsers keep Basic credentials for an origin: a page elsewhere must
	// not make them call tools (Sec-Fetch-Site / Origin checks).
	return http.NewCrossOriginProtection().Handler(mux)
}

func clientAddr(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

// session is the upstream session a tool call runs on.
func (s *Server) session(ctx context.Context, req *mcp.CallToolRequest) (*upstream, error) {
	if s.stdio != nil {
		return s.stdio, nil
	}
	if req.Extra == nil || req.Extra.Header == nil || s.cfg.Connect == nil {
		return nil, &pg.Error{Code: pg.CodeInvalidAuthorization, Message: "nlproxy: no database identity for this call"}
	}
	id, err := identityFromHeader(req.Extra.Header)
	if err != nil {
		return nil, err
	}
	return s.pool.get(ctx, id)
}

// typeNames names result columns' types by OID (pgx's built-in table;
// other types as "oid N").
type typeNames struct {
	mu sync.Mutex
	m  *pgtype.Map
}

func (t *typeNames) name(oid uint32) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if typ, ok := t.m.TypeForOID(oid); ok {
		return typ.Name
	}
	return "oid " + strconv.FormatUint(uint64(oid), 10)
}
