package descindex

import (
	"bytes"
	"context"
	"errors"
	"hash/fnv"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestTokenize(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"order_total_usd", "order total usd"},
		{"orderTotalUSD", "order total usd"},
		{"HTTPServerName", "http server nam"},
		{"addr2line", "addr 2 lin"},
		{"The customers who are shipping boxes", "customer ship box"},
		{"Categories, statuses & classes", "category status class"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := strings.Join(Tokenize(tt.in), " "); got != tt.want {
			t.Errorf("Tokenize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func sampleDocs() []Doc {
	return []Doc{
		{Kind: KindTable, Schema: "sales", Table: "orders", Text: "One row per customer order placed on the web shop."},
		{Kind: KindColumn, Schema: "sales", Table: "orders", Column: "ord_sts", Text: "Order status: A = active, C = cancelled, S = shipped."},
		{Kind: KindColumn, Schema: "sales", Table: "orders", Column: "amt_net", Text: "Net amount in euros, excluding VAT and shipping."},
		{Kind: KindColumn, Schema: "sales", Table: "customers", Column: "seg_cd", Text: "Customer segment code (B2B, B2C, GOV)."},
		{Kind: KindColumn, Schema: "hr", Table: "employees", Column: "hireDate", Text: ""},
		{Kind: KindTable, Schema: "hr", Table: "employees", Text: "Staff records including contractors."},
		{Kind: KindGlossary, Term: "churned customer", Text: "A customer with no order in the last 12 months.",
			SQLHint: "NOT EXISTS (SELECT 1 FROM sales.orders o WHERE o.customer_id = c.id AND o.ordered_at > now() - interval '12 months')"},
		{Kind: KindGlossary, Term: "ARR", Text: "Annual recurring revenue: active subscription amounts times twelve."},
	}
}

func TestSplit(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"crmTxDate", []string{"crm", "tx", "date"}},
		{"order_total_usd", []string{"order", "total", "usd"}},
		{"HTTPServer2", []string{"http", "server", "2"}},
		{"paperkeyphrase", []string{"paperkeyphrase"}},
		{"w042", []string{"w", "042"}},
		{"Order Date", []string{"order", "date"}},
		{"", nil},
	} {
		if got := Split(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("Split(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSearchBM25(t *testing.T) {
	ix := New(sampleDocs(), Options{})
	ctx := context.Background()
	tests := []struct {
		query string
		want  string // Column, Term or Table of the top hit
	}{
		{"which orders were cancelled", "ord_sts"},
		{"net amount without VAT", "amt_net"},
		{"customers by segment", "seg_cd"},
		{"when was the employee hired", "hireDate"}, // name-only doc; hired and hire stem alike
		{"how many churned customers", "churned customer"},
		{"annual recurring revenue", "ARR"},
		{"contractors on staff", "employees"},
	}
	for _, tt := range tests {
		hits := ix.Search(ctx, tt.query, 3)
		if len(hits) == 0 {
			t.Errorf("%q: no hits", tt.query)
			continue
		}
		top := hits[0]
		got := top.Column
		if top.Kind == KindGlossary {
			got = top.Term
		} else if top.Kind == KindTable {
			got = top.Table
		}
		if got != tt.want {
			t.Errorf("%q: top hit %+v, want %s", tt.query, top, tt.want)
		}
		for i := 1; i < len(hits); i++ {
			if hits[i].Score > hits[i-1].Score {
				t.Errorf("%q: hits not sorted", tt.query)
			}
		}
	}
	if hits := ix.Search(ctx, "zebra giraffe", 5); len(hits) != 0 {
		t.Errorf("unrelated query matched %+v", hits)
	}
	if hits := ix.Search(ctx, "order", 2); len(hits) != 2 {
		t.Errorf("k not honoured: %d hits", len(hits))
	}
}

// hashEmbedder embeds bag-of-words with a tiny synonym table, so tests can
// check that the cosine blend finds what BM25 cannot.
type hashEmbedder struct {
	mu    sync.Mutex
	calls int
	fail  bool
}

var synonyms = map[string]string{"revenue": "income", "income": "income", "staff": "worker", "employees": "worker", "workers": "worker"}

func (h *hashEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	h.mu.Lock()
	h.calls++
	fail := h.fail
	h.mu.Unlock()
	if fail {
		return nil, errors.New("model unavailable")
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		v := make([]float32, 64)
		for _, w := range strings.Fields(strings.ToLower(t)) {
			w = strings.Trim(w, ".,:()")
			if s, ok := synonyms[w]; ok {
				w = s
			}
			f := fnv.New32a()
			f.Write([]byte(w))
			v[f.Sum32()%64]++
		}
		out[i] = v
	}
	return out, nil
}

func TestSearchEmbedding(t *testing.T) {
	ctx := context.Background()
	emb := &hashEmbedder{}
	ix := New(sampleDocs(), Options{Embedder: emb})
	// "income" appears in no doc; only the embedding links it to revenue.
	hits := ix.Search(ctx, "yearly income", 3)
	if len(hits) == 0 || hits[0].Term != "ARR" {
		t.Fatalf("embedding blend: %+v", hits)
	}
	if lex := New(sampleDocs(), Options{}).Search(ctx, "yearly income", 3); len(lex) != 0 {
		t.Fatalf("lexical-only should find nothing, got %+v", lex)
	}
	calls := emb.calls
	ix.Search(ctx, "workers", 3)
	if emb.calls != calls+1 {
		t.Fatalf("doc vectors recomputed: calls %d → %d", calls, emb.calls)
	}
	// A failing embedder degrades to BM25.
	bad := &hashEmbedder{fail: true}
	ix2 := New(sampleDocs(), Options{Embedder: bad})
	if err := ix2.Embed(ctx); err == nil {
		t.Fatal("Embed: want error from failing embedder")
	}
	if hits := ix2.Search(ctx, "cancelled orders", 1); len(hits) != 1 || hits[0].Column != "ord_sts" {
		t.Fatalf("degraded search: %+v", hits)
	}
}

func TestConcurrentSearch(t *testing.T) {
	emb := &hashEmbedder{}
	ix := New(sampleDocs(), Options{Embedder: emb})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if hits := ix.Search(context.Background(), "order status", 2); len(hits) == 0 {
					t.Error("no hits")
				}
			}
		})
	}
	wg.Wait()
}

