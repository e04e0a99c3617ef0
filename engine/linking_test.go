package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

func TestSharedPrefixes(t *testing.T) {
	parts := func(names ...string) [][]string {
		var out [][]string
		for _, n := range names {
			out = append(out, descindex.Split(n))
		}
		return out
	}
	for _, tt := range []struct {
		names []string
		want  []string
	}{
		{[]string{"crmAccount", "crmTransaction", "crmTxLine", "crmContact", "audit"}, []string{"crm"}},
		{[]string{"tbl_orders", "tbl_customers", "tbl_items"}, []string{"tbl"}},
		{[]string{"orders", "customers", "order_items"}, nil},      // one multi-part name
		{[]string{"order_items", "order_notes", "customers"}, nil}, // too few to learn from
		{[]string{"cust_id", "cust_name", "cust_city", "created"}, []string{"cust"}},
	} {
		got := sharedPrefixes(parts(tt.names...))
		var keys []string
		for k := range got {
			keys = append(keys, k)
		}
		if !slices.Equal(keys, tt.want) {
			t.Errorf("sharedPrefixes(%q) = %q, want %q", tt.names, keys, tt.want)
		}
	}
}

func TestSegment(t *testing.T) {
	vocab := map[string]bool{"paper": true, "keyphrase": true, "key": true, "phrase": true, "id": true, "author": true, "dataset": true}
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"paperkeyphrase", []string{"paper", "keyphrase"}}, // fewest words
		{"paperid", []string{"paper", "id"}},
		{"authorid", []string{"author", "id"}},
		{"paper", nil},     // one word is no split
		{"paperxyz", nil},  // not all vocabulary
		{"keyphrase", nil}, // the word itself is in the vocabulary, but so is key+phrase: fewest is 1 → nil
	} {
		v := vocab
		if tt.in == "keyphrase" {
			v = map[string]bool{"key": true, "phrase": true}
			tt.want = []string{"key", "phrase"}
		}
		if got := segment(tt.in, v); !slices.Equal(got, tt.want) {
			t.Errorf("segment(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestKeyLike(t *testing.T) {
	for name, want := range map[string]bool{"aid": true, "business_id": true, "state_code": true, "PartNo": false, "part_no": true,
		"name": false, "paid": true, "year": false, "ownerKey": true} {
		if got := keyLike(name); got != want {
			t.Errorf("keyLike(%q) = %v, want %v", name, got, want)
		}
	}
}

func col(name, typ, comment string) catalog.Column {
	return catalog.Column{Name: name, Type: typ, Nullable: true, Comment: comment}
}

// linkSchema: a crm schema with a shared table prefix and camelCase names,
// and a scholar schema without declared keys, where writes joins author
// and paper by same-named id columns.
func linkSchema() *catalog.Schema {
	s := &catalog.Schema{Tables: []catalog.Table{
		{Schema: "crm", Name: "crmAccount", Kind: catalog.KindTable, RowEstimate: 10, PrimaryKey: []string{"crmAccountId"},
			Columns: []catalog.Column{col("crmAccountId", "integer", ""), col("crmAccountName", "text", ""), col("crmRegion", "text", "")}},
		{Schema: "crm", Name: "crmTransaction", Kind: catalog.KindTable, RowEstimate: 10,
			Columns:     []catalog.Column{col("crmTxId", "integer", ""), col("crmAccountId", "integer", ""), col("crmTxDate", "date", ""), col("crmTxAmount", "numeric", "")},
			ForeignKeys: []catalog.ForeignKey{{Columns: []string{"crmAccountId"}, RefSchema: "crm", RefTable: "crmAccount", RefColumns: []string{"crmAccountId"}}}},
		{Schema: "crm", Name: "crmContact", Kind: catalog.KindTable, RowEstimate: 10,
			Columns: []catalog.Column{col("crmContactId", "integer", ""), col("crmEmail", "text", "")}},
		{Schema: "scholar", Name: "author", Kind: catalog.KindTable, RowEstimate: 10,
			Columns: []catalog.Column{col("authorid", "bigint", ""), col("authorname", "text", "full name of the author")}},
		{Schema: "scholar", Name: "paper", Kind: catalog.KindTable, RowEstimate: 10,
			Columns: []catalog.Column{col("paperid", "bigint", ""), col("title", "text", ""), col("year", "bigint", ""), col("venueid", "bigint", "")}},
		{Schema: "scholar", Name: "writes", Kind: catalog.KindTable, RowEstimate: 10,
			Columns: []catalog.Column{col("paperid", "bigint", ""), col("authorid", "bigint", "")}},
		{Schema: "scholar", Name: "venue", Kind: catalog.KindTable, RowEstimate: 10,
			Columns: []catalog.Column{col("venueid", "bigint", ""), col("venuename", "text", "")}},
		{Schema: "scholar", Name: "paperkeyphrase", Kind: catalog.KindTable, RowEstimate: 10,
			Columns: []catalog.Column{col("paperid", "bigint", ""), col("keyphraseid", "bigint", "")}},
		{Schema: "scholar", Name: "keyphrase", Kind: catalog.KindTable, RowEstimate: 10,
			Columns: []catalog.Column{col("keyphraseid", "bigint", ""), col("keyphrasename", "text", "")}},
	}}
	// Padding tables, so the whole schema exceeds the small budgets below.
	for i := 0; i < 30; i++ {
		cols := []catalog.Column{col("id", "integer", "")}
		for j := 0; j < 8; j++ {
			cols = append(cols, col("measurement_value_"+string(rune('a'+j)), "numeric", "a measurement of the instrument"))
		}
		s.Tables = append(s.Tables, catalog.Table{Schema: "lab", Name: "instrument_log_" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Kind: catalog.KindTable, RowEstimate: 10, Columns: cols})
	}
	return s
}

func TestSelectSchemaLinking(t *testing.T) {
	s := linkSchema()
	e := &Engine{}
	e.applyDefaults()
	for _, tt := range []struct {
		question string
		want     []string // detailed, in any order
		absent   []string
	}{
		{"total amount of transactions per account region", []string{"crm.crmTransaction", "crm.crmAccount"}, []string{"crm.crmContact"}},
		{"how many papers has each author written", []string{"scholar.author", "scholar.paper", "scholar.writes"}, nil},
		{"papers with the keyphrase deep learning", []string{"scholar.paper", "scholar.keyphrase", "scholar.paperkeyphrase"}, nil},
		{"the email of every contact", []string{"crm.crmContact"}, []string{"scholar.paper"}},
	} {
		a := &ask{req: Request{Question: tt.question}, schema0: s, trace: &Trace{}, keywords: lexicalKeywords(tt.question)}
		got := e.selectSchemaBudget(a, 1000)
		for _, w := range tt.want {
			if !slices.Contains(got, w) {
				t.Errorf("%q: selected %q, lacks %s", tt.question, got, w)
			}
		}
		for _, w := range tt.absent {
			if slices.Contains(got, w) {
				t.Errorf("%q: selected %q, includes %s", tt.question, got, w)
			}
		}
		if n := estimateTokens(a.schema); n > 1000 {
			t.Errorf("%q: ~%d tokens over the 1000 budget", tt.question, n)
		}
		// The soft schema names every other table.
		if !strings.Contains(a.schema, "instrument_log_aa") {
			t.Errorf("%q: the soft schema does not list the other tables:\n%s", tt.question, a.schema)
		}
	}
}

// A wide table is cut to the columns that matter plus its keys; the others
// are listed by name.
func TestSelectSchemaColumnFilter(t *testing.T) {
	s := linkSchema()
	cols := []catalog.Column{col("flight_id", "integer", ""), col("airline_code", "text", ""), col("departure_time", "bigint", "")}
	for _, n := range []string{"meal", "aircraft", "stops", "connections", "dual", "range", "weight", "capacity", "payload", "speed", "pressurized"} {
		cols = append(cols, col(n+"_info", "text", ""))
	}
	s.Tables = append(s.Tables, catalog.Table{Schema: "atis", Name: "flight", Kind: catalog.KindTable, RowEstimate: 10, PrimaryKey: []string{"flight_id"}, Columns: cols})
	e := &Engine{}
	e.applyDefaults()
	q := "departure time of each flight"
	a := &ask{req: Request{Question: q}, schema0: s, trace: &Trace{}, keywords: lexicalKeywords(q)}
	got := e.selectSchemaBudget(a, 1000)
	if !slices.Contains(got, "atis.flight") {
		t.Fatalf("selected %q, lacks atis.flight", got)
	}
	for _, want := range []string{"departure_time bigint", "flight_id integer", "other columns: airline_code"} {
		if !strings.Contains(a.schema, want) {
			t.Errorf("schema lacks %q:\n%s", want, a.schema)
		}
	}
	if strings.Contains(a.schema, "meal_info text") {
		t.Errorf("schema details a column the question does not need:\n%s", a.schema)
	}
}

// The lexicon, with the full rendering's size, is computed once per schema
// fingerprint, not per ask.
func TestLexiconCached(t *testing.T) {
	s := linkSchema()
	s.Fingerprint = "fp1"
	var l lexicons
	a, b := l.get(s), l.get(s)
	if a != b {
		t.Error("the same fingerprint built the lexicon twice")
	}
	s2 := linkSchema()
	s2.Tables = s2.Tables[:3]
	s2.Fingerprint = "fp2"
	if c := l.get(s2); c == a || len(c.tables) != 3 {
		t.Errorf("another fingerprint got the first schema's lexicon (%d tables)", len(c.tables))
	}
	if a.fullTokens != estimateTokens(s.RenderFull(catalog.RenderOptions{})) {
		t.Errorf("fullTokens %d, rendering is ~%d", a.fullTokens, estimateTokens(s.RenderFull(catalog.RenderOptions{})))
	}
}

// A value hit ranks the table that stores it.
func TestSelectSchemaValueHit(t *testing.T) {
	s := linkSchema()
	e := &Engine{}
	e.applyDefaults()
	q := "everything about Zanzibar"
	a := &ask{req: Request{Question: q}, schema0: s, trace: &Trace{}, keywords: lexicalKeywords(q),
		values: []valueindex.Match{{Schema: "scholar", Table: "venue", Column: "venuename", Value: "Zanzibar", Score: 1, Keyword: "Zanzibar", Exact: true}}}
	if got := e.selectSchemaBudget(a, 1000); len(got) == 0 || got[0] != "scholar.venue" {
		t.Errorf("selected %q, want scholar.venue first", got)
	}
}

func modelEngine(t testing.TB, fake *fakeollama.Server) *Engine {
	t.Helper()
	client, err := llm.New(llm.Config{
		Host:        fake.URL(),
		Models:      map[llm.Role]string{llm.RoleGenerator: "coder:7b", llm.RoleSmall: "coder:7b"},
		CallTimeout: 10 * time.Second,
		MaxRetries:  -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{LLM: client, SchemaMaxTokens: 1000}
	e.applyDefaults()
	return e
}

const (
	filterPrompt    = "mark the ones that could help answer"
	tablesPrompt    = "You choose the tables of a PostgreSQL database"
	selectionPrompt = "You choose the tables and columns"
)

func TestSelectSchemaWithModel(t *testing.T) {
	ctx := context.Background()
	q := "how many papers has each author written"
	tests := []struct {
		name                    string
		filter, tables, columns string
		want, absent            []string // substrings of the final schema
		calls                   int
		kept                    bool // the deterministic selection stays
		maxCalls                int  // the profile's cap (0: 30)
	}{
		{
			name:    "three steps, join path and keys kept",
			filter:  `{"columns": ["scholar.author.authorname", "scholar.paper.title"]}`,
			tables:  `{"reasoning": "authors and papers", "tables": ["scholar.author", "scholar.paper"]}`,
			columns: `{"reasoning": "", "tables": ["scholar.author", "scholar.paper", "scholar.writes"], "columns": {"scholar.author": ["authorname"], "scholar.paper": ["title"]}}`,
			// writes joins the two and is added; authorid/paperid are join columns.
			want:   []string{"CREATE TABLE scholar.writes", "authorid bigint", "paperid bigint", "authorname text", "title text"},
			absent: []string{"CREATE TABLE scholar.venue", "year bigint"},
			calls:  3,
		},
		{
			name:    "unusable filter answer keeps every column",
			filter:  `not json`,
			tables:  `{"reasoning": "", "tables": ["scholar.author", "scholar.writes", "scholar.paper"]}`,
			columns: `{"reasoning": "", "tables": [], "columns": {}}`,
			want:    []string{"CREATE TABLE scholar.writes", "CREATE TABLE scholar.author", "year bigint"},
			calls:   4, // the unusable answer is asked for once more

		},
		{
			name:     "a spent budget degrades each step to its input",
			filter:   `{"columns": ["scholar.author.authorname", "scholar.paper.title", "scholar.writes.paperid"]}`,
			maxCalls: 1,
			// tables and columns steps find no call left: every filtered
			// table, whole.
			want:  []string{"CREATE TABLE scholar.writes", "CREATE TABLE scholar.author", "year bigint"},
			calls: 1,
		},
		{
			name:    "unknown tables keep the deterministic selection",
			filter:  `{"columns": ["scholar.author.authorname"]}`,
			tables:  `{"reasoning": "", "tables": ["people", "documents"]}`,
			columns: `{"reasoning": "", "tables": [], "columns": {}}`,
			calls:   2,
			kept:    true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := fakeollama.New(t, fakeollama.Options{})
			fake.SetRules(
				fakeollama.Rule{Name: "filter", PromptContains: []string{filterPrompt}, Reply: tt.filter},
				fakeollama.Rule{Name: "tables", PromptContains: []string{tablesPrompt}, Reply: tt.tables},
				fakeollama.Rule{Name: "columns", PromptContains: []string{selectionPrompt}, Reply: tt.columns},
			)
			e := modelEngine(t, fake)
			a := &ask{req: Request{Question: q}, schema0: linkSchema(), trace: &Trace{}, keywords: lexicalKeywords(q),
				client: budgetClient{Client: e.LLM, b: &budget{maxCalls: cmp.Or(tt.maxCalls, 30)}}}
			e.selectSchema(a)
			before := a.schema
			if err := e.selectSchemaWithModel(ctx, a); err != nil {
				t.Fatal(err)
			}
			st := a.trace.Stages[len(a.trace.Stages)-1]
			if st.Name != "schema-model" || st.LLMCalls != tt.calls {
				t.Errorf("stage %q with %d calls, want schema-model with %d (%s)", st.Name, st.LLMCalls, tt.calls, st.Note)
			}
			if tt.kept {
				if a.schema != before {
					t.Errorf("the deterministic selection was replaced:\n%s", a.schema)
				}
				return
			}
			for _, w := range tt.want {
				if !strings.Contains(a.schema, w) {
					t.Errorf("schema lacks %q:\n%s", w, a.schema)
				}
			}
			for _, w := range tt.absent {
				if strings.Contains(a.schema, w) {
					t.Errorf("schema has %q:\n%s", w, a.schema)
				}
			}
			if n := estimateTokens(a.schema); n > e.SchemaMaxTokens {
				t.Errorf("~%d tokens over the budget", n)
			}
		})
	}
}

// A name the question uses is corrected to the code the column stores, as a
// table of the same database pairs them (item: literal handling).
func TestTranslateAliasLiteral(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.cluster.Exec(ctx, "postgres", `
		CREATE TABLE us_state (state_code text PRIMARY KEY, state_name text NOT NULL);
		INSERT INTO us_state VALUES ('CA', 'California'), ('NY', 'New York'), ('TX', 'Texas');
		CREATE TABLE shop (id int PRIMARY KEY, shop_name text, state text);
		INSERT INTO shop VALUES (1, 'Corner Books', 'CA'), (2, 'Deli', 'NY'), (3, 'Feed', 'CA');`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, sql, want string
	}{
		{"equality", "SELECT count(*) FROM shop WHERE state = 'California'", "state = 'CA'"},
		{"pattern on a code column", "SELECT count(*) FROM shop WHERE state ILIKE '%California%'", "state ILIKE '%CA%'"},
		// Patterns that find what they look for, or have no counterpart,
		// stay as written.
		{"pattern that matches", "SELECT count(*) FROM shop WHERE shop_name ILIKE '%books%' AND state = 'CA'", "shop_name ILIKE '%books%'"},
		{"prefix without a counterpart", "SELECT count(*) FROM shop WHERE state LIKE 'Calif%'", "state LIKE 'Calif%'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.fake.SetRules(
				fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords}, Reply: `{"keywords": ["shops"], "entities": ["California"]}`},
				fakeollama.Rule{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate}, Reply: sqlReply(tc.sql)},
			)
			f.fake.Reset()
			res, err := f.engine(t).Translate(ctx, f.request("how many shops are in California"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(res.SQL(), tc.want) {
				t.Errorf("SQL %q, want it to contain %q", res.SQL(), tc.want)
			}
			// The candidate prompt already showed the stored code for "California".
			var prompt string
			for _, r := range f.fake.RequestsTo(fakeollama.RouteChat) {
				for _, m := range r.Messages {
					if strings.Contains(m.Content, fakeollama.PromptCandidate) {
						prompt = m.Content
					}
				}
			}
			if !strings.Contains(prompt, "shop.state contains 'CA'") {
				t.Errorf("candidate prompt does not show shop.state 'CA':\n%s", prompt)
			}
		})
	}
}

