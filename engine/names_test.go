package engine

import (
	"slices"
	"testing"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
)

func TestGluedPrefix(t *testing.T) {
	vocab := map[string]bool{}
	for _, w := range commonWords {
		vocab[w] = true
	}
	for _, tt := range []struct {
		names []string
		want  string
	}{
		{[]string{"sbcustomer", "sbtransaction", "sbticker", "sbdailyprice"}, "sb"},          // broker, folded
		{[]string{"rsrestaurant", "rslocation", "rsgeographic"}, "rs"},                       // three suffice
		{[]string{"tblorders", "tblcustomers", "tblitems", "audit"}, "tbl"},                  // three of four
		{[]string{"dimcustomer", "dimproduct", "factsales", "dimdate"}, "dim"},               // dim, not fact
		{[]string{"customer", "customer", "call", "catalog", "catalog", "catalog"}, ""},      // ca+talog is no word
		{[]string{"sbcustomer", "sbtransaction"}, ""},                                        // too few to learn from
		{[]string{"order", "product", "customer", "invoice"}, ""},                            // no shared start
		{[]string{"stxyzq", "stqwrt", "stplkm"}, ""},                                         // remainders are no words
		{[]string{"acaid", "acname", "achomepage", "actitle", "acyear", "acabstract"}, "ac"}, // columns; aid too short to count
	} {
		if got := gluedPrefix(tt.names, vocab); got != tt.want {
			t.Errorf("gluedPrefix(%q) = %q, want %q", tt.names, got, tt.want)
		}
	}
}

func TestDropGlued(t *testing.T) {
	for _, tt := range []struct {
		parts  []string
		prefix string
		want   []string
	}{
		{[]string{"rsfoodtype"}, "rs", []string{"foodtype"}},
		{[]string{"rsid"}, "rs", []string{"rsid"}}, // too short a remainder
		{[]string{"rs", "name"}, "rs", []string{"rs", "name"}},
		{[]string{"region"}, "rs", []string{"region"}},
		{[]string{"sbtxdatetime"}, "", []string{"sbtxdatetime"}},
	} {
		if got := dropGlued(tt.parts, tt.prefix); !slices.Equal(got, tt.want) {
			t.Errorf("dropGlued(%q, %q) = %q, want %q", tt.parts, tt.prefix, got, tt.want)
		}
	}
}

func TestAbbreviates(t *testing.T) {
	for _, tt := range []struct {
		a, w string
		want bool
	}{
		{"instr", "instructor", true},
		{"crs", "cours", true}, // stems: course → cours
		{"nbr", "number", true},
		{"dept", "department", true},
		{"qty", "quantity", true},
		{"crs", "cars", false},     // shorter by one only
		{"nbr", "amount", false},   // another first letter
		{"txn", "transfer", false}, // letters not all there
		{"id", "identifier", false},
	} {
		if got := abbreviates(tt.a, tt.w); got != tt.want {
			t.Errorf("abbreviates(%q, %q) = %v, want %v", tt.a, tt.w, got, tt.want)
		}
	}
}

func TestExpand(t *testing.T) {
	for _, tt := range []struct {
		terms, comment, want []string
	}{
		{[]string{"cust", "id"}, nil, []string{"cust", "id", "customer"}},
		{[]string{"tx", "qty"}, nil, []string{"tx", "qty", "transaction", "quantity"}},
		{[]string{"crs", "nbr"}, nil, []string{"crs", "nbr", "cours", "number"}},
		{[]string{"instr"}, []string{"unique", "instructor"}, []string{"instr", "instructor"}},
		{[]string{"pvdr"}, []string{"name", "provider"}, []string{"pvdr", "provider"}}, // spelt out by the comment
		{[]string{"pvdr"}, nil, []string{"pvdr"}},
		{[]string{"region"}, []string{"reg", "regional"}, []string{"region"}}, // long terms are no abbreviations
		{[]string{"peopl"}, nil, []string{"peopl", "person"}},                 // an irregular plural (stems)
	} {
		if got := expand(slices.Clone(tt.terms), tt.comment); !slices.Equal(got, tt.want) {
			t.Errorf("expand(%q, %q) = %q, want %q", tt.terms, tt.comment, got, tt.want)
		}
	}
}

