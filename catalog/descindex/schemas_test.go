package descindex

import (
	"bytes"
	"context"
	"testing"
)

// TestSameTableTwoSchemas: documents of one table name in two schemas stay
// apart, keep their schema through a save and load, and rank by their own
// text.
func TestSameTableTwoSchemas(t *testing.T) {
	docs := []Doc{
		{Kind: KindTable, Schema: "public", Table: "orders", Text: "Web shop orders placed by consumers."},
		{Kind: KindColumn, Schema: "public", Table: "orders", Column: "status", Text: "open or closed"},
		{Kind: KindTable, Schema: "sales", Table: "orders", Text: "CRM pipeline deals negotiated by account managers."},
		{Kind: KindColumn, Schema: "sales", Table: "orders", Column: "status", Text: "won or lost"},
	}
	built := New(docs, Options{})
	var buf bytes.Buffer
	if _, err := built.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	loaded, err := Read(&buf, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cases := []struct {
		query, schema, column string
	}{
		{"pipeline deals of account managers", "sales", ""},
		{"web shop consumers", "public", ""},
		{"deals won", "sales", "status"},
		{"closed orders", "public", "status"},
	}
	for _, ix := range []*Index{built, loaded} {
		for _, tc := range cases {
			hits := ix.Search(ctx, tc.query, 4)
			if len(hits) == 0 {
				t.Fatalf("Search(%q) found nothing", tc.query)
			}
			if h := hits[0]; h.Schema != tc.schema || h.Table != "orders" || h.Column != tc.column {
				t.Errorf("Search(%q) = %s.%s.%s first, want %s.orders.%s", tc.query, h.Schema, h.Table, h.Column, tc.schema, tc.column)
			}
		}
	}
}
