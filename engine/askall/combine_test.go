package askall

import (
	"slices"
	"testing"

	"github.com/nlproxy/nlproxy/internal/pg"
)

func one(db, v string) Step {
	return Step{Database: db, Rows: &pg.Rows{Columns: []string{"n"}, Values: [][]*string{{&v}}}}
}

func TestCombine(t *testing.T) {
	two := func(a, b string) []Step { return []Step{one("eu", a), one("us", b)} }
	tests := []struct {
		name  string
		op    string
		steps []Step
		want  []string
	}{
		{"none", CombineNone, two("1", "2"), nil},
		{"larger first", CombineLarger, two("1200.50", "950"), []string{"step 1 (eu) = 1200.50 is larger than step 2 (us) = 950, by 250.5"}},
		{"larger second", CombineLarger, two("3", "10"), []string{"step 2 (us) = 10 is larger than step 1 (eu) = 3, by 7"}},
		{"smaller", CombineSmaller, two("3", "10"), []string{"step 1 (eu) = 3 is smaller than step 2 (us) = 10, by 7"}},
		{"equal", CombineLarger, two("0.1", "0.10"), []string{"step 1 (eu) = 0.1 and step 2 (us) = 0.10 are equal"}},
		{"difference exact", CombineDifference, two("0.3", "0.1"), []string{"step 1 (eu) = 0.3 minus step 2 (us) = 0.1 = 0.2"}},
		{"ratio", CombineRatio, two("1", "3"), []string{"step 1 (eu) = 1 divided by step 2 (us) = 3 = 0.333333333333"}},
		{"ratio by zero", CombineRatio, two("1", "0"), []string{"step 1 (eu) = 1 divided by step 2 (us) = 0 is undefined (division by zero)"}},
		{"sum", CombineSum, []Step{one("a", "1"), one("b", "2.5"), one("c", "-1")}, []string{"sum of step 1 (a) = 1, step 2 (b) = 2.5, step 3 (c) = -1 = 2.5"}},
		{"big integers", CombineDifference, two("123456789012345678901234567890", "1"), []string{"step 1 (eu) = 123456789012345678901234567890 minus step 2 (us) = 1 = 123456789012345678901234567889"}},
		{"missing second", CombineLarger, []Step{one("eu", "5"), {Database: "us"}}, []string{"cannot compute larger: no single number from step 2 (us)"}},
		{"not a number", CombineLarger, two("5", "many"), []string{"cannot compute larger: no single number from step 2 (us)"}},
		{"one step", CombineLarger, []Step{one("eu", "5")}, []string{"cannot compute larger: it needs two numbers"}},
		{"sum without one", CombineSum, []Step{one("a", "1"), {Database: "b"}}, []string{"sum of step 1 (a) = 1 = 1 (without step 2 (b): no single number)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := combine(tt.op, tt.steps); !slices.Equal(got, tt.want) {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
		})
	}
}
