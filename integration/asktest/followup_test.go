package asktest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// followupPrompt tells the follow-up rewrite apart (prompts/templates/followup.tmpl).
const followupPrompt = "You rewrite a follow-up question"

// testFollowUp: a session's follow-up ("and their segments?") is rewritten
// into a standalone question with the session's earlier ask, answered, and
// shown back ("understood as: …") in the NOTICE, the ask-sql row and the
// table-function form, over the untracked relay (simple protocol) and the
// tracked one (extended protocol). Another session, DISCARD ALL and
// ask(new): each start with no history, and then no rewrite is asked for.
// The rewrite's prompt holds the earlier question and SQL, never its rows.
func testFollowUp(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const (
		q1   = "top three customers by number of orders"
		sql1 = "SELECT c.name, count(*) AS n FROM customers c JOIN orders o ON o.customer_id = c.customer_id GROUP BY c.customer_id, c.name ORDER BY n DESC, c.customer_id LIMIT 3"
		q2   = "and their segments?"
		s2   = "the segments of the three customers with the most orders"
		sql2 = "SELECT c.name, c.segment, count(*) AS n FROM customers c JOIN orders o ON o.customer_id = c.customer_id GROUP BY c.customer_id, c.name, c.segment ORDER BY n DESC, c.customer_id LIMIT 3"
		// q2 answered as asked, when there is nothing to follow.
		sqlAlone = "SELECT DISTINCT segment FROM customers ORDER BY 1"
	)
	f.fake.SetRules(
		fakeollama.Rule{Name: "followup", PromptContains: []string{followupPrompt, q2}, Reply: `{"question": "` + s2 + `"}`},
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: keywordsReply([]string{"customers", "orders", "segment"}, nil)},
		fakeollama.Rule{Name: "candidate-s2", PromptContains: []string{fakeollama.PromptCandidate, s2}, Reply: sqlReply(sql2)},
		fakeollama.Rule{Name: "candidate-q1", PromptContains: []string{fakeollama.PromptCandidate, q1}, Reply: sqlReply(sql1)},
		fakeollama.Rule{Name: "candidate-q2", PromptContains: []string{fakeollama.PromptCandidate, q2}, Reply: sqlReply(sqlAlone)},
	)
	f.fake.Reset()
	rewrites := func() []fakeollama.Recorded {
		var out []fakeollama.Recorded
		for _, r := range f.fake.Requests() {
			if r.Rule == "followup" {
				out = append(out, r)
			}
		}
		return out
	}
	want1, want2, wantAlone := f.direct(t, sql1), f.direct(t, sql2), f.direct(t, sqlAlone)

	for _, mode := range []struct {
		name string
		exec pgx.QueryExecMode
	}{{"untracked", pgx.QueryExecModeSimpleProtocol}, {"tracked", pgx.QueryExecModeExec}} {
		t.Run(mode.name, func(t *testing.T) {
			c := f.connect(t, f.proxy)
			before := len(rewrites())
			if got, err := queryText(ctx, c.Conn, "-- ask: "+q1, mode.exec); err != nil || got != want1 {
				t.Fatalf("first ask = %q, %v; want %q", got, err, want1)
			}
			if n := len(rewrites()); n != before {
				t.Errorf("a first ask asked for %d rewrites", n-before)
			}
			got, err := queryText(ctx, c.Conn, "-- ask: "+q2, mode.exec)
			if err != nil || got != want2 {
				t.Fatalf("follow-up = %q, %v; want %q", got, err, want2)
			}
			ns := c.Notices()
			if len(ns) == 0 || !strings.Contains(ns[len(ns)-1], "understood as: "+s2) {
				t.Errorf("notices %q lack the standalone question", ns)
			}
			rw := rewrites()
			if len(rw) != before+1 {
				t.Fatalf("%d rewrites asked, want 1", len(rw)-before)
			}
			prompt := promptOf(rw[len(rw)-1])
			if !strings.Contains(prompt, q1) || !strings.Contains(prompt, "GROUP BY c.customer_id, c.name") {
				t.Errorf("the rewrite's prompt lacks the earlier question or SQL:\n%s", prompt)
			}
			for _, row := range strings.Split(want1, ";") {
				if name := strings.Split(row, ",")[0]; name != "" && strings.Contains(prompt, name) {
					t.Errorf("the rewrite's prompt holds a result row value %q:\n%s", name, prompt)
				}
			}
			// DISCARD ALL forgets: the same words are answered as asked.
			if _, err := c.Exec(ctx, "DISCARD ALL", pgx.QueryExecModeSimpleProtocol); err != nil {
				t.Fatal(err)
			}
			if got, err := queryText(ctx, c.Conn, "-- ask: "+q2, mode.exec); err != nil || got != wantAlone {
				t.Errorf("after DISCARD ALL = %q, %v; want %q", got, err, wantAlone)
			}
			if n := len(rewrites()); n != before+1 {
				t.Errorf("after DISCARD ALL a rewrite was asked for")
			}
		})
	}

	t.Run("forms", func(t *testing.T) {
		c := f.connect(t, f.proxy)
		other := f.connect(t, f.proxy)
		before := len(rewrites())
		if _, err := queryText(ctx, c.Conn, "-- ask: "+q1, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
		// ask-sql reports the standalone question.
		row, err := askSQL(ctx, c.Conn, q2)
		if err != nil || row["understood_as"] != s2 || !strings.Contains(row["sql"], "c.segment") {
			t.Errorf("ask-sql = %q, %v; want understood_as %q", row, err, s2)
		}
		// The table-function form reads the same history.
		got, err := queryText(ctx, c.Conn, "SELECT * FROM nlproxy.ask('"+q2+"')", pgx.QueryExecModeSimpleProtocol)
		if err != nil || got != want2 {
			t.Errorf("table function = %q, %v; want %q", got, err, want2)
		}
		if n := len(rewrites()) - before; n != 2 {
			t.Errorf("%d rewrites for ask-sql and the table function, want 2", n)
		}
		// Another session has no history: its follow-up is asked as is.
		if got, err := queryText(ctx, other.Conn, "-- ask: "+q2, pgx.QueryExecModeSimpleProtocol); err != nil || got != wantAlone {
			t.Errorf("another session = %q, %v; want %q", got, err, wantAlone)
		}
		// ask(new): starts again.
		if got, err := queryText(ctx, c.Conn, "/* ask(new): "+q2+" */", pgx.QueryExecModeSimpleProtocol); err != nil || got != wantAlone {
			t.Errorf("ask(new) = %q, %v; want %q", got, err, wantAlone)
		}
		if n := len(rewrites()) - before; n != 2 {
			t.Errorf("%d rewrites after another session and ask(new), want still 2", n)
		}
	})

	// The table-function form reads and adds to the history like the
	// markers, and its profile word 'new' starts it again, on the event
	// loop and on the goroutine relay, in simple and extended protocol.
	goroutines := f.startProxyRelay(t, f.eng, true)
	for _, relay := range []struct{ name, addr string }{{"event loop", f.proxy}, {"goroutine relay", goroutines}} {
		for _, mode := range []struct {
			name string
			exec pgx.QueryExecMode
		}{{"simple", pgx.QueryExecModeSimpleProtocol}, {"extended", pgx.QueryExecModeExec}} {
			t.Run("table function/"+relay.name+"/"+mode.name, func(t *testing.T) {
				c := f.connect(t, relay.addr)
				fn := func(q string, args ...string) string {
					return "SELECT * FROM nlproxy.ask('" + strings.Join(append([]string{q}, args...), "', '") + "')"
				}
				before := len(rewrites())
				step := func(what, stmt, want string, rewritten int) {
					t.Helper()
					n := len(c.Notices())
					got, err := queryText(ctx, c.Conn, stmt, mode.exec)
					if err != nil || got != want {
						t.Fatalf("%s: %q, %v; want %q", what, got, err, want)
					}
					if d := len(rewrites()) - before; d != rewritten {
						t.Fatalf("%s: %d rewrites so far, want %d", what, d, rewritten)
					}
					understood := strings.Contains(strings.Join(c.Notices()[n:], "\n"), "understood as: "+s2)
					if want == want2 && !understood {
						t.Errorf("%s: no \"understood as\" notice: %q", what, c.Notices()[n:])
					}
					if want != want2 && understood {
						t.Errorf("%s: answered as a follow-up", what)
					}
				}
				// The table function adds its ask: a marker follows it.
				step("table function, first", fn(q1), want1, 0)
				step("marker after the table function", "-- ask: "+q2, want2, 1)
				// It reads the history too.
				step("table function follow-up", fn(q2), want2, 2)
				// 'new' forgets: the follow-up is asked as it is.
				step("table function, new", fn(q2, "new"), wantAlone, 2)
				// What it answered is the whole history now.
				step("marker after 'new'", "-- ask: "+q2, want2, 3)
				rw := rewrites()
				prompt := promptOf(rw[len(rw)-1])
				if strings.Contains(prompt, q1) || strings.Contains(prompt, "GROUP BY c.customer_id, c.name ORDER") {
					t.Errorf("the rewrite after 'new' still sees the earlier asks:\n%s", prompt)
				}
				if !strings.Contains(prompt, sqlAlone) {
					t.Errorf("the rewrite after 'new' lacks the ask 'new' answered:\n%s", prompt)
				}
			})
		}
	}
}

func promptOf(r fakeollama.Recorded) string {
	s := r.System
	for _, m := range r.Messages {
		s += "\n" + m.Content
	}
	return s
}
