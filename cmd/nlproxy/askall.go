package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/askall"
	"github.com/nlproxy/nlproxy/engine/llm"
)

// AskAllConfig configures questions across databases (ask(all):).
type AskAllConfig struct {
	// Databases a question may be answered from; empty: every database the
	// upstream entries name (the default route's own database included).
	Databases []string
	// Authenticators give, per database ("" for every database without its
	// own), the credentials (libpq URL or DSN with user and password) of the
	// authenticator role nlproxy connects with to run the asker's questions
	// there as the asker. Server, port and TLS come from the upstream route.
	Authenticators []UpstreamEntry
	TopK           int
	MaxSteps       int
}

// authenticatorList is the repeatable --authenticator flag: "DSN" (every
// database) or "database=DSN".
type authenticatorList struct{ entries *[]UpstreamEntry }

func (a authenticatorList) String() string {
	if a.entries == nil {
		return ""
	}
	parts := make([]string, 0, len(*a.entries))
	for _, e := range *a.entries {
		if e.Database == "" {
			parts = append(parts, "(default)")
		} else {
			parts = append(parts, e.Database)
		}
	}
	return strings.Join(parts, " ") // never the credentials
}

func (a authenticatorList) Set(s string) error {
	e, err := parseUpstreamEntry(s)
	if err != nil {
		return err
	}
	*a.entries = append(*a.entries, e)
	return nil
}

// validate checks the settings of questions across databases.
func (c AskAllConfig) validate() error {
	if c.TopK < 0 || c.MaxSteps < 0 {
		return fmt.Errorf("ask-all-top-k and ask-all-max-steps must not be negative")
	}
	seen := map[string]bool{}
	for _, a := range c.Authenticators {
		if seen[a.Database] {
			return fmt.Errorf("authenticator for database %q given twice", a.Database)
		}
		seen[a.Database] = true
		if _, err := pgx.ParseConfig(a.URL); err != nil {
			return fmt.Errorf("authenticator for database %q: %w", a.Database, err)
		}
		// Without a user libpq would connect as the OS user: never meant.
		if !namesUser(a.URL) {
			return fmt.Errorf("authenticator for database %q names no user", a.Database)
		}
	}
	return nil
}

// namesUser reports whether a libpq URL or keyword/value DSN names a user.
func namesUser(dsn string) bool {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		return err == nil && (u.User != nil && u.User.Username() != "" || u.Query().Get("user") != "")
	}
	for _, f := range strings.Fields(dsn) {
		if k, v, ok := strings.Cut(f, "="); ok && strings.TrimSpace(k) == "user" && v != "" {
			return true
		}
	}
	return false
}

// askAllDatabases are the databases ask(all): covers: the configured ones,
// else every database the upstream entries name.
func askAllDatabases(cfg Config) []string {
	if len(cfg.Engine.AskAll.Databases) > 0 {
		return cfg.Engine.AskAll.Databases
	}
	var out []string
	for _, u := range cfg.Upstreams {
		db := u.Database
		if db == "" {
			if c, err := pgx.ParseConfig(u.URL); err == nil {
				db = c.Database
			}
		}
		if db != "" && !contains(out, db) {
			out = append(out, db)
		}
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// authenticatorConnector opens authenticator connections: the upstream
// route's server and TLS, the authenticator's user and password (resolved
// per server and database as libpq does, like the catalog's).
func authenticatorConnector(cfg Config) (askall.Connector, error) {
	creds := map[string]string{}
	for _, a := range cfg.Engine.AskAll.Authenticators {
		creds[a.Database] = a.URL
	}
	if len(creds) == 0 {
		return nil, nil
	}
	base, err := newCatalogConns(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, database string) (*pgconn.PgConn, error) {
		dsn, ok := creds[database]
		if !ok {
			dsn, ok = creds[""]
		}
		if !ok {
			return nil, fmt.Errorf("%w: %s", askall.ErrNoAuthenticator, database)
		}
		cc := &catalogConns{routes: base.routes, creds: dsn}
		c, err := cc.config(database)
		if err != nil {
			return nil, err
		}
		c.RuntimeParams["application_name"] = "nlproxy-ask-all"
		return pgconn.ConnectConfig(ctx, &c.Config)
	}, nil
}

// buildAskAll wires questions across databases to the engine's parts.
func buildAskAll(cfg Config, eng *engine.Engine, client *llm.Pool, mgr *catalog.Manager, logger *zap.Logger) (*askall.Asker, error) {
	ec := cfg.Engine
	connect, err := authenticatorConnector(cfg)
	if err != nil {
		return nil, err
	}
	a := &askall.Asker{
		Engine:     eng,
		LLM:        client,
		Catalogs:   mgr,
		Databases:  askAllDatabases(cfg),
		Connect:    connect,
		Glossary:   mgr.Glossary,
		Logger:     logger.Named("ask-all"),
		TopK:       ec.AskAll.TopK,
		MaxSteps:   ec.AskAll.MaxSteps,
		RunTimeout: time.Duration(ec.RunTimeout),
		MaxBytes:   ec.TrialMaxBytes,
		NumCtx:     ec.NumCtx,
	}
	if ec.EmbedModel != "" {
		a.Embedder = llm.NewEmbedder(client, ec.EmbedModel)
	}
	return a, nil
}
