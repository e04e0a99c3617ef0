package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog/sampledb"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/integration/pgtest"
)

const (
	demoDatabase = "shop"
	demoRole     = "demo"
	demoPassword = "demo"
)

// runDemo starts a throwaway Postgres with the sample database and the proxy in
// front of it, prints how to connect, and removes everything on Ctrl-C.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nlproxy demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:6432", "proxy address (a free port is used if this one is taken)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger, err := newLogger(*logLevel, "console", stderr)
	if err != nil {
		return err
	}
	defer logger.Sync() //nolint:errcheck

	fmt.Fprintln(stdout, "Starting a throwaway PostgreSQL cluster…")
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cluster, err := pgtest.Start(startCtx, pgtest.Options{AuthMethod: "scram-sha-256"})
	if err != nil {
		return fmt.Errorf("demo postgres: %w", err)
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			logger.Warn("stopping demo postgres", zap.Error(err))
		}
		fmt.Fprintln(stdout, "Demo PostgreSQL stopped and its files removed.")
	}()
	if err := loadDemoData(startCtx, cluster); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		logger.Warn("demo listen address taken; using a free port", zap.String("addr", *listen), zap.Error(err))
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return fmt.Errorf("listen: %w", err)
		}
	}
	cfg := defaultConfig()
	cfg.Upstreams = []UpstreamEntry{{URL: cluster.URL(demoRole, demoPassword, demoDatabase)}}
	cfg.Engine.CatalogDSN = cluster.DSN("postgres")
	cfg.Engine.DataDir = "" // throwaway cluster, throwaway catalog
	if err := applyEnv(&cfg, os.Getenv); err != nil {
		return err
	}
	srv, err := newServer(cfg, logger)
	if err != nil {
		return err
	}
	parts, err := buildEngine(cfg, logger)
	if err != nil {
		return err
	}
	defer parts.Close()
	parts.attach(srv)
	if _, err := parts.catalogs.Get(startCtx, demoDatabase); err != nil {
		return fmt.Errorf("demo catalog: %w", err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	fmt.Fprintf(stdout, `
nlproxy demo is running.
  Sample database %q on a throwaway PostgreSQL (%s), proxy on %s.

Connect with:
  psql "postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable"

Try:
  SELECT count(*) FROM orders;
  /* ask: how many orders were placed by customers in Los Angeles? */;
  ASK which five products sold the most units last year;

%s
Press Ctrl-C to stop; the cluster and its files are removed.
`, demoDatabase, cluster.Addr(), addr, demoRole, demoPassword, addr.Port, demoDatabase, parts.ollamaStatus(ctx))
	return serveUntilDone(ctx, srv, ln, 5*time.Second, logger)
}

func loadDemoData(ctx context.Context, cluster *pgtest.Cluster) error {
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
	defer conn.Close(ctx)
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
