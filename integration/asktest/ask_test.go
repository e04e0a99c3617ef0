package asktest_test

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// TestAsk runs every scenario against one cluster, catalog and fake model;
// each subtest scripts the fake for its own question, so the subtests do
// not depend on each other's cache entries.
func TestAsk(t *testing.T) {
	f := newFixture(t)
	t.Run("FirstTry", func(t *testing.T) { testFirstTry(t, f) })
	t.Run("ExecutionErrorFixed", func(t *testing.T) { testExecutionErrorFixed(t, f) })
	t.Run("LiteralCorrected", func(t *testing.T) { testLiteralCorrected(t, f) })
	t.Run("WritesRejected", func(t *testing.T) { testWritesRejected(t, f) })
	t.Run("GarbageOutput", func(t *testing.T) { testGarbage(t, f) })
	t.Run("Timeout", func(t *testing.T) { testTimeout(t, f) })
	t.Run("Cancel", func(t *testing.T) { testCancel(t, f) })
	t.Run("InsideTransaction", func(t *testing.T) { testInsideTransaction(t, f) })
	t.Run("Clients", func(t *testing.T) { testClients(t, f) })
	t.Run("MoreClients", func(t *testing.T) { testMoreClients(t, f) })
	t.Run("Lifecycle", func(t *testing.T) { testLifecycle(t, f) })
	t.Run("CacheHit", func(t *testing.T) { testCacheHit(t, f) })
	t.Run("OllamaDown", func(t *testing.T) { testOllamaDown(t, f) })
	t.Run("Profiles", func(t *testing.T) { testProfiles(t, f) })
	t.Run("Optimize", func(t *testing.T) { testOptimize(t, f) })
	t.Run("OptimizeInMax", func(t *testing.T) { testOptimizeInMax(t, f) })
	t.Run("TableFunction", func(t *testing.T) { testTableFunction(t, f) })
	t.Run("FollowUp", func(t *testing.T) { testFollowUp(t, f) })
	t.Run("Verified", func(t *testing.T) { testVerified(t, f) })
	t.Run("FailedAskSQL", func(t *testing.T) { testFailedAskSQL(t, f) })
}

func testFirstTry(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const q = "how many orders are there?"
	const sql = "SELECT count(*) FROM orders"
	f.script(q, keywordsReply([]string{"orders", "order"}, nil), sqlReply(sql))
	out, stderr, err := psql(ctx, t, f.proxy, "-c", "/* ask: "+q+" */")
	if err != nil {
		t.Fatalf("psql: %v\n%s", err, stderr)
	}
	if want := f.direct(t, sql); out != want {
		t.Errorf("count through the proxy = %q, direct = %q", out, want)
	}
	if !strings.Contains(stderr, "NOTICE:") || !strings.Contains(stderr, sql) {
		t.Errorf("stderr lacks a NOTICE with the SQL: %q", stderr)
	}
	if n := f.chatCalls(); n != 2 {
		t.Errorf("LLM chat requests = %d, want 2 (keywords + candidate)", n)
	}
}

