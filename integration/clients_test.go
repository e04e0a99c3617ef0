package integration_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/clienttest"
	"github.com/nlproxy/nlproxy/testkit/needs"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// The shared scenario every client runs, and the lines it must print.
const (
	typesSQL  = `SELECT 42::int4, 'héllo wörld ✓ 日本語'::text, 12345.6789::numeric, '2024-01-02 03:04:05.123+00'::timestamptz, '\xdeadbeef'::bytea, NULL::text`
	typesLine = "types: 42|héllo wörld ✓ 日本語|12345.6789|1704164645123|deadbeef|null"
	markerSQL = "/* ask: how many rows are in tx_t */ SELECT 1"
	// markerCode is what a marker yields through a proxy with no engine.
	markerCode = "0A000"
)

func markerResult() string {
	if viaProxy {
		return markerCode
	}
	return "none" // plain Postgres treats the marker as a comment
}

func scenarioLines(connectLine string) []string {
	return []string{
		connectLine,
		"simple: 1",
		"param: 42|héllo ✓ 日本",
		typesLine,
		"error: 22012",
		"recovered: 2",
		"rollback: 0",
		"marker: " + markerResult(),
		"after-marker: 3",
	}
}

// clientEnv is the cluster behind a plain and a TLS-terminating proxy.
type clientEnv struct {
	cluster *pgcluster.Cluster
	direct  target // Postgres itself, for differential checks
	targets []namedTarget
}

type namedTarget struct {
	name string
	tg   target
	tls  bool
}

func newClientEnv(t *testing.T) clientEnv {
	t.Helper()
	c := newScramCluster(t, nil)
	tm := newTLSMaterial(t)
	plain := startProxy(t, c, proxyOptions{})
	secure := startProxy(t, c, proxyOptions{TLS: &tm})
	tlsTarget := targetFor(t, secure.Addr, "postgres")
	if viaProxy {
		tlsTarget.CAFile = tm.CAFile
	}
	return clientEnv{cluster: c, direct: targetFor(t, c.Addr(), "postgres"), targets: []namedTarget{
		{name: "plain", tg: targetFor(t, plain.Addr, "postgres")},
		{name: "tls", tg: tlsTarget, tls: viaProxy},
	}}
}

// runClient runs an external client with the target's libpq environment and
// returns its stdout; a non-zero exit fails the test with both streams.
func runClient(ctx context.Context, t *testing.T, tg target, extraEnv []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(tg.Env(), extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\nstdout:\n%s\nstderr:\n%s", name, args, err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("%s stderr:\n%s", filepath.Base(name), stderr.String())
	}
	return stdout.String()
}

func assertLines(t *testing.T, got string, want []string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(got, "\n"), "\n")
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("output mismatch\n--- got:\n%s\n--- want:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestClients(t *testing.T) {
	env := newClientEnv(t)
	ctx := context.Background()
	for _, nt := range env.targets {
		t.Run(nt.name, func(t *testing.T) {
			t.Run("psql", func(t *testing.T) { testPsql(ctx, t, nt) })
			t.Run("pgx", func(t *testing.T) { testPgx(ctx, t, nt, env.direct) })
			t.Run("pgjdbc", func(t *testing.T) { testJDBC(ctx, t, nt) })
			t.Run("psycopg2", func(t *testing.T) { testPsycopg2(ctx, t, nt) })
			t.Run("psycopg3", func(t *testing.T) { testPsycopg3(ctx, t, nt) })
			t.Run("node-postgres", func(t *testing.T) { testNode(ctx, t, nt) })
		})
	}
	t.Run("pgbench", func(t *testing.T) { testPgbench(ctx, t, env) })
}

