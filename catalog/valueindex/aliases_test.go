package valueindex

import (
	"bytes"
	"context"
	"slices"
	"testing"
)

func TestCodeAndNameShapes(t *testing.T) {
	for _, tt := range []struct {
		v          string
		code, name bool
	}{
		{"CA", true, false}, {"LAX", true, false}, {"F1", true, false}, {"ABCD", true, false},
		{"ABCDE", false, false}, {"Abcde", false, true}, {"12", false, false}, {"ca", false, false}, {"California", false, true},
		{"New York", false, true}, {"", false, false}, {"NEW YORK", false, false},
	} {
		if got := codeLike(tt.v); got != tt.code {
			t.Errorf("codeLike(%q) = %v", tt.v, got)
		}
		if got := nameLike(tt.v); got != tt.name {
			t.Errorf("nameLike(%q) = %v", tt.v, got)
		}
	}
}

func TestCommentAliases(t *testing.T) {
	for _, tt := range []struct {
		comment string
		want    []Alias
	}{
		{"Status: A = Active, S = Suspended, C = Closed", []Alias{{"A", "Active", "st", "st"}, {"S", "Suspended", "st", "st"}, {"C", "Closed", "st", "st"}}},
		{"Order channel (W: Web shop; P: Phone order)", []Alias{{"W", "Web shop", "st", "st"}, {"P", "Phone order", "st", "st"}}},
		{"FT (Full time) or PT (Part time)", []Alias{{"FT", "Full time", "st", "st"}, {"PT", "Part time", "st", "st"}}},
		{"The name of the city", nil},
		{"ISO code: e.g. US", nil}, // one pair is no list
	} {
		got := commentAliases("st", tt.comment)
		if !slices.Equal(got, tt.want) {
			t.Errorf("commentAliases(%q) = %+v, want %+v", tt.comment, got, tt.want)
		}
	}
}

// aliasIndex: a state table pairing codes with names, a business table
// storing only codes, and a country table whose code 'CA' means Canada.
func aliasIndex() *Index {
	return FromValues([]ColumnValues{
		{Schema: "geo", Table: "state", Column: "state_name", Values: []string{"California", "New York", "Texas"}},
		{Schema: "geo", Table: "state", Column: "state_code", Values: []string{"CA", "NY", "TX"}},
		{Schema: "geo", Table: "country", Column: "country_code", Values: []string{"CA", "US"}},
		{Schema: "geo", Table: "country", Column: "country_name", Values: []string{"Canada", "United States"}},
		{Schema: "biz", Table: "business", Column: "state", Values: []string{"CA", "NY", "WA"}},
		{Schema: "biz", Table: "business", Column: "country", Values: []string{"CA", "US"}},
	}, Options{Aliases: []Alias{
		{"CA", "California", "state_code", "state_name"}, {"NY", "New York", "state_code", "state_name"}, {"TX", "Texas", "state_code", "state_name"},
		{"CA", "Canada", "country_code", "country_name"}, {"US", "United States", "country_code", "country_name"},
	}})
}

func TestAliasLookup(t *testing.T) {
	ix := aliasIndex()
	ctx := context.Background()
	has := func(ms []Match, table, column, value string) bool {
		for _, m := range ms {
			if m.Table == table && m.Column == column && m.Value == value {
				return true
			}
		}
		return false
	}
	ms := ix.Lookup(ctx, []string{"California"}, LookupOptions{})
	if !has(ms, "business", "state", "CA") || !has(ms, "state", "state_name", "California") {
		t.Errorf("Lookup(California) = %+v, want business.state 'CA' and state.state_name 'California'", ms)
	}
	if ms := ix.Lookup(ctx, []string{"Canada"}, LookupOptions{}); !has(ms, "business", "country", "CA") {
		t.Errorf("Lookup(Canada) = %+v, want business.country 'CA'", ms)
	}
	if ms := ix.Lookup(ctx, []string{"NY"}, LookupOptions{}); !has(ms, "state", "state_name", "New York") {
		t.Errorf("Lookup(NY) = %+v, want state.state_name 'New York'", ms)
	}
	if ms := ix.Lookup(ctx, []string{"Oregon"}, LookupOptions{}); has(ms, "business", "state", "CA") {
		t.Errorf("Lookup(Oregon) = %+v: an alias it does not have", ms)
	}
}