// A glossary entry the question matches ranks the tables its SQL names.
func TestSelectSchemaGlossary(t *testing.T) {
	s := linkSchema()
	e := &Engine{}
	e.applyDefaults()
	q := "how many prolific writers are there"
	a := &ask{req: Request{Question: q}, schema0: s, trace: &Trace{}, keywords: lexicalKeywords(q),
		descs: []descindex.Hit{{Doc: descindex.Doc{Kind: descindex.KindGlossary, Term: "prolific writer",
			Text: "an author with more than 10 papers", SQLHint: "(SELECT count(*) FROM scholar.writes w WHERE w.authorid = author.authorid) > 10"}, Score: 1}}}
	got := e.selectSchemaBudget(a, 1000)
	for _, w := range []string{"scholar.writes", "scholar.author"} {
		if !slices.Contains(got, w) {
			t.Errorf("selected %q, lacks %s", got, w)
		}
	}
}

func TestNamedTables(t *testing.T) {
	lx := buildLexicon(linkSchema())
	var got []string
	for _, i := range lx.namedTables("SELECT 1 FROM scholar.writes w JOIN author ON author.authorid = w.authorid WHERE paperx = 1") {
		got = append(got, lx.tables[i].key)
	}
	if want := []string{"scholar.writes", "scholar.author"}; !slices.Equal(got, want) {
		t.Errorf("namedTables = %q, want %q", got, want)
	}
}