func TestGlossary(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	wrapped := write("wrapped.yaml", `
terms:
  - term: active customer
    definition: A customer with an order in the last 90 days.
    sql: "o.ordered_at > now() - interval '90 days'"
    table: sales.customers
    column: status
  - term: ARR
    definition: Annual recurring revenue.
`)
	list := write("list.yaml", `
- term: ARR
  definition: Annual recurring revenue.
`)
	docs, err := LoadGlossary(wrapped)
	if err != nil {
		t.Fatal(err)
	}
	want := Doc{Kind: KindGlossary, Schema: "sales", Table: "customers", Column: "status", Term: "active customer",
		Text: "A customer with an order in the last 90 days.", SQLHint: "o.ordered_at > now() - interval '90 days'"}
	if len(docs) != 2 || !reflect.DeepEqual(docs[0], want) {
		t.Fatalf("wrapped glossary: %+v", docs)
	}
	docs, err = LoadGlossary(list)
	if err != nil || len(docs) != 1 || docs[0].Term != "ARR" {
		t.Fatalf("list glossary: %+v %v", docs, err)
	}
	for name, body := range map[string]string{
		"missing-def.yaml": "- term: X\n",
		"bad.yaml":         "terms: [unclosed",
		"wrongtype.yaml":   "terms: 42\n",
	} {
		if _, err := LoadGlossary(write(name, body)); !errors.Is(err, ErrGlossary) {
			t.Errorf("%s: err = %v, want ErrGlossary", name, err)
		}
	}
	if _, err := LoadGlossary(filepath.Join(dir, "nope.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
}

func TestPersist(t *testing.T) {
	ctx := context.Background()
	emb := &hashEmbedder{}
	ix := New(sampleDocs(), Options{Embedder: emb, EmbedWeight: 0.4})
	if err := ix.Embed(ctx); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := ix.WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo = %d, %v (buffer %d)", n, err, buf.Len())
	}
	emb2 := &hashEmbedder{}
	ix2, err := Read(bytes.NewReader(buf.Bytes()), Options{Embedder: emb2})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ix.docs, ix2.docs) || !reflect.DeepEqual(ix.vecs, ix2.vecs) || ix2.opts.EmbedWeight != 0.4 {
		t.Fatal("round trip changed docs, vectors or options")
	}
	for _, q := range []string{"cancelled orders", "yearly income", "segment"} {
		a, b := ix.Search(ctx, q, 5), ix2.Search(ctx, q, 5)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%q: results differ after reload:\n%+v\n%+v", q, a, b)
		}
	}
	if emb2.calls != 3 { // one per query, none for the persisted doc vectors
		t.Errorf("reloaded index embedder calls = %d, want 3", emb2.calls)
	}
	bad := bytes.Clone(buf.Bytes())
	bad[0] = 'X'
	for name, data := range map[string][]byte{"magic": bad, "truncated": buf.Bytes()[:20], "empty": nil} {
		if _, err := Read(bytes.NewReader(data), Options{}); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", name, err)
		}
	}
}

func TestStemConsistency(t *testing.T) {
	// Inflections of one word must meet.
	groups := [][]string{
		{"order", "orders", "ordered", "ordering"}, {"category", "categories"}, {"box", "boxes"},
		{"ship", "ships", "shipped", "shipping"}, {"status", "statuses"}, {"hire", "hired", "hires", "hiring"},
		{"case", "cases"}, {"class", "classes"},
	}
	for _, g := range groups {
		for _, w := range g[1:] {
			if a, b := Stem(g[0]), Stem(w); a != b {
				t.Errorf("Stem(%q) = %q but Stem(%q) = %q", g[0], a, w, b)
			}
		}
	}
}
