package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// TestRedactionEverywhere: with --audit-redact question,literals no record
// of an ask — the engine's and ask(all)'s log lines, the audit log, the
// admin page with its trace and candidates — shows the question or a
// literal from it or from the SQL, for answered and failed asks alike.
func TestRedactionEverywhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"})
	db := pgtest.UniqueName(t, "redact")
	if err := c.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, db, `CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, amount numeric NOT NULL);
INSERT INTO orders VALUES (1, 'Zanzibar-Quux', 10), (2, 'other', 20);`); err != nil {
		t.Fatal(err)
	}
	const (
		literal   = "Zanzibar-Quux"
		words     = "which orders were placed by" // the question's own words
		question  = words + " '" + literal + "'?"
		broken    = "broken: " + words + " '" + literal + "' in total?"
		goodSQL   = "SELECT id FROM orders WHERE customer = '" + literal + "'"
		brokenSQL = "SELECT sum(amount) FROM orders WHERE customer = '" + literal + "' AND no_such_column > 0"
	)
	fake := fakeollama.New(t, fakeollama.Options{Models: []string{opsModel}})
	fake.SetDefault(&fakeollama.Rule{Name: "scripted", ReplyFunc: func(v fakeollama.ChatView) string {
		switch {
		case strings.Contains(v.Prompt, "search terms"):
			return `{"keywords": ["orders", "` + literal + `"], "entities": ["` + literal + `"]}`
		case strings.Contains(v.Prompt, "broken"):
			return "```sql\n" + brokenSQL + "\n```"
		}
		return "```sql\n" + goodSQL + "\n```"
	}})

	dir := t.TempDir()
	token := "tok-" + pgtest.UniqueName(t, "admin")
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auditFile := filepath.Join(dir, "audit.jsonl")
	sp := startServe(t, "--upstream", c.DSN(db), "--ollama-host", fake.URL(), "--model", opsModel, "--log-level", "debug",
		"--admin-listen", "127.0.0.1:0", "--admin-token-file", tokenFile,
		"--audit-log", auditFile, "--audit-redact", "question,literals")
	waitReady(t, sp.admin)

	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", pgtest.Superuser, pgtest.SuperuserPassword, sp.addr, db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var id int
	if err := conn.QueryRow(ctx, "-- ask: "+question, pgx.QueryExecModeSimpleProtocol).Scan(&id); err != nil || id != 1 {
		t.Fatalf("ask: %d, %v\n%s", id, err, sp.logs.String())
	}
	if _, err := conn.Exec(ctx, "-- ask: "+broken, pgx.QueryExecModeSimpleProtocol); err == nil {
		t.Fatal("the broken ask succeeded")
	}
	if _, err := conn.Exec(ctx, "-- ask(all): "+question, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("ask(all): %v", err)
	}

	audit, err := os.ReadFile(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(audit), "\n"); n != 3 {
		t.Fatalf("audit log has %d lines, want 3:\n%s", n, audit)
	}
	code, page := httpGet(t, "http://"+sp.admin+"/", "Authorization", "Bearer "+token)
	if code != http.StatusOK {
		t.Fatalf("admin page: %d", code)
	}
	code, metricsText := httpGet(t, "http://"+sp.admin+"/metrics")
	if code != http.StatusOK || !strings.Contains(metricsText, "nlproxy_asks_total") {
		t.Fatalf("/metrics: %d", code)
	}
	logs := sp.logs.String()
	// The records are there, redacted: not a vacuous pass.
	for what, want := range map[string][]string{
		"log":   {`"msg":"ask answered"`, `"msg":"ask failed"`, `"msg":"question across databases answered"`, `"question":"redacted:`, "customer = $1"},
		"audit": {`"question":"redacted:`, `"outcome":"failed"`, "customer = $1"},
		"page":  {`<td class="question">redacted:`, "customer = $1", `<tr class="stage">`, `<tr class="candidate">`},
	} {
		got := map[string]string{"log": logs, "audit": string(audit), "page": page}[what]
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s lacks %q", what, w)
			}
		}
	}
	for what, got := range map[string]string{"log": logs, "audit": string(audit), "page": page, "metrics": metricsText} {
		for _, secret := range []string{literal, strings.ToLower(literal), words} {
			if i := strings.Index(got, secret); i >= 0 {
				t.Errorf("%s shows %q: …%s…", what, secret, got[max(0, i-200):min(len(got), i+200)])
			}
		}
	}
}
