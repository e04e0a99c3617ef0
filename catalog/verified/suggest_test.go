package verified

import (
	"reflect"
	"strings"
	"testing"
)

// TestSuggest: candidates of the same statement shape are one suggestion,
// kept when seen often enough and not already an entry; every literal is a
// parameter and no value of the original statements (nor any other quoted
// text or number of a question) reaches the suggestion.
func TestSuggest(t *testing.T) {
	cityText := "SELECT count(*) FROM orders t1 WHERE t1.city = $1 AND t1.amount > $2"
	for _, tc := range []struct {
		name     string
		cs       []Candidate
		existing []Entry
		min      int64
		want     []Suggestion
	}{{
		name: "asks of two roles, values out",
		cs: []Candidate{
			{Database: "shop", Question: "Orders in Paris above 30", Text: cityText, Values: []string{"Paris", "30"}, Count: 1},
			{Database: "shop", Question: "orders in 'Lyon' above 99 for ACME-7", Text: cityText, Values: []string{"Lyon", "99"}, Count: 1},
			{Database: "shop", Question: "orders in paris above 30", Text: cityText, Values: []string{"Paris", "30"}, Count: 1},
		},
		min: 2,
		want: []Suggestion{{Seen: 3, Source: "asks", Entry: Entry{Name: "suggested_1", Database: "shop",
			Question: "Orders in {p1} above {p2}", SQL: "SELECT count(*) FROM orders t1 WHERE t1.city = :p1 AND t1.amount > :p2",
			Params: []Param{{Name: "p1"}, {Name: "p2"}}}}},
	}, {
		name: "below min",
		cs:   []Candidate{{Database: "shop", Question: "orders in Paris", Text: cityText, Values: []string{"Paris"}, Count: 1}},
		min:  2,
	}, {
		name: "workload and asks, best first, per database",
		cs: []Candidate{
			{Database: "shop", Text: "SELECT sum(amount) FROM orders", Count: 2},
			{Database: "shop", Text: "SELECT id FROM customers LIMIT $1", Count: 9},
			{Database: "shop", Question: "top 5 customers", Text: "SELECT id FROM customers LIMIT $1", Values: []string{"5"}, Count: 1},
			{Database: "hr", Text: "SELECT sum(amount) FROM orders", Count: 1},
		},
		min: 2,
		want: []Suggestion{
			{Seen: 10, Source: "asks, workload", Entry: Entry{Name: "suggested_1", Database: "shop", Question: "top {p1} customers",
				SQL: "SELECT id FROM customers LIMIT :p1", Params: []Param{{Name: "p1"}}}},
			{Seen: 2, Source: "workload", Entry: Entry{Name: "suggested_2", Database: "shop", SQL: "SELECT sum(amount) FROM orders"}},
		},
	}, {
		name:     "already an entry",
		cs:       []Candidate{{Database: "shop", Text: "SELECT sum(amount) FROM orders", Count: 5}},
		existing: []Entry{{Name: "total", Database: "shop", SQL: "SELECT sum(amount)\n  FROM orders"}},
		min:      1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := Suggest(tc.cs, tc.existing, tc.min, nil)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Suggest =\n%+v\nwant\n%+v", got, tc.want)
			}
			for _, s := range got {
				for _, c := range tc.cs {
					for _, v := range c.Values {
						if strings.Contains(strings.ToLower(s.Entry.Question+s.Entry.SQL), strings.ToLower(v)) {
							t.Errorf("value %q carried into %+v", v, s.Entry)
						}
					}
				}
				for _, leak := range []string{"ACME", "Lyon", "99"} {
					if strings.Contains(s.Entry.Question, leak) {
						t.Errorf("%q carried into %q", leak, s.Entry.Question)
					}
				}
			}
		})
	}
}
