package asktest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// Substrings that tell the optimizer's prompts apart.
const (
	optInstructionPrompt = "decide the one change"
	optRewritePrompt     = "You rewrite a query so that it runs faster"
)

// orders.customer_id has no index in the sample database: the correlated
// count scans orders once per customer.
const (
	optOriginal = "SELECT c.customer_id, c.name, (SELECT count(*) FROM orders o WHERE o.customer_id = c.customer_id) AS n FROM customers c ORDER BY c.customer_id"
	optGood     = "SELECT c.customer_id, c.name, count(o.order_id) AS n FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id GROUP BY c.customer_id, c.name ORDER BY c.customer_id"
	optWrong    = "SELECT c.customer_id, c.name, count(o.order_id) AS n FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id WHERE c.customer_id > 10 GROUP BY c.customer_id, c.name ORDER BY c.customer_id"
	optSlower   = "SELECT c.customer_id, c.name, (SELECT count(*) FROM orders o WHERE o.customer_id = c.customer_id) + 0 * (SELECT count(*) FROM orders o2, customers c2 WHERE o2.customer_id = c2.customer_id) AS n FROM customers c ORDER BY c.customer_id"
)

// scriptOptimize makes the fake model propose rewrites in order, then the
// original again (a duplicate: the descent ends by its tolerance).
func (f *fixture) scriptOptimize(rewrites ...string) {
	rules := []fakeollama.Rule{{Name: "instruction", PromptContains: []string{optInstructionPrompt},
		Reply: `{"policy": "merge", "instruction": "Count orders once with a grouped LEFT JOIN."}`}}
	for i, r := range rewrites {
		rules = append(rules, fakeollama.Rule{Name: fmt.Sprintf("rewrite-%d", i+1), PromptContains: []string{optRewritePrompt},
			Reply: "```sql\n" + r + "\n```", Times: 1})
	}
	rules = append(rules, fakeollama.Rule{Name: "repeat", PromptContains: []string{optRewritePrompt}, Reply: "```sql\n" + optOriginal + "\n```"})
	f.fake.SetRules(rules...)
	f.fake.Reset()
}

func testOptimize(t *testing.T, f *fixture) {
	t.Run("psql", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		f.scriptOptimize("DELETE FROM orders", optWrong, optGood, optSlower)
		out, stderr, err := psql(ctx, t, f.proxy, "-c", "/* optimize: */ "+optOriginal+";")
		if err != nil {
			t.Fatalf("psql: %v\n%s", err, stderr)
		}
		rows := strings.Split(out, "\n")
		verdicts := make([]string, len(rows))
		for i, r := range rows {
			verdicts[i] = strings.Split(r, "|")[2]
		}
		want := "original guard result chosen no-improvement duplicate duplicate optimized"
		if strings.Join(verdicts, " ") != want {
			t.Fatalf("verdicts %q, want %q\n%s", strings.Join(verdicts, " "), want, out)
		}
		last := strings.Split(rows[len(rows)-1], "|")
		if last[0] != "result" || last[5] != optGood {
			t.Errorf("result row %q, want the good rewrite", rows[len(rows)-1])
		}
		if !strings.Contains(stderr, "NOTICE:  nlproxy optimize: ") || !strings.Contains(stderr, "x faster") || !strings.Contains(stderr, "2 rejected (guard 1, result 1)") {
			t.Errorf("stderr lacks the summary NOTICE: %q", stderr)
		}
		if n := f.chatCalls(); n != 2*(len(rows)-2) {
			t.Errorf("LLM chat requests = %d, want 2 per proposal (%d)", n, len(rows)-2)
		}
	})
	t.Run("pgx extended", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := f.connect(t, f.proxy)
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeSimpleProtocol} {
			f.scriptOptimize(optSlower, optWrong, optGood)
			rows, err := c.Query(ctx, "-- optimize: "+optOriginal, mode)
			if err != nil {
				t.Fatalf("%v: %v", mode, err)
			}
			var got [][]string
			for rows.Next() {
				var r []string
				for _, v := range rows.RawValues() {
					r = append(r, string(v))
				}
				got = append(got, r)
			}
			if err := rows.Err(); err != nil {
				t.Fatalf("%v: %v", mode, err)
			}
			var names []string
			for _, fd := range rows.FieldDescriptions() {
				names = append(names, fd.Name)
			}
			if strings.Join(names, ",") != "step,policy,verdict,cost,ms,sql,note" {
				t.Fatalf("%v: columns %v", mode, names)
			}
			last := got[len(got)-1]
			if last[2] != "optimized" || last[5] != optGood || last[4] == "" || got[0][4] == "" {
				t.Errorf("%v: result row %v (original %v)", mode, last, got[0])
			}
			for _, r := range got[1 : len(got)-1] {
				if r[5] == optWrong && r[2] != "result" || r[5] == optSlower && r[2] != "no-improvement" {
					t.Errorf("%v: %s proposal got verdict %s", mode, r[5], r[2])
				}
			}
			assertUsable(ctx, t, c)
		}
	})
	t.Run("keeps original", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := f.connect(t, f.proxy)
		f.scriptOptimize(optWrong, optSlower)
		got, err := queryText(ctx, c.Conn, "/* optimize: "+optOriginal+" */", pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		rows := strings.Split(got, ";")
		last := rows[len(rows)-1]
		if !strings.HasPrefix(last, "result,,kept original,") || !strings.Contains(last, optOriginal) {
			t.Errorf("result row %q, want the original kept", last)
		}
		if n := c.Notices(); len(n) == 0 || !strings.Contains(n[len(n)-1], "kept the original") {
			t.Errorf("notices %q", n)
		}
		assertUsable(ctx, t, c)
	})
	t.Run("refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := f.connect(t, f.proxy)
		f.scriptOptimize()
		count := "SELECT count(*) FROM orders"
		before := f.direct(t, count)
		for _, tt := range []struct{ sql, code string }{
			{"DELETE FROM orders", "42501"},
			{"SELECT 1; DROP TABLE orders", "42501"},
			{"SELECT pg_sleep(1)", "42501"},
			{"SELECT nope FROM orders", "42703"},
			{"SELEC 1", "42601"},
		} {
			for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
				_, err := queryText(ctx, c.Conn, "-- optimize: "+tt.sql, mode)
				if code := pgCode(err); code != tt.code {
					t.Errorf("%q (%v): err = %v, want SQLSTATE %s", tt.sql, mode, err, tt.code)
				}
				assertUsable(ctx, t, c)
			}
		}
		if n := f.chatCalls(); n != 0 {
			t.Errorf("%d LLM calls for refused queries", n)
		}
		if after := f.direct(t, count); after != before {
			t.Fatalf("data changed: %q -> %q", before, after)
		}
	})
}

