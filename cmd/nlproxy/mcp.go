package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/internal/metrics"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/mcpserver"
	"github.com/nlproxy/nlproxy/proxy"
)

// MCPConfig configures the MCP endpoint for agents (docs/mcp.md).
type MCPConfig struct {
	// Listen serves Streamable HTTP at /mcp; "" is off.
	Listen string
	// Database is what an HTTP request uses when its URL names none.
	Database string
	// DSN is the role `nlproxy mcp --stdio` acts as.
	DSN         string
	MaxRows     int
	MaxBytes    int
	MaxSessions int
	IdleTimeout Duration
}

func (c Config) validateMCP() error {
	m := c.MCP
	var errs []error
	if m.MaxRows < 0 || m.MaxBytes < 0 || m.MaxSessions < 0 || m.IdleTimeout < 0 {
		errs = append(errs, errors.New("mcp-max-rows, mcp-max-bytes, mcp-max-sessions and mcp-idle-timeout must not be negative"))
	}
	if m.Listen != "" {
		if c.Engine.Disabled {
			errs = append(errs, errors.New("mcp-listen needs the engine (the catalog and the guard); drop --no-engine"))
		}
		// Basic credentials in the clear are for loopback only.
		if c.TLSCert == "" && !loopback(m.Listen) {
			errs = append(errs, fmt.Errorf("mcp-listen %s is not a loopback address: agents send database passwords, so it needs --tls-cert and --tls-key", m.Listen))
		}
	}
	return errors.Join(errs...)
}

// loopback reports whether addr (host:port) binds to a loopback address
// only; an empty host binds to every address.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// newMCPServer builds the MCP server over the engine; its calls reach the
// same recorders as the wire path's asks (audit log, admin page, metrics),
// redacted by srv.Redact first.
func newMCPServer(cfg Config, parts *engineParts, srv *proxy.Server, m *metrics.Metrics, connect mcpserver.Connector, logger *zap.Logger) *mcpserver.Server {
	ver, _ := versionInfo()
	return mcpserver.New(mcpserver.Config{
		Engine:           parts.engine,
		StatementTimeout: time.Duration(cfg.Engine.RunTimeout),
		MaxRows:          cfg.MCP.MaxRows,
		MaxBytes:         cfg.MCP.MaxBytes,
		MaxSQLBytes:      cfg.Engine.MaxQuestionBytes,
		MaxSessions:      cfg.MCP.MaxSessions,
		MaxAsks:          cfg.Engine.MaxAsks,
		IdleTimeout:      time.Duration(cfg.MCP.IdleTimeout),
		Database:         cfg.MCP.Database,
		Connect:          connect,
		OnCall:           mcpRecorder(srv, m),
		Logger:           logger,
		Version:          ver,
	})
}

// mcpRecorder turns each MCP tool call into the wire path's ask record.
func mcpRecorder(srv *proxy.Server, m *metrics.Metrics) func(*mcpserver.Call) {
	return func(c *mcpserver.Call) {
		outcome, code := "answered", ""
		if c.Err != nil {
			outcome, code = "failed", c.Err.Code
		}
		m.ObserveMCPCall(c.Tool, outcome, code, c.Duration)
		if srv.OnAsk == nil {
			return
		}
		kind := proxy.MarkerNone
		switch c.Tool {
		case mcpserver.ToolAsk:
			kind = proxy.MarkerAsk
		case mcpserver.ToolAskSQL:
			kind = proxy.MarkerAskSQL
		}
		rec := &proxy.AskRecord{Time: c.Time, Duration: c.Duration, User: c.User, Database: c.Database, Client: c.Client,
			Kind: kind, Question: c.Question, Report: c.Report, Err: c.Err, Tool: c.Tool}
		srv.OnAsk(proxy.RedactRecord(rec, srv.Redact))
	}
}

// mcpConnector opens an agent's own session: the upstream route's server,
// port and TLS, the agent's user and password (checked by the server).
// nlproxy's catalog credentials are never used for it.
func mcpConnector(cfg Config) (mcpserver.Connector, error) {
	cc, err := newCatalogConns(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, id mcpserver.Identity) (*pgconn.PgConn, error) {
		c, err := cc.config(id.Database)
		if err != nil {
			return nil, &pg.Error{Code: pg.CodeInvalidCatalogName, Message: err.Error()}
		}
		c.User, c.Password = id.User, id.Password
		c.RuntimeParams["application_name"] = "nlproxy-mcp"
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return pgconn.ConnectConfig(ctx, &c.Config)
	}, nil
}

