package valueindex

import (
	"bytes"
	"context"
	"slices"
	"testing"
)

// TestSameTableTwoSchemas: one table name in two schemas (and a schema or
// table name holding a dot, and two tables differing only in case) must
// keep their values apart in Lookup, Closest and a persisted copy.
func TestSameTableTwoSchemas(t *testing.T) {
	cols := []ColumnValues{
		{Schema: "public", Table: "orders", Column: "status", Values: []string{"open", "closed"}},
		{Schema: "sales", Table: "orders", Column: "status", Values: []string{"won", "lost"}},
		{Schema: "sales", Table: "Orders", Column: "status", Values: []string{"pending review"}},
		{Schema: "eu.west", Table: "orders", Column: "status", Values: []string{"geschlossen"}},
		{Schema: "eu", Table: "west.orders", Column: "status", Values: []string{"fermé"}},
	}
	built := FromValues(cols, Options{})
	var buf bytes.Buffer
	if _, err := built.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	loaded, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	type ref struct{ schema, table string }
	for _, ix := range []*Index{built, loaded} {
		lookups := []struct {
			keyword string
			want    ref
		}{
			{"won", ref{"sales", "orders"}},
			{"closed", ref{"public", "orders"}},
			{"pending review", ref{"sales", "Orders"}},
			{"geschlossen", ref{"eu.west", "orders"}},
			{"ferme", ref{"eu", "west.orders"}},
		}
		for _, tc := range lookups {
			ms := ix.Lookup(ctx, []string{tc.keyword}, LookupOptions{})
			if len(ms) == 0 || (ref{ms[0].Schema, ms[0].Table}) != tc.want {
				t.Errorf("Lookup(%q) = %+v, want %v first", tc.keyword, ms, tc.want)
			}
		}
		closest := []struct {
			table, literal string
			want           []ref // the tables the candidates may come from
		}{
			{"sales.orders", "lost", []ref{{"sales", "orders"}}},
			{"public.orders", "lost", []ref{{"public", "orders"}}},
			{"sales.Orders", "pending", []ref{{"sales", "Orders"}}},
			{"SALES.ORDERS", "won", []ref{{"sales", "orders"}, {"sales", "Orders"}}}, // no exact match: case-insensitive
			{"eu.west.orders", "geschlossen", []ref{{"eu.west", "orders"}, {"eu", "west.orders"}}},
			{"orders", "lost", []ref{{"public", "orders"}, {"sales", "orders"}, {"eu.west", "orders"}}}, // bare: every schema
			{"Orders", "pending", []ref{{"sales", "Orders"}}},                                           // exact case first
		}
		for _, tc := range closest {
			ms := ix.Closest(ctx, tc.table, "status", tc.literal, 10)
			if len(ms) == 0 {
				t.Errorf("Closest(%s, %q) found nothing", tc.table, tc.literal)
			}
			seen := map[ref]bool{}
			for _, m := range ms {
				r := ref{m.Schema, m.Table}
				seen[r] = true
				if !slices.Contains(tc.want, r) {
					t.Errorf("Closest(%s, %q) returned a value of %v", tc.table, tc.literal, r)
				}
			}
			if len(tc.want) > 1 && tc.table == "orders" && len(seen) != len(tc.want) {
				t.Errorf("Closest(orders, %q) searched %v, want all of %v", tc.literal, seen, tc.want)
			}
		}
	}
}