// intTable is a table of integer columns in schema public.
func intTable(name string, cols ...string) catalog.Table {
	tb := catalog.Table{Schema: "public", Name: name, Kind: catalog.KindTable, RowEstimate: 10}
	for _, c := range cols {
		tb.Columns = append(tb.Columns, col(c, "integer", ""))
	}
	return tb
}

// Tables that match the same question terms get exactly the same score
// on every ask, so ties keep the catalog's order instead of one that
// changes with how a map happens to be iterated.
func TestTableScoresDeterministic(t *testing.T) {
	s := &catalog.Schema{}
	add := func(name string, cols ...string) { s.Tables = append(s.Tables, intTable(name, cols...)) }
	// Six tied tables, each with every term; filler tables make the terms'
	// document frequencies (so their weights) differ.
	for i := 0; i < 6; i++ {
		add(fmt.Sprintf("tied%d", i), "alpha", "bravo", "charlie", "delta", "echo")
	}
	for i, cols := range [][]string{{"alpha"}, {"alpha"}, {"alpha", "bravo"}, {"charlie"}, {"delta"}, {"delta", "echo"}} {
		add(fmt.Sprintf("filler%d", i), cols...)
	}
	for i := 0; i < 12; i++ {
		add(fmt.Sprintf("other%d", i), "zulu")
	}
	lx := buildLexicon(s)
	q := questionTerms("alpha bravo charlie delta echo", nil)
	for run := 0; run < 50; run++ {
		sc := lx.tableScores(q, nil, nil)
		for i := 1; i < 6; i++ {
			if sc[i] != sc[0] {
				t.Fatalf("run %d: tied%d scores %v, tied0 %v", run, i, sc[i], sc[0])
			}
		}
	}
}

