package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

const workloadExamplePrompt = "You turn a query that a database already runs"

// pairsFixture is the fixture with staff (salary hidden from a clerk, who
// may not read sales either) and a workload of one staff–stores query.
type pairsFixture struct {
	*fixture
	clerk     string
	clerkConn *pgconn.PgConn
	workload  staticWorkload
}

const qStaffCity = "SELECT t2.city, count(*) FROM staff t1 JOIN stores t2 ON t2.id = t1.store_id WHERE t2.city = $1 GROUP BY t2.city"

func newPairsFixture(t *testing.T) *pairsFixture {
	f := newFixture(t)
	ctx := context.Background()
	clerk := pgtest.UniqueName(t, "clerk")
	if err := f.cluster.Exec(ctx, "postgres", `
CREATE TABLE staff (id int PRIMARY KEY, store_id int NOT NULL REFERENCES stores(id), name text NOT NULL, salary numeric NOT NULL);
INSERT INTO staff VALUES (1, 1, 'Ann', 10), (2, 2, 'Bo', 20), (3, 1, 'Cy', 30);
CREATE ROLE `+clerk+` LOGIN;
GRANT SELECT ON stores TO `+clerk+`;
GRANT SELECT (id, store_id, name) ON staff TO `+clerk+`;`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgconn.ParseConfig(f.cluster.URL(clerk, "", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	stores, staff := Relation{Name: "stores"}, Relation{Name: "staff"}
	w := staticWorkload{"postgres": {
		Joins: []LearnedJoin{{Left: ColumnRef{staff, "store_id"}, Right: ColumnRef{stores, "id"}, Count: 5}},
		Queries: []LearnedQuery{{Fingerprint: "fp-staff-city", SQL: qStaffCity, Relations: []Relation{staff, stores},
			Filtered: []ColumnRef{{stores, "city"}}, Count: 5}},
	}}
	return &pairsFixture{fixture: f, clerk: clerk, clerkConn: conn, workload: w}
}

// engine is an engine over the workload whose balanced profile has one
// generator (the test is about the examples, not the selection).
func (f *pairsFixture) engine(t *testing.T) (*Engine, *MemoryPairs) {
	eng := f.fixture.engine(t)
	eng.Workload = f.workload
	pairs := &MemoryPairs{}
	eng.Pairs = pairs
	ps := Profiles()
	ps[ProfileBalanced].Generators = ps[ProfileBalanced].Generators[:1]
	eng.Profiles = ps
	return eng, pairs
}

func (f *pairsFixture) ask(t *testing.T, eng *Engine, role, profile, question string) *Result {
	t.Helper()
	req := f.request(question)
	req.Profile = profile
	if role == f.clerk {
		req.User, req.Exec = role, ConnExecutor{Conn: f.clerkConn}
	}
	res, err := eng.Translate(context.Background(), req)
	if err != nil {
		t.Fatalf("%s asking %q: %v", role, question, err)
	}
	return res
}

func exampleReply(question, sql string) string {
	b, _ := json.Marshal(map[string]string{"question": question, "sql": sql})
	return string(b)
}

func workloadStage(res *Result) *StageTrace {
	for _, s := range res.Trace.Snapshot() {
		if s.Name == "workload examples" {
			return &s
		}
	}
	return nil
}

// candidatePrompts are the candidate prompts the fake model was sent.
func candidatePrompts(f *fakeollama.Server) []string {
	var out []string
	for _, r := range f.RequestsTo(fakeollama.RouteChat) {
		for _, m := range r.Messages {
			if strings.Contains(m.Content, candidatePrompt) {
				out = append(out, m.Content)
			}
		}
	}
	return out
}

// TestWorkloadSynthPairs: in balanced, the workload query offered for a
// question becomes a remembered pair once (stored values offered for its
// parameter, the call counted on the ask), shown to the same ask's
// generators and to later asks, to the clerk as well, since it names
// nothing the clerk may not read; fast makes none.
func TestWorkloadSynthPairs(t *testing.T) {
	f := newPairsFixture(t)
	const pairSQL = "SELECT st.city, count(*) FROM staff f JOIN stores st ON st.id = f.store_id WHERE st.city = 'LA' GROUP BY st.city"
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{keywordsPrompt}, Reply: `{"keywords": ["staff", "store", "city"]}`},
		fakeollama.Rule{Name: "example", PromptContains: []string{workloadExamplePrompt}, Reply: exampleReply("How many staff work in LA?", pairSQL)},
		fakeollama.Rule{Name: "candidate", PromptContains: []string{candidatePrompt}, Reply: sqlReply("SELECT count(*) FROM staff")},
	)

	eng, pairs := f.engine(t)
	f.ask(t, eng, "postgres", ProfileFast, "how many staff work per store city")
	if n := f.fake.Hits("example"); n != 0 {
		t.Fatalf("fast asked for %d workload examples", n)
	}

	res := f.ask(t, eng, "postgres", ProfileBalanced, "how many staff work per store city")
	if n := f.fake.Hits("example"); n != 1 {
		t.Fatalf("balanced asked for %d workload examples, want 1", n)
	}
	st := workloadStage(res)
	if st == nil || st.LLMCalls != 1 || st.PromptTokens == 0 || !strings.Contains(st.Note, "1 kept") {
		t.Errorf("workload examples stage %+v: want one call, counted, one pair kept", st)
	}
	var examplePrompt string
	for _, r := range f.fake.RequestsTo(fakeollama.RouteChat) {
		for _, m := range r.Messages {
			if strings.Contains(m.Content, "A query this database runs") {
				examplePrompt = m.Content
			}
		}
	}
	for _, w := range []string{qStaffCity, "stores.city contains 'LA'"} {
		if !strings.Contains(examplePrompt, w) {
			t.Errorf("example prompt lacks %q:\n%s", w, examplePrompt)
		}
	}
	ps, _ := pairs.Pairs(context.Background(), "postgres")
	if len(ps) != 1 || ps[0].Source != PairWorkload || ps[0].Role != "" || !strings.Contains(ps[0].SQL, "'LA'") {
		t.Fatalf("pairs %+v: want the one workload pair", ps)
	}
	cps := candidatePrompts(f.fake)
	if last := cps[len(cps)-1]; !strings.Contains(last, "Question: How many staff work in LA?") {
		t.Errorf("the pair is not an example of the ask that made it:\n%s", last)
	}

	// Once per query: later asks, by either role, make no more and see it.
	for _, role := range []string{"postgres", f.clerk} {
		f.fake.Reset()
		res := f.ask(t, eng, role, ProfileBalanced, "how many staff work in each store city")
		if n := f.fake.Hits("example"); n != 0 {
			t.Errorf("%s: asked for %d more workload examples", role, n)
		}
		if st := workloadStage(res); st == nil || st.LLMCalls != 0 {
			t.Errorf("%s: stage %+v: want no call", role, st)
		}
		cps := candidatePrompts(f.fake)
		if len(cps) == 0 || !strings.Contains(cps[0], "Question: How many staff work in LA?") {
			t.Errorf("%s: the pair is not shown: %q", role, cps)
		}
	}
}

// TestWorkloadSynthRefused: what the model answers is kept only when it
// passes the guard, reads the workload query's tables and nothing the
// asker may not read, and runs with rows; a refused query is not tried
// again, and the ask goes on either way.
func TestWorkloadSynthRefused(t *testing.T) {
	f := newPairsFixture(t)
	for _, tt := range []struct {
		name, reply, why string
	}{
		{"write", exampleReply("Remove the staff", "DELETE FROM staff"), "guard"},
		{"write in a CTE", exampleReply("Remove LA", "WITH d AS (DELETE FROM stores WHERE city = 'LA' RETURNING id) SELECT count(*) FROM d"), "guard"},
		{"hidden column", exampleReply("Who earns most in LA?", "SELECT f.name FROM staff f JOIN stores st ON st.id = f.store_id WHERE st.city = 'LA' ORDER BY f.salary DESC"), "may not read"},
		{"hidden table", exampleReply("Sales in LA?", "SELECT sum(s.amount) FROM sales s JOIN stores st ON st.id = s.store_id WHERE st.city = 'LA'"), "may not read"},
		{"other table", exampleReply("How many stores?", "SELECT count(*) FROM stores st, pg_catalog.pg_roles r"), "reads"},
		{"garbage", "I would rather not. {{{", "unusable answer"},
		{"empty", exampleReply("", ""), "no question"},
		{"no rows", exampleReply("Staff in Nowhere?", "SELECT st.city, count(*) FROM staff f JOIN stores st ON st.id = f.store_id WHERE st.city = 'Nowhere' GROUP BY st.city"), "no rows"},
		{"does not run", exampleReply("Staff in LA?", "SELECT st.town FROM staff f JOIN stores st ON st.id = f.store_id"), "trial"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.fake.Reset()
			f.fake.SetRules(
				fakeollama.Rule{Name: "keywords", PromptContains: []string{keywordsPrompt}, Reply: `{"keywords": ["staff", "store", "city"]}`},
				fakeollama.Rule{Name: "example", PromptContains: []string{workloadExamplePrompt}, Reply: tt.reply},
				fakeollama.Rule{Name: "candidate", PromptContains: []string{candidatePrompt}, Reply: sqlReply("SELECT count(*) FROM staff")},
			)
			eng, pairs := f.engine(t)
			for i, q := range []string{"how many staff work per store city", "staff count of each store city"} {
				res := f.ask(t, eng, f.clerk, ProfileBalanced, q)
				st := workloadStage(res)
				if i == 0 && (st == nil || !strings.Contains(st.Note, "refused") || !strings.Contains(st.Note, tt.why)) {
					t.Errorf("stage %+v: want refused (%s)", st, tt.why)
				}
			}
			if n := f.fake.Hits("example"); n < 1 || n > 2 { // a garbage answer is asked again once
				t.Errorf("%d workload example calls over two asks: want the one query tried once", n)
			}
			ps, _ := pairs.Pairs(context.Background(), "postgres")
			for _, p := range ps {
				if p.Source == PairWorkload {
					t.Errorf("kept %+v", p)
				}
			}
		})
	}
}