func testPsql(ctx context.Context, t *testing.T, nt namedTarget) {
	psql := clienttest.RequireBinary(t, "psql")
	extra := []string{"PGTZ=UTC", "PGAPPNAME=nlproxy-psql"}
	t.Run("commands", func(t *testing.T) {
		out := runClient(ctx, t, nt.tg, extra, psql, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
			"-c", "SELECT 1",
			"-c", "PREPARE p(int, text) AS SELECT $1 + 1, $2; EXECUTE p(41, 'héllo ✓ 日本')",
			"-c", typesSQL,
			"-c", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
			"-c", "BEGIN; CREATE TEMP TABLE tx_t(x int); SAVEPOINT s; INSERT INTO tx_t VALUES (1); ROLLBACK TO s; SELECT count(*) FROM tx_t; ROLLBACK")
		want := []string{"1", "PREPARE", "42|héllo ✓ 日本", `42|héllo wörld ✓ 日本語|12345.6789|2024-01-02 03:04:05.123+00|\xdeadbeef|`,
			"f", // TLS, if any, ends at the proxy: the upstream leg is plain
			"BEGIN", "CREATE TABLE", "SAVEPOINT", "INSERT 0 1", "ROLLBACK", "0", "ROLLBACK"}
		assertLines(t, out, want)
	})
	t.Run("conninfo", func(t *testing.T) {
		out := runClient(ctx, t, nt.tg, extra, psql, "-X", "-c", `\conninfo`)
		if got := strings.Contains(out, "SSL connection"); got != nt.tls {
			t.Errorf("psql TLS = %v, want %v:\n%s", got, nt.tls, out)
		}
	})
	t.Run("error-recovery", func(t *testing.T) {
		// Without ON_ERROR_STOP psql goes on after an error on the same session.
		cmd := exec.CommandContext(ctx, psql, "-X", "-A", "-t", "-v", "VERBOSITY=verbose",
			"-c", "SELECT 1/0", "-c", "SELECT 'recovered'", "-c", "-- ask: how many tables are there\nSELECT 1", "-c", "SELECT 'after-marker'")
		cmd.Env = append(nt.tg.Env(), extra...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run() // exit status reflects the last command only
		wantOut := []string{"recovered", "after-marker"}
		if !viaProxy {
			wantOut = []string{"recovered", "1", "after-marker"}
		}
		assertLines(t, stdout.String(), wantOut)
		if !strings.Contains(stderr.String(), "ERROR:  22012: division by zero") {
			t.Errorf("stderr lacks the division error:\n%s", stderr.String())
		}
		if viaProxy && !strings.Contains(stderr.String(), "ERROR:  0A000: natural-language queries need an engine") {
			t.Errorf("stderr lacks the marker error:\n%s", stderr.String())
		}
	})
	t.Run("script", func(t *testing.T) {
		dir := t.TempDir()
		in, out := filepath.Join(dir, "in.csv"), filepath.Join(dir, "out.csv")
		if err := os.WriteFile(in, []byte("1,héllo\n2,wörld\n3,日本\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		tmpl, err := os.ReadFile("testdata/psql_script.sql")
		if err != nil {
			t.Fatal(err)
		}
		script := filepath.Join(dir, "script.sql")
		body := strings.NewReplacer("@COPY_IN@", in, "@COPY_OUT@", out).Replace(string(tmpl))
		if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, psql, "-X", "-A", "-t", "-f", script)
		cmd.Env = append(nt.tg.Env(), extra...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("psql -f: %v\n%s\n%s", err, stdout.String(), stderr.String())
		}
		want := []string{"CREATE TABLE", "COPY 3", "copied|3|6|héllo,wörld,日本", "COPY 3"}
		if !viaProxy {
			want = append(want, "1") // Postgres runs the statement after the comment
		}
		want = append(want, "after-comment-marker", "after-ask|3")
		assertLines(t, stdout.String(), want)
		gotCSV, err := os.ReadFile(out)
		if err != nil {
			t.Fatalf("copy out file: %v", err)
		}
		if string(gotCSV) != "1,HéLLO\n2,WöRLD\n3,日本\n" {
			t.Errorf("copy out = %q", gotCSV)
		}
		markerErrs := regexp.MustCompile(`ERROR:  0A000: natural-language queries need an engine`).FindAllString(stderr.String(), -1)
		wantErrs := 2
		if !viaProxy {
			wantErrs = 0
		}
		if len(markerErrs) != wantErrs {
			t.Errorf("got %d marker errors, want %d; stderr:\n%s", len(markerErrs), wantErrs, stderr.String())
		}
	})
}

func testPgbench(ctx context.Context, t *testing.T, env clientEnv) {
	pgbench := clienttest.RequireBinary(t, "pgbench")
	if err := env.cluster.CreateDatabase(ctx, "bench"); err != nil {
		t.Fatal(err)
	}
	tg := env.targets[0].tg
	tg.Database = "bench"
	runClient(ctx, t, tg, nil, pgbench, "-i", "-s", "1", "-q")
	processed := regexp.MustCompile(`number of transactions actually processed: (\d+)/(\d+)`)
	failed := regexp.MustCompile(`number of failed transactions: (\d+)`)
	for _, mode := range []string{"simple", "extended", "prepared"} {
		t.Run(mode, func(t *testing.T) {
			out := runClient(ctx, t, tg, nil, pgbench, "-n", "-M", mode, "-c", "4", "-j", "2", "-t", "100")
			m := processed.FindStringSubmatch(out)
			if m == nil || m[1] != "400" || m[2] != "400" {
				t.Errorf("processed = %v; output:\n%s", m, out)
			}
			f := failed.FindStringSubmatch(out)
			if f == nil || f[1] != "0" {
				t.Errorf("failed = %v; output:\n%s", f, out)
			}
		})
	}
}

var pgxModes = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement,
	pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeExec,
	pgx.QueryExecModeSimpleProtocol,
}

func testPgx(ctx context.Context, t *testing.T, nt namedTarget, direct target) {
	for _, mode := range pgxModes {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := nt.tg.pgxConfig(t)
			cfg.DefaultQueryExecMode = mode
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer conn.Close(ctx)
			if got := isTLS(conn); got != nt.tls {
				t.Errorf("TLS to proxy = %v, want %v", got, nt.tls)
			}
			var lines []string
			lines = append(lines, "connect: ok")

			var one int
			if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
				t.Fatalf("simple: %v", err)
			}
			lines = append(lines, fmt.Sprintf("simple: %d", one))

			var n int
			var s string
			if err := conn.QueryRow(ctx, "SELECT $1::int + 1, $2::text", 41, "héllo ✓ 日本").Scan(&n, &s); err != nil {
				t.Fatalf("param: %v", err)
			}
			lines = append(lines, fmt.Sprintf("param: %d|%s", n, s))

			var (
				i4  int32
				txt string
				num pgtype.Numeric
				ts  time.Time
				bin []byte
				nul *string
			)
			if err := conn.QueryRow(ctx, typesSQL).Scan(&i4, &txt, &num, &ts, &bin, &nul); err != nil {
				t.Fatalf("types: %v", err)
			}
			numStr, err := num.Value()
			if err != nil {
				t.Fatal(err)
			}
			nulStr := "null"
			if nul != nil {
				nulStr = *nul
			}
			lines = append(lines, fmt.Sprintf("types: %d|%s|%v|%d|%x|%s", i4, txt, numStr, ts.UnixMilli(), bin, nulStr))

			_, err = conn.Exec(ctx, "SELECT 1/0")
			lines = append(lines, "error: "+pgErrCode(err))
			if err := conn.QueryRow(ctx, "SELECT 2").Scan(&one); err != nil {
				t.Fatalf("recovered: %v", err)
			}
			lines = append(lines, fmt.Sprintf("recovered: %d", one))

			if _, err := conn.Exec(ctx, "CREATE TEMP TABLE tx_t(x int)"); err != nil {
				t.Fatal(err)
			}
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO tx_t VALUES ($1)", 1); err != nil {
				t.Fatal(err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM tx_t").Scan(&one); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, fmt.Sprintf("rollback: %d", one))

			err = conn.QueryRow(ctx, markerSQL).Scan(&one)
			lines = append(lines, "marker: "+codeOrNone(err))
			if err := conn.QueryRow(ctx, "SELECT 3").Scan(&one); err != nil {
				t.Fatalf("after marker: %v", err)
			}
			lines = append(lines, fmt.Sprintf("after-marker: %d", one))
			assertLines(t, strings.Join(lines, "\n"), scenarioLines("connect: ok"))

			// A marker with parameters (extended protocol in every mode but
			// simple) and a marker inside a transaction: the error aborts the
			// transaction like any other, and the session recovers.
			_, err = conn.Exec(ctx, "-- ask: which rows are above $1\nSELECT $1::int", 5)
			if got := codeOrNone(err); got != markerResult() {
				t.Errorf("parameterized marker: got %s, want %s", got, markerResult())
			}
			tx, err = conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tx.Exec(ctx, markerSQL)
			if got := codeOrNone(err); got != markerResult() {
				t.Errorf("marker in tx: got %s, want %s", got, markerResult())
			}
			_ = tx.Rollback(ctx)
			if err := conn.QueryRow(ctx, "SELECT 4").Scan(&one); err != nil || one != 4 {
				t.Errorf("after marker in tx: %d, %v", one, err)
			}

			// Batches are pipelined (one Sync in the extended modes). A bad
			// statement mid-batch must fail the batch exactly the way it
			// does on Postgres itself, and a marker like any invalid statement.
			dcfg := direct.pgxConfig(t)
			dcfg.DefaultQueryExecMode = mode
			dconn, err := pgx.ConnectConfig(ctx, dcfg)
			if err != nil {
				t.Fatal(err)
			}
			defer dconn.Close(ctx)
			good := batchOutcome(ctx, conn, "SELECT $1::int * 2")
			if want := batchOutcome(ctx, dconn, "SELECT $1::int * 2"); good != want || !strings.Contains(good, "14") {
				t.Errorf("batch via proxy %q, direct %q", good, want)
			}
			viaBad := batchOutcome(ctx, conn, "SELEC $1::int")
			wantBad := batchOutcome(ctx, dconn, "SELEC $1::int")
			if viaBad != wantBad {
				t.Errorf("batch with a syntax error: via proxy %q, direct %q", viaBad, wantBad)
			}
			viaMarker := batchOutcome(ctx, conn, "/* ask: double $1 */ SELECT $1::int")
			if mode == pgx.QueryExecModeSimpleProtocol {
				// pgx joins the batch into one multi-statement Query: the
				// marker is not at the start of the text, so it is an ordinary
				// comment and the statement runs as written.
				if want := batchOutcome(ctx, dconn, "/* ask: double $1 */ SELECT $1::int"); viaMarker != want {
					t.Errorf("simple-protocol batch with a mid-text marker: %q, direct %q", viaMarker, want)
				}
			} else if viaProxy {
				if want := strings.ReplaceAll(wantBad, "42601", markerCode); viaMarker != want {
					t.Errorf("batch with a marker: %q, want %q (like a syntax error, SQLSTATE %s)", viaMarker, want, markerCode)
				}
			}
			if err := conn.QueryRow(ctx, "SELECT 5").Scan(&one); err != nil || one != 5 {
				t.Errorf("after batches: %d, %v", one, err)
			}
		})
	}
}

