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

// Apostrophes inside words are not quotes; real quotes still are.
func TestLexicalKeywordsApostrophes(t *testing.T) {
	tests := []struct {
		question string
		want     []string
		absent   []string
	}{
		{"How many orders did O'Brien place at Macy's?", []string{"O'Brien", "Macy's"}, []string{"Brien place at Macy", "s"}},
		{"orders of O'Brien and 'Acme Corp' last year", []string{"O'Brien", "Acme Corp"}, []string{"Brien and "}},
		{"stores named 'Macy's' in Ohio", []string{"Macy's", "Ohio"}, []string{"Macy"}},
		{"sales at Macy’s and Kohl’s", []string{"Macy’s", "Kohl’s"}, []string{"s and Kohl"}},
		{"customers called ‘Jean-Luc’", []string{"Jean-Luc"}, nil},
		{"it's the 'Q3' report", []string{"Q3", "report"}, []string{"s the "}},
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
				t.Errorf("%q: keywords %q contain %q", tt.question, got, w)
			}
		}
	}
}