// TestWorkloadPairVisibility: a workload pair is shown only to a role that
// may read every relation and column its SQL names.
func TestWorkloadPairVisibility(t *testing.T) {
	f := newPairsFixture(t)
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{keywordsPrompt}, Reply: `{"keywords": ["staff", "salary"]}`},
		fakeollama.Rule{Name: "candidate", PromptContains: []string{candidatePrompt}, Reply: sqlReply("SELECT count(*) FROM staff")},
	)
	eng, pairs := f.engine(t)
	eng.Workload = nil
	ctx := context.Background()
	for _, p := range []Pair{
		{Question: "Which staff earn over 15?", SQL: "SELECT name FROM staff WHERE salary > 15", Source: PairWorkload},
		{Question: "Which staff work in store 1?", SQL: "SELECT name FROM staff WHERE store_id = 1", Source: PairWorkload},
	} {
		if err := pairs.AddPair(ctx, "postgres", p); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		role         string
		want, absent []string
	}{
		{"postgres", []string{"earn over 15", "work in store 1"}, nil},
		{f.clerk, []string{"work in store 1"}, []string{"earn over 15", "salary"}},
	} {
		f.fake.Reset()
		f.ask(t, eng, tt.role, ProfileFast, "which staff work in which store")
		cps := candidatePrompts(f.fake)
		if len(cps) == 0 {
			t.Fatalf("%s: no candidate prompt", tt.role)
		}
		for _, w := range tt.want {
			if !strings.Contains(cps[0], w) {
				t.Errorf("%s: prompt lacks %q:\n%s", tt.role, w, cps[0])
			}
		}
		for _, w := range tt.absent {
			if strings.Contains(cps[0], w) {
				t.Errorf("%s: prompt reveals %q:\n%s", tt.role, w, cps[0])
			}
		}
	}
}

