package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nlproxy/nlproxy/internal/pgcluster"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

func TestWithTarget(t *testing.T) {
	t.Setenv("PGPASSWORD", "")
	t.Setenv("PGPASSFILE", filepath.Join(t.TempDir(), "none"))
	tests := []struct {
		name, dsn, wantUser, wantPassword string
	}{
		{"bare URL", "postgres://cat@elsewhere:1/x", "cat", ""},
		{"URL with password and query", "postgres://cat:s%3Fcret@elsewhere:1/x?sslmode=disable&host=other", "cat", "s?cret"},
		{"keyword/value", `user=cat password='it\'s'`, "cat", "it's"},
		{"keyword/value with a host", "host=elsewhere port=1 dbname=x user=cat", "cat", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := pgx.ParseConfig(withTarget(tt.dsn, "db.internal", 6543, "app db/ü&x=1"))
			if err != nil {
				t.Fatal(err)
			}
			if c.Host != "db.internal" || c.Port != 6543 || c.Database != "app db/ü&x=1" || c.User != tt.wantUser || c.Password != tt.wantPassword {
				t.Errorf("got host %q port %d db %q user %q password %q", c.Host, c.Port, c.Database, c.User, c.Password)
			}
		})
	}
}

// catalogEnv is a SCRAM cluster with a catalog role and a database holding
// a table that role may read, and one holding a table it may not.
type catalogEnv struct {
	c                           *pgcluster.Cluster
	role, password              string
	readableDB, unreadableDB    string
	upstream                    string // default-route URL to readableDB
	passfileLine, emptyPassfile string
}

func newCatalogEnv(t *testing.T) catalogEnv {
	t.Helper()
	ctx := context.Background()
	c := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"})
	e := catalogEnv{c: c, role: "nlproxy_catalog", password: "cat-pass", readableDB: "app", unreadableDB: "locked"}
	if err := c.CreateRole(ctx, e.role, e.password, false); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{e.readableDB, e.unreadableDB} {
		if err := c.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
		if err := c.Exec(ctx, db, "CREATE TABLE orders (id int, city text)"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Exec(ctx, e.readableDB, "GRANT SELECT ON orders TO "+e.role); err != nil {
		t.Fatal(err)
	}
	e.upstream = c.URL(e.role, "", e.readableDB)
	e.passfileLine = fmt.Sprintf("%s:%d:*:%s:%s\n", c.Host, c.Port, e.role, e.password)
	e.emptyPassfile = filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(e.emptyPassfile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

func writePassfile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "pgpass")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCatalogCredentials: the catalog connects with a password from every
// source libpq knows — the DSN, PGPASSWORD, a password file (PGPASSFILE) —
// resolved for the upstream it actually connects to, and the start-up check
// names the role and the fix when it cannot connect or read the schema.
func TestCatalogCredentials(t *testing.T) {
	e := newCatalogEnv(t)
	passfile := writePassfile(t, "# catalog\n"+e.passfileLine)
	otherHostOnly := writePassfile(t, fmt.Sprintf("other.host:%d:*:%s:%s\n", e.c.Port, e.role, e.password))
	tests := []struct {
		name        string
		catalogDSN  string
		upstreams   []UpstreamEntry
		pgpassfile  string
		pgpassword  string
		wantProblem string // "" = the check passes; else a word of the warning's fix
	}{
		{name: "password in --catalog-dsn", catalogDSN: fmt.Sprintf("postgres://%s:%s@ignored/ignored", e.role, e.password),
			upstreams: []UpstreamEntry{{URL: e.upstream}}, pgpassfile: e.emptyPassfile},
		{name: "--catalog-dsn with only a user, password from PGPASSFILE for the upstream's host",
			catalogDSN: "user=" + e.role, upstreams: []UpstreamEntry{{URL: e.upstream}}, pgpassfile: passfile},
		{name: "--catalog-dsn with only a user, password from PGPASSWORD", catalogDSN: "user=" + e.role,
			upstreams: []UpstreamEntry{{URL: e.upstream}}, pgpassfile: e.emptyPassfile, pgpassword: e.password},
		{name: "no --catalog-dsn: the upstream URL's role, password from the password file",
			upstreams: []UpstreamEntry{{URL: e.upstream}}, pgpassfile: passfile},
		{name: "routed upstream, password file", catalogDSN: "user=" + e.role,
			upstreams: []UpstreamEntry{{Database: "reports", URL: e.upstream}}, pgpassfile: passfile},
		{name: "no password anywhere", catalogDSN: "user=" + e.role,
			upstreams: []UpstreamEntry{{URL: e.upstream}}, pgpassfile: e.emptyPassfile, wantProblem: "PGPASSFILE"},
		{name: "password file entry for another host only", catalogDSN: "user=" + e.role,
			upstreams: []UpstreamEntry{{URL: e.upstream}}, pgpassfile: otherHostOnly, wantProblem: "PGPASSFILE"},
		{name: "wrong password", catalogDSN: fmt.Sprintf("user=%s password=wrong", e.role),
			upstreams: []UpstreamEntry{{URL: e.upstream}}, pgpassfile: e.emptyPassfile, wantProblem: "password"},
		{name: "no such role", catalogDSN: "user=nobody password=x",
			upstreams: []UpstreamEntry{{URL: e.upstream}}, pgpassfile: e.emptyPassfile, wantProblem: "password"},
		{name: "connects but may read no table", catalogDSN: "user=" + e.role,
			upstreams: []UpstreamEntry{{URL: e.c.URL(e.role, "", e.unreadableDB)}}, pgpassfile: passfile, wantProblem: "GRANT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PGPASSFILE", tt.pgpassfile)
			t.Setenv("PGPASSWORD", tt.pgpassword)
			cfg := defaultConfig()
			cfg.Upstreams = tt.upstreams
			cfg.Engine.CatalogDSN = tt.catalogDSN
			core, logs := observer.New(zapcore.InfoLevel)
			problems := checkCatalogAccess(context.Background(), cfg, zap.New(core))
			entries := logs.All()
			if len(entries) != 1 {
				t.Fatalf("want one log entry per upstream, got %d: %+v", len(entries), entries)
			}
			fields := entries[0].ContextMap()
			if tt.wantProblem == "" {
				if problems != 0 || entries[0].Level != zapcore.InfoLevel {
					t.Fatalf("check failed: %s %v", entries[0].Message, fields)
				}
				if fields["role"] != e.role || fields["tables_readable"] != int64(1) {
					t.Errorf("fields %v, want role %s reading 1 table", fields, e.role)
				}
				// The connector the engine uses connects the same way.
				connect, err := catalogConnector(cfg)
				if err != nil {
					t.Fatal(err)
				}
				db := tt.upstreams[0].Database
				if db == "" {
					db = e.readableDB
				}
				conn, err := connect(context.Background(), db)
				if err != nil {
					t.Fatalf("catalog connect: %v", err)
				}
				var user string
				err = conn.QueryRow(context.Background(), "SELECT current_user").Scan(&user)
				conn.Close(context.Background())
				if err != nil || user != e.role {
					t.Errorf("connected as %q (%v), want %q", user, err, e.role)
				}
				return
			}
			if problems != 1 || entries[0].Level != zapcore.WarnLevel {
				t.Fatalf("want a warning, got %s: %s %v", entries[0].Level, entries[0].Message, fields)
			}
			fix, _ := fields["fix"].(string)
			if !strings.Contains(fix, tt.wantProblem) {
				t.Errorf("fix %q does not mention %q", fix, tt.wantProblem)
			}
			if role, _ := fields["role"].(string); role == "" || !strings.Contains(entries[0].Message+fix, "catalog") {
				t.Errorf("warning does not name the role and the catalog: %s %v", entries[0].Message, fields)
			}
		})
	}
}

// TestServeChecksCatalogAtStart: `nlproxy serve` with the engine on runs the
// check once per upstream at start and keeps relaying plain SQL when the
// catalog role has no password.
func TestServeChecksCatalogAtStart(t *testing.T) {
	e := newCatalogEnv(t)
	t.Setenv("PGPASSFILE", e.emptyPassfile)
	t.Setenv("PGPASSWORD", "")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	logR, logW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--upstream", e.upstream,
			"--catalog-dsn", "user=" + e.role, "--ollama-host", "http://127.0.0.1:1", "--data-dir", "",
			"--log-format", "json"}, io.Discard, logW)
		logW.Close()
	}()
	var addr string
	var warning map[string]any
	sc := bufio.NewScanner(logR)
	for (addr == "" || warning == nil) && sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if m["msg"] == "nlproxy listening" {
			addr, _ = m["addr"].(string)
		}
		if m["logger"] == "catalog" && m["level"] == "warn" {
			warning = m
		}
	}
	go io.Copy(io.Discard, logR) //nolint:errcheck // keep draining until serve ends
	if addr == "" || warning == nil {
		t.Fatalf("serve ended without listening (%q) or warning (%v): %v", addr, warning, <-done)
	}
	if warning["role"] != e.role || !strings.Contains(fmt.Sprint(warning["fix"]), "--catalog-dsn") {
		t.Errorf("warning %v: want the role %s and the fix", warning, e.role)
	}
	// Plain SQL is relayed all the same.
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(cctx, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", e.role, e.password, addr, e.readableDB))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(cctx, "SELECT count(*) FROM orders").Scan(&n); err != nil || n != 0 {
		t.Errorf("plain SQL through the proxy: %d, %v", n, err)
	}
	conn.Close(cctx)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// TestCatalogCheckCountsUnreadable: a catalog role that may read part of a
