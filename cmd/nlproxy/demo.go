package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/internal/sampledb"
)

const (
	demoDatabase = "shop"
	demoRole     = "demo"
	demoPassword = "demo"
)

// errStdoutClosed ends the demo when nobody reads its output any more
// (`make run | head -1`, a closed tee).
var errStdoutClosed = errors.New("stdout closed")

// demoOwnsEnv names the settings the demo makes itself — where it connects,
// what it keeps, how clients reach it — so the environment of a shell set up
// for a real deployment cannot point the demo elsewhere.
func demoOwnsEnv(key string) bool {
	switch key {
	case "NLPROXY_UPSTREAM", "NLPROXY_CATALOG_DSN", "NLPROXY_DATA_DIR", "NLPROXY_NO_ENGINE",
		"NLPROXY_UNIX_SOCKET_DIR", "NLPROXY_TLS_CERT", "NLPROXY_TLS_KEY", "NLPROXY_REQUIRE_TLS",
		"NLPROXY_SHUTDOWN_TIMEOUT":
		return true
	}
	return false
}

// demoEnvKeys are the environment variables the demo honours.
func demoEnvKeys() []string {
	var keys []string
	for _, k := range envKeys() {
		if !demoOwnsEnv(k) {
			keys = append(keys, k)
		}
	}
	return keys
}

const demoNotes = `The demo starts a throwaway PostgreSQL (initdb, pg_ctl) with the sample database
"shop" and serves it through the proxy. Ollama is used at OLLAMA_HOST when it
answers; without it ordinary SQL still works. Ctrl-C, SIGTERM, SIGHUP (terminal
closed) or closing stdout (| head, a closed tee) stops PostgreSQL and removes its
files.
`

// runDemo starts a throwaway Postgres with the sample database and the proxy in
// front of it, prints how to connect, and removes everything when stopped.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	getenv := func(k string) string {
		if demoOwnsEnv(k) {
			return ""
		}
		return os.Getenv(k)
	}
	cfg := defaultConfig()
	if err := applyEnv(&cfg, getenv); err != nil {
		return err
	}
	fs := flag.NewFlagSet("nlproxy demo", flag.ContinueOnError)
	fs.SetOutput(helpOutput(args, stdout, stderr))
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "proxy address; a free port is used if this one is taken (env NLPROXY_LISTEN)")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error (env NLPROXY_LOG_LEVEL)")
	// The settings a demo user changes first, as the option table words them.
	for _, name := range []string{"model", "small-model", "ask-timeout", "profile", "ollama-host", "no-progress"} {
		o := lookupOption(name)
		switch p := o.Field(&cfg).(type) {
		case *string:
			fs.StringVar(p, name, *p, o.usage())
		case *bool:
			fs.BoolVar(p, name, *p, o.usage())
		case *Duration:
			fs.Var(p, name, o.usage())
		}
	}
	fs.Usage = func() { printFlagUsage(fs, args, "nlproxy demo [flags]", demoEnvKeys(), demoNotes) }
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() > 0 {
		return usageErrorf("demo takes no arguments, got %q", fs.Arg(0))
	}
	logger, err := newLogger(cfg.LogLevel, cfg.LogFormat, stderr)
	if err != nil {
		return err
	}
	defer logger.Sync() //nolint:errcheck

	ctx, release := demoContext(ctx, stdout)
	defer release() // last: signals stay caught until the cleanup is done
	// An error caused by the stop itself is the normal way out, not a failure.
	stopped := func(err error) error {
		if ctx.Err() != nil {
			logger.Info("demo stopped before it was ready", zap.String("reason", context.Cause(ctx).Error()))
			return nil
		}
		return err
	}

	say(stdout, "Starting a throwaway PostgreSQL cluster…\n")
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cluster, err := pgcluster.Start(startCtx, pgcluster.Options{AuthMethod: "scram-sha-256"})
	if err != nil {
		return stopped(fmt.Errorf("demo postgres: %w", err))
	}
	defer func() {
		reason := "demo failed"
		if c := context.Cause(ctx); c != nil {
			reason = c.Error()
		}
		logger.Info("stopping the demo PostgreSQL", zap.String("reason", reason), zap.String("dir", cluster.Dir()))
		if err := cluster.Stop(); err != nil {
			logger.Warn("stopping demo postgres", zap.Error(err))
			return
		}
		say(stdout, "Demo PostgreSQL stopped and its files removed.\n")
	}()
	if err := loadDemoData(startCtx, cluster); err != nil {
		return stopped(err)
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		logger.Warn("demo listen address taken; using a free port", zap.String("addr", cfg.Listen), zap.Error(err))
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	cfg.Upstreams = []UpstreamEntry{{URL: cluster.URL(demoRole, demoPassword, demoDatabase)}}
	cfg.Engine.CatalogDSN = cluster.DSN("postgres")
	cfg.Engine.DataDir = "" // throwaway cluster, throwaway catalog
	srv, err := newServer(cfg, logger)
	if err != nil {
		ln.Close()
		return err
	}
	parts, err := buildEngine(cfg, logger)
	if err != nil {
		ln.Close()
		return err
	}
	defer parts.Close()
	parts.attach(srv)
	var checks sync.WaitGroup
	checks.Go(func() { checkCatalogAccess(ctx, cfg, logger.Named("catalog")) })
	defer checks.Wait()
	if _, err := parts.catalogs.Get(startCtx, demoDatabase); err != nil {
		ln.Close()
		return stopped(fmt.Errorf("demo catalog: %w", err))
	}
	addr := ln.Addr().(*net.TCPAddr)
	say(stdout, fmt.Sprintf(`
nlproxy demo is running.
  Sample database %q on a throwaway PostgreSQL (%s, files in %s), proxy on %s.

Connect with:
  psql "postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable"

Try:
  SELECT count(*) FROM orders;
  /* ask: how many orders were placed by customers in Los Angeles? */;
  ASK which five products sold the most units last year;
At the psql prompt use /* ask: … */; or ASK …; : psql drops a leading
-- comment, so "-- ask: …" typed there sends nothing (it is for drivers).
A long ask shows its progress as NOTICEs (--no-progress turns them off).

%s
Press Ctrl-C to stop; the cluster and its files are removed.
`, demoDatabase, cluster.Addr(), cluster.Dir(), addr, demoRole, demoPassword, addr.Port, demoDatabase, parts.ollamaStatus(ctx)))
	return serveUntilDone(ctx, srv, ln, 5*time.Second, logger)
}