// brokerSchema is the shape of a public benchmark database written for
// another database and loaded unquoted: a glued prefix on tables and
// columns, abbreviations, run-together words, beside a schema with the
// plain names.
func brokerSchema(comments bool) *catalog.Schema {
	cm := func(s string) string {
		if comments {
			return s
		}
		return ""
	}
	return &catalog.Schema{Tables: []catalog.Table{
		{Schema: "broker", Name: "sbcustomer", Kind: catalog.KindTable, Columns: []catalog.Column{
			col("sbcustid", "text", ""), col("sbcustname", "text", ""), col("sbcustemail", "text", ""), col("sbcustcountry", "text", "")}},
		{Schema: "broker", Name: "sbtransaction", Kind: catalog.KindTable, Columns: []catalog.Column{
			col("sbtxid", "text", ""), col("sbtxcustid", "text", ""), col("sbtxtickerid", "text", ""), col("sbtxdatetime", "timestamp", ""),
			col("sbtxtype", "text", cm("buy or sell")), col("sbtxshares", "numeric", ""), col("sbtxprice", "numeric", "")}},
		{Schema: "broker", Name: "sbticker", Kind: catalog.KindTable, Columns: []catalog.Column{
			col("sbtickerid", "text", ""), col("sbtickersymbol", "text", ""), col("sbtickername", "text", "")}},
		{Schema: "broker", Name: "sbdailyprice", Kind: catalog.KindTable, Columns: []catalog.Column{
			col("sbdptickerid", "text", ""), col("sbdpdate", "date", ""), col("sbdpopen", "numeric", ""), col("sbdpclose", "numeric", cm("closing price"))}},
		{Schema: "uni", Name: "crs_offr", Kind: catalog.KindTable, Columns: []catalog.Column{
			col("offr_id", "integer", ""), col("crs_id", "integer", ""), col("sem", "integer", ""), col("sect_nbr", "integer", "")}},
		{Schema: "uni", Name: "instr", Kind: catalog.KindTable, Columns: []catalog.Column{
			col("instr_id", "integer", ""), col("nm", "text", ""), col("uniqnm", "text", "")}},
		{Schema: "uni", Name: "pvdr", Kind: catalog.KindTable, Comment: cm("course provider"), Columns: []catalog.Column{
			col("pvdr_id", "integer", ""), col("pvdr_nm", "text", "")}},
		{Schema: "shop", Name: "customers", Kind: catalog.KindTable, Columns: []catalog.Column{
			col("customer_id", "integer", ""), col("name", "text", ""), col("email", "text", "")}},
		{Schema: "shop", Name: "orders", Kind: catalog.KindTable, Columns: []catalog.Column{
			col("order_id", "integer", ""), col("customer_id", "integer", ""), col("orderdate", "date", ""), col("total", "numeric", "")}},
		{Schema: "shop", Name: "products", Kind: catalog.KindTable, Columns: []catalog.Column{
			col("product_id", "integer", ""), col("name", "text", ""), col("price", "numeric", "")}},
	}}
}

// What the lexicon reads in a name: glued prefixes dropped, run-together
// words split, abbreviations expanded, plurals stemmed like the question's.
func TestLexiconNames(t *testing.T) {
	for _, comments := range []bool{false, true} {
		lx := buildLexicon(brokerSchema(comments))
		for _, tt := range []struct {
			table, column string // column "": the table's name terms
			want          []string
			needComments  bool
		}{
			{"broker.sbcustomer", "", []string{"customer"}, false},
			{"broker.sbdailyprice", "", []string{"daily", "price"}, false},
			{"broker.sbticker", "sbtickersymbol", []string{"ticker", "symbol"}, false},
			{"broker.sbtransaction", "sbtxdatetime", []string{"date", "time"}, false}, // tx: the table's own glued prefix
			{"broker.sbtransaction", "sbtxcustid", []string{"customer", "id"}, false},
			{"uni.crs_offr", "", []string{"course", "offering"}, false}, // compared as stems, as questions are
			{"uni.crs_offr", "sect_nbr", []string{"section", "number"}, false},
			{"uni.instr", "", []string{"instructor"}, false},
			{"uni.instr", "nm", []string{"name"}, false},
			{"uni.pvdr", "", []string{"provider"}, true}, // only the comment says it
			{"shop.orders", "orderdate", []string{"order", "date"}, false},
			{"shop.customers", "", []string{"customer"}, false},
		} {
			if tt.needComments && !comments {
				continue
			}
			lt := &lx.tables[lx.index[tt.table]]
			got := lt.name
			if tt.column != "" {
				got = nil
				for _, c := range lt.cols {
					if c.name == tt.column {
						got = c.terms
					}
				}
			}
			for _, w := range tt.want {
				if w = descindex.Stem(w); !slices.Contains(got, w) {
					t.Errorf("comments %v: %s %s: terms %q lack %q", comments, tt.table, tt.column, got, w)
				}
			}
		}
	}
}

