package valueindex

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
)

func TestNormalize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Los Angeles", "los angeles"},
		{"  ST.  Louis ", "st louis"},
		{"O'Brien", "obrien"},
		{"São Paulo", "sao paulo"},
		{"Zürich", "zurich"},
		{"Coca-Cola 0.5L", "coca cola 0 5l"},
		{"---", ""},
		{"ＡＢＣ", "abc"}, // fullwidth folds under NFKD
	}
	for _, tt := range tests {
		if got := normalize(tt.in); got != tt.want {
			t.Errorf("normalize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestOSA(t *testing.T) {
	var s editScratch
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"smith", "smith", 0}, {"smith", "smtih", 1},
		{"boston", "bostn", 1}, {"kitten", "sitting", 3}, {"zürich", "zurich", 1}, {"ca", "abc", 3},
	}
	for _, tt := range tests {
		if got := s.osa(tt.a, tt.b); got != tt.want {
			t.Errorf("osa(%q,%q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestLookup(t *testing.T) {
	ix := FromValues(fixtureValues(), Options{})
	ctx := context.Background()
	tests := []struct {
		name, kw, table, col, want string
		exact                      bool
	}{
		{"exact", "Boston", "customers", "city", "Boston", true},
		{"case", "LOS ANGELES", "customers", "city", "Los Angeles", true},
		{"punctuation dropped", "St Louis", "customers", "city", "St. Louis", true},
		{"space-insensitive", "OBrien", "customers", "full_name", "", false},
		{"accent folded", "Sao Paulo", "customers", "city", "São Paulo", true},
		{"typo substitution", "Bostin", "customers", "city", "Boston", false},
		{"typo transposition", "Jessica Smtih", "customers", "full_name", "Jessica Smith", false},
		{"typo deletion", "Philadelpia", "customers", "city", "Philadelphia", false},
		{"two typos", "Sacremanto", "customers", "city", "Sacramento", false},
		{"partial prefix", "Haagen", "products", "product_name", "Häagen-Dazs Vanilla", false},
		{"partial token", "Cherry Garcia", "products", "product_name", "Ben & Jerry's Cherry Garcia", false},
		{"initials to full", "SLC", "customers", "city", "Salt Lake City", false},
		{"full to initials", "New York City", "stores", "city_code", "NYC", false},
		{"dept initials", "QA", "departments", "dept_name", "Quality Assurance", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms := ix.Lookup(ctx, []string{tt.kw}, LookupOptions{})
			if len(ms) == 0 {
				t.Fatalf("no matches for %q", tt.kw)
			}
			if tt.want == "" { // any value of the column ranks first
				if ms[0].Table != tt.table || ms[0].Column != tt.col {
					t.Fatalf("top match %+v, want column %s.%s", ms[0], tt.table, tt.col)
				}
				return
			}
			found := -1
			for i, m := range ms {
				if m.Table == tt.table && m.Column == tt.col && m.Value == tt.want {
					found = i
					break
				}
			}
			if found < 0 || found > 2 {
				t.Fatalf("%q: want %s.%s=%q in top 3, got %+v", tt.kw, tt.table, tt.col, tt.want, ms)
			}
			if tt.exact && (found != 0 || !ms[0].Exact || ms[0].Score != 1) {
				t.Fatalf("%q: want exact top match, got %+v", tt.kw, ms[0])
			}
			if ms[0].Keyword != tt.kw {
				t.Fatalf("keyword not echoed: %+v", ms[0])
			}
		})
	}
}

func TestLookupLimitsAndNoise(t *testing.T) {
	ix := FromValues(fixtureValues(), Options{})
	ctx := context.Background()
	ms := ix.Lookup(ctx, []string{"Smith", "xqzvw", "Boston"}, LookupOptions{Limit: 5, PerColumn: 2})
	perKW := map[string]int{}
	perCol := map[string]int{}
	for _, m := range ms {
		perKW[m.Keyword]++
		perCol[m.Keyword+"/"+m.Table+"."+m.Column]++
		if m.Keyword == "xqzvw" {
			t.Errorf("nonsense keyword matched %+v", m)
		}
	}
	for kw, n := range perKW {
		if n > 5 {
			t.Errorf("keyword %q: %d matches, limit 5", kw, n)
		}
	}
	for k, n := range perCol {
		if n > 2 {
			t.Errorf("%s: %d matches, per-column limit 2", k, n)
		}
	}
	if perKW["Smith"] == 0 || perKW["Boston"] == 0 {
		t.Fatalf("missing matches: %v", perKW)
	}
	if ms[0].Keyword != "Smith" {
		t.Fatalf("results not in keyword order: %+v", ms[0])
	}
}

func TestClosest(t *testing.T) {
	ix := FromValues(fixtureValues(), Options{})
	ctx := context.Background()
	tests := []struct{ table, col, lit, want string }{
		{"stores", "city_code", "Los Angeles", "LA"},
		{"public.stores", "city_code", "Salt Lake City", "SLC"},
		{"customers", "city", "LA", "Los Angeles"},
		{"customers", "city", "san fransisco", "San Francisco"},
		{"customers", "full_name", "Jon Smith", "John Smith"},
		{"sales.products", "product_name", "coca cola 0.5 l", "Coca-Cola 0.5L"},
	}
	for _, tt := range tests {
		ms := ix.Closest(ctx, tt.table, tt.col, tt.lit, 3)
		if len(ms) == 0 || ms[0].Value != tt.want {
			t.Errorf("Closest(%s.%s, %q) = %+v, want %q first", tt.table, tt.col, tt.lit, ms, tt.want)
		}
		for _, m := range ms {
			if m.Column != tt.col {
				t.Errorf("Closest returned another column: %+v", m)
			}
		}
	}
	if ms := ix.Closest(ctx, "nosuch", "city", "Boston", 3); len(ms) != 0 {
		t.Errorf("unknown table matched: %+v", ms)
	}
}

func TestLookupEmbedder(t *testing.T) {
	ix := FromValues(fixtureValues(), Options{})
	emb := &hashEmbedder{dim: 256}
	ms := ix.Lookup(context.Background(), []string{"Bostin"}, LookupOptions{Embedder: emb})
	if emb.calls != 1 {
		t.Fatalf("embedder calls = %d, want 1", emb.calls)
	}
	if len(ms) == 0 || ms[0].Value != "Boston" {
		t.Fatalf("with embedder: %+v", ms)
	}
	if ms[0].Score >= 1 || ms[0].Exact {
		t.Fatalf("blended score should stay below exact: %+v", ms[0])
	}
}

func TestPersistRoundTrip(t *testing.T) {
	ix := FromValues(fixtureValues(), Options{Bands: 20, Rows: 5})
	var buf bytes.Buffer
	n, err := ix.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d", n, buf.Len())
	}
	ix2, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ix.Stats(), ix2.Stats()) || ix.cfg != ix2.cfg {
		t.Fatalf("stats/config differ after round trip")
	}
	for _, f := range []struct {
		name string
		a, b any
	}{
		{"raw", ix.raw, ix2.raw}, {"rawOff", ix.rawOff, ix2.rawOff}, {"nrm", ix.nrm, ix2.nrm},
		{"exact", ix.exact, ix2.exact}, {"vocab", ix.vocab, ix2.vocab}, {"post", ix.post, ix2.post},
		{"dels", ix.dels, ix2.dels}, {"abbr", ix.abbr, ix2.abbr}, {"bands", ix.bands, ix2.bands},
	} {
		if !reflect.DeepEqual(f.a, f.b) {
			t.Errorf("%s differs after round trip", f.name)
		}
	}
	ctx := context.Background()
	kws := []string{"Bostin", "Jessica Smtih", "SLC", "Haagen"}
	if a, b := ix.Lookup(ctx, kws, LookupOptions{}), ix2.Lookup(ctx, kws, LookupOptions{}); !reflect.DeepEqual(a, b) {
		t.Fatalf("lookups differ:\n%+v\n%+v", a, b)
	}
	// Writing the loaded index gives the same bytes.
	var buf2 bytes.Buffer
	if _, err := ix2.WriteTo(&buf2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), buf2.Bytes()) {
		t.Fatal("re-encoded index differs")
	}
}