// batchOutcome sends SELECT 1; mid (with parameter 7); SELECT 3 as one batch
// and renders what each query returned.
func batchOutcome(ctx context.Context, conn *pgx.Conn, mid string) string {
	b := &pgx.Batch{}
	b.Queue("SELECT 1")
	b.Queue(mid, 7)
	b.Queue("SELECT 3")
	br := conn.SendBatch(ctx, b)
	var out []string
	for i := 0; i < 3; i++ {
		var v int
		if err := br.QueryRow().Scan(&v); err != nil {
			out = append(out, "E:"+codeOrNone(err))
		} else {
			out = append(out, strconv.Itoa(v))
		}
	}
	if err := br.Close(); err != nil {
		out = append(out, "close:"+codeOrNone(err))
	}
	return strings.Join(out, ",")
}

func isTLS(conn *pgx.Conn) bool {
	_, ok := conn.PgConn().Conn().(*tls.Conn)
	return ok
}

func codeOrNone(err error) string {
	if err == nil {
		return "none"
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return "no rows"
	}
	return pgErrCode(err)
}

func testJDBC(ctx context.Context, t *testing.T, nt namedTarget) {
	java := clienttest.RequireBinary(t, "java")
	javac := clienttest.RequireBinary(t, "javac")
	const jar = "/usr/share/java/postgresql.jar"
	if _, err := os.Stat(jar); err != nil {
		needs.Missing(t, "pgjdbc jar missing: %v", err)
	}
	classes := t.TempDir()
	src, err := filepath.Abs("testdata/Client.java")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, javac, "-encoding", "UTF-8", "-d", classes, "-cp", jar, src).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	for _, tc := range []struct{ name, params string }{
		{"default", ""},
		{"prepareThreshold=1,binaryTransfer", "prepareThreshold=1&binaryTransfer=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := runClient(ctx, t, nt.tg, nil, java, "-Dfile.encoding=UTF-8", "-Dstdout.encoding=UTF-8",
				"-cp", classes+":"+jar, "Client", tc.params)
			assertLines(t, out, scenarioLines("connect: ok"))
		})
	}
}