// startMCP serves MCP over HTTP (TLS with the wire listener's certificate)
// until the returned stop is called.
func startMCP(cfg Config, parts *engineParts, srv *proxy.Server, m *metrics.Metrics, logger *zap.Logger) (stop func(), err error) {
	connect, err := mcpConnector(cfg)
	if err != nil {
		return nil, err
	}
	log := logger.Named("mcp")
	ms := newMCPServer(cfg, parts, srv, m, connect, log)
	ln, err := net.Listen("tcp", cfg.MCP.Listen)
	if err != nil {
		ms.Close()
		return nil, fmt.Errorf("mcp listen: %w", err)
	}
	hs := &http.Server{Handler: ms.Handler(), ReadHeaderTimeout: 10 * time.Second}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			ln.Close()
			ms.Close()
			return nil, fmt.Errorf("mcp TLS: %w", err)
		}
		hs.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		ln = tls.NewListener(ln, hs.TLSConfig)
	}
	log.Info("MCP endpoint listening", zap.String("url", mcpURL(ln.Addr().String(), cfg.TLSCert != "")))
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("MCP listener failed", zap.Error(err))
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		ms.Close()
	}, nil
}

func mcpURL(addr string, tls bool) string {
	if tls {
		return "https://" + addr + mcpserver.Path
	}
	return "http://" + addr + mcpserver.Path
}

const mcpUsage = `Usage:
  nlproxy mcp --stdio [--mcp-dsn URL] [serve options]

Serves one agent over the Model Context Protocol on stdin and stdout, as the
role of --mcp-dsn (NLPROXY_MCP_DSN; default: the default --upstream URL).
The options are serve's (nlproxy serve --help); logs go to stderr.
See docs/mcp.md.
`

// runMCP is `nlproxy mcp --stdio`: one agent on stdin/stdout as the DSN's
// role, with the engine configured as for serve.
func runMCP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if helpRequested(args) {
		fmt.Fprint(stdout, mcpUsage)
		return nil
	}
	i := slices.IndexFunc(args, func(a string) bool { return a == "--stdio" || a == "-stdio" })
	if i < 0 {
		return usageErrorf("nlproxy mcp serves stdio only (--stdio); HTTP is nlproxy serve --mcp-listen ADDR")
	}
	args = slices.Delete(slices.Clone(args), i, i+1)
	cfg, err := loadConfigWith(args, os.Getenv, stderr, func(c *Config) {
		// The role's DSN is also where the catalog reads, unless an
		// upstream (and a catalog role) is configured.
		if c.MCP.DSN != "" && len(c.Upstreams) == 0 {
			c.Upstreams = []UpstreamEntry{{URL: c.MCP.DSN}}
		}
		if c.MCP.DSN == "" {
			for _, u := range c.Upstreams {
				if u.Database == "" {
					c.MCP.DSN = u.URL
				}
			}
		}
	})
	if err != nil {
		return err
	}
	if cfg.MCP.DSN == "" {
		return usageErrorf("nlproxy mcp --stdio needs --mcp-dsn (or a default --upstream) naming the role the agent acts as")
	}
	if cfg.Engine.Disabled {
		return usageErrorf("nlproxy mcp needs the engine; drop --no-engine")
	}
	if cfg.Ops.AuditLog == "stdout" {
		return usageErrorf("nlproxy mcp speaks on stdout: write the audit log to stderr or a file")
	}
	logger, err := newLogger(cfg.LogLevel, cfg.LogFormat, stderr)
	if err != nil {
		return err
	}
	defer logger.Sync() //nolint:errcheck // nothing useful to do on a failed log flush
	pc, err := pgconn.ParseConfig(cfg.MCP.DSN)
	if err != nil {
		return fmt.Errorf("mcp-dsn: %w", err)
	}
	pc.RuntimeParams["application_name"] = "nlproxy-mcp"
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return fmt.Errorf("mcp: connect as the DSN's role: %w", err)
	}
	// The recorders hang off a server value, as for serve; nothing listens
	// on it.
	srv := &proxy.Server{Logger: logger}
	op, err := setupOps(cfg, srv, io.Discard, stderr, logger)
	if err != nil {
		conn.Close(context.Background())
		return err
	}
	defer op.Close()
	parts, err := buildEngine(cfg, logger)
	if err != nil {
		conn.Close(context.Background())
		return err
	}
	defer parts.Close()
	op.start(cfg, srv, parts, "", logger)
	ms := newMCPServer(cfg, parts, srv, op.metrics, nil, logger.Named("mcp"))
	defer ms.Close() // closes conn
	logger.Info("MCP on stdio", zap.String("user", pc.User), zap.String("database", pc.Database))
	return ms.ServeStdio(ctx, conn, mcpserver.Identity{User: pc.User, Database: pc.Database, Client: "stdio"})
}