// say writes to the demo's stdout. A write error is ignored: a closed stdout
// is noticed by demoContext, which stops the demo.
func say(w io.Writer, s string) { _, _ = io.WriteString(w, s) }

// demoContext is ctx, also cancelled by SIGINT, SIGTERM, SIGHUP or stdout
// losing its reader, with the reason as its cause. SIGPIPE is caught, so a
// write to a closed stdout fails with EPIPE instead of killing the process
// before it has stopped Postgres. release undoes all of it; call it last.
func demoContext(parent context.Context, stdout io.Writer) (ctx context.Context, release func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	stopWatch := watchReaderGone(stdout, func() { cancel(errStdoutClosed) })
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case s := <-sigs:
			// Worded like signal.NotifyContext's cause: main's context may
			// see SIGINT and SIGTERM first.
			cancel(errors.New(s.String() + " signal received"))
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		stopWatch()
		cancel(errors.New("demo ended"))
		<-done
		// Later signals keep landing in the (full or unread) channels until
		// Stop, so a second Ctrl-C cannot cut the cleanup short.
		signal.Stop(sigs)
		signal.Stop(pipe)
	}
}

func loadDemoData(ctx context.Context, cluster *pgcluster.Cluster) error {
	if err := cluster.CreateRole(ctx, demoRole, demoPassword, false); err != nil {
		return err
	}
	if err := cluster.Exec(ctx, "postgres", fmt.Sprintf("CREATE DATABASE %s OWNER %s", demoDatabase, demoRole)); err != nil {
		return err
	}
	conn, err := cluster.Connect(ctx, demoDatabase)
	if err != nil {
		return fmt.Errorf("demo database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// Load as the demo role so it owns (and may query and change) the sample data.
	if _, err := conn.Exec(ctx, "SET ROLE "+demoRole); err != nil {
		return fmt.Errorf("demo role: %w", err)
	}
	if err := sampledb.Load(ctx, conn, sampledb.Small); err != nil {
		return fmt.Errorf("load sample data: %w", err)
	}
	return nil
}

// ollamaStatus says whether Ollama answers with the configured models and,
// when not, how to get there.
func (p *engineParts) ollamaStatus(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err := llm.CheckModels(ctx, p.llm, p.llmConfig)
	if err == nil {
		return fmt.Sprintf("Ollama: ready at %s with model %s.", p.llm.BaseURL(), p.llmConfig.Models[llm.RoleGenerator])
	}
	var le *llm.Error
	hint := ""
	if errors.As(err, &le) && le.Hint != "" {
		hint = "\n  " + le.Hint
	}
	if errors.Is(err, llm.ErrModelMissing) {
		return fmt.Sprintf("Ollama: answering at %s, but a configured model is missing: %v%s", p.llm.BaseURL(), err, hint)
	}
	return fmt.Sprintf(`Ollama: NOT reachable at %s (%v).
  Natural-language questions need a local model. Start one with:
    ollama serve &
    ollama pull %s
  (or set OLLAMA_HOST to where it runs; NLPROXY_MODEL picks another model).
  Ordinary SQL works without it.`, p.llm.BaseURL(), err, p.llmConfig.Models[llm.RoleGenerator])
}