func pythonBin(t *testing.T) string {
	t.Helper()
	// Debian's psycopg packages belong to the system interpreter, not to a
	// pyenv/virtualenv python3 that may come first on PATH.
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return clienttest.RequireBinary(t, "python3")
}

func requirePythonModule(ctx context.Context, t *testing.T, py, module string) {
	t.Helper()
	if out, err := exec.CommandContext(ctx, py, "-c", "import "+module).CombinedOutput(); err != nil {
		needs.Missing(t, "python module %s not installed: %v\n%s", module, err, out)
	}
}

func sslWord(nt namedTarget) string {
	if nt.tls {
		return "ssl"
	}
	return "plain"
}

func testPsycopg2(ctx context.Context, t *testing.T, nt namedTarget) {
	py := pythonBin(t)
	requirePythonModule(ctx, t, py, "psycopg2")
	out := runClient(ctx, t, nt.tg, nil, py, "testdata/client.py", "psycopg2")
	assertLines(t, out, scenarioLines("connect: ok "+sslWord(nt)))
}

func testPsycopg3(ctx context.Context, t *testing.T, nt namedTarget) {
	py := pythonBin(t)
	requirePythonModule(ctx, t, py, "psycopg")
	for _, mode := range []string{"default", "prepare", "binary", "client", "pipeline"} {
		t.Run(mode, func(t *testing.T) {
			out := runClient(ctx, t, nt.tg, nil, py, "testdata/client.py", "psycopg3", mode)
			want := scenarioLines("connect: ok " + sslWord(nt))
			if mode == "pipeline" {
				want = append(want, "pipeline: 1 42", "pipeline-error: 22012", "pipeline-after: 6")
			}
			assertLines(t, out, want)
		})
	}
}