// Joins found by shared key columns are linked in the same order on every
// build, so a tie between two bridge tables is decided the same way.
func TestLexiconJoinsDeterministic(t *testing.T) {
	s := &catalog.Schema{}
	add := func(name string, cols ...string) { s.Tables = append(s.Tables, intTable(name, cols...)) }
	add("flight", "flight_id", "leg_id")
	add("airport", "airport_code", "zone_code")
	// Four bridges between flight and airport, each by other key columns.
	add("stop", "flight_id", "airport_code")
	add("leg", "leg_id", "airport_code")
	add("service", "flight_id", "zone_code")
	add("zone", "leg_id", "zone_code")
	first := fmt.Sprint(buildLexicon(s).adj)
	for run := 0; run < 30; run++ {
		if got := fmt.Sprint(buildLexicon(s).adj); got != first {
			t.Fatalf("build %d: joins %s, first build %s", run, got, first)
		}
	}
	lx := buildLexicon(s)
	if b := lx.bridge(0, 1, make([]float64, len(s.Tables)), map[int]bool{}); b < 2 {
		t.Fatalf("bridge between flight and airport = %d", b)
	}
}

func nsTable(ns, name string, cols ...string) catalog.Table {
	tb := intTable(name, cols...)
	tb.Schema = ns
	return tb
}

