package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
	"github.com/nlproxy/nlproxy/workload"
)

// TestServeUsesLearnedWorkload: with --learn-workload, what was learnt of
// a database (a profile saved beside the catalog) reaches the ask's
// prompt: the learnt join as a join path, the query as one the database
// runs, with no literal.
func TestServeUsesLearnedWorkload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a hang guard only
	defer cancel()
	c := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"})
	db := pgtest.UniqueName(t, "wluse")
	if err := c.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, db, `CREATE TABLE customers (cid int PRIMARY KEY, email text, country text);
CREATE TABLE orders (oid int PRIMARY KEY, buyer int, total numeric);
INSERT INTO customers VALUES (1, 'a@example.com', 'NL'); INSERT INTO orders VALUES (1, 1, 5);`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st := workload.NewStore(dir, workload.Limits{})
	p, err := st.Profile(db)
	if p == nil {
		t.Fatal(err)
	}
	sh, err := workload.Analyze("SELECT sum(o.total) FROM orders o JOIN customers c ON c.cid = o.buyer WHERE c.country = 'Atlantis'")
	if err != nil {
		t.Fatal(err)
	}
	p.Add(sh, pgtest.Superuser, time.Now())
	if err := st.Save(time.Now()); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var prompt string
	fake := fakeollama.New(t, fakeollama.Options{Models: []string{opsModel}})
	fake.SetDefault(&fakeollama.Rule{Name: "scripted", ReplyFunc: func(v fakeollama.ChatView) string {
		if strings.Contains(v.Prompt, "search terms") {
			return `{"keywords": ["orders", "customers", "country"], "entities": []}`
		}
		mu.Lock()
		prompt = v.Prompt
		mu.Unlock()
		return "```sql\nSELECT sum(o.total) FROM orders o JOIN customers c ON c.cid = o.buyer WHERE c.country = 'NL'\n```"
	}})
	sp := startServe(t, "--upstream", c.DSN(db), "--ollama-host", fake.URL(), "--model", opsModel,
		"--admin-listen", "127.0.0.1:0", "--learn-workload", "--data-dir", dir)
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", pgtest.Superuser, pgtest.SuperuserPassword, sp.addr, db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "-- ask: total of the orders of customers from NL", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("ask: %v\n%s", err, sp.logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"customers.cid = orders.buyer (used by 1 query)", "Queries this database runs", "t2.country = $1"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("the SQL prompt lacks %q:\n%s", want, prompt)
		}
	}
	if strings.Contains(prompt, "Atlantis") {
		t.Errorf("a literal of the workload reached the prompt:\n%s", prompt)
	}
}
