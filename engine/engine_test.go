package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/internal/sampledb"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

type fixture struct {
	cluster *pgcluster.Cluster
	fake    *fakeollama.Server
	cats    *catalog.Manager
	conn    *pgconn.PgConn
}

const storesDDL = `
CREATE TABLE stores (id int PRIMARY KEY, city text NOT NULL);
COMMENT ON COLUMN stores.city IS 'city of the store, abbreviated';
CREATE TABLE sales (id int PRIMARY KEY, store_id int NOT NULL REFERENCES stores(id), amount numeric NOT NULL);
INSERT INTO stores VALUES (1, 'LA'), (2, 'NYC'), (3, 'Chicago');
INSERT INTO sales SELECT g, 1 + g % 3, g FROM generate_series(1, 30) g;
CREATE FUNCTION bump() RETURNS int LANGUAGE sql AS 'INSERT INTO sales VALUES (1000, 1, 1) RETURNING id';
`

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	cluster := pgtest.New(t, pgcluster.Options{})
	if err := cluster.Exec(ctx, "postgres", storesDDL); err != nil {
		t.Fatal(err)
	}
	fake := fakeollama.New(t, fakeollama.Options{})
	cats := &catalog.Manager{Connect: func(ctx context.Context, database string) (*pgx.Conn, error) {
		return cluster.Connect(ctx, database)
	}}
	t.Cleanup(func() { cats.Close() })
	cfg, err := pgconn.ParseConfig(cluster.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return &fixture{cluster: cluster, fake: fake, cats: cats, conn: conn}
}

