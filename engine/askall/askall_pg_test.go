package askall

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/prompts"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// Substrings that tell the prompts apart (prompts/templates).
const ()

const (
	model    = "qwen2.5-coder:7b"
	authPass = "auth-secret"
	// secretSalary is a value alice may not read; it must reach neither
	// the model nor the answer.
	secretSalary = "987654"
	marchSQL     = "SELECT sum(total) AS total FROM orders WHERE placed_at >= DATE '2024-03-01' AND placed_at < DATE '2024-04-01'"
)

// world is a cluster with databases eu (alice's own), us (row-level
// security, a table alice may not read), ghost (no authenticator), gone
// (its authenticator's server is down) and a second cluster's far (where
// alice does not exist); one authenticator role, NOINHERIT, granted alice.
type world struct {
	main, other *pgcluster.Cluster
	fake        *fakeollama.Server
	asker       *Asker
	alice       *pgconn.PgConn // alice's own session on eu
}

// admin answers sql as the superuser.
func (w *world) admin(t *testing.T, db, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := w.main.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var s string
	if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// do runs sql as the superuser.
func (w *world) do(t *testing.T, db, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.main.Exec(ctx, db, sql); err != nil {
		t.Fatal(err)
	}
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := &world{main: pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"}), other: pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"})}
	for _, c := range []*pgcluster.Cluster{w.main, w.other} {
		if err := c.Exec(ctx, "postgres", "CREATE ROLE nlproxy_auth LOGIN NOINHERIT PASSWORD '"+authPass+"'"); err != nil {
			t.Fatal(err)
		}
	}
	must := func(c *pgcluster.Cluster, db, sql string) {
		t.Helper()
		if err := c.Exec(ctx, db, sql); err != nil {
			t.Fatalf("%s: %v", db, err)
		}
	}
	must(w.main, "postgres", "CREATE ROLE alice LOGIN PASSWORD 'alice-pw'; CREATE ROLE bob LOGIN; GRANT alice TO nlproxy_auth; GRANT bob TO nlproxy_auth")
	for _, db := range []string{"eu", "us", "ghost", "gone"} {
		if err := w.main.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.other.CreateDatabase(ctx, "far"); err != nil {
		t.Fatal(err)
	}
	must(w.main, "eu", `CREATE TABLE orders (id int PRIMARY KEY, placed_at date NOT NULL, total numeric NOT NULL);
COMMENT ON TABLE orders IS 'orders of the EU shop';
INSERT INTO orders VALUES (1, '2024-03-02', 100), (2, '2024-03-15', 200), (3, '2024-03-31', 300.25), (4, '2024-04-01', 999);
GRANT SELECT ON orders TO alice;`)
	must(w.main, "us", `CREATE TABLE orders (id int PRIMARY KEY, placed_at date NOT NULL, total numeric NOT NULL, manager text NOT NULL);
COMMENT ON TABLE orders IS 'orders of the US shop';
INSERT INTO orders VALUES (1, '2024-03-03', 150, 'alice'), (2, '2024-03-20', 250, 'alice'), (3, '2024-03-21', 5000, 'bob');
ALTER TABLE orders ENABLE ROW LEVEL SECURITY;
CREATE POLICY managed ON orders USING (manager = current_user);
GRANT SELECT ON orders TO alice, bob;
CREATE TABLE payroll (name text, salary numeric);
INSERT INTO payroll VALUES ('carol', `+secretSalary+`);
GRANT SELECT ON payroll TO nlproxy_auth; -- its own right, never the asker's`)
	must(w.main, "ghost", `CREATE TABLE ghosts (id int, name text); GRANT SELECT ON ghosts TO alice;`)
	must(w.main, "gone", `CREATE TABLE shipments (id int, orders int); GRANT SELECT ON shipments TO PUBLIC;`)
	must(w.other, "far", `CREATE TABLE orders_archive (id int, total numeric); GRANT SELECT ON orders_archive TO PUBLIC;`)

	cats := &catalog.Manager{Connect: func(ctx context.Context, database string) (*pgx.Conn, error) {
		if database == "far" {
			return w.other.Connect(ctx, database)
		}
		return w.main.Connect(ctx, database)
	}}
	t.Cleanup(func() { cats.Close() })

	// A port nothing listens on: the authenticator's server for "gone" is down.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := ln.Addr().String()
	ln.Close()
	connect := func(ctx context.Context, database string) (*pgconn.PgConn, error) {
		var url string
		switch database {
		case "ghost":
			return nil, fmt.Errorf("%w: %s", ErrNoAuthenticator, database)
		case "gone":
			url = "postgres://nlproxy_auth:" + authPass + "@" + deadAddr + "/gone?sslmode=disable&connect_timeout=5"
		case "far":
			url = w.other.URL("nlproxy_auth", authPass, "far")
		default:
			url = w.main.URL("nlproxy_auth", authPass, database)
		}
		return pgconn.Connect(ctx, url)
	}

	w.fake = fakeollama.New(t, fakeollama.Options{Models: []string{model}, Default: &fakeollama.Rule{Reply: "no JSON here"}})
	client, err := llm.New(llm.Config{
		Host:        w.fake.URL(),
		Models:      map[llm.Role]string{llm.RoleGenerator: model, llm.RoleSmall: model},
		CallTimeout: 10 * time.Second,
		MaxRetries:  -1,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	eng := &engine.Engine{LLM: client, Catalogs: cats, TrialTimeout: 5 * time.Second}
	w.asker = &Asker{
		Engine: eng, LLM: client, Catalogs: cats, Connect: connect,
		Databases: []string{"eu", "us", "ghost", "gone", "far"},
		Glossary:  []descindex.Doc{{Kind: descindex.KindGlossary, Term: "ARR", Text: "annual recurring revenue: the yearly value of active subscriptions"}},
		TopK:      5,
	}
	w.alice, err = pgconn.Connect(ctx, w.main.URL("alice", "alice-pw", "eu"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.alice.Close(context.Background()) })
	return w
}

// script sets the fake model's answers for one question: the context
// switch, the plan, each goal's SQL (also given to the fixer), the
// return-type decision and the prose answer.
func (w *world) script(needsData bool, plan string, sqlByGoal map[string]string, returnsRows bool, answer string) {
	rules := []fakeollama.Rule{
		{Name: "switch", PromptContains: []string{fakeollama.PromptSwitch}, Reply: fmt.Sprintf(`{"needs_data": %t, "answer": "ARR is annual recurring revenue."}`, needsData)},
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
	w.fake.SetRules(rules...)
	w.fake.Reset()
}

func (w *world) ask(t *testing.T, q string, planOnly bool) (*Answer, error) {
	t.Helper()
	return w.askOn(t, w.alice, q, planOnly)
}

// askOn asks q from session conn on eu.
func (w *world) askOn(t *testing.T, conn *pgconn.PgConn, q string, planOnly bool) (*Answer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return w.asker.Ask(ctx, Request{Question: q, Database: "eu", User: "alice", TxStatus: pg.TxIdle,
		Exec: engine.ConnExecutor{Conn: conn}, PlanOnly: planOnly})
}

// aliceSession is a new session of alice's on eu, closed when t ends.
func (w *world) aliceSession(t *testing.T) *pgconn.PgConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, w.main.URL("alice", "alice-pw", "eu"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// exec runs sql on conn and fails t on an error.
func exec(t *testing.T, conn *pgconn.PgConn, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if last := res[len(res)-1]; len(last.Rows) > 0 && len(last.Rows[0]) > 0 {
		return string(last.Rows[0][0])
	}
	return ""
}

func skipped(ans *Answer) map[string]string {
	out := map[string]string{}
	for _, s := range ans.Skipped {
		out[s.Database] = s.Reason
	}
	return out
}

// noPrompt fails when any request to the model contained s.
func (w *world) noPrompt(t *testing.T, s string) {
	t.Helper()
	for _, r := range w.fake.RequestsTo(fakeollama.RouteChat) {
		for _, m := range r.Messages {
			if strings.Contains(m.Content, s) {
				t.Fatalf("the model was shown %q", s)
			}
		}
	}
}

func TestAskAcrossDatabases(t *testing.T) {
	w := newWorld(t)
	const (
		euGoal = "What was the total of EU shop orders in March 2024?"
		usGoal = "What was the total of US shop orders in March 2024?"
	)
	twoSteps := `{"steps": [{"database": "eu", "goal": "` + euGoal + `"}, {"database": "us", "goal": "` + usGoal + `"}], "combine": "larger"}`

	t.Run("comparison over two databases with the asker's row security", func(t *testing.T) {
		w.script(true, twoSteps, map[string]string{euGoal: marchSQL, usGoal: marchSQL}, false, "The EU shop sold more in March 2024.")
		ans, err := w.ask(t, "Did the EU shop sell more in March 2024 than the US shop?", false)
		if err != nil {
			t.Fatal(err)
		}
		if ans.Kind != KindText || ans.Role != "alice" || len(ans.Steps) != 2 {
			t.Fatalf("answer %+v", ans)
		}
		for _, st := range ans.Steps {
			if st.Err != nil || st.SQL != marchSQL {
				t.Fatalf("step %s: %q %v", st.Database, st.SQL, st.Err)
			}
		}
		// Alice sees 150 + 250 of the US shop's March (bob's 5000 is
		// hidden by the policy); the EU shop's March is 600.25.
		want := "step 1 (eu) = 600.25 is larger than step 2 (us) = 400, by 200.25"
		if len(ans.Computed) != 1 || ans.Computed[0] != want {
			t.Fatalf("computed %q, want %q", ans.Computed, want)
		}
		if !strings.Contains(ans.Text, "The EU shop sold more") || !strings.Contains(ans.Text, "Computed: "+want) {
			t.Errorf("text %q", ans.Text)
		}
		sk := skipped(ans)
		if !strings.Contains(sk["ghost"], "no authenticator") || !strings.Contains(sk["gone"], "cannot be reached") ||
			!strings.Contains(sk["far"], "role alice does not exist there") || len(sk) != 3 {
			t.Errorf("skipped %v", sk)
		}
		notices := strings.Join(ans.Notices(), "\n")
		for _, s := range []string{"step 1, database eu: " + marchSQL, "step 2, database us: " + marchSQL, "database ghost skipped", "database gone skipped", "database far skipped", "computed: " + want} {
			if !strings.Contains(notices, s) {
				t.Errorf("notices lack %q:\n%s", s, notices)
			}
		}
		if !strings.Contains(ans.Text, "Not consulted: ") {
			t.Errorf("skipped databases not said in the answer: %q", ans.Text)
		}
		// Nothing the plan saw names a table alice cannot read.
		w.noPrompt(t, "payroll")
		// Every call carries its step's output cap, the planner's own
		// (context switch, plan, answer) included, not the client's default.
		for _, r := range w.fake.RequestsTo(fakeollama.RouteChat) {
			if n, _ := r.Options["num_predict"].(float64); n <= 0 || n > float64(prompts.OutputCap("candidate")) {
				t.Errorf("a call answered by rule %q went out with num_predict %v", r.Rule, r.Options["num_predict"])
			}
		}
	})

	t.Run("a table the asker may not read is a failed step, never data", func(t *testing.T) {
		const goal = "What is the highest salary in the US payroll?"
		w.script(true, `{"steps": [{"database": "us", "goal": "`+goal+`"}], "combine": "none"}`,
			map[string]string{goal: "SELECT max(salary) FROM payroll"}, true, "The salary could not be read.")
		ans, err := w.ask(t, "highest salary in payroll", false)
		if err != nil {
			t.Fatal(err)
		}
		if ans.Kind != KindText || len(ans.Steps) != 1 || ans.Steps[0].Err == nil {
			t.Fatalf("answer %+v", ans)
		}
		if msg := ErrText(ans.Steps[0].Err); !strings.Contains(msg, "permission denied for table payroll") {
			t.Errorf("step error %q", msg)
		}
		if !strings.Contains(ans.Text, "Partial answer; not answered: step 1 (us)") || strings.Contains(ans.Text, secretSalary) {
			t.Errorf("text %q", ans.Text)
		}
		w.noPrompt(t, secretSalary)
	})

	t.Run("a write in the plan is refused and changes nothing", func(t *testing.T) {
		const goal = "Delete every EU order"
		before := w.admin(t, "eu", "SELECT count(*)::text FROM orders")
		w.script(true, `{"steps": [{"database": "eu", "goal": "`+goal+`"}], "combine": "none"}`,
			map[string]string{goal: "DELETE FROM orders"}, true, "Nothing was deleted.")
		ans, err := w.ask(t, "delete all EU orders", false)
		if err != nil {
			t.Fatal(err)
		}
		var ee *pg.Error
		if len(ans.Steps) != 1 || !errors.As(ans.Steps[0].Err, &ee) || ee.Code != pg.CodeInsufficientPrivilege {
			t.Fatalf("steps %+v", ans.Steps)
		}
		if after := w.admin(t, "eu", "SELECT count(*)::text FROM orders"); after != before {
			t.Fatalf("orders %s → %s", before, after)
		}
	})

	t.Run("one step that answers the question returns its rows", func(t *testing.T) {
		const goal = "List the ids of US shop orders"
		w.script(true, `{"steps": [{"database": "us", "goal": "`+goal+`"}], "combine": "none"}`,
			map[string]string{goal: "SELECT id FROM orders ORDER BY id"}, true, "unused")
		ans, err := w.ask(t, "ids of US orders", false)
		if err != nil {
			t.Fatal(err)
		}
		if ans.Kind != KindRows || ans.Rows == nil {
			t.Fatalf("answer %+v", ans)
		}
		var ids []string
		for _, r := range ans.Rows.Values {
			ids = append(ids, *r[0])
		}
		if got := strings.Join(ids, ","); got != "1,2" { // row-level security: alice's orders only
			t.Errorf("rows %q, want 1,2", got)
		}
		if w.fake.Hits("answer") != 0 {
			t.Error("the prose answer was generated for a rows answer")
		}
	})

	t.Run("plan only", func(t *testing.T) {
		w.script(true, twoSteps, map[string]string{euGoal: marchSQL, usGoal: marchSQL}, false, "unused")
		ans, err := w.ask(t, "Did the EU shop sell more in March 2024 than the US shop, plan?", true)
		if err != nil {
			t.Fatal(err)
		}
		if ans.Kind != KindPlan || len(ans.Steps) != 2 || ans.Steps[1].SQL != marchSQL || ans.Steps[1].Rows != nil {
			t.Fatalf("answer %+v", ans)
		}
		if w.fake.Hits("switch") != 0 || w.fake.Hits("answer") != 0 {
			t.Error("plan only ran the context switch or the answer")
		}
	})

	t.Run("a question that needs no data is answered from the glossary", func(t *testing.T) {
		w.script(false, twoSteps, nil, false, "unused")
		ans, err := w.ask(t, "What does ARR mean?", false)
		if err != nil {
			t.Fatal(err)
		}
		if ans.Kind != KindText || ans.Text != "ARR is annual recurring revenue." || len(ans.Steps) != 0 {
			t.Fatalf("answer %+v", ans)
		}
		if w.fake.Hits("plan") != 0 {
			t.Error("the databases were consulted")
		}
	})

	t.Run("a failing model server is 58000, a cancelled ask 57014", func(t *testing.T) {
		w.fake.SetRules(fakeollama.Rule{Name: "down", PromptContains: []string{fakeollama.PromptSwitch}, Status: 500, Error: "overloaded"})
		_, err := w.ask(t, "anything at all", false)
		var ee *pg.Error
		if !errors.As(err, &ee) || ee.Code != pg.CodeSystemError {
			t.Fatalf("err %v, want 58000", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = w.asker.Ask(ctx, Request{Question: "q", Database: "eu", TxStatus: pg.TxIdle, Exec: engine.ConnExecutor{Conn: w.alice}})
		if !errors.As(err, &ee) || ee.Code != pg.CodeQueryCanceled {
			t.Fatalf("err %v, want 57014", err)
		}
	})

	t.Run("perimeter", func(t *testing.T) { testPerimeter(t, w) })

	t.Run("without a glossary entry it abstains", func(t *testing.T) {
		w.script(false, twoSteps, nil, false, "unused")
		ans, err := w.ask(t, "Who painted the Mona Lisa?", false)
		if err != nil {
			t.Fatal(err)
		}
		if ans.Kind != KindText || !strings.Contains(ans.Text, "does not answer it from the model's own knowledge") {
			t.Fatalf("answer %+v", ans)
		}
	})
}

// testPerimeter: another database is asked only where the asking session's
// login role could open a session itself, and whose role is taken on is
// read so that the session's temp objects cannot change it.
func testPerimeter(t *testing.T, w *world) {
	const goal = "List the ids of US shop orders"
	usOnly := func() {
		w.script(true, `{"steps": [{"database": "us", "goal": "`+goal+`"}], "combine": "none"}`,
			map[string]string{goal: "SELECT id FROM orders ORDER BY id"}, true, "No US orders could be read.")
	}
	ids := func(t *testing.T, ans *Answer) string {
		t.Helper()
		if ans.Kind != KindRows || ans.Rows == nil {
			t.Fatalf("answer %+v", ans)
		}
		var out []string
		for _, r := range ans.Rows.Values {
			out = append(out, *r[0])
		}
		return strings.Join(out, ",")
	}
	// notAsked checks that us was skipped for want and that no step ran there.
	notAsked := func(t *testing.T, ans *Answer, err error, want string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if r := skipped(ans)["us"]; !strings.Contains(r, want) {
			t.Fatalf("us skipped for %q, want %q (skipped %v)", r, want, skipped(ans))
		}
		for _, st := range ans.Steps {
			if st.Database == "us" {
				t.Fatalf("a step ran on us: %+v", st)
			}
		}
		if !strings.Contains(strings.Join(ans.Notices(), "\n"), "database us skipped: "+want) {
			t.Errorf("notices do not say why us was skipped: %q", ans.Notices())
		}
		w.noPrompt(t, "US shop")
	}

	t.Run("REVOKE CONNECT keeps the asker out; a GRANT lets the next ask in", func(t *testing.T) {
		usOnly()
		ans, err := w.ask(t, "ids of US orders", false)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(t, ans); got != "1,2" {
			t.Fatalf("before the REVOKE: rows %q", got)
		}
		w.do(t, "postgres", "REVOKE CONNECT ON DATABASE us FROM PUBLIC")
		t.Cleanup(func() {
			w.do(t, "postgres", "GRANT CONNECT ON DATABASE us TO PUBLIC; REVOKE CONNECT ON DATABASE us FROM alice")
		})
		// The authenticator may still connect: it is the asker's right
		// that is missing.
		w.do(t, "postgres", "GRANT CONNECT ON DATABASE us TO nlproxy_auth")
		usOnly()
		ans, err = w.ask(t, "ids of US orders", false)
		notAsked(t, ans, err, "role alice has no CONNECT privilege on it")

		w.do(t, "postgres", "GRANT CONNECT ON DATABASE us TO alice")
		usOnly()
		ans, err = w.ask(t, "ids of US orders", false)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(t, ans); got != "1,2" {
			t.Fatalf("after the GRANT: rows %q", got)
		}
	})

	t.Run("a login role made NOLOGIN is kept out", func(t *testing.T) {
		w.do(t, "postgres", "ALTER ROLE alice NOLOGIN")
		t.Cleanup(func() { w.do(t, "postgres", "ALTER ROLE alice LOGIN") })
		usOnly()
		ans, err := w.ask(t, "ids of US orders", false) // her session outlives the change
		notAsked(t, ans, err, "role alice may not log in (NOLOGIN)")
	})

	t.Run("a role at its connection limit is kept out", func(t *testing.T) {
		// alice's own session is one backend: a second would pass the limit.
		w.do(t, "postgres", "ALTER ROLE alice CONNECTION LIMIT 1")
		t.Cleanup(func() { w.do(t, "postgres", "ALTER ROLE alice CONNECTION LIMIT -1") })
		usOnly()
		ans, err := w.ask(t, "ids of US orders", false)
		notAsked(t, ans, err, "role alice is at its connection limit (1)")
	})

	t.Run("after SET ROLE the login role's CONNECT decides, as for a direct session", func(t *testing.T) {
		readers := fmt.Sprintf("us_readers_%d", time.Now().UnixNano())
		// alice may take on readers but does not inherit its rights (set
		// before the GRANT, so that the grant inherits nothing on any
		// version of Postgres).
		w.do(t, "postgres", "ALTER ROLE alice NOINHERIT")
		w.do(t, "postgres", fmt.Sprintf("CREATE ROLE %[1]s NOLOGIN; GRANT %[1]s TO alice; GRANT %[1]s TO nlproxy_auth", readers))
		t.Cleanup(func() { w.do(t, "postgres", fmt.Sprintf("REVOKE %s FROM alice; ALTER ROLE alice INHERIT", readers)) })
		w.do(t, "us", fmt.Sprintf("GRANT SELECT ON orders TO %s", readers))
		c := w.aliceSession(t)
		exec(t, c, "SET ROLE "+readers)
		// A NOLOGIN role taken on by SET ROLE: alice logged in and may
		// connect to us, so us is asked, as readers (the policy shows it
		// no rows: none is managed by it).
		usOnly()
		ans, err := w.askOn(t, c, "ids of US orders", false)
		if err != nil {
			t.Fatal(err)
		}
		if ans.Role != readers || ids(t, ans) != "" {
			t.Fatalf("role %q, rows %q", ans.Role, ids(t, ans))
		}
		// CONNECT for the role taken on does not stand in for the login role's.
		w.do(t, "postgres", fmt.Sprintf("REVOKE CONNECT ON DATABASE us FROM PUBLIC; GRANT CONNECT ON DATABASE us TO nlproxy_auth, %s", readers))
		t.Cleanup(func() { w.do(t, "postgres", "GRANT CONNECT ON DATABASE us TO PUBLIC") })
		// readers may read nothing on eu either: no database is left.
		usOnly()
		_, err = w.askOn(t, c, "ids of US orders", false)
		var nt *NoTargetError
		if !errors.As(err, &nt) || !strings.Contains(nt.Error(), "us: role alice has no CONNECT privilege on it") {
			t.Fatalf("err %v, want no database left, us for want of CONNECT", err)
		}
		w.noPrompt(t, "US shop")
	})

	t.Run("a pg_temp.text with a cast from name does not change the role taken on", func(t *testing.T) {
		c := w.aliceSession(t)
		// The vector: for types Postgres searches pg_temp first, so
		// current_user::text on this session gives bob.
		exec(t, c, `CREATE TYPE pg_temp.text AS ENUM ('bob');
CREATE FUNCTION pg_temp.as_bob(pg_catalog.name) RETURNS pg_temp.text LANGUAGE sql AS $$ SELECT 'bob'::pg_temp.text $$;
CREATE CAST (pg_catalog.name AS pg_temp.text) WITH FUNCTION pg_temp.as_bob(pg_catalog.name)`)
		if got := exec(t, c, "SELECT current_user::text"); got != "bob" {
			t.Fatalf("the vector did not take: current_user::text is %q", got)
		}
		usOnly()
		ans, err := w.askOn(t, c, "ids of US orders", false)
		if err != nil {
			t.Fatal(err)
		}
		// As bob the policy would show order 3.
		if got := ids(t, ans); ans.Role != "alice" || got != "1,2" {
			t.Fatalf("role %q, rows %q: want alice's 1,2", ans.Role, got)
		}
	})
}
