package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/prompts"
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

func TestInQuestion(t *testing.T) {
	for _, tt := range []struct {
		question string
		terms    []string
		want     []string
	}{
		// Plural and singular, case, phrases sharing one word.
		{"How many customers are there in Los Angeles?", []string{"customer", "los angeles", "customer count"}, []string{"customer", "los angeles", "customer count"}},
		// The prompt's example copied for another question.
		{"How many customers are there?", []string{"JFK", "March 2021", "flight", "departure delay", "airport"}, nil},
		{"Flights from JFK in March 2021\nUse upper-case airport codes.", []string{"JFK", "March 2021", "flight", "airport code", "revenue"}, []string{"JFK", "March 2021", "flight", "airport code"}},
	} {
		if got := inQuestion(tt.question, tt.terms); !slices.Equal(got, tt.want) {
			t.Errorf("%q: kept %q, want %q", tt.question, got, tt.want)
		}
	}
}

// TestKeywordsTranscriptEchoingExample: what Gemma 3 270M answered to the
// keyword prompt through the proxy (engine/llm/testdata/real) keeps none of
// its terms for the question it was asked.
func TestKeywordsTranscriptEchoingExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("llm", "testdata", "real", "keywords-echoes-example.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tr struct{ Prompt, Content string }
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	var out prompts.KeywordsResult
	if err := llm.ExtractJSON(tr.Content, &out); err != nil {
		t.Fatal(err)
	}
	question := strings.SplitN(strings.TrimPrefix(tr.Prompt, "Question:\n"), "\n", 2)[0]
	if len(out.Keywords)+len(out.Entities) == 0 {
		t.Fatal("transcript holds no terms")
	}
	if kept := inQuestion(question, append(out.Entities, out.Keywords...)); len(kept) != 0 {
		t.Errorf("%q: kept %q from the model's copied example", question, kept)
	}
}