// Schema ranking on a warehouse-shaped catalog: a schema whose prefixed,
// connected tables cover the question outranks a plain same-word table of
// another schema; an entity table reached through a join comes in when the
// question names its attribute, and only then; the order is the same on
// every call.
func TestRankSchemas(t *testing.T) {
	s := &catalog.Schema{Tables: []catalog.Table{
		nsTable("mart", "business", "business_id", "name"),
		nsTable("mart", "product", "product_id", "name", "price"),
		nsTable("mart", "sale", "sale_id", "product_id", "amount"),
		nsTable("uni", "course", "course_id", "instructor_id", "title"),
		nsTable("uni", "instructor", "instructor_id", "person_id", "rank"),
		nsTable("uni", "person", "person_id", "email", "name"),
		nsTable("uni", "room", "room_id", "name", "capacity"),
		nsTable("yelp", "yp_business", "business_id", "name", "city"),
		nsTable("yelp", "yp_review", "review_id", "business_id", "stars"),
		nsTable("yelp", "yp_tip", "tip_id", "business_id", "likes"),
	}}
	lx := buildLexicon(s)
	names := func(q string) []string {
		qt := questionTerms(q, lexicalKeywords(q))
		var out []string
		for _, i := range lx.rank(lx.tableScores(qt, nil, nil), qt, nil, nil) {
			out = append(out, lx.tables[i].key)
		}
		return out
	}
	for _, tt := range []struct {
		question     string
		before, then string // before ranks ahead of then ("" then: absent)
		absent       string
	}{
		{"average stars of the reviews of each business", "yelp.yp_review", "mart.business", ""},
		{"the names of the instructors of each course", "uni.instructor", "", ""},
		{"the names of the instructors of each course", "uni.person", "", "mart.sale"},
		{"how many courses each instructor teaches", "uni.course", "", "uni.person"},
	} {
		got := names(tt.question)
		bi, ti := slices.Index(got, tt.before), slices.Index(got, tt.then)
		switch {
		case bi < 0:
			t.Errorf("%q: ranked %q, lacks %s", tt.question, got, tt.before)
		case tt.then != "" && ti >= 0 && ti < bi:
			t.Errorf("%q: ranked %q, %s before %s", tt.question, got, tt.then, tt.before)
		case tt.absent != "" && slices.Contains(got, tt.absent):
			t.Errorf("%q: ranked %q, includes %s", tt.question, got, tt.absent)
		}
		for run := 0; run < 20; run++ {
			if again := names(tt.question); !slices.Equal(again, got) {
				t.Fatalf("%q: run %d ranked %q, first %q", tt.question, run, again, got)
			}
		}
	}
}

