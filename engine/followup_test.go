package engine

import "testing"

func TestStandsAlone(t *testing.T) {
	for q, want := range map[string]bool{
		"top five customers by revenue":                                               true,
		"how many orders were placed in March 2024?":                                  true,
		"What cities have more than one restaurant with the same name?":               false, // "same": the model decides
		"For each paper that cites other papers, how many other papers does it cite?": true,
		"only in 2024":                   false,
		"and their cities?":              false,
		"what about last year?":          false,
		"how about the stores in Boston": false,
		"show those per region":          false,
		"sorted by name instead":         false,
		"the same for suppliers please":  false,
		"list them":                      false,
		"Which customers placed orders that were later refunded by the store?": true,
	} {
		if got := StandsAlone(q); got != want {
			t.Errorf("StandsAlone(%q) = %v, want %v", q, got, want)
		}
	}
}
