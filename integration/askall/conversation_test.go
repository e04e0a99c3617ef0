package askall_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// TestAskAllConversation: ask(all) belongs to the session's conversation
// like the other forms. Its follow-up is rewritten into a standalone
// question before the plan (NOTICE "understood as", ask-sql(all)'s
// understood_as column), a single-database follow-up can refer to an
// ask(all), and an ask(all) follow-up to a single-database ask. ask(new):,
// DISCARD ALL and another session each start with no history, and then no
// rewrite is asked for.
func TestAskAllConversation(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const (
		q1 = compare + ", in a conversation?"
		// An ask(all) follow-up of q1.
		q2 = "and in April?"
		s2 = "Did the EU shop sell more in April 2024 than the US shop?"
		// A single-database follow-up of q2.
		q3       = "only the EU one?"
		s3       = "What was the total of EU shop orders in April 2024?"
		aprilSQL = "SELECT sum(total) AS total FROM orders WHERE placed_at >= DATE '2024-04-01' AND placed_at < DATE '2024-05-01'"
		// An ask-sql(all) follow-up of q3.
		q4 = "what about the US one?"
		s4 = "What was the total of US shop orders in April 2024?"
	)
	f.fake.SetRules(append([]fakeollama.Rule{
		{Name: "followup-all", PromptContains: []string{fakeollama.PromptFollowup, "Follow-up question:\n" + q2}, Reply: `{"question": "` + s2 + `"}`},
		{Name: "followup-one", PromptContains: []string{fakeollama.PromptFollowup, "Follow-up question:\n" + q3}, Reply: `{"question": "` + s3 + `"}`},
		{Name: "followup-plan", PromptContains: []string{fakeollama.PromptFollowup, "Follow-up question:\n" + q4}, Reply: `{"question": "` + s4 + `"}`},
	}, rules(twoSteps, map[string]string{euGoal: marchSQL, usGoal: marchSQL, s3: aprilSQL}, false, "The EU shop sold more.")...)...)
	f.fake.Reset()
	var (
		allRewrites = func() int { return f.fake.Hits("followup-all") }
		lastPrompt  = func(rule string) string {
			var out string
			for _, r := range f.fake.Requests() {
				if r.Rule == rule {
					out = r.System
					for _, m := range r.Messages {
						out += "\n" + m.Content
					}
				}
			}
			return out
		}
		lacks = func(what, got string, unwanted ...string) {
			t.Helper()
			for _, u := range unwanted {
				if strings.Contains(got, u) {
					t.Errorf("%s holds %q:\n%s", what, u, got)
				}
			}
		}
	)
	simple := pgx.QueryExecModeSimpleProtocol
	c := f.connect(t)
	newNotices := func(before int) string { return strings.Join(c.Notices()[before:], "\n") }

	// 1. A first ask(all): nothing to follow, no rewrite.
	if _, err := rows(ctx, c.Conn, "ASK(all) "+q1, simple); err != nil {
		t.Fatal(err)
	}
	if n := allRewrites() + f.fake.Hits("followup-one") + f.fake.Hits("followup-plan"); n != 0 {
		t.Fatalf("a first ask asked for %d rewrites", n)
	}

	// 2. Its follow-up, ask(all) too: rewritten from the earlier question
	// and its steps' SQL (never rows), answered as the standalone question.
	before := len(c.Notices())
	got, err := rows(ctx, c.Conn, "ASK(all) "+q2, simple)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "answer", got, "The EU shop sold more.", "Computed: "+computed)
	notices := newNotices(before)
	if !strings.HasPrefix(notices, "nlproxy: understood as: "+s2+"\n") {
		t.Errorf("the first notice is not the standalone question:\n%s", notices)
	}
	if allRewrites() != 1 {
		t.Fatalf("%d rewrites of the ask(all) follow-up, want 1", allRewrites())
	}
	prompt := lastPrompt("followup-all")
	contains(t, "the ask(all) rewrite's prompt", prompt, q1, "(database eu) "+marchSQL, "(database us) ", marchSQL)
	lacks("the ask(all) rewrite's prompt", prompt, "600.25", "400") // the steps' results
	contains(t, "the plan's prompt", lastPrompt("plan"), s2)
	lacks("the plan's prompt", lastPrompt("plan"), q2)

	// 3. A single-database follow-up of the ask(all).
	before = len(c.Notices())
	if got, err := rows(ctx, c.Conn, "-- ask: "+q3, simple); err != nil || got != "999" {
		t.Fatalf("single-database follow-up = %q, %v; want 999", got, err)
	}
	contains(t, "single-database notice", newNotices(before), "understood as: "+s3, aprilSQL)
	contains(t, "the single-database rewrite's prompt", lastPrompt("followup-one"), s2, "(database eu) "+marchSQL)

	// 4. An ask-sql(all) follow-up of the single-database ask: the plan's
	// rows carry the standalone question.
	before = len(c.Notices())
	got, err = rows(ctx, c.Conn, "/* ask-sql(all): "+q4+" */", simple)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range strings.Split(got, ";") {
		if !strings.HasSuffix(row, ","+s4) && !strings.HasSuffix(row, s4) {
			t.Errorf("plan row %q lacks understood_as %q", row, s4)
		}
	}
	contains(t, "ask-sql(all) notices", newNotices(before), "nlproxy: understood as: "+s4)
	contains(t, "the ask-sql(all) rewrite's prompt", lastPrompt("followup-plan"), s3, aprilSQL)
	if f.fake.Hits("answer") != 2 {
		t.Errorf("answers composed: %d, want 2 (q1, q2; ask-sql(all) composes none)", f.fake.Hits("answer"))
	}

	// 5. ask(new): starts again; the next ask(all) follow-up reads only it.
	if got, err := rows(ctx, c.Conn, "-- ask(new): "+euGoal, simple); err != nil || got != "600.25" {
		t.Fatalf("ask(new) = %q, %v", got, err)
	}
	if _, err := rows(ctx, c.Conn, "ASK(all) "+q2, simple); err != nil {
		t.Fatal(err)
	}
	if allRewrites() != 2 {
		t.Fatalf("%d rewrites after ask(new), want 2", allRewrites())
	}
	prompt = lastPrompt("followup-all")
	contains(t, "the rewrite after ask(new)", prompt, euGoal)
	lacks("the rewrite after ask(new)", prompt, q1, s3, s4)

	// 6. DISCARD ALL forgets: the same words are asked as they are.
	if _, err := c.Exec(ctx, "DISCARD ALL", simple); err != nil {
		t.Fatal(err)
	}
	before = len(c.Notices())
	if _, err := rows(ctx, c.Conn, "ASK(all) "+q2, simple); err != nil {
		t.Fatal(err)
	}
	if allRewrites() != 2 {
		t.Errorf("a rewrite was asked for after DISCARD ALL")
	}
	lacks("notices after DISCARD ALL", newNotices(before), "understood as")
	contains(t, "the plan's prompt after DISCARD ALL", lastPrompt("plan"), q2)

	// 7. Another session has no history, whatever this one asked.
	other := f.connect(t)
	if _, err := rows(ctx, other.Conn, "ASK(all) "+q2, pgx.QueryExecModeDescribeExec); err != nil {
		t.Fatal(err)
	}
	if allRewrites() != 2 {
		t.Errorf("another session's follow-up was rewritten")
	}
}