func TestReadRejects(t *testing.T) {
	var buf bytes.Buffer
	if _, err := FromValues(fixtureValues(), Options{}).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	badVersion := bytes.Clone(good)
	badVersion[11] = 99
	tests := map[string][]byte{
		"empty":     nil,
		"bad magic": append([]byte("NOTANIDX"), good[8:]...),
		"version":   badVersion,
		"truncated": good[:len(good)/2],
	}
	for name, data := range tests {
		if _, err := Read(bytes.NewReader(data)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", name, err)
		}
	}
}

func TestConcurrentLookup(t *testing.T) {
	ix := FromValues(fixtureValues(), Options{})
	ctx := context.Background()
	want := ix.Lookup(ctx, []string{"Bostin", "Jessica Smtih", "QA"}, LookupOptions{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if got := ix.Lookup(ctx, []string{"Bostin", "Jessica Smtih", "QA"}, LookupOptions{}); !reflect.DeepEqual(got, want) {
					t.Error("concurrent lookup differs")
					return
				}
				ix.Closest(ctx, "stores", "city_code", "Los Angeles", 1)
			}
		})
	}
	wg.Wait()
}

// Exact matches are kept past the per-keyword limit, up to a bound: the
// column asked about is not crowded out by others storing the same value,
// and a value stored everywhere cannot flood the result.
func TestLookupExactPastLimit(t *testing.T) {
	var cols []ColumnValues
	for i := 0; i < 40; i++ {
		cols = append(cols, ColumnValues{Schema: "s", Table: fmt.Sprintf("t%02d", i), Column: "city", Values: []string{"New York", "Newark", "York"}})
	}
	ix := FromValues(cols, Options{})
	ms := ix.Lookup(context.Background(), []string{"New York"}, LookupOptions{Limit: 5})
	exact := 0
	for _, m := range ms {
		if m.Exact {
			exact++
		}
	}
	if exact <= 5 || len(ms) > 15 {
		t.Errorf("%d matches, %d exact; want more than the limit of 5 exact ones and at most 15 in all", len(ms), exact)
	}
}