func testExecutionErrorFixed(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const q = "names of the first five customers"
	const good = "SELECT customer_id, name FROM customers ORDER BY customer_id LIMIT 5"
	f.script(q, keywordsReply([]string{"customers", "customer", "name"}, nil),
		sqlReply("SELECT customer_id, full_name FROM customers ORDER BY customer_id LIMIT 5"),
		sqlReply(good))
	c := f.connect(t, f.proxy)
	got, err := queryText(ctx, c.Conn, "-- ask: "+q, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	if want := f.direct(t, good); got != want {
		t.Errorf("rows = %q, want %q", got, want)
	}
	var fixPrompt string
	for _, r := range f.fake.Requests() {
		if r.Rule == "fix" {
			for _, m := range r.Messages {
				fixPrompt += m.Content + "\n"
			}
		}
	}
	if fixPrompt == "" {
		t.Fatal("the fixer was never asked")
	}
	if !strings.Contains(fixPrompt, `column "full_name" does not exist`) {
		t.Errorf("fixer prompt lacks the Postgres error:\n%s", fixPrompt)
	}
	if n := f.chatCalls(); n != 3 {
		t.Errorf("LLM chat requests = %d, want 3", n)
	}
}

func testLiteralCorrected(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const q = "total sales of the Los Angeles store"
	f.script(q, keywordsReply([]string{"sales", "store"}, []string{"Los Angeles"}),
		sqlReply("SELECT sum(s.amount) FROM store_sales s JOIN stores st ON st.id = s.store_id WHERE st.city = 'Los Angeles'"))
	c := f.connect(t, f.proxy)
	got, err := queryText(ctx, c.Conn, "/* ask: "+q+" */", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	want := f.direct(t, "SELECT sum(amount) FROM store_sales WHERE store_id = (SELECT id FROM stores WHERE city = 'LA')")
	if got != want || got == "" {
		t.Errorf("sum = %q, want %q", got, want)
	}
	notices := strings.Join(withoutProgress(c.Notices()), "\n")
	sqlLine, _, _ := strings.Cut(notices, "\n")
	if !strings.Contains(sqlLine, "st.city = 'LA'") || strings.Contains(sqlLine, "Los Angeles") {
		t.Errorf("executed SQL (notice) was not corrected to the stored 'LA': %q", notices)
	}
	// The NOTICE says what was changed.
	if !strings.Contains(notices, "public.stores.city: 'Los Angeles' → 'LA'") {
		t.Errorf("the notice does not list the rewrite: %q", notices)
	}
	// ask-sql shows the same corrected statement, and the rewrite.
	got2, err := askSQL(ctx, c.Conn, q)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got2["sql"], "'LA'") {
		t.Errorf("ask-sql = %q, want the corrected literal", got2["sql"])
	}
	var rws []memory.LiteralRewrite
	if err := json.Unmarshal([]byte(got2["literals"]), &rws); err != nil || len(rws) != 1 ||
		rws[0] != (memory.LiteralRewrite{Table: "public.stores", Column: "city", From: "Los Angeles", To: "LA", Kind: memory.RewriteValue}) {
		t.Errorf("ask-sql literals = %q (%v), want the one rewrite", got2["literals"], err)
	}

	// A literal the column holds is kept, even when only the asking
	// session's open transaction holds it (the value index cannot know).
	const q2 = "how many sales has the Los Angeles store made so far"
	const sql2 = "SELECT count(*) FROM store_sales s JOIN stores st ON st.id = s.store_id WHERE st.city = 'Los Angeles'"
	f.script(q2, keywordsReply([]string{"sales", "store"}, []string{"Los Angeles"}), sqlReply(sql2))
	for _, stmt := range []string{"BEGIN", "INSERT INTO stores VALUES (99, 'Los Angeles')"} {
		if _, err := c.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
	}
	n, err := queryText(ctx, c.Conn, "/* ask: "+q2+" */", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "ROLLBACK", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	last := c.Notices()[len(c.Notices())-1]
	if n != "0" || !strings.Contains(last, "'Los Angeles'") || strings.Contains(last, "Literals changed") {
		t.Errorf("stored literal: count %q, notice %q; want 0 and the literal kept", n, last)
	}
}

func testWritesRejected(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const q = "get rid of all orders"
	count := "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM order_lines), to_regclass('orders') IS NOT NULL"
	before := f.direct(t, count)
	f.script(q, keywordsReply([]string{"orders"}, nil),
		sqlReply("DROP TABLE orders"),
		sqlReply("DELETE FROM orders"),
		sqlReply("WITH d AS (DELETE FROM orders RETURNING *) SELECT count(*) FROM d"),
		sqlReply("DROP TABLE orders CASCADE"))
	c := f.connect(t, f.proxy)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		f.fake.Reset() // fixes are Times:1; re-arm them for the second form
		_, err := queryText(ctx, c.Conn, "-- ask: "+q, mode)
		if code := pgCode(err); code != "42501" {
			t.Fatalf("%v: err = %v, want SQLSTATE 42501", mode, err)
		}
		if n := f.chatCalls(); n != 4 {
			t.Errorf("%v: LLM chat requests = %d, want 4 (fast profile: keywords, candidate, 2 fixes)", mode, n)
		}
		// The failed ask is reported with what it did: the model calls it
		// spent and the guard's refusals (audit log, metrics, admin page).
		r := f.lastAsk()
		if r == nil || r.Outcome() != "failed" || r.Err == nil || r.Err.Code != "42501" || r.Report == nil {
			t.Fatalf("%v: reported ask %+v", mode, r)
		}
		guardNotes := 0
		for _, st := range r.Report.Stages {
			if strings.HasPrefix(st.Note, "guard:") {
				guardNotes++
			}
		}
		if r.Report.LLMCalls != 4 || guardNotes != 3 || r.Report.Profile != "fast" || r.Report.SQL != "" || r.Report.Confidence != -1 || len(r.Report.Candidates) != 1 {
			t.Errorf("%v: report of the failed ask: %d calls, %d guard refusals, %+v", mode, r.Report.LLMCalls, guardNotes, r.Report)
		}
		assertUsable(ctx, t, c)
	}
	if after := f.direct(t, count); after != before {
		t.Fatalf("data changed: before %q, after %q", before, after)
	}
}

func testGarbage(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const q = "tell me a joke about invoices"
	f.script(q, keywordsReply([]string{"invoices"}, nil), "I cannot help with that.")
	c := f.connect(t, f.proxy)
	_, err := queryText(ctx, c.Conn, "ASK "+q+";", pgx.QueryExecModeSimpleProtocol)
	var pe *pgconn.PgError
	if !asPgError(err, &pe) || pe.Code != "42N01" || !strings.Contains(pe.Message, "usable SQL") {
		t.Fatalf("err = %v, want 42N01 saying no usable SQL", err)
	}
	if n := f.chatCalls(); n != 3 {
		t.Errorf("LLM chat requests = %d, want 3 (keywords, candidate, one corrective re-ask)", n)
	}
	assertUsable(ctx, t, c)
}

func testTimeout(t *testing.T, f *fixture) {
	tests := []struct {
		name string
		opts engineOpts
		// what the error must say: the limit that ended the ask, and the
		// setting that raises it
		message, hint string
	}{
		// The engine settles before the deadline when the next call cannot
		// fit ("the ask's time (700ms) ran out …"), or is cut at it ("timed
		// out after 700ms"): either way the message names the limit.
		{"ask timeout", engineOpts{askTimeout: 700 * time.Millisecond, callTimeout: 30 * time.Second},
			"700ms", "--ask-timeout"},
		{"call timeout", engineOpts{askTimeout: 30 * time.Second, callTimeout: 700 * time.Millisecond},
			"a model call timed out after 700ms", "--llm-call-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			q := "slow question for the " + tt.name
			f.fake.SetRules(fakeollama.Rule{Name: "slow", PromptContains: []string{q}, Delay: 10 * time.Minute, Reply: "{}"})
			f.fake.Reset()
			tt.opts.host = f.fake.URL()
			addr := f.startProxy(t, f.engine(t, tt.opts))
			c := f.connect(t, addr)
			_, err := queryText(ctx, c.Conn, "-- ask: "+q, pgx.QueryExecModeSimpleProtocol)
			var pe *pgconn.PgError
			if !asPgError(err, &pe) || pe.Code != "57014" {
				t.Fatalf("err = %v, want SQLSTATE 57014", err)
			}
			if !strings.Contains(pe.Message, tt.message) || !strings.Contains(pe.Hint, tt.hint) {
				t.Errorf("error %q (hint %q), want it to say %q and name %s", pe.Message, pe.Hint, tt.message, tt.hint)
			}
			assertUsable(ctx, t, c)
		})
	}
}