// testOptimizeInMax: in the max profile a settled query above the cost
// threshold goes through the optimizer before it runs; ask-sql's trace
// shows the optimize stage, and the plain ask runs the rewrite.
func testOptimizeInMax(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const q = "how many orders has each customer placed"
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: keywordsReply([]string{"orders", "customer"}, nil)},
		fakeollama.Rule{Name: "instruction", PromptContains: []string{optInstructionPrompt}, Reply: `{"policy": "merge", "instruction": "Count orders once with a grouped LEFT JOIN."}`},
		fakeollama.Rule{Name: "rewrite-1", PromptContains: []string{optRewritePrompt}, Reply: "```sql\n" + optWrong + "\n```", Times: 1},
		fakeollama.Rule{Name: "rewrite-2", PromptContains: []string{optRewritePrompt}, Reply: "```sql\n" + optGood + "\n```", Times: 1},
		fakeollama.Rule{Name: "repeat", PromptContains: []string{optRewritePrompt}, Reply: "```sql\n" + optOriginal + "\n```"},
	)
	// Every generator of the profile proposes the slow query.
	f.fake.SetDefault(&fakeollama.Rule{Name: "generators", Reply: sqlReply(optOriginal)})
	defer f.fake.SetDefault(nil)
	f.fake.Reset()
	c := f.connect(t, f.proxy)
	got, err := askSQLProfile(ctx, c.Conn, "max", q)
	if err != nil {
		t.Fatal(err)
	}
	if got["sql"] != optGood {
		t.Fatalf("ask-sql(max) sql = %q, want the optimizer's rewrite\ntrace %s", got["sql"], got["trace"])
	}
	var stages []struct {
		Stage string `json:"stage"`
		Note  string `json:"note"`
		Calls int    `json:"llm_calls"`
	}
	if err := json.Unmarshal([]byte(got["trace"]), &stages); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range stages {
		if s.Stage == "optimize" {
			found = true
			if !strings.Contains(s.Note, "x faster") || !strings.Contains(s.Note, "result 1") || s.Calls < 4 {
				t.Errorf("optimize stage %+v", s)
			}
		}
	}
	if !found {
		t.Errorf("trace has no optimize stage: %s", got["trace"])
	}
	// A cheap query stays below the threshold: no optimizer model call.
	const q2 = "how many stores are there"
	f.fake.SetDefault(&fakeollama.Rule{Name: "generators", Reply: sqlReply("SELECT count(*) FROM stores")})
	f.fake.Reset()
	got, err = askSQLProfile(ctx, c.Conn, "max", q2)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got["trace"], "below the optimizer's threshold") || f.fake.Hits("instruction") != 0 {
		t.Errorf("cheap query: trace %s, instruction calls %d", got["trace"], f.fake.Hits("instruction"))
	}
	assertUsable(ctx, t, c)
}

// askSQLProfile runs `/* ask-sql(<profile>): q */` and returns its row by
// column name (NULL as "").
func askSQLProfile(ctx context.Context, conn *pgx.Conn, profile, q string) (map[string]string, error) {
	rows, err := conn.Query(ctx, "/* ask-sql("+profile+"): "+q+" */", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		for i, fd := range rows.FieldDescriptions() {
			out[fd.Name] = string(rows.RawValues()[i])
		}
	}
	return out, rows.Err()
}
