package engine

import (
	"slices"
	"testing"
)

func TestLexicalKeywords(t *testing.T) {
	tests := []struct {
		question string
		want     []string // each must be present
		absent   []string
	}{
		{"How many orders were placed by customers in Los Angeles?", []string{"Los Angeles", "orders", "customers", "placed"}, []string{"How", "many", "in"}},
		{`Which products are supplied by "Acme Corp" in EUR?`, []string{"Acme Corp", "products", "EUR", "supplied"}, []string{"Which"}},
		{"total monthly revenue per region in 2023", []string{"revenue", "region", "2023", "monthly revenue"}, []string{"total", "per"}},
		{"", nil, nil},
	}
	for _, tt := range tests {
		got := lexicalKeywords(tt.question)
		for _, w := range tt.want {
			if !slices.Contains(got, w) {
				t.Errorf("%q: keywords %q lack %q", tt.question, got, w)
			}
		}
		for _, w := range tt.absent {
			if slices.Contains(got, w) {
				t.Errorf("%q: keywords %q contain stopword %q", tt.question, got, w)
			}
		}
	}
}