func (f *fixture) engine(t *testing.T) *Engine {
	t.Helper()
	client, err := llm.New(llm.Config{
		Host:        f.fake.URL(),
		Models:      map[llm.Role]string{llm.RoleGenerator: "coder:7b", llm.RoleSmall: "coder:7b"},
		CallTimeout: 10 * time.Second,
		MaxRetries:  -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &Engine{LLM: client, Catalogs: f.cats, Cache: NewCache(10, time.Minute), TrialTimeout: 10 * time.Second}
}

func (f *fixture) request(q string) Request {
	return Request{Question: q, Database: "postgres", User: "postgres", TxStatus: pg.TxIdle, Exec: ConnExecutor{Conn: f.conn}}
}

// ownRequest is request on a connection of its own: an ask cut short by a
// timeout or a cancel may end its connection (pgconn closes one whose
// context ends mid-query), and the fixture's must outlive it.
func (f *fixture) ownRequest(t *testing.T, q string) Request {
	t.Helper()
	conn, err := pgconn.Connect(context.Background(), f.cluster.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	r := f.request(q)
	r.Exec = ConnExecutor{Conn: conn}
	return r
}

func sqlReply(sql string) string {
	return "Sub-questions:\n1. the rows -> " + sql + "\n```sql\n" + sql + "\n```"
}

func TestTranslate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()

	tests := []struct {
		name      string
		question  string
		keywords  string // reply of the keywords step
		candidate string
		fixes     []string // replies of successive fixer calls
		wantSQL   []string // substrings of the settled SQL
		wantCode  string   // SQLSTATE when the ask must fail
		wantCalls int
	}{
		{
			name:      "first try",
			question:  "total sales amount",
			keywords:  `{"keywords": ["sales", "amount"], "entities": []}`,
			candidate: sqlReply("SELECT sum(amount) FROM sales"),
			wantSQL:   []string{"sum(amount)"},
			wantCalls: 2,
		},
		{
			name:      "literal corrected to the stored abbreviation",
			question:  "sales of the Los Angeles store",
			keywords:  `{"keywords": ["sales", "store"], "entities": ["Los Angeles"]}`,
			candidate: sqlReply("SELECT sum(s.amount) FROM sales s JOIN stores st ON st.id = s.store_id WHERE st.city = 'Los Angeles'"),
			wantSQL:   []string{"st.city = 'LA'"},
			wantCalls: 2,
		},
		{
			name:      "execution error fixed",
			question:  "how many stores",
			keywords:  `{"keywords": ["stores"]}`,
			candidate: sqlReply("SELECT count(store_name) FROM stores"),
			fixes:     []string{sqlReply("SELECT count(*) FROM stores")},
			wantSQL:   []string{"count(*)"},
			wantCalls: 3,
		},
		{
			name:      "keywords garbage falls back to lexical",
			question:  "list every store city",
			keywords:  "Sure! Here are some keywords: stores, city",
			candidate: sqlReply("SELECT city FROM stores"),
			wantSQL:   []string{"SELECT city FROM stores"},
			wantCalls: 3, // keywords + its one repair + candidate
		},
		{
			name:      "writes rejected every round",
			question:  "remove all sales",
			keywords:  `{"keywords": ["sales"]}`,
			candidate: sqlReply("DELETE FROM sales"),
			fixes:     []string{sqlReply("DROP TABLE sales"), sqlReply("WITH d AS (DELETE FROM sales RETURNING *) SELECT count(*) FROM d"), sqlReply("DELETE FROM sales WHERE id = 1")},
			wantCode:  pg.CodeInsufficientPrivilege,
			wantCalls: 4, // fast: keywords + candidate + 2 fixes
		},
		{
			name:      "a user-defined function is refused by the guard",
			question:  "bump it",
			keywords:  `{"keywords": ["bump"]}`,
			candidate: sqlReply("SELECT bump()"),
			fixes:     []string{sqlReply("SELECT bump()"), sqlReply("SELECT bump()"), sqlReply("SELECT bump()")},
			wantCode:  pg.CodeInsufficientPrivilege,
			// keywords + candidate + 1 fix: the fix gave the same SQL back,
			// so a second round would send the same request again.
			wantCalls: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.fake.Reset()
			rules := []fakeollama.Rule{
				{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords, tt.question}, Reply: tt.keywords},
				{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate, tt.question}, Reply: tt.candidate},
			}
			for _, fix := range tt.fixes {
				rules = append(rules, fakeollama.Rule{Name: "fix", PromptContains: []string{fakeollama.PromptFixer}, Reply: fix, Times: 1})
			}
			f.fake.SetRules(rules...)
			eng := f.engine(t)
			res, err := eng.Translate(ctx, f.request(tt.question))
			calls := len(f.fake.RequestsTo(fakeollama.RouteChat))
			if calls != tt.wantCalls {
				t.Errorf("LLM calls = %d, want %d", calls, tt.wantCalls)
			}
			if tt.wantCode != "" {
				var ee *pg.Error
				if !errors.As(err, &ee) || ee.Code != tt.wantCode {
					t.Fatalf("err = %v, want SQLSTATE %s", err, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.wantSQL {
				if !strings.Contains(res.SQL(), want) {
					t.Errorf("SQL %q lacks %q", res.SQL(), want)
				}
			}
			if got, _, _ := res.Trace.LLMCalls(); got != tt.wantCalls {
				t.Errorf("trace counts %d LLM calls, want %d", got, tt.wantCalls)
			}
		})
	}

	// Nothing the model wrote changed the data.
	rs, err := f.conn.Exec(ctx, "SELECT count(*) FROM sales").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if n := string(rs[0].Rows[0][0]); n != "30" {
		t.Fatalf("sales rows = %s, want 30", n)
	}
}

func TestTranslateCacheAndFailures(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["stores"]}`},
		fakeollama.Rule{Name: "slow", PromptContains: []string{fakeollama.PromptCandidate, "slowly"}, Reply: sqlReply("SELECT 1"), Delay: 10 * time.Minute}, // forever, for the test
		fakeollama.Rule{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply("SELECT count(*) FROM stores")},
	)
	eng := f.engine(t)

	first, err := eng.Translate(ctx, f.request("How many stores?"))
	if err != nil {
		t.Fatal(err)
	}
	before := len(f.fake.Requests())
	second, err := eng.Translate(ctx, f.request("  how many STORES "))
	if err != nil {
		t.Fatal(err)
	}
	if after := len(f.fake.Requests()); after != before || !second.Cached || second.SQL() != first.SQL() {
		t.Fatalf("cache miss: requests %d → %d, cached=%v, %q vs %q", before, after, second.Cached, first.SQL(), second.SQL())
	}
	// Answered or cached, the result carries the session's resolution as
	// the ask probed it (the table-function form seals with it).
	for _, r := range []*Result{first, second} {
		if r.Names == nil || r.Names.Relation("stores") == "" || r.Names.Relation("stores") == "pg_catalog" {
			t.Fatalf("result (cached %v) does not carry the session's names: %v", r.Cached, r.Names)
		}
	}

	t.Run("ask timeout", func(t *testing.T) {
		slow := f.engine(t)
		slow.AskTimeout = 300 * time.Millisecond
		// Returning at all shows the timeout: the model never answers.
		_, err := slow.Translate(ctx, f.ownRequest(t, "count stores slowly"))
		var ee *pg.Error
		if !errors.As(err, &ee) || ee.Code != pg.CodeQueryCanceled {
			t.Fatalf("err = %v, want %s", err, pg.CodeQueryCanceled)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(200*time.Millisecond, cancel)
		_, err := eng.Translate(cctx, f.ownRequest(t, "count stores slowly please"))
		var ee *pg.Error
		if !errors.As(err, &ee) || ee.Code != pg.CodeQueryCanceled || !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want cancellation", err)
		}
	})
	t.Run("failed transaction", func(t *testing.T) {
		req := f.request("anything")
		req.TxStatus = pg.TxFailed
		_, err := eng.Translate(ctx, req)
		if !errors.Is(err, pg.ErrFailedTransaction) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("model unreachable", func(t *testing.T) {
		client, err := llm.New(llm.Config{Host: "127.0.0.1:1", Models: map[llm.Role]string{llm.RoleGenerator: "m", llm.RoleSmall: "m"}, MaxRetries: -1})
		if err != nil {
			t.Fatal(err)
		}
		down := f.engine(t)
		down.LLM = client
		down.Cache = nil
		_, err = down.Translate(ctx, f.ownRequest(t, "how many stores"))
		var ee *pg.Error
		if !errors.As(err, &ee) || ee.Code != pg.CodeSystemError || !strings.Contains(ee.Hint, "ollama serve") {
			t.Fatalf("err = %v (hint %q), want %s with an `ollama serve` hint", err, hintOf(err), pg.CodeSystemError)
		}
	})
}

func hintOf(err error) string {
	var ee *pg.Error
	if errors.As(err, &ee) {
		return ee.Hint
	}
	return ""
}

// The 4,000-column schema must be cut down to fit a small model's context,
// keeping the tables the question is about.
func TestSchemaSelectionWide(t *testing.T) {
	ctx := context.Background()
	cluster := pgtest.New(t, pgcluster.Options{})
	conn, err := cluster.Connect(ctx, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := sampledb.WideSchema(ctx, conn, 200, 20); err != nil {
		t.Fatal(err)
	}
	if err := sampledb.Load(ctx, conn, sampledb.Small); err != nil {
		t.Fatal(err)
	}
	snap, err := catalog.Build(ctx, conn, "postgres", catalog.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{}
	e.applyDefaults()
	a := &ask{req: Request{Question: "which products were returned most often"}, snap: snap, schema0: snap.Schema, trace: &Trace{},
		keywords: []string{"products", "returned"}}
	e.selectSchema(a)
	tokens := len(a.schema) / 4
	if tokens > e.SchemaMaxTokens {
		t.Fatalf("schema prompt ~%d tokens, budget %d", tokens, e.SchemaMaxTokens)
	}
	for _, want := range []string{"CREATE TABLE public.products", "CREATE TABLE public.returns"} {
		if !strings.Contains(a.schema, want) && !strings.Contains(a.schema, strings.Replace(want, "public.", "", 1)) {
			t.Errorf("selected schema lacks %q:\n%.2000s", want, a.schema)
		}
	}
	t.Logf("wide schema: %d tables, selected ~%d tokens; %s", len(snap.Schema.Tables), tokens, a.trace.Stages[0].Note)
}

// The model sees only what the asking role may SELECT.
func TestPrivilegesRestrictSchema(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.cluster.Exec(ctx, "postgres", `CREATE ROLE clerk LOGIN; GRANT SELECT ON stores TO clerk`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgconn.ParseConfig(f.cluster.URL("clerk", "", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	clerk, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer clerk.Close(ctx)
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["stores", "sales"]}`},
		fakeollama.Rule{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply("SELECT count(*) FROM stores")},
	)
	eng := f.engine(t)
	req := f.request("how many stores and sales")
	req.User, req.Exec = "clerk", ConnExecutor{Conn: clerk}
	if _, err := eng.Translate(ctx, req); err != nil {
		t.Fatal(err)
	}
	var prompt string
	for _, r := range f.fake.RequestsTo(fakeollama.RouteChat) {
		for _, m := range r.Messages {
			if strings.Contains(m.Content, fakeollama.PromptCandidate) {
				prompt = m.Content
			}
		}
	}
	if !strings.Contains(prompt, "stores") || strings.Contains(prompt, "CREATE TABLE sales") || strings.Contains(prompt, "CREATE TABLE public.sales") {
		t.Fatalf("candidate prompt should show stores but not sales:\n%s", prompt)
	}
}

// A role that may read no table gets 42501 with the privileges hint before
// any model call, not an internal error from an empty prompt.
func TestPrivilegesNothingReadable(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	role := fmt.Sprintf("nobody_%d", time.Now().UnixNano())
	if err := f.cluster.Exec(ctx, "postgres", "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgconn.ParseConfig(f.cluster.URL(role, "", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	f.fake.SetRules(fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["stores"]}`})
	f.fake.Reset()
	req := f.request("how many stores")
	req.User, req.Exec = role, ConnExecutor{Conn: conn}
	_, err = f.engine(t).Translate(ctx, req)
	var ee *pg.Error
	if !errors.As(err, &ee) || ee.Code != pg.CodeInsufficientPrivilege || !strings.Contains(ee.Message, role) || !strings.Contains(ee.Hint, "GRANT SELECT") {
		t.Fatalf("err = %v, want 42501 naming the role with the privileges hint", err)
	}
	if n := len(f.fake.RequestsTo(fakeollama.RouteChat)); n != 0 {
		t.Errorf("%d model calls for a role that can read nothing", n)
	}
}
