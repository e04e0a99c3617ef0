package workload_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/needs"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
	"github.com/nlproxy/nlproxy/workload"
)

// statStatementsCluster is a server with pg_stat_statements preloaded and
// created; the test is skipped when the server binaries lack it.
func statStatementsCluster(t *testing.T) *pgcluster.Cluster {
	t.Helper()
	bin, err := pgtest.FindBinDir()
	if err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	// bin is …/lib/postgresql/15/bin; the module is in …/15/lib.
	if _, err := os.Stat(filepath.Join(filepath.Dir(bin), "lib", "pg_stat_statements.so")); err != nil {
		needs.Missing(t, "pg_stat_statements is not shipped with the server in %s (install postgresql-contrib): %v", bin, err)
	}
	pg := pgtest.New(t, pgcluster.Options{Settings: map[string]string{"shared_preload_libraries": "'pg_stat_statements'"}})
	if err := pg.Exec(context.Background(), "postgres", `CREATE EXTENSION pg_stat_statements`); err != nil {
		t.Fatal(err)
	}
	return pg
}

// TestStatStatements: the statements another role ran, read from
// pg_stat_statements, are learnt with their roles and calls (the calls
// since the previous read, the next time), no literal kept; the catalog
// role's own statements are not.
func TestStatStatements(t *testing.T) {
	pg := statStatementsCluster(t)
	ctx := context.Background()
	app := pgtest.UniqueName(t, "app")
	if err := pg.Exec(ctx, "postgres", `
CREATE TABLE town (id int PRIMARY KEY, name text NOT NULL);
CREATE TABLE shop (id int PRIMARY KEY, town_id int NOT NULL, kind text NOT NULL);
INSERT INTO town VALUES (1, 'Zanzibar'), (2, 'Quito');
INSERT INTO shop VALUES (1, 1, 'bakery'), (2, 2, 'bakery');
CREATE ROLE `+app+` LOGIN;
GRANT SELECT ON town, shop TO `+app+`;
SELECT count(*) FROM town WHERE name = 'Superuser-only';`); err != nil {
		t.Fatal(err)
	}
	appConn, err := pgx.Connect(ctx, pg.URL(app, "", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer appConn.Close(ctx)
	run := func(n int) {
		for i := 0; i < n; i++ {
			if _, err := appConn.Exec(ctx, "SELECT s.kind FROM shop s JOIN town t ON t.id = s.town_id WHERE t.name = 'Zanzibar'"); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(3)

	src := workload.PgStatStatements{Connect: pg.Connect}
	store := workload.NewStore("", workload.Limits{})
	c := workload.NewCollector(store, workload.CollectorOptions{})
	learn := func() *workload.Profile {
		rows, err := src.Statements(ctx, "postgres")
		if err != nil {
			t.Fatal(err)
		}
		c.LearnStats("postgres", rows, time.Now())
		p, _ := store.Profile("postgres")
		return p
	}
	find := func(p *workload.Profile) *workload.Query {
		for _, q := range p.Queries() {
			if strings.Contains(q.Text, "shop") {
				return &q
			}
		}
		return nil
	}
	p := learn()
	q := find(p)
	if q == nil {
		t.Fatalf("the app's join was not learnt: %+v", p.Queries())
	}
	if q.Count != 3 || len(q.Roles) != 1 || q.Roles[0] != app || len(q.Joins) != 1 {
		t.Errorf("learnt %+v: want 3 runs by %s, one join", *q, app)
	}
	for _, q := range p.Queries() {
		if strings.Contains(q.Text, "Superuser-only") || strings.Contains(q.Text, "Zanzibar") || strings.Contains(q.Text, "pg_stat_statements") {
			t.Errorf("learnt a literal or the catalog role's statement: %s", q.Text)
		}
		if len(q.Roles) > 0 && q.Roles[0] == "postgres" {
			t.Errorf("learnt the catalog role's statement: %s", q.Text)
		}
	}

	run(2)
	if q := find(learn()); q == nil || q.Count != 5 {
		t.Errorf("after two more runs: %+v, want count 5 (3 + the 2 since the last read)", q)
	}
	if q := find(learn()); q == nil || q.Count != 5 {
		t.Errorf("a read with no new runs changed the count: %+v", q)
	}
}

// TestStatStatementsMissing: without the extension, a read fails with a
// clear error; the collector counts each failure, warns once and goes on
// learning from relayed statements.
func TestStatStatementsMissing(t *testing.T) {
	pg := pgtest.New(t, pgcluster.Options{})
	ctx := context.Background()
	src := workload.PgStatStatements{Connect: pg.Connect}
	if _, err := src.Statements(ctx, "postgres"); !errors.Is(err, workload.ErrNoStatStatements) {
		t.Fatalf("read without the extension: %v, want ErrNoStatStatements", err)
	}

	core, logs := observer.New(zap.WarnLevel)
	store := workload.NewStore("", workload.Limits{})
	if _, err := store.Profile("postgres"); err != nil {
		t.Fatal(err)
	}
	c := workload.NewCollector(store, workload.CollectorOptions{Stats: src, StatsEvery: time.Millisecond, DrainEvery: time.Millisecond, Logger: zap.New(core)})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	c.Observe("postgres", "app", 0, []byte("SELECT 1 FROM town WHERE name = 'x'"))
	deadline := time.Now().Add(time.Minute) // a hang guard only
	for c.Stats().StatFailures < 3 || c.Stats().Learnt < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: want three failed reads and the relayed statement learnt", c.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessageSnippet("pg_stat_statements").Len(); n != 1 {
		t.Errorf("%d warnings for repeated failures, want 1", n)
	}
	if st := c.Stats(); st.StatReads != 0 {
		t.Errorf("stats %+v: a read succeeded without the extension", st)
	}
}

// TestStatStatementsCountedOnce: statements the relay captured and
// pg_stat_statements reports are counted once; runs outside the proxy
// (in pg_stat_statements only) are added; with Roles set, a role not
// named teaches through neither source.
func TestStatStatementsCountedOnce(t *testing.T) {
	pg := statStatementsCluster(t)
	ctx := context.Background()
	app, mallory := pgtest.UniqueName(t, "app"), pgtest.UniqueName(t, "mallory")
	if err := pg.Exec(ctx, "postgres", `
CREATE TABLE town (id int PRIMARY KEY, name text NOT NULL);
CREATE TABLE shop (id int PRIMARY KEY, town_id int NOT NULL, kind text NOT NULL);
CREATE ROLE `+app+` LOGIN; CREATE ROLE `+mallory+` LOGIN;
GRANT SELECT ON town, shop TO `+app+`, `+mallory+`;`); err != nil {
		t.Fatal(err)
	}
	conn := func(role string) *pgx.Conn {
		c, err := pgx.Connect(ctx, pg.URL(role, "", "postgres"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	appConn, malConn := conn(app), conn(mallory)
	const appSQL = "SELECT s.kind FROM shop s JOIN town t ON t.id = s.town_id WHERE t.name = 'Quito'"
	const malSQL = "SELECT s.kind FROM shop s JOIN town t ON t.id = s.id"

	src := workload.PgStatStatements{Connect: pg.Connect}
	for _, tt := range []struct {
		name    string
		roles   []string
		wantApp int64 // runs learnt of appSQL
		wantMal bool  // malSQL learnt
	}{
		{name: "every role teaches", wantApp: 5, wantMal: true},
		{name: "only the app teaches", roles: []string{app}, wantApp: 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := pg.Exec(ctx, "postgres", "SELECT pg_stat_statements_reset()"); err != nil {
				t.Fatal(err)
			}
			store := workload.NewStore("", workload.Limits{})
			c := workload.NewCollector(store, workload.CollectorOptions{Stats: src, Roles: tt.roles})
			read := func() {
				rows, err := src.Statements(ctx, "postgres")
				if err != nil {
					t.Fatal(err)
				}
				c.LearnStats("postgres", rows, time.Now())
			}
			read()
			// Three runs through the relay: captured, and in pg_stat_statements.
			for i := range 3 {
				c.LearnRelayed("postgres", app, uint64(i+1), appSQL)
				if _, err := appConn.Exec(ctx, appSQL); err != nil {
					t.Fatal(err)
				}
				c.LearnRelayed("postgres", mallory, 9, malSQL)
				if _, err := malConn.Exec(ctx, malSQL); err != nil {
					t.Fatal(err)
				}
			}
			read()
			// Two runs outside the proxy: in pg_stat_statements only.
			for range 2 {
				if _, err := appConn.Exec(ctx, appSQL); err != nil {
					t.Fatal(err)
				}
			}
			read()
			read()
			p, _ := store.Profile("postgres")
			var gotApp int64
			gotMal := false
			for _, q := range p.Queries() {
				switch {
				case strings.Contains(q.Text, "town_id"):
					gotApp = q.Count
					if len(q.Sessions) != 3 || len(q.Roles) != 1 {
						t.Errorf("app's query %+v: want 3 sessions of one role", q)
					}
				case len(q.Joins) == 1 && q.Joins[0].String() == "shop.id = town.id":
					gotMal = true
				}
			}
			if gotApp != tt.wantApp || gotMal != tt.wantMal {
				t.Errorf("learnt app runs %d, mallory's join %v; want %d, %v (%+v)", gotApp, gotMal, tt.wantApp, tt.wantMal, p.Queries())
			}
		})
	}
}
