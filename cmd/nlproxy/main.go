// Command nlproxy is a PostgreSQL wire-protocol proxy that answers
// natural-language questions with a local model and relays everything else.
//
//	nlproxy [serve] [flags]   run the proxy (default)
//	nlproxy demo              throwaway Postgres with sample data + the proxy
//	nlproxy catalog ...       build, show and query the schema/value catalog
//	nlproxy eval ...          measure accuracy on sql-eval or BIRD through the proxy
//	nlproxy version           version and commit
//	nlproxy help [command]    the commands, or one command's flags and environment
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nlproxy/nlproxy/engine/learned"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/router"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	fmt.Fprint(os.Stderr, reportError(err))
	os.Exit(exitCode(err))
}

// run dispatches a command line; exitCode(err) is the process's exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (strings.HasPrefix(args[0], "-") && !isTopLevelFlag(args[0])) {
		return runServe(ctx, args, stdout, stderr) // `nlproxy --listen …` is serve
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, args, stdout, stderr)
	case "demo":
		return runDemo(ctx, args, stdout, stderr)
	case "mcp":
		return runMCP(ctx, args, stdout, stderr)
	case "catalog":
		return runCatalog(ctx, args, stdout, stderr)
	case "workload":
		return runWorkload(args, stdout, stderr)
	case "eval":
		return runEval(ctx, args, stdout, stderr)
	case "verified":
		return runVerified(ctx, args, stdout, stderr)
	case "healthcheck":
		return runHealthcheck(ctx, args, os.Getenv, stdout, stderr)
	case "version", "-version", "--version":
		if len(args) > 0 && !helpRequested(args) {
			return usageErrorf("version takes no arguments, got %q", args[0])
		}
		fmt.Fprintln(stdout, versionLine())
		return nil
	case "help", "-h", "-help", "--help":
		if len(args) == 0 || cmd != "help" {
			fmt.Fprint(stdout, usage)
			return nil
		}
		switch args[0] {
		case "-h", "-help", "--help":
			fmt.Fprint(stdout, usage)
			return nil
		case "serve", "demo", "healthcheck", "mcp":
			return run(ctx, []string{args[0], "--help"}, stdout, stderr)
		case "catalog":
			sub := []string{"--help"}
			if len(args) > 1 {
				sub = []string{args[1], "--help"}
			}
			return runCatalog(ctx, sub, stdout, stderr)
		case "eval":
			sub := []string{"--help"}
			if len(args) > 1 {
				sub = []string{args[1], "--help"}
			}
			return runEval(ctx, sub, stdout, stderr)
		case "workload":
			return runWorkload([]string{"--help"}, stdout, stderr)
		case "verified":
			return runVerified(ctx, []string{"help"}, stdout, stderr)
		case "version":
			fmt.Fprintln(stdout, "Usage:\n  nlproxy version    (or nlproxy --version)")
			return nil
		case "help":
			fmt.Fprint(stdout, usage)
			return nil
		}
		return usageErrorf("unknown command %q", args[0])
	default:
		return usageErrorf("unknown command %q", cmd)
	}
}