// Questions find the folded, prefixed and abbreviated tables.
func TestSelectSchemaFoldedNames(t *testing.T) {
	e := &Engine{}
	e.applyDefaults()
	for _, tt := range []struct {
		question string
		want     []string
	}{
		{"Return the customer who made the most sell transactions on 2023-04-01", []string{"broker.sbcustomer", "broker.sbtransaction"}},
		{"Lowest daily closing price for symbol VTI in the past 7 days", []string{"broker.sbdailyprice", "broker.sbticker"}},
		{"which instructors teach each course offering", []string{"uni.instr", "uni.crs_offr"}},
		{"total of the orders of each customer", []string{"shop.orders", "shop.customers"}},
	} {
		a := &ask{req: Request{Question: tt.question}, schema0: brokerSchema(false), trace: &Trace{}, keywords: lexicalKeywords(tt.question)}
		lx := buildLexicon(a.schema0)
		qt := questionTerms(tt.question, a.keywords)
		var ranked []string
		for _, i := range lx.rank(lx.tableScores(qt, nil, nil), qt, nil, nil) {
			ranked = append(ranked, lx.tables[i].key)
		}
		if len(ranked) < len(tt.want) || !sameSet(ranked[:len(tt.want)], tt.want) {
			t.Errorf("%q: ranked %q, want %q first", tt.question, ranked, tt.want)
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// A run-together name no vocabulary word splits is split by the
// question's own words, per ask.
func TestQuestionWords(t *testing.T) {
	s := &catalog.Schema{Tables: []catalog.Table{
		{Schema: "mkt", Name: "tickerquote", Kind: catalog.KindTable, Columns: []catalog.Column{col("tickerid", "text", ""), col("bidzorp", "numeric", "")}},
		{Schema: "mkt", Name: "ticker", Kind: catalog.KindTable, Columns: []catalog.Column{col("tickerid", "text", ""), col("symbol", "text", "")}},
		{Schema: "mkt", Name: "dailyprice", Kind: catalog.KindTable, Columns: []catalog.Column{col("tickerid", "text", ""), col("close", "numeric", "")}},
	}}
	lx := buildLexicon(s)
	for _, tt := range []struct {
		question string
		add      []string // terms withQuestionWords adds
	}{
		{"the latest quotes", []string{"tickerquot"}}, // quot ends it
		{"every ticker", []string{"tickerquot"}},      // ticker begins it
		{"zorp of every bid", nil},                    // bidzorp is too short to keep
		{"daily closing price", nil},                  // dailyprice is split by the catalog's words
		{"the quota", nil},                            // quota begins or ends nothing
	} {
		q := questionTerms(tt.question, lexicalKeywords(tt.question))
		before := len(q)
		got := lx.withQuestionWords(q)
		if len(q) != before {
			t.Fatalf("%q: the question's terms were changed", tt.question)
		}
		var added []string
		for w := range got {
			if !q[w] {
				added = append(added, w)
			}
		}
		if !sameSet(added, tt.add) {
			t.Errorf("%q: added %q, want %q", tt.question, added, tt.add)
		}
	}
	q := lx.withQuestionWords(questionTerms("the latest quotes", nil))
	if r := lx.rank(lx.tableScores(q, nil, nil), q, nil, nil); len(r) == 0 || lx.tables[r[0]].key != "mkt.tickerquote" {
		t.Errorf("the latest quotes: ranked %v", r)
	}
}

// Singular and plural meet: regular ones through the stemmer on both
// sides, irregular ones through a short list.
func TestPlurals(t *testing.T) {
	s := &catalog.Schema{Tables: []catalog.Table{
		{Schema: "hr", Name: "people", Kind: catalog.KindTable, Columns: []catalog.Column{col("person_id", "integer", ""), col("name", "text", "")}},
		{Schema: "hr", Name: "child", Kind: catalog.KindTable, Columns: []catalog.Column{col("child_id", "integer", ""), col("person_id", "integer", "")}},
		{Schema: "hr", Name: "company", Kind: catalog.KindTable, Columns: []catalog.Column{col("company_id", "integer", ""), col("name", "text", "")}},
		{Schema: "hr", Name: "categories", Kind: catalog.KindTable, Columns: []catalog.Column{col("category_id", "integer", ""), col("label", "text", "")}},
	}}
	lx := buildLexicon(s)
	for _, tt := range []struct{ question, want string }{
		{"how many persons are there", "hr.people"},
		{"list the people", "hr.people"},
		{"how many children", "hr.child"},
		{"the companies", "hr.company"},
		{"each category", "hr.categories"},
	} {
		q := lx.withQuestionWords(questionTerms(tt.question, lexicalKeywords(tt.question)))
		r := lx.rank(lx.tableScores(q, nil, nil), q, nil, nil)
		if len(r) == 0 || lx.tables[r[0]].key != tt.want {
			var got []string
			for _, i := range r {
				got = append(got, lx.tables[i].key)
			}
			t.Errorf("%q: ranked %q, want %s first", tt.question, got, tt.want)
		}
	}
}
