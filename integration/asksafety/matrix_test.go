package asksafety_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/testkit/clienttest"
	"github.com/nlproxy/nlproxy/testkit/needs"
)

// setting is a way a client session lexes SQL.
type setting struct {
	name     string
	scsOff   bool
	encoding string // client_encoding; "" keeps UTF8
}

var settings = []setting{
	{name: "default"},
	{name: "scs_off", scsOff: true},
	{name: "sjis", scsOff: true, encoding: "SJIS"},
	{name: "gbk", scsOff: true, encoding: "GBK"},
	{name: "big5", scsOff: true, encoding: "BIG5"},
}

// vectorsFor is the corpus a setting runs: the slow vector only once, under
// the default setting (it holds each run for the statement timeout).
func vectorsFor(s setting) []vector {
	var out []vector
	for _, v := range corpus {
		if v.slow && s.name != "default" {
			continue
		}
		out = append(out, v)
	}
	return out
}

// outcome is what one client saw for one execution of one vector.
type outcome struct {
	ok    bool
	state string
}

var outcomeLine = regexp.MustCompile(`^(v\d\d)(?:#(\d+))?(-write)? (OK|ERR)\s*(\S*)`)

// parseOutcomes reads "v07#2 OK 3", "v07 ERR 42501", "v07-write OK" lines.
func parseOutcomes(out string) (runs map[string][]outcome, writes map[string]outcome) {
	runs, writes = map[string][]outcome{}, map[string]outcome{}
	for _, l := range lines(out) {
		m := outcomeLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		o := outcome{ok: m[4] == "OK", state: m[5]}
		if m[3] != "" {
			writes[m[1]] = o
			continue
		}
		runs[m[1]] = append(runs[m[1]], o)
	}
	return runs, writes
}

// judge checks one client's outcomes for a setting: every vector answered,
// no forbidden one ran, a transaction was writable again after an ask, and
// the victim data is unchanged.
func (f *fixture) judge(t *testing.T, vs []vector, runs map[string][]outcome, writes map[string]outcome, inTx bool, before string) {
	t.Helper()
	for _, v := range vs {
		os := runs[v.id]
		if len(os) == 0 {
			t.Errorf("%s: no outcome", v.id)
			continue
		}
		for i, o := range os {
			if o.ok && !v.mayRun {
				t.Errorf("%s run %d: the ask ran; it must fail (%s)", v.id, i+1, v.sql)
			}
		}
		if inTx && os[len(os)-1].ok {
			if w, ok := writes[v.id]; !ok || !w.ok {
				t.Errorf("%s: the client's transaction was not writable after the ask (%+v)", v.id, w)
			}
		}
	}
	if after := f.checksum(t); after != before {
		t.Fatalf("the victim data changed")
	}
}

