package askall_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/askall"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/router"
	"github.com/nlproxy/nlproxy/testkit/clienttest"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/needs"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// Substrings that tell the prompts apart (prompts/templates).
const ()

const (
	model     = "qwen2.5-coder:7b"
	alicePass = "alice-secret"
	authPass  = "auth-secret"
	secret    = "987654" // a salary alice may not read
	marchSQL  = "SELECT sum(total) AS total FROM orders WHERE placed_at >= DATE '2024-03-01' AND placed_at < DATE '2024-04-01'"
	euGoal    = "What was the total of EU shop orders in March 2024?"
	usGoal    = "What was the total of US shop orders in March 2024?"
	compare   = "Did the EU shop sell more in March 2024 than the US shop"
	// computed is the exact comparison over what alice may see: the US
	// shop's row-level security hides bob's 5000.
	computed = "step 1 (eu) = 600.25 is larger than step 2 (us) = 400, by 200.25"
	twoSteps = `{"steps": [{"database": "eu", "goal": "` + euGoal + `"}, {"database": "us", "goal": "` + usGoal + `"}], "combine": "larger"}`
)

type fixture struct {
	cluster *pgcluster.Cluster
	fake    *fakeollama.Server
	proxy   string
	alice   string // role name, unique per run
	auth    string // the authenticator role
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := &fixture{cluster: pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"})}
	f.alice = pgtest.UniqueName(t, "alice")
	auth := pgtest.UniqueName(t, "nlproxy_auth")
	f.auth = auth
	must := func(db, sql string) {
		t.Helper()
		if err := f.cluster.Exec(ctx, db, sql); err != nil {
			t.Fatalf("%s: %v", db, err)
		}
	}
	// The operator's setup, as docs/ask-all.md gives it.
	must("postgres", fmt.Sprintf(`CREATE ROLE %[1]s LOGIN NOINHERIT PASSWORD '%[2]s';
CREATE ROLE %[3]s LOGIN PASSWORD '%[4]s'; CREATE ROLE bob;
GRANT %[3]s TO %[1]s; GRANT bob TO %[1]s;`, auth, authPass, f.alice, alicePass))
	for _, db := range []string{"eu", "us", "gone"} {
		if err := f.cluster.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	must("eu", `CREATE TABLE orders (id int PRIMARY KEY, placed_at date NOT NULL, total numeric NOT NULL, note text);
COMMENT ON TABLE orders IS 'orders of the EU shop';
INSERT INTO orders VALUES (1, '2024-03-02', 100, NULL), (2, '2024-03-15', 200, 'gift'), (3, '2024-03-31', 300.25, NULL), (4, '2024-04-01', 999, NULL);
GRANT SELECT ON orders TO `+f.alice)
	must("us", `CREATE TABLE orders (id int PRIMARY KEY, placed_at date NOT NULL, total numeric NOT NULL, manager text NOT NULL);
COMMENT ON TABLE orders IS 'orders of the US shop';
INSERT INTO orders VALUES (1, '2024-03-03', 150, '`+f.alice+`'), (2, '2024-03-20', 250, '`+f.alice+`'), (3, '2024-03-21', 5000, 'bob');
ALTER TABLE orders ENABLE ROW LEVEL SECURITY;
CREATE POLICY managed ON orders USING (manager = current_user);
GRANT SELECT ON orders TO `+f.alice+`, bob;
CREATE TABLE payroll (name text, salary numeric);
INSERT INTO payroll VALUES ('carol', `+secret+`);
-- The authenticator itself may read payroll: a question must still get
-- alice's rights, not its.
GRANT SELECT ON payroll TO `+auth)
	must("gone", `CREATE TABLE shipments (id int, carrier text); GRANT SELECT ON shipments TO PUBLIC;`)

	cats := &catalog.Manager{Connect: func(ctx context.Context, database string) (*pgx.Conn, error) {
		return f.cluster.Connect(ctx, database)
	}}
	t.Cleanup(func() { cats.Close() })

	// Nothing listens here: the server behind "gone" is down for the
	// authenticator.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	connect := func(ctx context.Context, database string) (*pgconn.PgConn, error) {
		if database == "gone" {
			return pgconn.Connect(ctx, "postgres://"+auth+":"+authPass+"@"+dead+"/gone?sslmode=disable&connect_timeout=5")
		}
		return pgconn.Connect(ctx, f.cluster.URL(auth, authPass, database))
	}

	f.fake = fakeollama.New(t, fakeollama.Options{Models: []string{model}, Default: &fakeollama.Rule{Reply: "no JSON here"}})
	client, err := llm.New(llm.Config{
		Host:        f.fake.URL(),
		Models:      map[llm.Role]string{llm.RoleGenerator: model, llm.RoleSmall: model},
		CallTimeout: 10 * time.Second,
		MaxRetries:  -1,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	eng := &engine.Engine{LLM: client, Catalogs: cats, TrialTimeout: 5 * time.Second}
	multi := &askall.Asker{Engine: eng, LLM: client, Catalogs: cats, Connect: connect, Databases: []string{"eu", "us", "gone"}, TopK: 3}
	srv := &proxy.Server{
		Upstreams:  []proxy.Upstream{{Address: f.cluster.Addr(), TLS: proxy.UpstreamTLSDisable}},
		Translator: router.Translator{Engine: eng, Multi: multi, StatementTimeout: 10 * time.Second},
	}
	f.proxy = clienttest.ServeProxy(t, srv)
	return f
}

// script sets the model's answers: context switch (needs data), the plan,
// each goal's SQL (candidate and fixer), the return-type decision and the
// prose answer.
func (f *fixture) script(plan string, sqlByGoal map[string]string, returnsRows bool, answer string) {
	f.fake.SetRules(rules(plan, sqlByGoal, returnsRows, answer)...)
	f.fake.Reset()
}

func rules(plan string, sqlByGoal map[string]string, returnsRows bool, answer string) []fakeollama.Rule {
	rules := []fakeollama.Rule{
		{Name: "switch", PromptContains: []string{fakeollama.PromptSwitch}, Reply: `{"needs_data": true, "answer": ""}`},
		{Name: "plan", PromptContains: []string{fakeollama.PromptPlan}, Reply: plan},
		{Name: "return", PromptContains: []string{fakeollama.PromptReturn}, Reply: fmt.Sprintf(`{"answers": %t}`, returnsRows)},
		{Name: "answer", PromptContains: []string{fakeollama.PromptAnswer}, Reply: fmt.Sprintf(`{"answer": %q}`, answer)},
	}
	for goal, sql := range sqlByGoal {
		reply := "```sql\n" + sql + "\n```"
		rules = append(rules,
			fakeollama.Rule{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate, goal}, Reply: reply},
			fakeollama.Rule{Name: "fix", PromptContains: []string{fakeollama.PromptFixer, goal}, Reply: reply})
	}
	return rules
}

func (f *fixture) connect(t *testing.T) *clienttest.NoticeConn {
	t.Helper()
	return clienttest.ConnectNotices(t, fmt.Sprintf("postgres://%s:%s@%s/eu?sslmode=disable", f.alice, alicePass, f.proxy))
}

// rows runs sql and returns rows joined by ";", values by ",", NULL as ∅.
func rows(ctx context.Context, conn *pgx.Conn, sql string, mode pgx.QueryExecMode) (string, error) {
	r, err := conn.Query(ctx, sql, mode)
	if err != nil {
		return "", err
	}
	defer r.Close()
	var out []string
	for r.Next() {
		var vals []string
		for _, v := range r.RawValues() {
			if v == nil {
				vals = append(vals, "∅")
			} else {
				vals = append(vals, string(v))
			}
		}
		out = append(out, strings.Join(vals, ","))
	}
	return strings.Join(out, ";"), r.Err()
}

func (f *fixture) psql(ctx context.Context, t *testing.T, args ...string) (string, string) {
	t.Helper()
	bin := clienttest.RequireBinary(t, "psql")
	host, port, _ := net.SplitHostPort(f.proxy)
	cmd := exec.CommandContext(ctx, bin, append([]string{"-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", host, "-p", port, "-U", f.alice, "-d", "eu"}, args...)...)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+alicePass, "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("psql: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), stderr.String()
}

func contains(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

func TestAskAll(t *testing.T) {
	f := newFixture(t)

	t.Run("psql comparison", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		f.script(twoSteps, map[string]string{euGoal: marchSQL, usGoal: marchSQL}, false, "The EU shop sold more in March 2024.")
		out, stderr := f.psql(ctx, t, "-c", "/* ask(all): "+compare+", psql? */")
		contains(t, "psql output", out, "The EU shop sold more in March 2024.", "Computed: "+computed+".", "Not consulted: gone (it cannot be reached")
		contains(t, "psql notices", stderr, "NOTICE:  nlproxy: step 1, database eu: "+marchSQL, "NOTICE:  nlproxy: step 2, database us: "+marchSQL,
			"NOTICE:  nlproxy: computed: "+computed, "NOTICE:  nlproxy: database gone skipped: it cannot be reached")
	})

	t.Run("psql ask-sql(all) shows the plan", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		f.script(twoSteps, map[string]string{euGoal: marchSQL, usGoal: marchSQL}, false, "unused")
		out, _ := f.psql(ctx, t, "-F", "|", "-c", "-- ask-sql(all): "+compare+", plan?")
		want := strings.Join([]string{
			"1|eu|" + euGoal + "|" + marchSQL + "||",
			"2|us|" + usGoal + "|" + marchSQL + "||",
			"|gone|||skipped: it cannot be reached (see the proxy log)|",
		}, "\n")
		if out != want {
			t.Errorf("plan:\n%s\nwant:\n%s", out, want)
		}
		if f.fake.Hits("answer") != 0 {
			t.Error("ask-sql(all) composed an answer")
		}
	})

	t.Run("pgjdbc", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		javac, java := clienttest.RequireBinary(t, "javac"), clienttest.RequireBinary(t, "java")
		const jar = "/usr/share/java/postgresql.jar"
		if _, err := os.Stat(jar); err != nil {
			needs.Missing(t, "pgjdbc jar missing: %v", err)
		}
		const listGoal = "List the ids and notes of EU shop orders"
		const listSQL = "SELECT id, note FROM orders ORDER BY id"
		// The prepared question gets a one-step plan whose rows are the answer.
		f.fake.SetRules(append([]fakeollama.Rule{{Name: "plan-list", PromptContains: []string{fakeollama.PromptPlan, "ids and notes"},
			Reply: `{"steps": [{"database": "eu", "goal": "` + listGoal + `"}], "combine": "none"}`}},
			rules(twoSteps, map[string]string{euGoal: marchSQL, usGoal: marchSQL, listGoal: listSQL}, true, "The EU shop sold more.")...)...)
		f.fake.Reset()
		classes := t.TempDir()
		if out, err := exec.CommandContext(ctx, javac, "-encoding", "UTF-8", "-d", classes, "-cp", jar, "testdata/AskAllClient.java").CombinedOutput(); err != nil {
			t.Fatalf("javac: %v\n%s", err, out)
		}
		host, port, _ := net.SplitHostPort(f.proxy)
		cmd := exec.CommandContext(ctx, java, "-cp", classes+":"+jar, "AskAllClient", fmt.Sprintf("jdbc:postgresql://%s:%s/eu?sslmode=disable", host, port),
			f.alice, alicePass, compare+", jdbc?", "ids and notes of EU orders, jdbc")
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("java: %v\n%s\n%s", err, stdout.String(), stderr.String())
		}
		out := stdout.String()
		contains(t, "jdbc output", out,
			"statement: cols=answer rows=The EU shop sold more.||Computed: "+computed+".",
			"statement notice: nlproxy: step 2, database us: "+marchSQL,
			"prepared: cols=id,note rows=1,null;2,gift;3,null;4,null",
			"prepared notice: nlproxy: step 1, database eu: "+listSQL,
			"after: 42")
	})

	t.Run("pgx: a table alice may not read gives a partial answer, never its data", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const goal = "What is the highest salary in the US payroll?"
		f.script(`{"steps": [{"database": "us", "goal": "`+goal+`"}, {"database": "eu", "goal": "`+euGoal+`"}], "combine": "none"}`,
			map[string]string{goal: "SELECT max(salary) FROM payroll", euGoal: marchSQL}, false, "The payroll could not be read; EU March sales were 600.25.")
		c := f.connect(t)
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeDescribeExec} {
			got, err := rows(ctx, c.Conn, fmt.Sprintf("ASK(all) highest payroll salary and EU March sales (%v)", mode), mode)
			if err != nil {
				t.Fatalf("%v: %v", mode, err)
			}
			contains(t, "answer", got, "Partial answer; not answered: step 1 (us)", "permission denied for table payroll")
			if strings.Contains(got, secret) || strings.Contains(strings.Join(c.Notices(), "\n"), secret) {
				t.Fatalf("alice was shown the salary: %s", got)
			}
		}
		contains(t, "notices", strings.Join(c.Notices(), "\n"), "step 1, database us: no SQL: ", "permission denied for table payroll (SQLSTATE 42501)", "step 2, database eu: "+marchSQL)
		// The step fails as the permission problem it is (42501), not as
		// "no usable SQL" (42N01, which would be printed after it), and says
		// so once.
		if notices := strings.Join(c.Notices(), "\n"); strings.Contains(notices, "(SQLSTATE 42501) (SQLSTATE") {
			t.Errorf("the step's error is not one 42501:\n%s", notices)
		}
		for _, r := range f.fake.RequestsTo(fakeollama.RouteChat) {
			for _, m := range r.Messages {
				if strings.Contains(m.Content, secret) {
					t.Fatal("the model was shown the salary")
				}
			}
		}
		assertUsable(ctx, t, c)
	})

	t.Run("pgx: a write in the plan is refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const goal = "Delete every US shop order"
		f.script(`{"steps": [{"database": "us", "goal": "`+goal+`"}], "combine": "none"}`,
			map[string]string{goal: "DELETE FROM orders"}, true, "Nothing was deleted.")
		c := f.connect(t)
		got, err := rows(ctx, c.Conn, "/* ask(all): delete all US orders */", pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		contains(t, "answer", got, "Partial answer; not answered: step 1 (us)", "SQLSTATE 42501")
		admin, err := f.cluster.Connect(ctx, "us")
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(ctx)
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil || n != 3 {
			t.Fatalf("orders left: %d, %v", n, err)
		}
		assertUsable(ctx, t, c)
	})

	t.Run("pgx: inside the client's transaction", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		f.script(twoSteps, map[string]string{euGoal: marchSQL, usGoal: marchSQL}, false, "The EU shop sold more.")
		c := f.connect(t)
		if _, err := c.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		got, err := rows(ctx, c.Conn, "-- ask(all): "+compare+", in a transaction?", pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		contains(t, "answer", got, "Computed: "+computed)
		if s := c.PgConn().TxStatus(); s != 'T' {
			t.Fatalf("transaction status %c after the ask, want T", s)
		}
		if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("pgx: REVOKE CONNECT keeps ask(all) off the database until a GRANT", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		const goal = "List the ids of US shop orders"
		usOnly := func() {
			f.script(`{"steps": [{"database": "us", "goal": "`+goal+`"}], "combine": "none"}`,
				map[string]string{goal: "SELECT id FROM orders ORDER BY id"}, true, "No US orders could be read.")
		}
		c := f.connect(t)
		usOnly()
		if got, err := rows(ctx, c.Conn, "-- ask(all): ids of US orders, before", pgx.QueryExecModeSimpleProtocol); err != nil || got != "1;2" {
			t.Fatalf("before the REVOKE: %q, %v", got, err)
		}
		// The authenticator keeps its own CONNECT, as the operator gives it.
		if err := f.cluster.Exec(ctx, "postgres", "REVOKE CONNECT ON DATABASE us FROM PUBLIC; GRANT CONNECT ON DATABASE us TO "+f.auth); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := f.cluster.Exec(context.Background(), "postgres", "GRANT CONNECT ON DATABASE us TO PUBLIC; REVOKE CONNECT ON DATABASE us FROM "+f.alice); err != nil {
				t.Error(err)
			}
		})
		// Postgres itself now refuses alice on us.
		if conn, err := pgx.Connect(ctx, f.cluster.URL(f.alice, alicePass, "us")); err == nil {
			conn.Close(ctx)
			t.Fatal("alice could still connect to us directly")
		}
		usOnly()
		got, err := rows(ctx, c.Conn, "-- ask(all): ids of US orders, revoked", pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		if got == "1;2" || strings.Contains(got, "5000") {
			t.Fatalf("us rows after the REVOKE: %q", got)
		}
		contains(t, "answer", got, "Not consulted: ", "us (role "+f.alice+" has no CONNECT privilege on it)")
		contains(t, "notices", strings.Join(c.Notices(), "\n"), "nlproxy: database us skipped: role "+f.alice+" has no CONNECT privilege on it")
		assertUsable(ctx, t, c)

		if err := f.cluster.Exec(ctx, "postgres", "GRANT CONNECT ON DATABASE us TO "+f.alice); err != nil {
			t.Fatal(err)
		}
		usOnly()
		if got, err := rows(ctx, c.Conn, "-- ask(all): ids of US orders, granted", pgx.QueryExecModeSimpleProtocol); err != nil || got != "1;2" {
			t.Fatalf("after the GRANT: %q, %v", got, err)
		}
	})
	t.Run("pgx: a question over the limit fails with 54000 before the model, every form", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		f.script(twoSteps, map[string]string{euGoal: marchSQL, usGoal: marchSQL}, false, "unused")
		c := f.connect(t)
		// Just over the bound: the engine's check refuses it. Far over
		// (over the bound and the marker's slack): the proxy refuses it
		// while reading it, never holding it whole.
		just := strings.Repeat("x", 16<<10+1)
		long := strings.Repeat("how many orders ", 2<<10) // 32 KiB, over the 16 KiB default
		huge := strings.Repeat("x", 60<<20)               // within the 64 MiB message limit
		for _, tc := range []struct {
			name, sql string
			mode      pgx.QueryExecMode
		}{
			{"just over, simple", "-- ask: " + just, pgx.QueryExecModeSimpleProtocol},
			{"just over, extended", "-- ask(all): " + just, pgx.QueryExecModeDescribeExec},
			{"ask, simple", "-- ask: " + long, pgx.QueryExecModeSimpleProtocol},
			{"ask-sql, extended", "/* ask-sql: " + long + " */", pgx.QueryExecModeDescribeExec},
			{"ask(all), simple", "ASK(all) " + long, pgx.QueryExecModeSimpleProtocol},
			{"ask(all), extended", "-- ask(all): " + long, pgx.QueryExecModeDescribeExec},
			{"optimize, simple", "-- optimize: SELECT 1 AS " + strings.Repeat("a", 20<<10), pgx.QueryExecModeSimpleProtocol},
			{"60 MB, simple", "-- ask: " + huge, pgx.QueryExecModeSimpleProtocol},
		} {
			_, err := rows(ctx, c.Conn, tc.sql, tc.mode)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "54000" || !strings.Contains(pe.Hint, "--max-question-bytes") {
				t.Fatalf("%s: err %v, want 54000 naming --max-question-bytes", tc.name, err)
			}
			assertUsable(ctx, t, c)
		}
		if n := len(f.fake.RequestsTo(fakeollama.RouteChat)); n != 0 {
			t.Fatalf("the model was asked %d times", n)
		}
		// Long ordinary SQL that starts as a marker might is not refused.
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeDescribeExec} {
			if got, err := rows(ctx, c.Conn, "/* "+long+" */ SELECT '7'::text", mode); err != nil || got != "7" {
				t.Fatalf("%v: long SQL with a comment: %q, %v", mode, got, err)
			}
		}
		// In a transaction the refusal takes its place in the stream as any
		// failed statement would.
		if _, err := c.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		if _, err := rows(ctx, c.Conn, "-- ask: "+long, pgx.QueryExecModeDescribeExec); err == nil {
			t.Fatal("the long question succeeded in a transaction")
		}
		if s := c.PgConn().TxStatus(); s != 'E' {
			t.Fatalf("transaction status %c after the refusal, want E", s)
		}
		if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
		assertUsable(ctx, t, c)
	})
}

func assertUsable(ctx context.Context, t *testing.T, c *clienttest.NoticeConn) {
	t.Helper()
	var n int
	if err := c.QueryRow(ctx, "SELECT 40 + 2", pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil || n != 42 {
		t.Fatalf("session unusable after the ask: %d, %v", n, err)
	}
}
