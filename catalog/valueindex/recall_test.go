package valueindex_test

import (
	"context"
	"testing"

	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex/valuerecall"
)

// TestRecallFixture is the recall benchmark's logic on the fixture, with
// thresholds: typo/case/punctuation must reach 0.95 at 10.
func TestRecallFixture(t *testing.T) {
	ix := valueindex.FromValues(valueindex.FixtureValues(), valueindex.Options{})
	cases := valuerecall.Generate(ix, 7, 200)
	res := valuerecall.Evaluate(context.Background(), ix, cases)
	// Partial names and initials are ambiguous by nature in this fixture
	// (every first and last name is shared by 45 people; "JS" fits dozens),
	// so for them the right column matters more than the exact value.
	min10 := map[valuerecall.Class]float64{
		valuerecall.Case: 0.99, valuerecall.Punct: 0.99, valuerecall.Typo: 0.95,
		valuerecall.Abbrev: 0.7, valuerecall.Partial: 0.2,
	}
	minCol1 := map[valuerecall.Class]float64{
		valuerecall.Case: 0.99, valuerecall.Punct: 0.99, valuerecall.Typo: 0.95,
		valuerecall.Abbrev: 0.9, valuerecall.Partial: 0.95,
	}
	for _, cl := range valuerecall.Classes() {
		r := res[cl]
		t.Logf("%-12s n=%3d recall@1=%.3f recall@10=%.3f column@1=%.3f", cl, r.N, r.Recall1(), r.Recall10(), r.ColumnRecall1())
		if r.N < 20 {
			t.Errorf("%s: only %d cases generated", cl, r.N)
		}
		if r.Recall10() < min10[cl] {
			t.Errorf("%s: recall@10 %.3f < %.2f", cl, r.Recall10(), min10[cl])
		}
		if r.ColumnRecall1() < minCol1[cl] {
			t.Errorf("%s: column@1 %.3f < %.2f", cl, r.ColumnRecall1(), minCol1[cl])
		}
	}
}
