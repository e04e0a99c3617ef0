package learned

import (
	"context"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/workload"
)

// The store's profile reaches the engine as its own types: the normalised
// text, relations, counts, joins and filtered or grouped columns.
func TestStore(t *testing.T) {
	st := workload.NewStore("", workload.Limits{})
	p, err := st.Profile("shop")
	if p == nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"SELECT s.city, count(*) FROM sales x JOIN stores s ON s.id = x.store_id WHERE x.amount > 10 GROUP BY s.city",
		"SELECT s.city, count(*) FROM sales x JOIN stores s ON s.id = x.store_id WHERE x.amount > 99 GROUP BY s.city",
	} {
		sh, err := workload.Analyze(sql)
		if err != nil {
			t.Fatal(err)
		}
		p.Add(sh, "clerk", time.Now())
	}
	l, err := Store{st}.Learned(context.Background(), "shop")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Queries) != 1 || l.Queries[0].Count != 2 || len(l.Queries[0].Relations) != 2 {
		t.Fatalf("queries %+v: want one, run twice, over two relations", l.Queries)
	}
	if len(l.Joins) != 1 || l.Joins[0].Count != 2 {
		t.Errorf("joins %+v: want stores.id = sales.store_id, used twice", l.Joins)
	}
	uses := map[string]int{}
	for _, c := range l.Columns {
		uses[c.Column.Relation.Name+"."+c.Column.Column] = c.Uses
	}
	if uses["sales.amount"] != 2 || uses["stores.city"] != 2 {
		t.Errorf("columns %v: want sales.amount and stores.city used twice", uses)
	}
}