func testNode(ctx context.Context, t *testing.T, nt namedTarget) {
	modules := clienttest.NodeModules(ctx, t)
	out := runClient(ctx, t, nt.tg, []string{"NODE_PATH=" + modules, "NODE_NO_WARNINGS=1"}, "node", "testdata/client.js")
	want := scenarioLines("connect: ok")
	want = append(want[:8:8], "marker-extended: "+markerResult(), want[8])
	queue := "queue: 10,11,E22012,1,twelve"
	if viaProxy {
		queue = "queue: 10,11,E22012,E" + markerCode + ",twelve"
	}
	want = append(want, queue)
	assertLines(t, out, want)
}

// TestTLSBothLegs terminates client TLS at the proxy and speaks TLS upstream.
// The upstream then offers SCRAM-SHA-256-PLUS. Channel binding cannot survive
// a terminating proxy, and a TLS client that is not offered PLUS sends the
// gs2 flag "y" ("I could bind, you can't"), which a TLS upstream that does
// support binding rejects as a downgrade; the flag is covered by the proof,
// so a relaying proxy cannot rewrite it. Clients therefore need
// channel_binding=disable for this topology; with libpq's default (prefer)
// the login must fail with a clear 28000, not hang or crash.
func TestTLSBothLegs(t *testing.T) {
	c := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256", TLS: true})
	tm := newTLSMaterial(t)
	p := startProxyUpstreamTLS(t, c, tm)
	tg := targetFor(t, p.Addr, "postgres")
	tg.CAFile = tm.CAFile
	ctx := context.Background()

	t.Run("pgx channel_binding=disable", func(t *testing.T) {
		cfg := tg.pgxConfig(t)
		cfg.ChannelBinding = "disable"
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if !isTLS(conn) {
			t.Error("client leg is not TLS")
		}
		var ssl bool
		if err := conn.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil {
			t.Fatal(err)
		}
		if !ssl {
			t.Error("upstream leg is not TLS")
		}
	})
	t.Run("psql channel_binding=disable", func(t *testing.T) {
		psql := clienttest.RequireBinary(t, "psql")
		out := runClient(ctx, t, tg, []string{"PGCHANNELBINDING=disable"}, psql, "-X", "-A", "-t",
			"-c", "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
		assertLines(t, out, []string{"t"})
	})
	for _, binding := range []string{"prefer", "require"} {
		t.Run("pgx channel_binding="+binding+" fails clearly", func(t *testing.T) {
			cfg := tg.pgxConfig(t)
			cfg.ChannelBinding = binding
			start := time.Now()
			conn, err := pgconn.ConnectConfig(ctx, &cfg.Config)
			if err == nil {
				conn.Close(ctx)
				t.Skip("logged in: the proxy found a way to keep channel binding working")
			}
			t.Logf("error after %v: %v", time.Since(start).Round(time.Millisecond), err)
			if !strings.Contains(strings.ToLower(err.Error()), "channel binding") {
				t.Errorf("error does not say channel binding is the problem: %v", err)
			}
			if time.Since(start) > 10*time.Second {
				t.Error("failing took too long")
			}
		})
	}
}
