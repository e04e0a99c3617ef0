package asktest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/engine/optimize"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/router"
	"github.com/nlproxy/nlproxy/testkit/clienttest"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/needs"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

const (
	db       = "shop"
	askUser  = "asker"
	askPass  = "asker-secret"
	model    = "qwen2.5-coder:7b"
	otherDDL = `
CREATE TABLE stores (id int PRIMARY KEY, city text NOT NULL);
COMMENT ON COLUMN stores.city IS 'city of the store';
CREATE TABLE store_sales (id int PRIMARY KEY, store_id int NOT NULL REFERENCES stores(id), amount numeric NOT NULL);
INSERT INTO stores VALUES (1, 'LA'), (2, 'NYC'), (3, 'Chicago'), (4, 'Boston');
INSERT INTO store_sales SELECT g, 1 + g % 4, g FROM generate_series(1, 40) g;
CREATE TABLE scratch (id serial PRIMARY KEY, note text NOT NULL);
INSERT INTO scratch (note) VALUES ('first'), ('second');
`
)

// fixture is one cluster with the sample database, one catalog, one fake
// Ollama (served through an observer that sees cancelled requests) and the
// default proxy. Subtests share it and script the fake per question.
type fixture struct {
	cluster *pgcluster.Cluster
	fake    *fakeollama.Server
	obs     *observer
	cats    *catalog.Manager
	proxy   string // address of the default proxy
	eng     *engine.Engine
	admin   *pgx.Conn

	asksMu sync.Mutex
	asks   []*proxy.AskRecord // every settled ask, as the proxy reports it (OnAsk)
}

// lastAsk is the most recent ask the proxy reported.
func (f *fixture) lastAsk() *proxy.AskRecord {
	f.asksMu.Lock()
	defer f.asksMu.Unlock()
	if len(f.asks) == 0 {
		return nil
	}
	return f.asks[len(f.asks)-1]
}

// observer serves the fake Ollama and counts requests whose client went
// away before the answer was complete (the engine's ctx was cancelled).
type observer struct {
	fake *fakeollama.Server
	mu   sync.Mutex
	gone int
}

func (o *observer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.fake.ServeHTTP(w, r)
	// net/http cancels r's context itself only after ServeHTTP returns, so a
	// done context here means the client closed the connection.
	if r.Context().Err() != nil {
		o.mu.Lock()
		o.gone++
		o.mu.Unlock()
	}
}

func (o *observer) cancelled() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.gone
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"})
	// The asking role owns the data: it is loaded over TCP with its own
	// SCRAM login, as an application would.
	pgtest.OwnedSampleDB(ctx, t, cluster, askUser, askPass, db)
	owner, err := pgx.Connect(ctx, cluster.URL(askUser, askPass, db))
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	if _, err := owner.Exec(ctx, otherDDL); err != nil {
		t.Fatal(err)
	}
	admin, err := cluster.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })

	fake := fakeollama.New(t, fakeollama.Options{Models: []string{model}})
	obs := &observer{fake: fake}
	hs := httptest.NewServer(obs)
	// Close the fake first: it ends scripted delays still running, so the
	// HTTP server's Close does not wait on them.
	t.Cleanup(func() { fake.Close(); hs.Close() })

	// The catalog is built by the superuser, as a catalog role would.
	cats := &catalog.Manager{Connect: func(ctx context.Context, database string) (*pgx.Conn, error) {
		return cluster.Connect(ctx, database)
	}}
	t.Cleanup(func() { cats.Close() })
	if _, err := cats.Get(ctx, db); err != nil {
		t.Fatalf("catalog: %v", err)
	}
	f := &fixture{cluster: cluster, fake: fake, obs: obs, cats: cats, admin: admin}
	f.eng = f.engine(t, engineOpts{host: hs.URL})
	f.proxy = f.startProxy(t, f.eng)
	return f
}

// engineOpts vary the engine between subtests.
type engineOpts struct {
	host        string
	askTimeout  time.Duration
	callTimeout time.Duration
}