// TestWorkloadPairRowSecurity: a role that sees every row (here the
// superuser) makes a workload pair holding a value of a row that
// row-level security hides from the clerk: the pair is kept for its maker
// alone, and no shared pair with values over that table reaches the
// clerk's prompt; shared pairs without values still do.
func TestWorkloadPairRowSecurity(t *testing.T) {
	f := newPairsFixture(t)
	ctx := context.Background()
	if err := f.cluster.Exec(ctx, "postgres", `
ALTER TABLE stores ENABLE ROW LEVEL SECURITY;
CREATE POLICY not_la ON stores FOR SELECT USING (city <> 'LA');`); err != nil {
		t.Fatal(err)
	}
	const pairSQL = "SELECT st.city, count(*) FROM staff f JOIN stores st ON st.id = f.store_id WHERE st.city = 'LA' GROUP BY st.city"
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{keywordsPrompt}, Reply: `{"keywords": ["staff", "store", "city"]}`},
		fakeollama.Rule{Name: "example", PromptContains: []string{workloadExamplePrompt}, Reply: exampleReply("How many staff work in LA?", pairSQL)},
		fakeollama.Rule{Name: "candidate", PromptContains: []string{candidatePrompt}, Reply: sqlReply("SELECT count(*) FROM staff")},
	)
	eng, pairs := f.engine(t)
	f.ask(t, eng, "postgres", ProfileBalanced, "how many staff work per store city")
	ps, _ := pairs.Pairs(ctx, "postgres")
	if len(ps) != 1 || ps[0].Source != PairWorkload || ps[0].Role != "postgres" {
		t.Fatalf("pairs %+v: want the workload pair kept for its maker", ps)
	}
	// Shared pairs as a store written before this rule, or an operator,
	// may hold them.
	for _, p := range []Pair{
		{Question: "Which staff work in the LA store?", SQL: "SELECT f.name FROM staff f JOIN stores st ON st.id = f.store_id WHERE st.city = 'LA'", Source: PairWorkload},
		{Question: "Which staff work in store number one?", SQL: "SELECT f.name FROM staff f JOIN stores st ON st.id = f.store_id WHERE st.id = 1", Source: PairOperator},
		{Question: "Which staff work in a store of each city?", SQL: "SELECT st.city, f.name FROM staff f JOIN stores st ON st.id = f.store_id", Source: PairOperator},
	} {
		if err := pairs.AddPair(ctx, "postgres", p); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		role         string
		want, absent []string
	}{
		{"postgres", []string{"'LA'", "store number one"}, nil},
		{f.clerk, []string{"a store of each city"}, []string{"'LA'", "in LA", "LA store", "store number one"}},
	} {
		f.fake.Reset()
		f.ask(t, eng, tt.role, ProfileBalanced, "how many staff work in each store city")
		if n := f.fake.Hits("example"); n != 0 {
			t.Errorf("%s: %d more workload examples asked for", tt.role, n)
		}
		var all []string
		for _, r := range f.fake.RequestsTo(fakeollama.RouteChat) {
			for _, m := range r.Messages {
				all = append(all, m.Content)
			}
		}
		cps := candidatePrompts(f.fake)
		if len(cps) == 0 {
			t.Fatalf("%s: no candidate prompt", tt.role)
		}
		for _, w := range tt.want {
			if !strings.Contains(cps[0], w) {
				t.Errorf("%s: prompt lacks %q:\n%s", tt.role, w, cps[0])
			}
		}
		for _, w := range tt.absent {
			for _, p := range all {
				if strings.Contains(p, w) {
					t.Errorf("%s: a prompt holds %q:\n%s", tt.role, w, p)
				}
			}
		}
	}
}
