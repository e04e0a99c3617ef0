package asktest_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/testkit/clienttest"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/needs"
)

// The clients ask variations of one question; every variation gets the
// same scripted SQL, and each is a different cache key, so every client's
// ask goes through the model.
const (
	clientTopic = "first three products"
	clientSQL   = "SELECT product_id, sku FROM products ORDER BY product_id LIMIT 3"
)

func testClients(t *testing.T, f *fixture) {
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords, clientTopic}, Reply: keywordsReply([]string{"products", "product"}, nil)},
		fakeollama.Rule{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate, clientTopic}, Reply: sqlReply(clientSQL)},
	)
	f.fake.Reset()
	rows := f.direct(t, clientSQL)
	want := func(label string) string { return label + ": cols=product_id,sku rows=" + rows }
	host, port, _ := net.SplitHostPort(f.proxy)

	t.Run("psql", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, stmt := range []string{"/* ask: " + clientTopic + " for psql */", "ASK " + clientTopic + " for psql, bare;"} {
			out, stderr, err := psql(ctx, t, f.proxy, "-F", ",", "-R", ";", "-c", stmt)
			if err != nil {
				t.Fatalf("%s: %v\n%s", stmt, err, stderr)
			}
			if out != rows {
				t.Errorf("%s: %q, want %q", stmt, out, rows)
			}
			if !strings.Contains(stderr, clientSQL) {
				t.Errorf("%s: no NOTICE with the SQL on stderr: %q", stmt, stderr)
			}
		}
	})

	t.Run("pgx", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := f.connect(t, f.proxy)
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement,
			pgx.QueryExecModeDescribeExec} {
			q := fmt.Sprintf("-- ask: %s via pgx %v", clientTopic, mode)
			r, err := c.Query(ctx, q, mode)
			if err != nil {
				t.Fatalf("%v: %v", mode, err)
			}
			var cols []string
			for _, fd := range r.FieldDescriptions() {
				cols = append(cols, fd.Name)
			}
			var got []string
			for r.Next() {
				var id int
				var sku string
				if err := r.Scan(&id, &sku); err != nil { // binary/typed decoding needs the described types
					t.Fatalf("%v: scan: %v", mode, err)
				}
				got = append(got, fmt.Sprintf("%d,%s", id, sku))
			}
			if err := r.Err(); err != nil {
				t.Fatalf("%v: %v", mode, err)
			}
			if line := "cols=" + strings.Join(cols, ",") + " rows=" + strings.Join(got, ";"); "x: "+line != want("x") {
				t.Errorf("%v: %s, want %s", mode, line, want("x"))
			}
		}
		// Each ask's progress NOTICEs came before the one with its SQL.
		var progress, sql int
		for _, n := range c.Notices() {
			switch {
			case strings.HasPrefix(n, "nlproxy: generating candidate 1/1 ("):
				progress++
			case strings.Contains(n, clientSQL) && progress > sql:
				sql++
			}
		}
		if progress < 3 || sql < 3 {
			t.Errorf("notices %q: want a progress NOTICE before the SQL for each of 3 asks", c.Notices())
		}
		assertUsable(ctx, t, c)
	})

	t.Run("pgjdbc", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		javac, java := clienttest.RequireBinary(t, "javac"), clienttest.RequireBinary(t, "java")
		const jar = "/usr/share/java/postgresql.jar"
		if _, err := os.Stat(jar); err != nil {
			needs.Missing(t, "pgjdbc jar missing: %v", err)
		}
		classes := t.TempDir()
		if out, err := exec.CommandContext(ctx, javac, "-encoding", "UTF-8", "-d", classes, "-cp", jar, "testdata/AskClient.java").CombinedOutput(); err != nil {
			t.Fatalf("javac: %v\n%s", err, out)
		}
		url := fmt.Sprintf("jdbc:postgresql://%s:%s/%s?sslmode=disable", host, port, db)
		out := run(ctx, t, nil, java, "-cp", classes+":"+jar, "AskClient", url, askUser, askPass,
			clientTopic+" via jdbc statement", clientTopic+" via jdbc prepared")
		assertLines(t, out, want("statement"), "statement notices: progress=true sql=true",
			want("prepared"), "prepared notices: progress=true sql=true", "after: 42")
	})

	dsn := fmt.Sprintf("host=%s port=%s dbname=%s user=%s password=%s sslmode=disable", host, port, db, askUser, askPass)
	for _, driver := range []string{"psycopg2", "psycopg"} {
		t.Run(driver, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			py := "/usr/bin/python3" // Debian's psycopg packages belong to the system interpreter
			if _, err := os.Stat(py); err != nil {
				py = clienttest.RequireBinary(t, "python3")
			}
			if out, err := exec.CommandContext(ctx, py, "-c", "import "+driver).CombinedOutput(); err != nil {
				needs.Missing(t, "python module %s not installed: %s", driver, out)
			}
			arg, labels := "psycopg3", []string{"execute", "prepared"}
			if driver == "psycopg2" {
				arg, labels = "psycopg2", []string{"execute", "comment"}
			}
			out := run(ctx, t, nil, py, "testdata/ask_client.py", arg, dsn,
				clientTopic+" via "+driver+" one", clientTopic+" via "+driver+" two")
			assertLines(t, out, want(labels[0]), labels[0]+" notices: progress=True sql=True",
				want(labels[1]), labels[1]+" notices: progress=True sql=True", "after: 42")
		})
	}

	t.Run("node-postgres", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		modules := clienttest.NodeModules(ctx, t)
		conn := fmt.Sprintf("postgres://%s:%s@%s:%s/%s?sslmode=disable", askUser, askPass, host, port, db)
		out := run(ctx, t, []string{"NODE_PATH=" + modules, "NODE_NO_WARNINGS=1"}, clienttest.RequireBinary(t, "node"), "testdata/ask_client.js", conn,
			clientTopic+" via node simple", clientTopic+" via node extended")
		assertLines(t, out, want("simple"), want("extended"), "after: 42")
	})
}

