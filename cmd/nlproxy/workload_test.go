package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/internal/pgcluster"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
	"github.com/nlproxy/nlproxy/workload"
)

func TestWorkloadOptions(t *testing.T) {
	base := []string{"--upstream", "postgres://u@h/db"}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    WorkloadConfig
		wantErr string
	}{
		{name: "defaults: off", want: WorkloadConfig{MaxQueries: workload.DefaultMaxQueries, MaxAge: Duration(workload.DefaultMaxAge), Sample: 1, Queue: 1024, Examples: 1}},
		{name: "flags", args: []string{"--learn-workload", "--workload-max-queries", "50", "--workload-max-age", "48h", "--workload-deny", "(?i)payroll", "--workload-sample", "0.25", "--workload-queue", "64",
			"--workload-stat-statements", "2m", "--workload-examples", "0", "--workload-roles", "app,etl", "--workload-roles", "report"},
			want: WorkloadConfig{Learn: true, MaxQueries: 50, MaxAge: Duration(48 * time.Hour), Deny: "(?i)payroll", Roles: []string{"app", "etl", "report"}, Sample: 0.25, Queue: 64, StatStatements: Duration(2 * time.Minute)}},
		{name: "environment, a flag wins", args: []string{"--workload-queue", "8"},
			env: map[string]string{"NLPROXY_LEARN_WORKLOAD": "true", "NLPROXY_WORKLOAD_MAX_QUERIES": "7", "NLPROXY_WORKLOAD_MAX_AGE": "0s", "NLPROXY_WORKLOAD_DENY": "x", "NLPROXY_WORKLOAD_SAMPLE": "0.5", "NLPROXY_WORKLOAD_QUEUE": "99",
				"NLPROXY_WORKLOAD_ROLES": "app"},
			want: WorkloadConfig{Learn: true, MaxQueries: 7, MaxAge: 0, Deny: "x", Roles: []string{"app"}, Sample: 0.5, Queue: 8, Examples: 1}},
		{name: "negative examples", args: []string{"--workload-examples", "-1"}, wantErr: "workload-examples"},
		{name: "bad deny pattern", args: []string{"--workload-deny", "("}, wantErr: "workload-deny"},
		{name: "sample out of range", args: []string{"--workload-sample", "0"}, wantErr: "workload-sample"},
		{name: "bad environment", env: map[string]string{"NLPROXY_WORKLOAD_QUEUE": "many"}, wantErr: "NLPROXY_WORKLOAD_QUEUE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			cfg, err := loadConfig(append(append([]string{"--no-engine"}, base...), tt.args...), getenv, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.Workload, tt.want) {
				t.Errorf("Workload = %+v, want %+v", cfg.Workload, tt.want)
			}
		})
	}
	if !strings.Contains(strings.Join(envKeys(), " "), "NLPROXY_LEARN_WORKLOAD") {
		t.Error("serve --help does not list NLPROXY_LEARN_WORKLOAD")
	}
}

// TestServeLearnsWorkload: `nlproxy serve --learn-workload` with a real
// client learns what it runs, saves it beside the catalog on shutdown, and
// `nlproxy workload show|forget` read and edit it; no literal is stored.
func TestServeLearnsWorkload(t *testing.T) {
	pg := pgtest.New(t, pgcluster.Options{AuthMethod: "trust"})
	ctx := context.Background()
	db := pgtest.UniqueName(t, "wl")
	if err := pg.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, db, `CREATE TABLE customers (id int PRIMARY KEY, email text, country text);
		CREATE TABLE orders (id int PRIMARY KEY, customer_id int, total numeric, placed date)`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	logR, logW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(sctx, []string{"serve", "--listen", "127.0.0.1:0", "--upstream", pg.URL(pgtest.Superuser, "", "postgres"),
			"--no-engine", "--learn-workload", "--workload-deny", "(?i)secret_", "--data-dir", dir, "--log-format", "json"}, io.Discard, logW)
		logW.Close()
	}()
	var addr string
	sc := bufio.NewScanner(logR)
	for addr == "" && sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "nlproxy listening" {
			addr, _ = m["addr"].(string)
		}
	}
	go io.Copy(io.Discard, logR) //nolint:errcheck // keep draining until serve ends
	if addr == "" {
		t.Fatalf("serve ended without listening: %v", <-done)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute) // a hang guard only
	defer cancel()
	conn, err := pgx.Connect(cctx, fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", pgtest.Superuser, addr, db))
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`SELECT o.id FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.email = 'alice@example.com'`,
		`SELECT o.id FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.email = 'bob@example.com'`,
		`SELECT country, count(*) FROM customers WHERE id > 31337 GROUP BY country ORDER BY country`,
		`SELECT email AS secret_mail FROM customers`,
	} {
		if _, err := conn.Exec(cctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var n int
	if err := conn.QueryRow(cctx, "SELECT count(*) FROM orders WHERE total > $1", 5).Scan(&n); err != nil {
		t.Fatal(err)
	}
	conn.Close(cctx)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}

	raw, err := os.ReadFile(workload.Path(dir, db))
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"alice", "bob@", "31337", "secret_mail"} {
		if bytes.Contains(raw, []byte(leak)) {
			t.Errorf("stored file holds %q", leak)
		}
	}
	var out, errb bytes.Buffer
	if err := run(ctx, []string{"workload", "show", "--data-dir", dir, "--database", db}, &out, &errb); err != nil {
		t.Fatalf("show: %v\n%s", err, errb.String())
	}
	for _, want := range []string{db + ": 3 fingerprint(s)", "t2.email = $1", "customers.id = orders.customer_id", "total > $1", "customers.country"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("show lacks %q:\n%s", want, out.String())
		}
	}
	p, err := workload.ReadProfile(dir, db, workload.Limits{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	fp := p.Queries()[0].Fingerprint // the join, run twice
	out.Reset()
	if err := run(ctx, []string{"workload", "forget", "--data-dir", dir, "--database", db, "--fingerprint", fp}, &out, &errb); err != nil {
		t.Fatalf("forget: %v", err)
	}
	out.Reset()
	if err := run(ctx, []string{"workload", "show", "--data-dir", dir, "--database", db}, &out, &errb); err != nil || strings.Contains(out.String(), fp) || !strings.Contains(out.String(), "2 fingerprint(s)") {
		t.Errorf("show after forget (%v):\n%s", err, out.String())
	}
	if err := run(ctx, []string{"workload", "forget", "--data-dir", dir}, &out, &errb); exitCode(err) != 2 {
		t.Errorf("forget without --database: %v, want a usage error", err)
	}
	if err := run(ctx, []string{"workload", "show", "--data-dir", dir, "--database", "nosuch"}, &out, &errb); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("show of an unknown database: %v", err)
	}
}

