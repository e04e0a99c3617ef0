package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog/sampledb"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/integration/pgtest"
	"github.com/nlproxy/nlproxy/proxy"
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
	srv := &proxy.Server{
		Upstreams: []proxy.Upstream{{Address: cluster.Addr(), TLS: proxy.UpstreamTLSDisable}},
		OnDDL: func(database, tag string) {
			logger.Debug("DDL seen", zap.String("database", database), zap.String("tag", tag))
		},
		Logger: logger,
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
`, demoDatabase, cluster.Addr(), addr, demoRole, demoPassword, addr.Port, demoDatabase, ollamaStatus(ctx))
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

// ollamaStatus says whether a local Ollama answers at OLLAMA_HOST and, when it
// does not, how to start one.
func ollamaStatus(ctx context.Context) string {
	u, err := llm.ParseHost(os.Getenv("OLLAMA_HOST"))
	if err != nil {
		return fmt.Sprintf("Ollama: OLLAMA_HOST is not usable: %v", err)
	}
	base := u.String()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/tags", nil)
	if err == nil {
		var resp *http.Response
		if resp, err = http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return fmt.Sprintf("Ollama: answering at %s.", base)
			}
			err = fmt.Errorf("HTTP %s", resp.Status)
		}
	}
	var hint string
	if errors.Is(err, context.DeadlineExceeded) {
		hint = "it did not answer within 2s"
	} else {
		hint = err.Error()
	}
	return fmt.Sprintf(`Ollama: NOT reachable at %s (%s).
  Natural-language questions need a local model. Start one with:
    ollama serve &
    ollama pull qwen2.5-coder:7b
  (or set OLLAMA_HOST to where it runs). Ordinary SQL works without it.`, base, hint)
}