// A warehouse whose table names alone would crowd the prompt: the schemas
// the question is not about are summarized in one line each.
func TestSelectSchemaSummarizesOtherSchemas(t *testing.T) {
	s := &catalog.Schema{}
	for _, ns := range []string{"billing", "logistics", "marketing", "people"} {
		for i := 0; i < 60; i++ {
			s.Tables = append(s.Tables, nsTable(ns, fmt.Sprintf("%s_quarterly_snapshot_%02d", ns, i), "id", fmt.Sprintf("measure_%02d", i)))
		}
	}
	s.Tables = append(s.Tables, nsTable("people", "employee", "id", "salary"))
	e := &Engine{}
	e.applyDefaults()
	a := &ask{req: Request{Question: "average salary of the employees"}, schema0: s, trace: &Trace{}, keywords: lexicalKeywords("average salary of the employees")}
	got := e.selectSchemaBudget(a, 4000)
	if !slices.Contains(got, "people.employee") {
		t.Fatalf("selected %q", got)
	}
	for _, want := range []string{"-- Other schemas (not shown):", "-- billing: 60 tables: billing_quarterly_snapshot_00,", "-- marketing: 60 tables:"} {
		if !strings.Contains(a.schema, want) {
			t.Errorf("missing %q in\n%s", want, a.schema)
		}
	}
	if strings.Contains(a.schema, "-- people:") || estimateTokens(a.schema) > 4000 {
		t.Errorf("the selected schema is summarized, or the budget is exceeded (~%d tokens):\n%s", estimateTokens(a.schema), a.schema)
	}
}