// database (a table created after the grants) passes the check with a
// warning counting the tables it cannot read and naming ALTER DEFAULT
// PRIVILEGES.
func TestCatalogCheckCountsUnreadable(t *testing.T) {
	e := newCatalogEnv(t)
	ctx := context.Background()
	db := "partial"
	if err := e.c.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Exec(ctx, db, "CREATE TABLE granted (id int); GRANT SELECT ON granted TO "+e.role+"; CREATE TABLE later (id int); CREATE TABLE later2 (id int)"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGPASSFILE", writePassfile(t, e.passfileLine))
	cfg := defaultConfig()
	cfg.Upstreams = []UpstreamEntry{{URL: e.c.URL(e.role, "", db)}}
	cfg.Engine.CatalogDSN = "user=" + e.role
	core, logs := observer.New(zapcore.InfoLevel)
	if problems := checkCatalogAccess(ctx, cfg, zap.New(core)); problems != 0 {
		t.Fatalf("%d problems, want the check to pass", problems)
	}
	entries := logs.All()
	if len(entries) != 1 || entries[0].Level != zapcore.WarnLevel {
		t.Fatalf("want one warning, got %+v", entries)
	}
	fields := entries[0].ContextMap()
	fix, _ := fields["fix"].(string)
	if fields["tables_unreadable"] != int64(2) || fields["tables"] != int64(3) || !strings.Contains(fix, "ALTER DEFAULT PRIVILEGES") {
		t.Errorf("warning %s %v, want 2 of 3 tables unreadable and ALTER DEFAULT PRIVILEGES in the fix", entries[0].Message, fields)
	}
}
