package engine

import (
	"fmt"
	"testing"

	"github.com/nlproxy/nlproxy/catalog"
)

// benchSchema is 200 tables of 20 columns: plain snake_case names in half
// the schemas, glued lowercase prefixes in the others.
func benchSchema() *catalog.Schema {
	words := []string{"customer", "order", "product", "price", "daily", "ticker", "account", "invoice", "payment", "region"}
	s := &catalog.Schema{}
	for i := 0; i < 200; i++ {
		ns := fmt.Sprintf("s%d", i%10)
		glued := i%20 >= 10
		name := func(a, b string) string {
			if glued {
				return "sb" + a + b
			}
			return a + "_" + b
		}
		t := catalog.Table{Schema: ns, Name: name(words[i%10], fmt.Sprint(i)), Kind: catalog.KindTable}
		for j := 0; j < 20; j++ {
			t.Columns = append(t.Columns, col(name(words[(i+j)%10], words[j%10]), "text", "the "+words[j%10]+" of the "+words[(i+j)%10]))
		}
		s.Tables = append(s.Tables, t)
	}
	return s
}

// The lexicon is built once per schema fingerprint; the scoring runs on
// every ask.
func BenchmarkLexiconBuild(b *testing.B) {
	s := benchSchema()
	for b.Loop() {
		buildLexicon(s)
	}
}

func BenchmarkLexiconRank(b *testing.B) {
	lx := buildLexicon(benchSchema())
	q := "lowest daily closing price of each ticker for the customers of every region"
	qt := questionTerms(q, lexicalKeywords(q))
	for b.Loop() {
		lx.rank(lx.tableScores(qt, nil, nil), qt, nil, nil)
	}
}

func BenchmarkQuestionWords(b *testing.B) {
	lx := buildLexicon(benchSchema())
	q := "lowest daily closing price of each ticker for the customers of every region"
	qt := questionTerms(q, lexicalKeywords(q))
	for b.Loop() {
		lx.withQuestionWords(qt)
	}
}