// A glossary term over a join (a metric of two semantic models) points
// linking at each of its tables, and is shown only to a role that may read
// them all.
func TestGlossaryOverJoin(t *testing.T) {
	s := linkSchema()
	e := &Engine{}
	e.applyDefaults()
	q := "what is the quarterly yield"
	hit := descindex.Hit{Doc: descindex.Doc{Kind: descindex.KindGlossary, Term: "quarterly yield", Schema: "crm", Table: "crmTransaction",
		Also: []string{"scholar.venue"}, Text: "Amount per place.", SQLHint: "SUM(crmTxAmount) / COUNT(*)"}, Score: 1}
	for _, tc := range []struct {
		name string
		also []string
		want []string
	}{
		{"one table", nil, []string{"crm.crmTransaction"}},
		{"over a join", []string{"scholar.venue"}, []string{"crm.crmTransaction", "scholar.venue"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := hit
			h.Also = tc.also
			a := &ask{req: Request{Question: q}, schema0: s, trace: &Trace{}, keywords: lexicalKeywords(q), descs: []descindex.Hit{h}}
			got := e.selectSchemaBudget(a, 60)
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("selected %q, lacks %s", got, w)
				}
			}
			if tc.also == nil && slices.Contains(got, "scholar.venue") {
				t.Errorf("selected %q: venue without the term pointing at it (the budget is too loose)", got)
			}
		})
	}
	// A role that may not read venue is not shown the term.
	hidden := s.Filter(func(tb *catalog.Table, _ *catalog.Column) bool { return tb.Name != "venue" })
	if got := visibleDescriptions(hidden, []descindex.Hit{hit}); len(got) != 0 {
		t.Errorf("a term over an unreadable table is shown: %+v", got)
	}
	if got := visibleDescriptions(s, []descindex.Hit{hit}); len(got) != 1 {
		t.Errorf("a term over readable tables is dropped: %+v", got)
	}
}