func TestHostileMatrix(t *testing.T) {
	f := newFixture(t)
	f.scriptCorpus(corpus)
	host, port := proxyHostPort(f.proxy)
	before := f.checksum(t)
	asks := 0

	for _, st := range settings {
		vs := vectorsFor(st)
		env := []string{"PGPASSWORD=" + askPass, "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10"}
		if st.scsOff {
			env = append(env, "PGOPTIONS=-c standard_conforming_strings=off")
		}
		if st.encoding != "" {
			env = append(env, "PGCLIENTENCODING="+st.encoding)
		}

		for _, inTx := range []bool{false, true} {
			path := "psql-idle"
			if inTx {
				path = "psql-begin"
			}
			t.Run(path+"/"+st.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				var script strings.Builder
				for _, v := range vs {
					if inTx {
						script.WriteString("BEGIN;\n")
					}
					fmt.Fprintf(&script, "/* ask: %s */;\n\\echo %s :ERROR :SQLSTATE\n", question(v, path, st.name), v.id)
					if inTx {
						fmt.Fprintf(&script, "INSERT INTO scratch VALUES (1);\n\\echo %s-write :ERROR :SQLSTATE\nROLLBACK;\n", v.id)
					}
				}
				script.WriteString("SELECT 42;\n")
				out := runPsql(ctx, t, host, port, f.db, env, script.String())
				runs, writes := map[string][]outcome{}, map[string]outcome{}
				for _, l := range lines(out) {
					fs := strings.Fields(l)
					if len(fs) != 3 || !strings.HasPrefix(fs[0], "v") {
						continue
					}
					o := outcome{ok: fs[1] == "false", state: fs[2]}
					if id, ok := strings.CutSuffix(fs[0], "-write"); ok {
						writes[id] = o
					} else {
						runs[fs[0]] = append(runs[fs[0]], o)
					}
				}
				asks += len(vs)
				if !strings.HasSuffix(strings.TrimSpace(out), "42") {
					t.Errorf("session unusable at the end:\n%s", out)
				}
				f.judge(t, vs, runs, writes, inTx, before)
			})
		}

		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement,
			pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
			if mode == pgx.QueryExecModeSimpleProtocol && st.scsOff {
				continue // pgx refuses its simple protocol unless strings are standard and UTF8
			}
			path := "pgx-" + mode.String()
			t.Run(path+"/"+st.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", askUser, askPass, f.proxy, f.db))
				if err != nil {
					t.Fatal(err)
				}
				if st.scsOff {
					cfg.RuntimeParams["standard_conforming_strings"] = "off"
				}
				if st.encoding != "" {
					cfg.RuntimeParams["client_encoding"] = st.encoding
				}
				conn, err := pgx.ConnectConfig(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
				runs := map[string][]outcome{}
				for _, v := range vs {
					// Twice: the second run reuses the prepared ask statement
					// in the statement cache modes.
					q := "-- ask: " + question(v, path, st.name)
					for k := 0; k < 2; k++ {
						o := outcome{ok: true}
						rows, err := conn.Query(ctx, q, mode)
						if err == nil {
							for rows.Next() {
							}
							rows.Close()
							err = rows.Err()
						}
						var pe *pgconn.PgError
						switch {
						case errors.As(err, &pe):
							o = outcome{state: pe.Code}
						case err != nil:
							t.Fatalf("%s: %v", v.id, err)
						}
						runs[v.id] = append(runs[v.id], o)
						asks++
					}
				}
				var n int
				if err := conn.QueryRow(ctx, "SELECT 42").Scan(&n); err != nil || n != 42 {
					t.Fatalf("session unusable at the end: %v", err)
				}
				f.judge(t, vs, runs, nil, false, before)
			})
		}

		if st.encoding == "" {
			// pgjdbc requires client_encoding UTF8.
			for _, mode := range []string{"autocommit", "tx"} {
				t.Run("jdbc-prepared-"+mode+"/"+st.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
					defer cancel()
					classes := compileJava(ctx, t)
					url := fmt.Sprintf("jdbc:postgresql://%s:%s/%s?sslmode=disable&prepareThreshold=1", host, port, f.db)
					if st.scsOff {
						url += "&options=-c%20standard_conforming_strings%3Doff"
					}
					out := runClient(ctx, t, nil, questionsInput(vs, "jdbc-"+mode, st.name),
						clienttest.RequireBinary(t, "java"), "-cp", classes+":"+jdbcJar, "SafetyClient", url, askUser, askPass, mode)
					runs, writes := parseOutcomes(out)
					asks += 3 * len(vs)
					if !strings.Contains(out, "after 42") {
						t.Errorf("session unusable at the end:\n%s", out)
					}
					f.judge(t, vs, runs, writes, mode == "tx", before)
				})
			}
		}

		for _, mode := range []string{"binary", "prepare"} {
			t.Run("psycopg-"+mode+"/"+st.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				py := python(ctx, t)
				dsn := fmt.Sprintf("host=%s port=%s dbname=%s user=%s password=%s sslmode=disable", host, port, f.db, askUser, askPass)
				if st.scsOff {
					dsn += " options='-c standard_conforming_strings=off'"
				}
				args := []string{"testdata/safety_client.py", dsn, mode}
				if st.encoding != "" {
					args = append(args, st.encoding)
				}
				out := runClient(ctx, t, nil, questionsInput(vs, "psycopg-"+mode, st.name), py, args...)
				runs, writes := parseOutcomes(out)
				if mode == "prepare" {
					asks += 3 * len(vs)
				} else {
					asks += len(vs)
				}
				if !strings.Contains(out, "after 42") {
					t.Errorf("session unusable at the end:\n%s", out)
				}
				f.judge(t, vs, runs, writes, mode == "prepare", before)
			})
		}
	}
	t.Logf("hostile corpus: %d vectors; %d ask executions across paths × settings; victim checksum unchanged", len(corpus), asks)
}

const jdbcJar = "/usr/share/java/postgresql.jar"

// questionsInput is the client programs' stdin: "id<TAB>question" lines.
func questionsInput(vs []vector, path, setting string) string {
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "%s\t%s\n", v.id, question(v, path, setting))
	}
	return b.String()
}

func compileJava(ctx context.Context, t *testing.T) string {
	t.Helper()
	javac := clienttest.RequireBinary(t, "javac")
	if _, err := os.Stat(jdbcJar); err != nil {
		needs.Missing(t, "pgjdbc jar missing: %v", err)
	}
	classes := t.TempDir()
	if out, err := exec.CommandContext(ctx, javac, "-encoding", "UTF-8", "-d", classes, "-cp", jdbcJar, "testdata/SafetyClient.java").CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	return classes
}

func python(ctx context.Context, t *testing.T) string {
	t.Helper()
	py := "/usr/bin/python3" // Debian's psycopg package belongs to the system interpreter
	if _, err := os.Stat(py); err != nil {
		py = clienttest.RequireBinary(t, "python3")
	}
	if out, err := exec.CommandContext(ctx, py, "-c", "import psycopg").CombinedOutput(); err != nil {
		needs.Missing(t, "python module psycopg not installed: %s", out)
	}
	return py
}

func runPsql(ctx context.Context, t *testing.T, host, port, db string, env []string, script string) string {
	t.Helper()
	bin := clienttest.RequireBinary(t, "psql")
	return runClient(ctx, t, env, script, bin, "-X", "-A", "-t", "-q", "-h", host, "-p", port, "-U", askUser, "-d", db, "-f", "-")
}

// runClient runs a client program with stdin and returns its stdout; a
// failure shows stderr.
func runClient(ctx context.Context, t *testing.T, env []string, stdin string, bin string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}