func TestAliasClosest(t *testing.T) {
	ix := aliasIndex()
	ctx := context.Background()
	for _, tt := range []struct {
		table, column, literal, want string
	}{
		{"biz.business", "state", "California", "CA"},
		{"biz.business", "state", "new york", "NY"},
		{"biz.business", "country", "Canada", "CA"},
		{"geo.state", "state_name", "TX", "Texas"},
	} {
		got := ix.Closest(ctx, tt.table, tt.column, tt.literal, 1)
		if len(got) == 0 || got[0].Value != tt.want || got[0].Score < 0.6 {
			t.Errorf("Closest(%s.%s, %q) = %+v, want %q", tt.table, tt.column, tt.literal, got, tt.want)
		}
	}
	// Canada's code is not a state: no alias correction in a state column.
	if got := ix.Closest(ctx, "biz.business", "state", "Canada", 1); len(got) > 0 && got[0].Value == "CA" && got[0].Score >= 0.6 {
		t.Errorf("Closest(business.state, Canada) = %+v: a country's code in a state column", got)
	}
}

// Build reads the pairs the rows show and the code lists comments give,
// and they survive a write and read.
func TestBuildMinesAliases(t *testing.T) {
	if testCluster == nil {
		t.Skip("no postgres")
	}
	conn := fixtureDB(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `
		CREATE TABLE us_state (state_code text, state_name text, capital text);
		INSERT INTO us_state VALUES ('CA','California','Sacramento'), ('NY','New York','Albany'), ('TX','Texas','Austin'), ('WA','Washington','Olympia');
		CREATE TABLE shop (shop_name text, state text, kind text);
		INSERT INTO shop VALUES ('Corner Books','CA','R'), ('Big Apple Deli','NY','W'), ('Lone Star Feed','TX','R');
		CREATE TABLE country (code text, name text);
		INSERT INTO country VALUES ('CA','Canada'), ('US','United States');
		COMMENT ON COLUMN shop.kind IS 'R = Retail store, W = Wholesale';
		CREATE TABLE visit (state text, city text);
		INSERT INTO visit VALUES ('CA','Los Angeles'), ('CA','San Diego'), ('NY','Buffalo');`); err != nil {
		t.Fatal(err)
	}
	cols := []Column{
		{Schema: "public", Table: "us_state", Name: "state_code", Type: "text"},
		{Schema: "public", Table: "us_state", Name: "state_name", Type: "text"},
		{Schema: "public", Table: "us_state", Name: "capital", Type: "text"},
		{Schema: "public", Table: "shop", Name: "shop_name", Type: "text"},
		{Schema: "public", Table: "shop", Name: "state", Type: "text"},
		{Schema: "public", Table: "shop", Name: "kind", Type: "text", Comment: "R = Retail store, W = Wholesale"},
		{Schema: "public", Table: "visit", Name: "state", Type: "text"},
		{Schema: "public", Table: "visit", Name: "city", Type: "text"},
		{Schema: "public", Table: "country", Name: "code", Type: "text"},
		{Schema: "public", Table: "country", Name: "name", Type: "text"},
	}
	ix, err := Build(ctx, conn, cols, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Alias{{"CA", "California", "state_code", "state_name"}, {"NY", "New York", "state_code", "state_name"},
		{"R", "Retail store", "kind", "kind"}, {"W", "Wholesale", "kind", "kind"}, {"CA", "Canada", "code", "name"}}
	for _, w := range want {
		if !slices.Contains(ix.Aliases(), w) {
			t.Errorf("aliases %+v lack %+v", ix.Aliases(), w)
		}
	}
	for _, a := range ix.Aliases() {
		// visit maps CA to two cities; a capital is not what a state code
		// stands for (state_name is the column named like it).
		if a.NameColumn == "city" || a.NameColumn == "capital" || a.NameColumn == "shop_name" {
			t.Errorf("alias %+v: not a code's name", a)
		}
	}
	var buf bytes.Buffer
	if _, err := ix.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got := back.Closest(ctx, "public.shop", "state", "California", 1)
	if len(got) == 0 || got[0].Value != "CA" {
		t.Errorf("after a round trip, Closest(shop.state, California) = %+v, want CA", got)
	}
	if got := back.Closest(ctx, "public.shop", "kind", "wholesale", 1); len(got) == 0 || got[0].Value != "W" {
		t.Errorf("Closest(shop.kind, wholesale) = %+v, want W", got)
	}
}
