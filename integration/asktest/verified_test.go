package asktest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/catalog/verified"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// testVerified: a paraphrase of a verified query is answered by the
// entry's SQL with its parameter filled from the question through the
// value index, with no model call, and says so (NOTICE, ask-sql's verified
// column); an entry limited to other roles answers nothing; a question
// that nearly matches is answered by the model with the entry as the first
// example; a question that does not match is answered by the model.
func testVerified(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var city string
	if err := f.admin.QueryRow(ctx, "SELECT city FROM addresses WHERE city IS NOT NULL ORDER BY address_id LIMIT 1").Scan(&city); err != nil {
		t.Fatal(err)
	}
	const ordersSQL = "SELECT count(*) FROM orders o JOIN addresses a ON a.customer_id = o.customer_id WHERE a.city = :city"
	eng := f.engine(t, engineOpts{host: f.fake.URL()})
	eng.Verified = verified.List{
		{Name: "orders_in_city", Database: db, Question: "How many orders were placed by customers in {city}?",
			Paraphrases: []string{"number of orders from customers in {city}"}, SQL: ordersSQL,
			Params: []verified.Param{{Name: "city", Column: "addresses.city"}}},
		{Name: "orders_per_status", Database: db, Question: "How many orders are there in each status?",
			SQL: "SELECT status, count(*) AS orders FROM orders GROUP BY status ORDER BY status"},
		{Name: "staff_count", Database: db, Question: "How many employees are there?", SQL: "SELECT count(*) FROM employees",
			Roles: []string{"someone_else"}},
	}
	addr := f.startProxy(t, eng)
	c := f.connect(t, addr)

	const plain = "How many employees are there?"
	const plainSQL = "SELECT count(*) AS n FROM employees"
	const near = "How many orders in each status were placed in 2024 by customers?"
	const nearSQL = "SELECT status, count(*) FROM orders WHERE ordered_at >= '2024-01-01' AND ordered_at < '2025-01-01' GROUP BY status"
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: keywordsReply([]string{"orders", "employees"}, nil)},
		fakeollama.Rule{Name: "plain", PromptContains: []string{fakeollama.PromptCandidate, plain}, Reply: sqlReply(plainSQL)},
		fakeollama.Rule{Name: "near", PromptContains: []string{fakeollama.PromptCandidate, near}, Reply: sqlReply(nearSQL)},
	)
	f.fake.Reset()

	q := "number of orders from customers in " + city
	got, err := queryText(ctx, c.Conn, "/* ask: "+q+" */", pgx.QueryExecModeSimpleProtocol)
	want := f.direct(t, strings.Replace(ordersSQL, ":city", "'"+strings.ReplaceAll(city, "'", "''")+"'", 1))
	if err != nil || got != want {
		t.Fatalf("verified answer = %q, %v; want %q", got, err, want)
	}
	if n := f.chatCalls(); n != 0 {
		t.Errorf("%d model calls for a verified answer, want none", n)
	}
	if ns := c.Notices(); len(ns) == 0 || !strings.Contains(ns[len(ns)-1], "verified: orders_in_city") {
		t.Errorf("notices %q lack the verified query's name", ns)
	}
	row, err := askSQL(ctx, c.Conn, q)
	if err != nil || row["verified"] != "orders_in_city" {
		t.Errorf("ask-sql = %q, %v; want verified orders_in_city", row, err)
	}

	// The role may not use staff_count: the model answers.
	if got, err := queryText(ctx, c.Conn, "/* ask: "+plain+" */", pgx.QueryExecModeSimpleProtocol); err != nil || got != f.direct(t, plainSQL) {
		t.Errorf("%q = %q, %v", plain, got, err)
	}
	if ns := c.Notices(); strings.Contains(ns[len(ns)-1], "verified:") {
		t.Errorf("an entry for other roles answered: %q", ns[len(ns)-1])
	}

	// A near miss: the model answers, shown the entry first (bound).
	if got, err := queryText(ctx, c.Conn, "/* ask: "+near+" */", pgx.QueryExecModeSimpleProtocol); err != nil || got != f.direct(t, nearSQL) {
		t.Errorf("%q = %q, %v", near, got, err)
	}
	var prompt string
	for _, r := range f.fake.Requests() {
		if r.Rule == "near" {
			prompt = promptOf(r)
		}
	}
	if ns := c.Notices(); strings.Contains(ns[len(ns)-1], "verified:") {
		t.Errorf("a near miss was answered by the entry: %q", ns[len(ns)-1])
	}
	if !strings.Contains(prompt, "How many orders are there in each status?") || !strings.Contains(prompt, "GROUP BY status ORDER BY status") {
		t.Errorf("the near-missed entry is not among the examples:\n%s", prompt)
	}
}
