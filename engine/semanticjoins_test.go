package engine

import (
	"slices"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/catalog/semantic"
)

// A semantic-layer join is listed first among the join paths, marked as
// the semantic model's, ahead of the workload's and the inferred ones; one
// naming a table or column the asker cannot read is left out.
func TestSemanticJoinsFirst(t *testing.T) {
	e := &Engine{SemanticJoins: []semantic.Join{
		{Entity: "airport", From: "travel.flight.to_airport", To: "travel.airport.airport_code"},
		{Entity: "ghost", From: "travel.flight.nope", To: "travel.airport.airport_code"},
		{Entity: "elsewhere", From: "other.flight.to_airport", To: "travel.airport.airport_code"},
	}}
	e.applyDefaults()
	a := previewAsk(travelSchema(), "how many flights leave from each airport city", travelWorkload())
	a.sess = &session{searchPath: []string{"travel"}}
	e.addSemanticJoins(a)
	got := e.selectSchemaBudget(a, 1000)
	if !slices.Contains(got, "travel.flight") || !slices.Contains(got, "travel.airport") {
		t.Fatalf("selected %q", got)
	}
	sem := strings.Index(a.schema, "--   airport.airport_code = flight.to_airport (semantic model)")
	wl := strings.Index(a.schema, "(used by 40 queries)")
	if sem < 0 || wl < 0 || sem > wl {
		t.Errorf("the semantic join is not listed ahead of the workload's:\n%s", a.schema)
	}
	if strings.Contains(a.schema, "nope") || strings.Count(a.schema, "(semantic model)") != 1 {
		t.Errorf("an unresolvable semantic join is listed:\n%s", a.schema)
	}
}