// The clients of issue 19 (PHP PDO, psqlodbc, Ruby pg, pgcli): each runs
// plain SQL, every ask form and the prepared lifecycle its driver uses.
func testMoreClients(t *testing.T, f *fixture) {
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords, clientTopic}, Reply: keywordsReply([]string{"products", "product"}, nil)},
		fakeollama.Rule{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate, clientTopic}, Reply: sqlReply(clientSQL)},
	)
	f.fake.Reset()
	rows := f.direct(t, clientSQL)
	want := func(label string) string { return label + ": cols=product_id,sku rows=" + rows }
	host, port, _ := net.SplitHostPort(f.proxy)

	t.Run("php-pdo", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		php := clienttest.RequireBinary(t, "php")
		if out, err := exec.CommandContext(ctx, php, "-r", `exit(in_array("pgsql", PDO::getAvailableDrivers()) ? 0 : 1);`).CombinedOutput(); err != nil {
			needs.Missing(t, "PHP's PDO pgsql driver not installed (php-pgsql): %v %s", err, out)
		}
		dsn := fmt.Sprintf("pgsql:host=%s;port=%s;dbname=%s;sslmode=disable", host, port, db)
		out := run(ctx, t, nil, php, "testdata/ask_client.php", dsn, askUser, askPass, clientTopic)
		var lines []string
		for _, mode := range []string{"emulated", "native"} {
			lines = append(lines, mode+" plain: 42",
				want(mode+" comment"), want(mode+" dash"), want(mode+" bare"), want(mode+" func"),
				want(mode+" prepared 1"), want(mode+" prepared 2"),
				want(mode+" in tx"), mode+" tx: kept=1")
		}
		assertLines(t, out, lines...)
	})

	t.Run("ruby-pg", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ruby := clienttest.RequireBinary(t, "ruby")
		if out, err := exec.CommandContext(ctx, ruby, "-e", `require "pg"`).CombinedOutput(); err != nil {
			needs.Missing(t, "Ruby's pg not installed (ruby-pg): %v %s", err, out)
		}
		conninfo := fmt.Sprintf("host=%s port=%s dbname=%s user=%s password=%s sslmode=disable", host, port, db, askUser, askPass)
		out := run(ctx, t, nil, ruby, "testdata/ask_client.rb", conninfo, clientTopic)
		assertLines(t, out, "plain: 42", "plain params: 42",
			want("exec comment"), want("exec_params comment"), want("exec dash"), want("exec_params dash"),
			want("exec bare"), want("exec_params bare"), want("exec func"), want("exec_params func"),
			want("exec_prepared"), "prepare again: 42P05", "exec_prepared after DEALLOCATE: 26000",
			want("reused"), want("in tx"), "plain a1 in tx: 42", "after: 42")
	})

	t.Run("odbc", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		py := "/usr/bin/python3" // Debian's pyodbc belongs to the system interpreter
		if _, err := os.Stat(py); err != nil {
			py = clienttest.RequireBinary(t, "python3")
		}
		if out, err := exec.CommandContext(ctx, py, "-c", "import pyodbc, sys; sys.exit('PostgreSQL Unicode' not in pyodbc.drivers())").CombinedOutput(); err != nil {
			needs.Missing(t, "pyodbc or psqlodbc's PostgreSQL Unicode driver not installed (python3-pyodbc odbc-postgresql unixodbc): %v %s", err, out)
		}
		// Only what a connection needs: every other setting is the driver's
		// default (UseServerSidePrepare=1).
		connstr := fmt.Sprintf("Driver={PostgreSQL Unicode};Server=%s;Port=%s;Database=%s;Uid=%s;Pwd=%s;SSLmode=disable", host, port, db, askUser, askPass)
		t.Run("isql", func(t *testing.T) {
			// isql prepares every statement (SQLPrepare, SQLExecute): psqlodbc
			// then names it _PLAN<address> and deallocates it before the next.
			isql := clienttest.RequireBinary(t, "isql")
			input := strings.Join([]string{
				"SELECT 40 + 2 AS plain",
				"/* ask: " + clientTopic + " via isql comment */",
				"SELECT 42 AS after",
				"-- ask: " + clientTopic + " via isql dash",
				"SELECT 42 AS after",
				"ASK " + clientTopic + " via isql bare;",
				"SELECT 42 AS after",
				"SELECT * FROM nlproxy.ask('" + clientTopic + " via isql func')",
				"SELECT 42 AS after",
				"CREATE TEMP TABLE isql_t (x int)",
				"/* ask: " + clientTopic + " via isql before insert */",
				"INSERT INTO isql_t VALUES (1)",
				"SELECT count(*) AS kept FROM isql_t",
			}, "\n") + "\n"
			cmd := exec.CommandContext(ctx, isql, "-k", connstr, "-b", "-v", "-d,", "-c")
			cmd.Stdin = strings.NewReader(input)
			raw, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("isql: %v\n%s", err, raw)
			}
			askRows := append([]string{"product_id,sku"}, strings.Split(rows, ";")...)
			var want []string
			want = append(want, "plain", "42")
			for range 4 {
				want = append(want, askRows...)
				want = append(want, "after", "42")
			}
			want = append(want, askRows...)
			want = append(want, "kept", "1")
			assertLines(t, string(raw), want...)
		})
		out := run(ctx, t, nil, py, "testdata/ask_client_odbc.py", connstr, clientTopic)
		var lines []string
		for _, mode := range []string{"autocommit", "transaction"} {
			lines = append(lines, mode+" plain: 42", mode+" plain params: 42")
			for _, form := range []string{"comment", "dash", "bare", "func"} {
				lines = append(lines, want(mode+" "+form), mode+" after "+form+": 42")
			}
			lines = append(lines, want(mode+" prepared 1"), want(mode+" prepared 2"), want(mode+" before insert"), mode+" tx: kept=1")
		}
		assertLines(t, out, lines...)
	})

	t.Run("pgcli", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pgcli := clienttest.RequireBinary(t, "pgcli")
		script := clienttest.RequireBinary(t, "script") // util-linux: gives pgcli the terminal it insists on
		home := t.TempDir()
		// pgcli runs statements as they are typed; a comment-only statement
		// it does not send at all (/* ask: … */ alone) or fails on itself
		// (-- ask: …), so the comment form carries its question after the
		// comment, as psql users type it; the table-function form is valid
		// SQL, which pgcli sends as it is.
		input := strings.Join([]string{
			`\T csv`,
			`SELECT 40 + 2 AS plain;`,
			`ASK ` + clientTopic + ` via pgcli bare;`,
			`/* ask: */ ` + clientTopic + ` via pgcli comment;`,
			`SELECT 'after' AS done;`,
			`SELECT * FROM nlproxy.ask('` + clientTopic + ` via pgcli func');`,
			`\q`,
		}, "\n") + "\n"
		cmd := exec.CommandContext(ctx, script, "-qfec", fmt.Sprintf("%s -h %s -p %s -U %s -w --less-chatty --row-limit 0 %s", pgcli, host, port, askUser, db), "/dev/null")
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "PGPASSWORD="+askPass, "PGSSLMODE=disable",
			"PAGER=cat", "TERM=dumb", "COLUMNS=200", "LINES=50")
		cmd.Stdin = strings.NewReader(input)
		raw, err := cmd.CombinedOutput()
		out := ansi.ReplaceAllString(strings.ReplaceAll(string(raw), "\r", ""), "")
		if err != nil {
			t.Fatalf("pgcli: %v\n%s", err, out)
		}
		csv := func(row string) string { return `"` + strings.ReplaceAll(row, ",", `","`) + `"` }
		var askRows []string
		for _, r := range strings.Split(rows, ";") {
			askRows = append(askRows, csv(r))
		}
		for _, block := range []string{
			"\"plain\"\n\"42\"\nSELECT 1\n",
			"> ASK " + clientTopic + " via pgcli bare;\nnlproxy: " + clientSQL + "\n",
			"\"product_id\",\"sku\"\n" + strings.Join(askRows, "\n") + "\nSELECT 3\n",
			// pgcli drops the leading comment itself: the server gets the bare question.
			"> /* ask: */ " + clientTopic + " via pgcli comment;\nsyntax error at or near \"first\"\n",
			"\"done\"\n\"after\"\nSELECT 1\n",
			"> SELECT * FROM nlproxy.ask('" + clientTopic + " via pgcli func');\nnlproxy: " + clientSQL + "\n",
		} {
			if !strings.Contains(out, block) {
				t.Errorf("pgcli output lacks %q:\n%s", block, out)
			}
		}
	})
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[a-zA-Z]|\x1b[()][A-Z0-9]|\x1b[>=]`)

// run runs a client program and returns its stdout; a failure shows stderr.
func run(ctx context.Context, t *testing.T, env []string, bin string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func assertLines(t *testing.T, out string, want ...string) {
	t.Helper()
	got := strings.Split(strings.TrimSpace(out), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("output:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
