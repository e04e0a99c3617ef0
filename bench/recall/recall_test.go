package main

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nlproxy/nlproxy/bench/internal/sqleval"
	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

func TestGoldTables(t *testing.T) {
	for _, tt := range []struct {
		query string
		want  [][]string
	}{
		{"SELECT {author.name, author.aid} FROM author WHERE author.aid IN (SELECT w.aid FROM writes w JOIN DOMAIN d ON true);",
			[][]string{{"author", "domain", "writes"}}},
		{"WITH t AS (SELECT * FROM paper) SELECT count(*) FROM t JOIN writes USING (paperid);SELECT count(*) FROM paper p;",
			[][]string{{"paper", "writes"}, {"paper"}}},
		{"SELECT name FROM business WHERE state = 'CA;NY'", [][]string{{"business"}}},
	} {
		got, err := goldTableSets(tt.query)
		if err != nil {
			t.Fatalf("%q: %v", tt.query, err)
		}
		if !slices.EqualFunc(got, tt.want, slices.Equal) {
			t.Errorf("%q: tables %q, want %q", tt.query, got, tt.want)
		}
	}
}

func TestGoldLiterals(t *testing.T) {
	lits, err := goldLiterals("SELECT * FROM business b WHERE b.state = 'CA' AND b.name ILIKE '%Taco%' AND b.city IN ('New York', 'Boston') AND b.x LIKE 'a%b'")
	if err != nil {
		t.Fatal(err)
	}
	want := []goldLiteral{{"state", "CA", false}, {"name", "Taco", true}, {"city", "New York", false}, {"city", "Boston", false}}
	if !slices.Equal(lits, want) {
		t.Errorf("literals %+v, want %+v", lits, want)
	}
}

// The whole pipeline on two of the databases, merged into one database:
// every question's gold tables parse and resolve, and the selection finds
// them at 4,000 tokens for nearly all (the full run is go run ./bench/recall).
func TestRecallPipeline(t *testing.T) {
	c := pgtest.New(t, pgcluster.Options{})
	ctx := context.Background()
	dir := filepath.Join("..", "..", "datasets", "sql-eval")
	ds, err := dataset.OpenSQLEval(dir)
	if err != nil {
		t.Fatal(err)
	}
	snap, qs, err := sqleval.Merged(ctx, c, pgtest.UniqueName(t, "recall"), ds, []string{"restaurants", "geography"})
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 50 {
		t.Fatalf("%d questions for restaurants and geography, want 50", len(qs))
	}
	for _, want := range []string{"restaurants.restaurant", "geography.state"} {
		tb := snap.Schema.Table(want)
		if tb == nil {
			t.Fatalf("merged schema lacks %s", want)
		}
		commented := false
		for _, col := range tb.Columns {
			commented = commented || col.Comment != ""
		}
		if !commented {
			t.Errorf("%s: the column descriptions were not loaded as comments", want)
		}
	}
	rep, err := evaluate(ctx, snap, qs, []int{1000, 4000}, nil, sameName)
	if err != nil {
		t.Fatal(err)
	}
	all := rep.Rows[""]
	if all.Questions != 50 {
		t.Fatalf("evaluated %d questions", all.Questions)
	}
	if all.Hits[1] < all.Hits[0] {
		t.Errorf("recall falls with a larger budget: %v", all.Hits)
	}
	if r := float64(all.Hits[1]) / float64(all.Questions); r < 0.95 {
		t.Errorf("gold-table recall at 4,000 tokens %.2f, want ≥ 0.95; misses: %+v", r, rep.Misses)
	}
	if all.Literals == 0 || all.LiteralsFound == 0 {
		t.Errorf("value retrieval measured on %d literals, %d found", all.Literals, all.LiteralsFound)
	}
}

// The harder benchmark's database: renamed question-bearing tables, the
// distractor schemas beside them, every schema on the search_path, and gold
// tables mapped to the renamed names.
func TestRecallHardSetup(t *testing.T) {
	c := pgtest.New(t, pgcluster.Options{})
	ctx := context.Background()
	ds, err := dataset.OpenSQLEval(filepath.Join("..", "..", "datasets", "sql-eval"))
	if err != nil {
		t.Fatal(err)
	}
	snap, qs, path, err := setupHard(ctx, c, pgtest.UniqueName(t, "recallhard"), ds, []string{"restaurants"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 25 {
		t.Fatalf("%d questions for restaurants, want 25", len(qs))
	}
	for _, want := range []string{"restaurants.rsrestaurant", "yelp.yp_business", "geography.geoBorderInfo", "scholar.scpaperkeyphrase",
		"advising.crs_offr", "advising.stu_rec", "mart.restaurant", "mart.course", "sb.sbRestaurant", "crm.crm_business", "sample.orders", "wide.w030"} {
		if snap.Schema.Table(want) == nil {
			t.Errorf("warehouse lacks %s", want)
		}
	}
	if tb := snap.Schema.Table("restaurants.restaurant"); tb != nil {
		t.Errorf("restaurants.restaurant was not renamed")
	}
	// Folded: written unquoted, the glued names lost their case.
	if tb := snap.Schema.Table("restaurants.rsrestaurant"); tb == nil || tb.Column("rsfoodtype") == nil || tb.Column("rsfoodtype").Comment == "" {
		t.Errorf("restaurants.rsrestaurant lacks its renamed, commented column rsfoodtype: %+v", tb)
	}
	if got := goldName("advising", "course_offering", false); got != "crs_offr" {
		t.Errorf("advising.course_offering maps to %s", got)
	}
	if got := goldName("restaurants", "food_type", true); got != "rsfoodtype" {
		t.Errorf("restaurants' food_type maps to %s", got)
	}
	if tb := snap.Schema.Table("mart.restaurant"); tb == nil || len(tb.Columns) != 5 || tb.Columns[0].Comment == "" {
		t.Errorf("mart.restaurant is not a commented copy of restaurants.restaurant: %+v", tb)
	}
	if !slices.Equal(path, []string{"restaurants", "yelp", "academic", "geography", "advising", "atis", "scholar", "crm", "sb", "mart", "sample", "wide"}) {
		t.Errorf("search_path %v", path)
	}
	rep, err := evaluate(ctx, snap, qs, []int{4000}, path, goldName)
	if err != nil {
		t.Fatal(err)
	}
	if all := rep.Rows[""]; all.Hits[0] == 0 {
		t.Errorf("no question found its renamed gold tables: %+v", rep.Misses)
	}
}
