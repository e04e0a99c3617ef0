package verified

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// TestNamesAgainstCatalog: a drafted statement is checked against a real
// catalog, as the catalog role built it, and against what each role may
// read (table and column privileges): a relation or column gone, or one
// the role may not read, drops the candidate, with the reason, and it
// counts for nothing in the suggestion.
func TestNamesAgainstCatalog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := pgtest.New(t, pgcluster.Options{})
	db := pgtest.UniqueName(t, "shop")
	alice, bob := pgtest.UniqueName(t, "alice"), pgtest.UniqueName(t, "bob")
	if err := c.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, db, fmt.Sprintf(`CREATE ROLE %[1]s; CREATE ROLE %[2]s;
CREATE TABLE orders (id int PRIMARY KEY, city text, amount numeric, note text);
CREATE TABLE customers (id int PRIMARY KEY, email text, ssn text);
CREATE SCHEMA sales; CREATE TABLE sales.targets (region text, goal numeric);
GRANT SELECT ON orders TO %[1]s; GRANT SELECT (id, email) ON customers TO %[1]s;
GRANT SELECT (id, amount) ON orders TO %[2]s;`, alice, bob)); err != nil {
		t.Fatal(err)
	}
	conn, err := c.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	snap, err := catalog.Build(ctx, conn, db, catalog.BuildOptions{SkipValues: true})
	if err != nil {
		t.Fatal(err)
	}
	asked := map[string]int{}
	n := &Names{Schema: snap.Schema, Visible: func(role string) (*catalog.Schema, error) {
		asked[role]++
		return snap.Schema.VisibleTo(ctx, conn, role)
	}}
	const cityText = "SELECT count(*) FROM orders t1 WHERE t1.city = $1 AND t1.amount > $2"
	for _, tc := range []struct {
		role, sql, want string // want: a part of the reason, "" when it resolves
	}{
		{"", cityText, ""},
		{alice, cityText, ""},
		{bob, cityText, "may not read column t1.city"},
		{bob, "SELECT sum(amount) FROM orders", ""},
		{"", "SELECT phone FROM customers", "column phone does not exist"},
		{"", "SELECT t1.phone FROM customers t1", "column t1.phone does not exist"},
		{"", "SELECT * FROM refunds", "relation refunds does not exist"},
		{"", "SELECT * FROM sales.orders", "relation sales.orders does not exist"},
		{"", "SELECT goal FROM targets", "relation targets does not exist"}, // not on the path
		{"", "SELECT region, goal FROM sales.targets WHERE goal > $1", ""},
		{alice, "SELECT ssn FROM customers WHERE id = $1", "may not read column ssn"},
		{alice, "SELECT email FROM customers", ""},
		{bob, "SELECT id FROM customers", "may not read public.customers"},
		{alice, "SELECT region FROM sales.targets", "may not read sales.targets"},
		{"", "WITH x AS (SELECT id FROM orders) SELECT id FROM x", ""},
		// Bare names beside a CTE are not judged (a CTE's columns are not
		// the catalog's); qualified ones are.
		{"", "WITH x AS (SELECT nope FROM orders) SELECT id FROM x", ""},
		{"", "WITH x AS (SELECT o.nope FROM orders o) SELECT id FROM x", "column o.nope does not exist"},
		{"", "SELECT t2.x FROM (SELECT id AS x FROM orders) t2", ""},
		{"", "SELECT amount AS c1 FROM public.orders ORDER BY c1", ""},
		{"", "SELECT o.id, c.email FROM orders o JOIN customers c ON c.id = o.id", ""},
		{"", "SELECT o.email FROM orders o JOIN customers c ON c.id = o.id", "column o.email does not exist"},
		{"", "SELECT public.orders.note FROM public.orders", ""},
		{"", "SELEC nothing", "does not parse"},
	} {
		got := n.Check(tc.role, tc.sql)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("Check(%q, %q) = %q, want %q", tc.role, tc.sql, got, tc.want)
		}
	}
	if asked[alice] != 1 || asked[bob] != 1 {
		t.Errorf("privileges asked %v, want once per role", asked)
	}

	// Suggest: bob's ask and the workload query naming a gone column are
	// dropped and counted; alice's asks alone make the suggestion.
	cs := []Candidate{
		{Database: db, Question: "orders in Paris above 30", Text: cityText, Values: []string{"Paris", "30"}, Count: 1, Role: alice},
		{Database: db, Question: "orders in Lyon above 99", Text: cityText, Values: []string{"Lyon", "99"}, Count: 1, Role: alice},
		{Database: db, Question: "orders in Nice above 5", Text: cityText, Values: []string{"Nice", "5"}, Count: 1, Role: bob},
		{Database: db, Question: "orders in Metz above 7", Text: cityText, Values: []string{"Metz", "7"}, Count: 1, Role: bob},
		{Database: db, Text: "SELECT id FROM customers WHERE phone = $1", Count: 9},
	}
	ss, dropped := Suggest(cs, nil, 2, n.Check)
	if len(ss) != 1 || ss[0].Seen != 2 || ss[0].Source != "asks" || strings.Contains(ss[0].Entry.Question, "Nice") || strings.Contains(ss[0].Entry.Question, "Metz") {
		t.Errorf("suggestions %+v, want alice's two asks", ss)
	}
	want := []Dropped{
		{Database: db, Text: cityText, Role: bob, Reason: "role " + bob + " may not read column t1.city", Count: 2},
		{Database: db, Text: "SELECT id FROM customers WHERE phone = $1", Reason: "column phone does not exist", Count: 9},
	}
	if fmt.Sprint(dropped) != fmt.Sprint(want) {
		t.Errorf("dropped %+v\nwant %+v", dropped, want)
	}
}