// TestServeReadsStatStatements: with --workload-stat-statements, serve
// learns what another role ran on the server directly (not through the
// proxy) from pg_stat_statements, with its role and calls.
func TestServeReadsStatStatements(t *testing.T) {
	bin, err := pgtest.FindBinDir()
	if err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(bin), "lib", "pg_stat_statements.so")); err != nil {
		t.Skipf("pg_stat_statements is not shipped with the server in %s: %v", bin, err)
	}
	pg := pgtest.New(t, pgcluster.Options{AuthMethod: "trust", Settings: map[string]string{"shared_preload_libraries": "'pg_stat_statements'"}})
	ctx := context.Background()
	app := pgtest.UniqueName(t, "app")
	if err := pg.Exec(ctx, "postgres", `CREATE EXTENSION pg_stat_statements;
		CREATE TABLE parcel (id int PRIMARY KEY, depot text NOT NULL);
		CREATE ROLE `+app+` LOGIN; GRANT SELECT ON parcel TO `+app); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	logR, logW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(sctx, []string{"serve", "--listen", "127.0.0.1:0", "--upstream", pg.URL(pgtest.Superuser, "", "postgres"),
			"--no-engine", "--learn-workload", "--workload-stat-statements", "20ms", "--data-dir", dir, "--log-format", "json"}, io.Discard, logW)
		logW.Close()
	}()
	var addr string
	sc := bufio.NewScanner(logR)
	for addr == "" && sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "nlproxy listening" {
			addr, _ = m["addr"].(string)
		}
	}
	go io.Copy(io.Discard, logR) //nolint:errcheck // keep draining until serve ends
	if addr == "" {
		t.Fatalf("serve ended without listening: %v", <-done)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute) // a hang guard only
	defer cancel()
	// One statement through the proxy gives the database a profile, which
	// is what the reader reads for.
	proxied, err := pgx.Connect(cctx, fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable", pgtest.Superuser, addr))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proxied.Exec(cctx, "SELECT count(*) FROM parcel"); err != nil {
		t.Fatal(err)
	}
	proxied.Close(cctx)
	direct, err := pgx.Connect(cctx, pg.URL(app, "", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if _, err := direct.Exec(cctx, "SELECT id FROM parcel WHERE depot = 'Rotterdam-7'"); err != nil {
			t.Fatal(err)
		}
	}
	direct.Close(cctx)
	// The reader's own statement, counted by the server: once it has run
	// three times after the app's, the worker has taken the read holding
	// them (the reader hands a read over before it starts the next one).
	reads := func() int64 {
		var n int64
		c, err := pg.Connect(cctx, "postgres")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(cctx)
		if err := c.QueryRow(cctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements WHERE query LIKE '%pg_stat_statements s JOIN pg_catalog.pg_roles%' AND query NOT LIKE '%coalesce%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := reads()
	for reads() < before+3 {
		if cctx.Err() != nil {
			t.Fatal("pg_stat_statements was not read three times in a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	p, err := workload.ReadProfile(dir, "postgres", workload.Limits{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, q := range p.Queries() {
		if strings.Contains(q.Text, "depot = $1") {
			found = true
			if q.Count != 4 || len(q.Roles) != 1 || q.Roles[0] != app {
				t.Errorf("learnt %s: count %d, roles %v; want 4 runs by %s", q.Text, q.Count, q.Roles, app)
			}
		}
		if strings.Contains(q.Text, "Rotterdam") {
			t.Errorf("a literal was stored: %s", q.Text)
		}
	}
	if !found {
		t.Errorf("the app's statement was not learnt: %+v", p.Queries())
	}
}
