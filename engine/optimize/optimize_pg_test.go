package optimize_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/engine/optimize"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

const model = "qwen2.5-coder:7b"

// Substrings that tell the optimizer's two prompts apart.
const (
	instructionPrompt = "decide the one change"
	rewritePrompt     = "You rewrite a query so that it runs faster"
)

// Customers 291..300 have no orders; orders.customer_id has no index, so the
// correlated count scans orders once per customer.
const fixtureDDL = `
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, segment text);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL REFERENCES customers, amount numeric NOT NULL);
CREATE TABLE secrets (id int PRIMARY KEY, note text);
INSERT INTO customers SELECT g, 'customer ' || g, CASE WHEN g % 3 = 0 THEN 'SMB' END FROM generate_series(1, 300) g;
INSERT INTO orders SELECT g, 1 + g % 290, g % 97 FROM generate_series(1, 6000) g;
ANALYZE;
`

const original = "SELECT c.id, c.name, (SELECT count(*) FROM orders o WHERE o.customer_id = c.id) AS n FROM customers c ORDER BY c.id"

// good is the known faster equivalent rewrite.
const good = "SELECT c.id, c.name, count(o.id) AS n FROM customers c LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.id, c.name ORDER BY c.id"

type fixture struct {
	conn *pgx.Conn
	exec engine.ConnExecutor
	fake *fakeollama.Server
	llm  llm.Client
	opts guard.Options
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := pgtest.New(t, pgcluster.Options{})
	dbName := fmt.Sprintf("opt_%d", time.Now().UnixNano())
	if err := cl.CreateDatabase(ctx, dbName); err != nil {
		t.Fatal(err)
	}
	if err := cl.Exec(ctx, dbName, fixtureDDL); err != nil {
		t.Fatal(err)
	}
	conn, err := cl.Connect(ctx, dbName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	fns, err := catalog.LoadFunctions(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	fake := fakeollama.New(t, fakeollama.Options{Models: []string{model}})
	client, err := llm.New(llm.Config{Host: fake.URL(), Models: map[llm.Role]string{llm.RoleGenerator: model},
		CallTimeout: 10 * time.Second, MaxRetries: -1, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{conn: conn, exec: engine.ConnExecutor{Conn: conn.PgConn()}, fake: fake, llm: client, opts: guard.Options{Catalog: fns, Names: guard.SearchPath{"public"}}}
}

// script makes the fake model propose rewrites in order, then repeat the
// original (a duplicate, so the descent ends by its tolerance).
func (f *fixture) script(rewrites ...string) {
	rules := []fakeollama.Rule{{Name: "instruction", PromptContains: []string{instructionPrompt},
		Reply: `{"policy": "merge", "instruction": "Turn the per-row count into one grouped join."}`}}
	for i, r := range rewrites {
		rules = append(rules, fakeollama.Rule{Name: fmt.Sprintf("rewrite-%d", i+1), PromptContains: []string{rewritePrompt}, Reply: r, Times: 1})
	}
	rules = append(rules, fakeollama.Rule{Name: "repeat", PromptContains: []string{rewritePrompt}, Reply: fence(original)})
	f.fake.SetRules(rules...)
	f.fake.Reset()
}

func fence(sql string) string { return "Here is the rewrite.\n```sql\n" + sql + "\n```" }

func (f *fixture) optimizer() *optimize.Optimizer {
	// CostSlack -1: only plans the planner finds cheaper are measured, so
	// which proposals are measured does not depend on timing.
	return &optimize.Optimizer{LLM: f.llm, Guard: f.opts, Tolerance: 9, MaxCalls: 40, Timeout: 20 * time.Second, CostSlack: -1}
}

func (f *fixture) seal(t *testing.T, sql string) sealed.Statement {
	t.Helper()
	st, err := guard.Seal(sql, f.opts)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// rows runs sql directly (not through the optimizer) as text.
func (f *fixture) rows(t *testing.T, sql string) string {
	t.Helper()
	rs, err := f.conn.Query(context.Background(), sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var parts []string
		for _, v := range rs.RawValues() {
			parts = append(parts, string(v))
		}
		out = append(out, strings.Join(parts, ","))
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, ";")
}

func verdicts(o optimize.Outcome) []optimize.Verdict {
	var out []optimize.Verdict
	for _, s := range o.Steps {
		out = append(out, s.Verdict)
	}
	return out
}

func TestDescentRejectsWrongAndKeepsBest(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	slower := "SELECT c.id, c.name, (SELECT count(*) FROM orders o WHERE o.customer_id = c.id) + 0 * (SELECT count(*) FROM orders o2, customers c2 WHERE o2.customer_id = c2.id) AS n FROM customers c ORDER BY c.id"
	f.script(
		"I would rewrite it with a join.", // no SQL
		fence("DELETE FROM orders"),       // guard
		fence("SELECT c.id, c.name, count(*) AS n FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.id, c.name ORDER BY c.id"),              // drops customers without orders
		fence("SELECT c.id, c.name, count(o.id)::int AS n FROM customers c LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.id, c.name ORDER BY c.id"), // int4, not int8
		fence(strings.Replace(original, "ORDER BY c.id", "ORDER BY c.id DESC", 1)),                                                                          // other order
		fence("SELECT s.id, s.note AS name, 0::bigint AS n FROM secrets s"),                                                                                 // another table
		fence("SELECT c.id, c.name, count(o.id) AS n FROM customers c LEFT JOIN orders o ON o.customer_id = c.idd GROUP BY c.id, c.name ORDER BY c.id"),     // cannot plan
		fence(slower), // equivalent, costlier
		fence(good),   // the known good rewrite
		fence("SELECT c.id, c.name, count(o.id) AS n FROM customers c LEFT JOIN orders o ON o.customer_id = c.id WHERE c.segment = 'SMB' GROUP BY c.id, c.name ORDER BY c.id"), // cheaper, wrong
	)
	out, err := f.optimizer().Optimize(ctx, f.exec, f.seal(t, original), "orders per customer")
	if err != nil {
		t.Fatal(err)
	}
	want := []optimize.Verdict{
		optimize.VerdictNoSQL, optimize.VerdictGuard, optimize.VerdictResult, optimize.VerdictShape,
		optimize.VerdictOrder, optimize.VerdictTables, optimize.VerdictPlan, optimize.VerdictNoGain,
		optimize.VerdictChosen, optimize.VerdictResult,
	}
	got := verdicts(out)
	if len(got) < len(want) || fmt.Sprint(got[:len(want)]) != fmt.Sprint(want) {
		t.Fatalf("verdicts = %v, want %v then duplicates", got, want)
	}
	for _, v := range got[len(want):] {
		if v != optimize.VerdictDuplicate {
			t.Errorf("after the scripted proposals: %v, want only duplicates", got[len(want):])
		}
	}
	// The tolerance (9) counts the rejected proposal after the improvement
	// and 8 duplicates.
	if len(got)-len(want) != 8 {
		t.Errorf("%d duplicates after the rejected proposal, want 8", len(got)-len(want))
	}
	if !out.Improved || out.Result.Display() != good {
		t.Fatalf("result %q (improved %v, %s), want the good rewrite", out.Result.Display(), out.Improved, out.Reason)
	}
	if out.ResultCost >= out.OriginalCost || out.ResultTime <= 0 || out.OriginalTime <= 0 || out.ResultTime >= out.OriginalTime {
		t.Errorf("cost %.2f -> %.2f, time %v -> %v", out.OriginalCost, out.ResultCost, out.OriginalTime, out.ResultTime)
	}
	if out.LLMCalls != 2*len(got) {
		t.Errorf("LLM calls = %d, want 2 per step (%d steps)", out.LLMCalls, len(got))
	}
	if n := len(f.fake.RequestsTo(fakeollama.RouteChat)); n != out.LLMCalls {
		t.Errorf("fake saw %d chat requests, outcome counts %d", n, out.LLMCalls)
	}
	// Independently of the monitor: the result is the original's.
	if a, b := f.rows(t, original), f.rows(t, out.Result.SQL()); a != b {
		t.Fatalf("the returned rewrite's rows differ from the original's")
	}
	rej := out.Rejected()
	if rej[optimize.VerdictResult] != 2 || rej[optimize.VerdictGuard] != 1 {
		t.Errorf("rejections = %v", rej)
	}
	// The prompts carried the feedback and the history of valid plans.
	reqs := f.fake.RequestsTo(fakeollama.RouteChat)
	last := reqs[len(reqs)-1].Messages[len(reqs[len(reqs)-1].Messages)-1].Content
	for _, s := range []string{"Valid rewrites so far", "Feedback on the last attempt", "TABLE public.customers", "indexes:"} {
		if !strings.Contains(last, s) {
			t.Errorf("last prompt lacks %q", s)
		}
	}
}

func TestKeepsOriginal(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name      string
		sql       string
		rewrites  []string
		opt       func(*optimize.Optimizer)
		reason    string
		wantCalls bool
	}{
		{"only wrong or costlier proposals", original,
			[]string{fence("SELECT c.id, c.name, 0::bigint AS n FROM customers c ORDER BY c.id"), fence(original + " LIMIT 1000")},
			nil, "no proposal was equivalent and cheaper", true},
		{"cheaper but not measured faster enough", original, []string{fence(good)},
			func(o *optimize.Optimizer) { o.MinGain = 0.999 }, "no equivalent rewrite was measured faster", true},
		{"nondeterministic original", "SELECT random() AS r FROM customers", nil, nil, "changed between two runs", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			f.script(tt.rewrites...)
			o := f.optimizer()
			o.Tolerance = 3
			if tt.opt != nil {
				tt.opt(o)
			}
			orig := f.seal(t, tt.sql)
			out, err := o.Optimize(ctx, f.exec, orig, "")
			if err != nil {
				t.Fatal(err)
			}
			if out.Improved || out.Result.SQL() != orig.SQL() {
				t.Fatalf("returned %q, want the original", out.Result.Display())
			}
			if !strings.Contains(out.Reason, tt.reason) {
				t.Errorf("reason %q lacks %q", out.Reason, tt.reason)
			}
			if (out.LLMCalls > 0) != tt.wantCalls {
				t.Errorf("LLM calls = %d", out.LLMCalls)
			}
		})
	}
}

func TestOriginalErrors(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := f.optimizer().Optimize(ctx, f.exec, f.seal(t, "SELECT nope FROM customers"), "")
	var se *pg.Error
	if !errorsAs(err, &se) || se.Code != "42703" {
		t.Fatalf("err = %v, want the server's 42703", err)
	}
	if _, err := f.optimizer().Optimize(ctx, f.exec, sealed.Statement{}, ""); err != optimize.ErrNotSelect {
		t.Fatalf("zero statement: err = %v", err)
	}
	if n := len(f.fake.RequestsTo(fakeollama.RouteChat)); n != 0 {
		t.Errorf("%d LLM calls for a query that does not plan", n)
	}
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// TestCostSlackMeasures: a valid plan the planner does not find cheaper,
// but within CostSlack of the original, is measured rather than dropped.
func TestCostSlackMeasures(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	limited := original + " LIMIT 100000" // same rows, a Limit node more
	f.script(fence(limited))
	o := f.optimizer()
	o.Tolerance, o.CostSlack = 2, 0.25
	out, err := o.Optimize(ctx, f.exec, f.seal(t, original), "")
	if err != nil {
		t.Fatal(err)
	}
	st := out.Steps[0]
	if st.Cost < out.OriginalCost || st.Time <= 0 || (st.Verdict != optimize.VerdictSlower && st.Verdict != optimize.VerdictChosen) {
		t.Fatalf("step %+v (original cost %.2f): want it measured", st, out.OriginalCost)
	}
	if out.Improved && out.Result.Display() != limited {
		t.Errorf("returned %q", out.Result.Display())
	}
}

// A rewrite that names the same tables another way ("public.orders" for
// "orders") reads no new table; one that names another table does, however
// it is written.
func TestTablesResolvedAsTheSessionDoes(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	qualified := strings.NewReplacer("FROM customers", "FROM public.customers", "JOIN orders", "JOIN public.orders").Replace(good)
	f.script(
		fence("SELECT c.id, c.name, count(o.id) AS n FROM public.customers c LEFT JOIN public.secrets o ON o.id = c.id GROUP BY c.id, c.name ORDER BY c.id"),
		fence(qualified),
	)
	out, err := f.optimizer().Optimize(ctx, f.exec, f.seal(t, original), "orders per customer")
	if err != nil {
		t.Fatal(err)
	}
	got := verdicts(out)
	if len(got) < 2 || got[0] != optimize.VerdictTables || got[1] != optimize.VerdictChosen {
		t.Fatalf("verdicts = %v, want tables then chosen (%s)", got, out.Reason)
	}
	if !out.Improved || out.Result.Display() != qualified {
		t.Fatalf("result %q (%s), want the qualified rewrite", out.Result.Display(), out.Reason)
	}
}