// isTopLevelFlag: the flags that are nlproxy's own, not serve's.
func isTopLevelFlag(a string) bool {
	switch a {
	case "-h", "-help", "--help", "-version", "--version":
		return true
	}
	return false
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(args, os.Getenv, helpOutput(args, stdout, stderr))
	if err != nil {
		return err
	}
	logger, err := newLogger(cfg.LogLevel, cfg.LogFormat, stderr)
	if err != nil {
		return err
	}
	defer logger.Sync() //nolint:errcheck // nothing useful to do on a failed log flush
	warnPasswordFlags(logger, passwordFlags(args))
	srv, err := newServer(cfg, logger)
	if err != nil {
		return err
	}
	token := ""
	if cfg.Ops.AdminTokenFile != "" {
		if token, err = readToken(cfg.Ops.AdminTokenFile); err != nil {
			return err
		}
	}
	op, err := setupOps(cfg, srv, stdout, stderr, logger)
	if err != nil {
		return err
	}
	defer op.Close()
	learn := startWorkload(cfg, srv, op.metrics, logger)
	defer learn.Close() // before op.Close: the last save is logged while the logger lives
	op.workload = learn.Collector()
	var parts *engineParts
	if !cfg.Engine.Disabled {
		parts, err = buildEngine(cfg, logger)
		if err != nil {
			return err
		}
		defer parts.Close()
		if c := learn.Collector(); c != nil { // what is learnt feeds linking and prompts
			parts.engine.Workload = learned.Store{Store: c.Store()}
			parts.engine.WorkloadExamples = cfg.Workload.examples()
		}
		if cfg.Ops.CatalogStore != "" {
			if err := parts.useStore(ctx, cfg.Ops.CatalogStore, time.Duration(cfg.Ops.CatalogStorePoll), cfg.Engine.EmbedModel, logger.Named("store")); err != nil {
				return err
			}
		}
		parts.attach(srv)
		parts.observe(op.metrics)
		// In the background, once: whether Ollama has the models and, per
		// upstream, whether the catalog role can connect and read the
		// schema. Problems are logged with the fix; plain SQL works anyway.
		var checks sync.WaitGroup
		checks.Go(func() { parts.checkModels(ctx, logger) })
		checks.Go(func() { checkCatalogAccess(ctx, cfg, logger.Named("catalog")) })
		checks.Go(func() { parts.addExamples(ctx, logger.Named("engine")) })
		defer checks.Wait()
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	var extra []net.Listener
	if cfg.UnixSocketDir != "" {
		// Same name as Postgres's socket for this port, so `psql -h DIR -p PORT` finds it.
		uln, err := proxy.ListenUnix(cfg.UnixSocketDir, ln.Addr().(*net.TCPAddr).Port)
		if err != nil {
			ln.Close()
			return fmt.Errorf("unix socket: %w", err)
		}
		defer uln.Close() // removes socket and lock file on every exit path
		extra = append(extra, uln)
		logger.Info("nlproxy listening on a unix socket", zap.String("path", uln.Addr().String()))
	}
	op.start(cfg, srv, parts, token, logger)
	if cfg.MCP.Listen != "" {
		stop, err := startMCP(cfg, parts, srv, op.metrics, logger)
		if err != nil {
			ln.Close()
			return err
		}
		defer stop()
	}
	ver, rev := versionInfo()
	logger.Info("nlproxy listening", zap.String("addr", ln.Addr().String()),
		zap.Int("upstreams", len(cfg.Upstreams)), zap.String("version", ver), zap.String("commit", rev))
	return serveUntilDone(ctx, srv, ln, time.Duration(cfg.ShutdownTimeout), logger, extra...)
}

// serveUntilDone serves on ln (and extra) until ctx ends, then drains for at most drain.
func serveUntilDone(ctx context.Context, srv *proxy.Server, ln net.Listener, drain time.Duration, logger *zap.Logger, extra ...net.Listener) error {
	lns := append([]net.Listener{ln}, extra...)
	errc := make(chan error, len(lns))
	for _, l := range lns {
		go func() { errc <- srv.Serve(l) }()
	}
	select {
	case err := <-errc:
		_ = srv.Close() // one listener failed: stop the others too
		for range lns[1:] {
			<-errc
		}
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down: draining sessions", zap.Duration("timeout", drain))
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("drain incomplete; remaining sessions closed", zap.Error(err))
	}
	var firstErr error
	for range lns {
		if err := <-errc; err != nil && !errors.Is(err, proxy.ErrServerClosed) && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func newServer(cfg Config, logger *zap.Logger) (*proxy.Server, error) {
	srv := &proxy.Server{
		RequireTLS:               cfg.RequireTLS,
		MaxConns:                 cfg.MaxConns,
		HandshakeTimeout:         time.Duration(cfg.HandshakeTimeout),
		IdleTimeout:              time.Duration(cfg.IdleTimeout),
		IdleInTransactionTimeout: time.Duration(cfg.IdleInTransactionTimeout),
		MaxMessageSize:           cfg.MaxMessageSize,
		GoroutineRelay:           cfg.GoroutineRelay,
		RelayLoop:                proxy.RelayLoop(cfg.RelayLoop),
		Logger:                   logger,
		// The relay parses no SQL: the table-function form is read by the
		// router's parser, with or without an engine.
		AskFuncs: router.AskFuncs{},
	}
	for _, e := range cfg.Upstreams {
		u, err := proxy.ParseUpstream(e.Database, e.URL)
		if err != nil {
			return nil, fmt.Errorf("upstream %q: %w", formatUpstream(e), err)
		}
		if e.Database == "" {
			// The default route serves every database: pass the client's name through.
			u.OverrideDatabase = ""
		}
		srv.Upstreams = append(srv.Upstreams, u)
	}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("client TLS: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return srv, nil
}

func newLogger(level, format string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if format == "json" {
		enc = zapcore.NewJSONEncoder(encCfg)
	} else {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), lvl)), nil
}