func testCancel(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const q = "a question the model thinks about for a long time"
	const delay = 10 * time.Minute // the model never answers in time
	f.fake.SetRules(fakeollama.Rule{Name: "slow", PromptContains: []string{q}, Delay: delay, Reply: "{}"})
	f.fake.Reset()
	c := f.connect(t, f.proxy)
	before := f.obs.cancelled()
	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		_, err := queryText(ctx, c.Conn, "-- ask: "+q, pgx.QueryExecModeSimpleProtocol)
		done <- result{err, time.Since(start)}
	}()
	// Cancel once the model is working on it.
	for f.chatCalls() == 0 {
		select {
		case r := <-done:
			t.Fatalf("ask ended before the model was asked: %v", r.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := c.PgConn().CancelRequest(ctx); err != nil {
		t.Fatalf("CancelRequest: %v", err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute): // a hang guard, not a speed bound
		t.Fatal("the ask did not end after CancelRequest")
	}
	if code := pgCode(r.err); code != "57014" {
		t.Fatalf("err = %v, want SQLSTATE 57014", r.err)
	}
	if r.took >= delay {
		t.Errorf("the ask took %s, as long as the model's delay", r.took)
	}
	// The model server saw its request abandoned, i.e. the LLM work stopped.
	deadline := time.Now().Add(time.Minute) // a hang guard
	for f.obs.cancelled() == before {
		if time.Now().After(deadline) {
			t.Fatal("the model request was not cancelled")
		}
		time.Sleep(10 * time.Millisecond)
	}
	assertUsable(ctx, t, c)
}

func testInsideTransaction(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const q = "how many scratch notes are there"
	const sql = "SELECT count(*) FROM scratch"
	f.script(q, keywordsReply([]string{"scratch", "notes", "note"}, nil), sqlReply(sql))
	before := f.direct(t, sql)
	c := f.connect(t, f.proxy)
	for _, stmt := range []string{"BEGIN", "INSERT INTO scratch (note) VALUES ('inside the client transaction')"} {
		if _, err := c.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
	}
	got, err := queryText(ctx, c.Conn, "/* ask: "+q+" */", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatalf("ask inside a transaction: %v", err)
	}
	// The answer counts the uncommitted row: it ran in the client's transaction.
	if want := f.direct(t, "SELECT count(*) + 1 FROM scratch"); got != want {
		t.Errorf("count inside the transaction = %q, want %q (before: %s)", got, want, before)
	}
	if s := c.PgConn().TxStatus(); s != 'T' {
		t.Fatalf("transaction status after the ask = %c, want T", s)
	}
	mine, err := queryText(ctx, c.Conn, "SELECT count(*) FROM scratch WHERE note = 'inside the client transaction'", pgx.QueryExecModeSimpleProtocol)
	if err != nil || mine != "1" {
		t.Fatalf("scratch row inside the transaction: %q, %v", mine, err)
	}
	// The transaction is still read-write.
	if _, err := c.Exec(ctx, "INSERT INTO scratch (note) VALUES ('after the ask')", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("write after the ask: %v", err)
	}
	if _, err := c.Exec(ctx, "COMMIT", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("COMMIT: %v", err)
	}
	if got := f.direct(t, "SELECT count(*) FROM scratch WHERE note IN ('inside the client transaction', 'after the ask')"); got != "2" {
		t.Errorf("committed rows = %s, want 2", got)
	}
	assertUsable(ctx, t, c)
}

func testCacheHit(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const sql = "SELECT count(*) FROM products WHERE discontinued"
	f.script("How many products are discontinued?", keywordsReply([]string{"products", "discontinued"}, nil), sqlReply(sql))
	c := f.connect(t, f.proxy)
	first, err := askSQL(ctx, c.Conn, "How many products are discontinued?")
	if err != nil {
		t.Fatal(err)
	}
	if first["cached"] != "false" || first["llm_calls"] != "2" || first["sql"] != sql {
		t.Errorf("first ask-sql = %v, want cached=false, 2 calls, %q", first, sql)
	}
	calls := f.chatCalls()
	second, err := askSQL(ctx, c.Conn, "  how many PRODUCTS   are discontinued ")
	if err != nil {
		t.Fatal(err)
	}
	if second["cached"] != "true" || second["sql"] != sql || second["llm_calls"] != "0" {
		t.Errorf("second ask-sql = %v, want cached=true, 0 calls", second)
	}
	// A plain ask of the same question is answered from the cache, too.
	got, err := queryText(ctx, c.Conn, "-- ask: how many products are discontinued", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	if want := f.direct(t, sql); got != want {
		t.Errorf("rows = %q, want %q", got, want)
	}
	if n := f.chatCalls(); n != calls {
		t.Errorf("cached asks made %d LLM requests", n-calls)
	}
}

// askSQL runs `-- ask-sql:` and returns its one row by column name.
func askSQL(ctx context.Context, conn *pgx.Conn, q string) (map[string]string, error) {
	rows, err := conn.Query(ctx, "-- ask-sql: "+q, pgx.QueryExecModeSimpleProtocol)
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

func testOllamaDown(t *testing.T, f *fixture) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	noModel := fakeollama.New(t, fakeollama.Options{Models: []string{"llama3.2:1b"}})
	tests := []struct {
		name, host, code, hint string
	}{
		{"unreachable", "http://" + closed, "58000", "ollama serve"},
		{"model missing", noModel.URL(), "42704", "ollama pull " + model},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			addr := f.startProxy(t, f.engine(t, engineOpts{host: tt.host}))
			c := f.connect(t, addr)
			_, err := queryText(ctx, c.Conn, "-- ask: how many suppliers are there", pgx.QueryExecModeSimpleProtocol)
			var pe *pgconn.PgError
			if !asPgError(err, &pe) || pe.Code != tt.code {
				t.Fatalf("err = %v, want SQLSTATE %s", err, tt.code)
			}
			if !strings.Contains(pe.Hint, tt.hint) {
				t.Errorf("hint %q lacks %q", pe.Hint, tt.hint)
			}
			assertUsable(ctx, t, c)
		})
	}
}