// engine wires the LLM client, catalog and engine the way cmd/nlproxy does.
func (f *fixture) engine(t *testing.T, o engineOpts) *engine.Engine {
	t.Helper()
	if o.callTimeout == 0 {
		o.callTimeout = 10 * time.Second
	}
	client, err := llm.New(llm.Config{
		Host:        o.host,
		Models:      map[llm.Role]string{llm.RoleGenerator: model, llm.RoleSmall: model},
		CallTimeout: o.callTimeout,
		MaxRetries:  -1, // each scripted answer is consumed exactly once
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return &engine.Engine{
		LLM:          client,
		Catalogs:     f.cats,
		Cache:        engine.NewCache(100, time.Hour),
		AskTimeout:   o.askTimeout,
		TrialTimeout: 10 * time.Second,
	}
}

// startProxy serves an in-process proxy on 127.0.0.1:0 in front of the
// cluster. The upstream leg is plaintext: with TLS upstream and a plaintext
// client the proxy relays SCRAM-SHA-256-PLUS, which libpq rejects (see the
// package report); the TLS legs are covered by the integration package.
func (f *fixture) startProxy(t *testing.T, eng *engine.Engine) string {
	t.Helper()
	return f.startProxyRelay(t, eng, false)
}

// startProxyRelay is startProxy on the goroutine relay when goroutines is
// set (on Linux the event loop carries plaintext sessions by default).
func (f *fixture) startProxyRelay(t *testing.T, eng *engine.Engine, goroutines bool) string {
	t.Helper()
	srv := &proxy.Server{
		GoroutineRelay: goroutines,
		Upstreams:      []proxy.Upstream{{Address: f.cluster.Addr(), TLS: proxy.UpstreamTLSDisable}},
		// Every ask sends its progress NOTICEs at once, so that every client
		// of the matrix (JDBC's warning chain, psycopg's notices list, the
		// extended protocol) gets them before its answer.
		Translator: router.Translator{Engine: eng, StatementTimeout: 10 * time.Second, ProgressAfter: time.Nanosecond,
			Optimizer: &optimize.Optimizer{LLM: eng.LLM, Tolerance: 3, MaxCalls: 24, CostSlack: -1}},
		OnDDL: func(database, _ string) { f.cats.Refresh(database) },
		OnAsk: func(r *proxy.AskRecord) {
			f.asksMu.Lock()
			f.asks = append(f.asks, r)
			f.asksMu.Unlock()
		},
	}
	return clienttest.ServeProxy(t, srv)
}

// script replaces the fake's rules with the answers for one question: the
// keywords step, the candidate, then each fix in turn.
func (f *fixture) script(question, keywords, candidate string, fixes ...string) {
	rules := []fakeollama.Rule{
		{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords, question}, Reply: keywords},
		{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate, question}, Reply: candidate},
	}
	for _, fix := range fixes {
		rules = append(rules, fakeollama.Rule{Name: "fix", PromptContains: []string{fakeollama.PromptFixer, question}, Reply: fix, Times: 1})
	}
	f.fake.SetRules(rules...)
	f.fake.Reset()
}

func (f *fixture) chatCalls() int { return len(f.fake.RequestsTo(fakeollama.RouteChat)) }

// sqlReply is a generator answer: reasoning, then the SQL in a fence.
func sqlReply(sql string) string {
	return "Sub-questions:\n1. the rows -> " + sql + "\n```sql\n" + sql + "\n```"
}

func keywordsReply(keywords []string, entities []string) string {
	q := func(xs []string) string {
		out := make([]string, len(xs))
		for i, x := range xs {
			out[i] = fmt.Sprintf("%q", x)
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	return fmt.Sprintf(`{"keywords": %s, "entities": %s}`, q(keywords), q(entities))
}

func (f *fixture) connect(t *testing.T, addr string) *clienttest.NoticeConn {
	t.Helper()
	return clienttest.ConnectNotices(t, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", askUser, askPass, addr, db))
}

// queryText runs sql and returns every value as text, rows joined by ";"
// and values by ",", the format the client scripts print too.
func queryText(ctx context.Context, conn *pgx.Conn, sql string, args ...any) (string, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals := rows.RawValues()
		parts := make([]string, len(vals))
		for i, v := range vals {
			parts[i] = string(v)
		}
		out = append(out, strings.Join(parts, ","))
	}
	return strings.Join(out, ";"), rows.Err()
}

// direct is the answer straight from Postgres, as the superuser.
func (f *fixture) direct(t *testing.T, sql string) string {
	t.Helper()
	s, err := queryText(context.Background(), f.admin, sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatalf("direct %q: %v", sql, err)
	}
	return s
}

// pgCode returns the SQLSTATE of err, or "" when it carries none.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// assertUsable checks the session still answers plain SQL.
func assertUsable(ctx context.Context, t *testing.T, c *clienttest.NoticeConn) {
	t.Helper()
	got, err := queryText(ctx, c.Conn, "SELECT 40 + 2", pgx.QueryExecModeSimpleProtocol)
	if err != nil || got != "42" {
		t.Fatalf("session unusable after the ask: %q, %v", got, err)
	}
	if s := c.PgConn().TxStatus(); s != 'I' {
		t.Fatalf("session transaction status %c, want I", s)
	}
}

// psql runs psql through addr and returns stdout and stderr.
func psql(ctx context.Context, t *testing.T, addr string, args ...string) (string, string, error) {
	t.Helper()
	bin, err := exec.LookPath("psql")
	if err != nil {
		needs.Missing(t, "psql not installed")
	}
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.CommandContext(ctx, bin, append([]string{"-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"-h", host, "-p", port, "-U", askUser, "-d", db}, args...)...)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+askPass, "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	return strings.TrimSpace(stdout.String()), stderr.String(), err
}

func asPgError(err error, target **pgconn.PgError) bool { return errors.As(err, target) }

// progressNotice is a progress NOTICE ("nlproxy: generating candidate 1/1 (0 s)").
var progressNotice = regexp.MustCompile(`^nlproxy: [^\n]* \(\d+ s\)$`)

// withoutProgress drops the progress NOTICEs, leaving the answer's own.
func withoutProgress(notices []string) []string {
	var out []string
	for _, n := range notices {
		if !progressNotice.MatchString(n) {
			out = append(out, n)
		}
	}
	return out
}
