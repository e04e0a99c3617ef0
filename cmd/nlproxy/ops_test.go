package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/nlproxy/nlproxy/internal/askreport"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"

	"github.com/nlproxy/nlproxy/testkit/clienttest"
)

const opsModel = "qwen2.5-coder:7b"

// servingProxy is `nlproxy serve` run in-process by a test.
type servingProxy struct {
	addr, admin string // proxy and admin listener addresses
	logs        *syncBuffer
	stop        func()
}

// startServe runs serve with args and waits until both listeners are up
// (their addresses come from the JSON log).
func startServe(t *testing.T, args ...string) *servingProxy {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--log-format", "json", "--data-dir", ""}, args...), io.Discard, logs)
	}()
	sp := &servingProxy{logs: logs}
	var once sync.Once
	sp.stop = func() {
		once.Do(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("serve: %v\n%s", err, logs.String())
			}
		})
	}
	t.Cleanup(sp.stop)
	addrOf := func(msg string) string {
		re := regexp.MustCompile(`"msg":"` + msg + `".*?"addr":"([^"]+)"`)
		if m := re.FindStringSubmatch(logs.String()); m != nil {
			return m[1]
		}
		return ""
	}
	deadline := time.Now().Add(time.Minute) // hang guard, not a speed bound
	for sp.addr == "" || sp.admin == "" {
		select {
		case err := <-done:
			t.Fatalf("serve ended early: %v\n%s", err, logs.String())
		default:
		}
		sp.addr, sp.admin = addrOf("nlproxy listening"), addrOf("admin endpoints listening")
		if time.Now().After(deadline) {
			t.Fatalf("listeners not up\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return sp
}

func httpGet(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitReady polls /readyz until it answers 200 (the first probe starts the
// catalog build).
func waitReady(t *testing.T, admin string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // hang guard
	for {
		code, body := httpGet(t, "http://"+admin+"/readyz")
		if code == http.StatusOK {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// scriptedOllama answers keyword extraction with keywords and every other
// chat with sql in a fence.
func scriptedOllama(t *testing.T, keywords, sql string) *fakeollama.Server {
	fake := fakeollama.New(t, fakeollama.Options{Models: []string{opsModel}})
	fake.SetDefault(&fakeollama.Rule{Name: "scripted", ReplyFunc: func(v fakeollama.ChatView) string {
		if strings.Contains(v.Prompt, "search terms") {
			return keywords
		}
		return "```sql\n" + sql + "\n```"
	}})
	return fake
}

// TestOpsEndToEnd runs serve with the admin listener, an audit log and the
// fake Ollama; an ask made through the proxy shows up in the audit log, in
// /metrics and, with its trace, on the admin page in headless Chromium.
func TestOpsEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"})
	db := pgtest.UniqueName(t, "ops")
	if err := c.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, db, `CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, amount numeric NOT NULL);
INSERT INTO orders SELECT g, 'customer ' || g, g * 10 FROM generate_series(1, 7) g;`); err != nil {
		t.Fatal(err)
	}
	const question = "how many orders did 'customer 3' place above 25?"
	const sql = "SELECT count(*) FROM orders WHERE customer = 'customer 3' AND amount > 25"
	fake := scriptedOllama(t, `{"keywords": ["orders"], "entities": []}`, sql)

	dir := t.TempDir()
	token := "tok-" + pgtest.UniqueName(t, "admin")
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auditFile := filepath.Join(dir, "audit.jsonl")
	// A second Ollama that is down: the pool skips it, readiness holds.
	gone := httptest.NewServer(nil)
	down := gone.URL
	gone.Close()
	sp := startServe(t, "--upstream", c.DSN(db), "--ollama-host", down, "--ollama-host", fake.URL(), "--model", opsModel,
		"--admin-listen", "127.0.0.1:0", "--admin-token-file", tokenFile,
		"--audit-log", auditFile, "--audit-redact", "literals")

	if code, body := httpGet(t, "http://"+sp.admin+"/healthz"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	ready := waitReady(t, sp.admin)
	for _, want := range []string{"upstream: ok", "catalog: ok", "ollama: ok"} {
		if !strings.Contains(ready, want) {
			t.Errorf("/readyz lacks %q:\n%s", want, ready)
		}
	}

	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", pgtest.Superuser, pgtest.SuperuserPassword, sp.addr, db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "-- ask: "+question, pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
		t.Fatalf("ask: %v\n%s", err, sp.logs.String())
	}
	if n != 1 {
		t.Fatalf("ask answered %d, want 1", n)
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}

	// Audit: one line, literals redacted in question and SQL.
	b, err := os.ReadFile(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 1 {
		t.Fatalf("audit log has %d lines, want 1:\n%s", len(lines), b)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatalf("audit line is not JSON: %v\n%s", err, lines[0])
	}
	for _, k := range []string{"time", "user", "role", "database", "client", "question", "sql", "outcome", "duration_ms", "llm_calls", "prompt_tokens", "completion_tokens"} {
		if _, ok := line[k]; !ok {
			t.Errorf("audit line lacks %q: %s", k, lines[0])
		}
	}
	if line["outcome"] != "answered" || line["database"] != db || line["user"] != pgtest.Superuser {
		t.Errorf("audit line: %s", lines[0])
	}
	// Only the text fields can carry the literals (numbers such as the
	// backend PID or the client port may contain the same digits).
	for _, k := range []string{"question", "sql", "error"} {
		if s, _ := line[k].(string); strings.Contains(s, "customer 3") || strings.Contains(s, "25") {
			t.Errorf("audit field %s leaks a literal: %s", k, lines[0])
		}
	}
	if q, _ := line["question"].(string); q != "how many orders did ? place above ??" {
		t.Errorf("redacted question = %q", q)
	}
	if calls, _ := line["llm_calls"].(float64); calls < 1 {
		t.Errorf("llm_calls = %v", line["llm_calls"])
	}

	// Metrics.
	code, metricsText := httpGet(t, "http://"+sp.admin+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	for _, re := range []string{
		`nlproxy_asks_total\{outcome="answered",profile="[a-z]+",sqlstate=""\} 1`,
		`nlproxy_client_connections_total [1-9]`,
		`nlproxy_client_connections 1`,
		`nlproxy_relayed_bytes_total\{direction="from_client"\} [1-9]`,
		`nlproxy_relayed_messages_total\{direction="to_client"\} [1-9]`,
		`nlproxy_transactions_total [1-9]`,
		`nlproxy_upstream_connect_seconds_count [1-9]`,
		`nlproxy_ask_stage_seconds_count\{stage="catalog"\} 1`,
		`nlproxy_translation_cache_lookups_total\{result="miss"\} 1`,
		`nlproxy_catalog_tables\{database="` + db + `"\} 1`,
		`nlproxy_catalog_refreshes_total\{database="` + db + `",result="rebuilt"\} 1`,
		`nlproxy_llm_server_up\{server="` + regexp.QuoteMeta(down) + `"\} 0`,
		`nlproxy_llm_server_up\{server="` + regexp.QuoteMeta(fake.URL()) + `"\} 1`,
		`nlproxy_llm_calls_total\{model="` + regexp.QuoteMeta(opsModel) + `",result="ok",server="` + regexp.QuoteMeta(fake.URL()) + `"\} [1-9]`,
		`nlproxy_llm_tokens_total\{kind="completion",model="` + regexp.QuoteMeta(opsModel) + `",server="` + regexp.QuoteMeta(fake.URL()) + `"\} [1-9]`,
	} {
		if !regexp.MustCompile(`(?m)^` + re).MatchString(metricsText) {
			t.Errorf("/metrics lacks %s", re)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", metricsText)
	}

	// The page wants the token.
	if code, _ := httpGet(t, "http://"+sp.admin+"/"); code != http.StatusUnauthorized {
		t.Errorf("page without token = %d, want 401", code)
	}
	if code, _ := httpGet(t, "http://"+sp.admin+"/", "Authorization", "Bearer wrong-"+token); code != http.StatusUnauthorized {
		t.Errorf("page with a wrong token = %d, want 401", code)
	}
	code, page := httpGet(t, "http://"+sp.admin+"/", "Authorization", "Bearer "+token)
	if code != 200 || !strings.Contains(page, "orders") {
		t.Fatalf("page with token = %d", code)
	}

	// The page shows what the audit log shows: --audit-redact applies to
	// every record of an ask.
	chromiumPage(t, "http://"+sp.admin+"/?token="+token, "how many orders did ? place above ??",
		"SELECT count(*) FROM orders WHERE customer = $1 AND amount > $2", db)
	if strings.Contains(page, "customer 3") {
		t.Error("the admin page shows a redacted literal")
	}

	// Draining: an open transaction holds the shutdown; meanwhile /readyz
	// tells the load balancer to send new clients elsewhere.
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { sp.stop(); close(stopped) }()
	deadline := time.Now().Add(time.Minute) // hang guard
	for {
		code, body := httpGet(t, "http://"+sp.admin+"/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "proxy: shutting down") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz during the drain: %d %s", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	<-stopped
}

// chromiumPage loads url in headless Chromium: the DOM must show the ask
// with its trace, the console must stay clean, and a screenshot is kept in
// the test's artifact directory (go test -artifacts).
func chromiumPage(t *testing.T, url, question, sql, db string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dom, console := clienttest.Chromium(ctx, t, url, "--window-size=1400,1000", "--dump-dom")
	for _, want := range []string{
		`<td class="question">` + templateText(question) + `</td>`,
		templateText(sql),
		`<td class="answered">answered</td>`,
		`<tr class="stage"><td>catalog</td>`,
		`<tr class="conn">`,
		`(chosen)</td>`,
		`<tr class="catalog"><td>` + db + `</td><td>true</td>`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("admin page lacks %q", want)
		}
	}
	shot := filepath.Join(t.ArtifactDir(), "admin-page.png")
	_, more := clienttest.Chromium(ctx, t, url, "--window-size=1400,1000", "--screenshot="+shot)
	if st, err := os.Stat(shot); err != nil || st.Size() == 0 {
		t.Fatalf("no screenshot: %v", err)
	}
	t.Logf("screenshot: %s", shot)
	// The page has no script, so any console message is a defect (a CSP
	// refusal, a 404).
	for _, line := range append(console, more...) {
		t.Errorf("console message: %s", line)
	}
}

// templateText is text as Chromium serializes it in an element.
func templateText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func TestOllamaHostFlag(t *testing.T) {
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"", nil, ""},
		{"http://e:1", nil, "http://e:1"},
		{"http://e:1", []string{"--ollama-host", "a:1"}, "a:1"},
		{"http://e:1", []string{"--ollama-host", "a:1", "--ollama-host", "b:2"}, "a:1,b:2"},
		{"", []string{"--ollama-host", "a:1,b:2", "--ollama-host", "c:3"}, "a:1,b:2,c:3"},
	} {
		env := func(k string) string {
			if k == "NLPROXY_OLLAMA_HOST" {
				return tc.env
			}
			return ""
		}
		cfg, err := loadConfig(append([]string{"--upstream", "postgres://u@h/db"}, tc.args...), env, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if cfg.Engine.OllamaHost != tc.want {
			t.Errorf("env %q args %v: hosts %q, want %q", tc.env, tc.args, cfg.Engine.OllamaHost, tc.want)
		}
	}
}

func TestAskMetrics(t *testing.T) {
	refused := []askreport.Stage{{Name: "generate", Note: "divide"}, {Name: "check", Note: "guard: DELETE is not allowed"}}
	for _, tc := range []struct {
		name    string
		rec     proxy.AskRecord
		outcome string
		guard   bool
		stages  int
	}{
		{"answered", proxy.AskRecord{Report: &askreport.Report{Profile: "max", Stages: refused[:1]}}, "answered", false, 1},
		{"answered after a refusal", proxy.AskRecord{Report: &askreport.Report{Profile: "max", Stages: refused}}, "answered", true, 2},
		{"failed after refusals", proxy.AskRecord{Err: &pg.Error{Code: "42501"}, Report: &askreport.Report{Profile: "fast", Stages: refused}}, "failed", true, 2},
		{"failed before the engine worked", proxy.AskRecord{Err: &pg.Error{Code: "53400"}}, "failed", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := askMetrics(&tc.rec)
			if a.Outcome != tc.outcome || a.Guard != tc.guard || len(a.Stages) != tc.stages {
				t.Errorf("outcome %q, guard %v, %d stages; want %q, %v, %d", a.Outcome, a.Guard, len(a.Stages), tc.outcome, tc.guard, tc.stages)
			}
			if tc.rec.Err != nil && a.SQLState != tc.rec.Err.Code {
				t.Errorf("sqlstate %q", a.SQLState)
			}
		})
	}
}
