// Package asksafety_test attacks the ask path as a hostile model, hostile
// stored data and clients with unusual session settings would, through the
// real proxy, engine and clients, and checks that no ask ever wrote, leaked
// rows a role may not see, or exhausted the proxy.
package asksafety_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/router"
	"github.com/nlproxy/nlproxy/testkit/clienttest"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

const (
	model    = "qwen2.5-coder:7b"
	askUser  = "asker"
	askPass  = "asker-secret"
	victimDB = "victim"
)

// victimDDL: tables the attacks try to change, a function that writes only
// when the transaction is writable (so it passes a read-only trial run), a
// view and stored values that carry SQL.
const victimDDL = `
CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric NOT NULL, note text);
INSERT INTO accounts VALUES
  (1, 'ann', 100, 'x''; UPDATE accounts SET balance = 0; --'),
  (2, 'bob', 200, E'\\''; UPDATE accounts SET balance = 0; --'),
  (3, 'cat', 300, E'丁\\''; UPDATE accounts SET balance = 0; --'),
  (4, 'dan', 400, 'plain');
CREATE INDEX accounts_brin ON accounts USING brin (id);
CREATE TABLE audit_log (id serial PRIMARY KEY, what text NOT NULL);
CREATE SEQUENCE acct_seq;
CREATE FUNCTION write_when_writable() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('transaction_read_only') = 'off' THEN
    INSERT INTO audit_log (what) VALUES ('written by an ask');
  END IF;
  RETURN 1;
END $$;
CREATE VIEW v_writer AS SELECT id, write_when_writable() AS w FROM accounts;
CREATE TABLE scratch (x int);
ANALYZE;
`

// fixture is one cluster, the victim database, one fake Ollama, one catalog
// and an in-process proxy whose engine allows write_when_writable (so that
// only the proxy's read-only scope stands between it and a write).
type fixture struct {
	cluster *pgcluster.Cluster
	fake    *fakeollama.Server
	cats    *catalog.Manager
	admin   *pgx.Conn
	db      string
	proxy   string
	srv     *proxy.Server
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"})
	db := victimDB + "_" + randomSuffix(t)
	if err := cluster.CreateRole(ctx, askUser, askPass, false); err != nil {
		t.Fatal(err)
	}
	if err := cluster.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Exec(ctx, db, victimDDL+`
GRANT ALL ON ALL TABLES IN SCHEMA public TO `+askUser+`;
GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO `+askUser+`;
GRANT EXECUTE ON FUNCTION write_when_writable() TO `+askUser+`;`); err != nil {
		t.Fatal(err)
	}
	admin, err := cluster.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	fake := fakeollama.New(t, fakeollama.Options{Models: []string{model}})
	t.Cleanup(fake.Close)
	cats := &catalog.Manager{Connect: func(ctx context.Context, database string) (*pgx.Conn, error) {
		return cluster.Connect(ctx, database)
	}}
	t.Cleanup(func() { cats.Close() })
	if _, err := cats.Get(ctx, db); err != nil {
		t.Fatalf("catalog: %v", err)
	}
	f := &fixture{cluster: cluster, fake: fake, cats: cats, admin: admin, db: db}
	f.srv, f.proxy = f.startProxy(t, f.engine(t, guard.Options{AllowFunctions: []string{"write_when_writable"}}), nil)
	return f
}

func randomSuffix(t testing.TB) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func (f *fixture) engine(t *testing.T, g guard.Options) *engine.Engine {
	t.Helper()
	client, err := llm.New(llm.Config{
		Host:        f.fake.URL(),
		Models:      map[llm.Role]string{llm.RoleGenerator: model, llm.RoleSmall: model},
		CallTimeout: 30 * time.Second,
		MaxRetries:  -1,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return &engine.Engine{
		LLM:          client,
		Catalogs:     f.cats,
		Cache:        engine.NewCache(1000, time.Hour),
		TrialTimeout: 5 * time.Second,
		Guard:        g,
	}
}

// startProxy serves an in-process proxy; configure adjusts the server.
func (f *fixture) startProxy(t *testing.T, eng *engine.Engine, configure func(*proxy.Server)) (*proxy.Server, string) {
	t.Helper()
	srv := &proxy.Server{
		Upstreams:  []proxy.Upstream{{Address: f.cluster.Addr(), TLS: proxy.UpstreamTLSDisable}},
		Translator: router.Translator{Engine: eng, StatementTimeout: time.Second},
		OnDDL:      func(database, _ string) { f.cats.Refresh(database) },
	}
	if configure != nil {
		configure(srv)
	}
	return srv, clienttest.ServeProxy(t, srv)
}

// checksum digests everything an ask could change: the victim tables, the
// audit log the writing function fills, and the sequence.
func (f *fixture) checksum(t *testing.T) string {
	t.Helper()
	var sum string
	err := f.admin.QueryRow(context.Background(), `SELECT md5(string_agg(r, '|' ORDER BY r)) FROM (
		SELECT 'a' || accounts::text AS r FROM accounts
		UNION ALL SELECT 'l' || audit_log::text FROM audit_log
		UNION ALL SELECT 's' || last_value::text || is_called::text FROM acct_seq
		UNION ALL SELECT 'c' || count(*)::text FROM scratch) s`).Scan(&sum)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// sqlReply is a generator answer: reasoning, then the SQL in a fence.
func sqlReply(sql string) string {
	return "Sub-questions:\n1. the rows -> " + sql + "\n```sql\n" + sql + "\n```"
}

// tagOf returns the marker the question of vector v carries, so the fake's
// rules match every path's and setting's wording of it.
func tagOf(v vector) string { return "hostile " + v.id + " " }

// scriptCorpus makes the fake model answer every vector's question with its
// SQL, at generation and at every fix.
func (f *fixture) scriptCorpus(vs []vector) {
	rules := []fakeollama.Rule{{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["accounts", "note"], "entities": []}`}}
	for _, v := range vs {
		rules = append(rules,
			// Matched on the asked question only: remembered pairs of other
			// vectors appear in the prompt as examples.
			fakeollama.Rule{Name: "candidate " + v.id, PromptContains: []string{fakeollama.PromptCandidate}, Match: fakeollama.QuestionContains(tagOf(v)), Reply: sqlReply(v.sql)},
			fakeollama.Rule{Name: "fix " + v.id, PromptContains: []string{fakeollama.PromptFixer}, Match: fakeollama.QuestionContains(tagOf(v)), Reply: sqlReply(v.sql)})
	}
	f.fake.SetRules(rules...)
}

// question is the wording of vector v on one path under one setting.
func question(v vector, path, setting string) string {
	return fmt.Sprintf("%svia %s under %s", tagOf(v), path, setting)
}

func proxyHostPort(addr string) (string, string) {
	h, p, _ := net.SplitHostPort(addr)
	return h, p
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
