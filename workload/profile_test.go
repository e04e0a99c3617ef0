package workload

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// t0 is recent: a store applies the default age bound against the clock when it reads a file.
var t0 = time.Now().UTC().Truncate(time.Hour)

func mustAnalyze(t *testing.T, sql string) Shape {
	t.Helper()
	s, err := Analyze(sql)
	if err != nil {
		t.Fatalf("Analyze(%s): %v", sql, err)
	}
	return s
}

func TestProfileAggregates(t *testing.T) {
	p := NewProfile("shop", Limits{})
	a := mustAnalyze(t, `SELECT * FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.country = 'FR'`)
	b := mustAnalyze(t, `SELECT count(*) FROM orders o JOIN customers c ON o.customer_id = c.id GROUP BY c.country`)
	c := mustAnalyze(t, `SELECT * FROM orders o JOIN items i ON i.order_id = o.id ORDER BY o.placed`)
	for i := range 3 {
		p.Add(a, "alice", t0.Add(time.Duration(i)*time.Second))
	}
	p.Add(b, "bob", t0)
	p.Add(b, "alice", t0)
	p.Add(c, "carol", t0)

	// b, run by two roles, weighs more than a, run three times by one.
	qs := p.Queries()
	if len(qs) != 3 || qs[0].Fingerprint != b.Fingerprint || !slices.Equal(qs[0].Roles, []string{"alice", "bob"}) {
		t.Fatalf("Queries = %+v", qs)
	}
	if qs[1].Fingerprint != a.Fingerprint || qs[1].Count != 3 || !qs[1].LastSeen.Equal(t0.Add(2*time.Second)) {
		t.Errorf("second query = %+v", qs[1])
	}
	js := p.Joins()
	want := []JoinUse{
		{Join: join("customers.id", "orders.customer_id"), Count: 5, Queries: 2, Roles: 2},
		{Join: join("items.order_id", "orders.id"), Count: 1, Queries: 1, Roles: 1},
	}
	if !slices.Equal(js, want) {
		t.Errorf("Joins = %+v, want %+v", js, want)
	}
	cs := p.Columns()
	wantCols := []ColumnUse{
		{Col: col("customers.country"), Filtered: 3, Grouped: 2, Roles: 2},
		{Col: col("orders.placed"), Ordered: 1, Roles: 1},
	}
	if !slices.Equal(cs, wantCols) {
		t.Errorf("Columns = %+v, want %+v", cs, wantCols)
	}
	// Forgetting a query takes its share of the aggregates away.
	if !p.Forget(a.Fingerprint) || p.Forget(a.Fingerprint) {
		t.Fatal("Forget")
	}
	if js := p.Joins(); js[0].Count != 2 || js[0].Queries != 1 {
		t.Errorf("Joins after Forget = %+v", js)
	}
}

// One role flooding a join, in as many sessions as it likes, does not
// outrank a join two roles use once each; among joins of one role each,
// sessions count before runs.
func TestProfileWeighsRolesAndSessions(t *testing.T) {
	p := NewProfile("shop", Limits{})
	flood := mustAnalyze(t, `SELECT * FROM orders o JOIN victims v ON o.amount = v.id`)
	real := mustAnalyze(t, `SELECT * FROM orders o JOIN victims v ON o.victim_id = v.id`)
	wide := mustAnalyze(t, `SELECT * FROM orders o JOIN items i ON i.order_id = o.id`)
	for i := range 60 {
		p.AddFrom(flood, Origin{Role: "mallory", Session: strconv.Itoa(i)}, t0, 1)
	}
	p.AddFrom(real, Origin{Role: "app", Session: "a1"}, t0, 1)
	p.AddFrom(real, Origin{Role: "bi", Session: "b1"}, t0, 1)
	for range 100 {
		p.AddFrom(wide, Origin{Role: "etl", Session: "e1"}, t0, 1)
	}
	var got []string
	for _, j := range p.Joins() {
		got = append(got, fmt.Sprintf("%s roles=%d sessions=%d count=%d", j.Join, j.Roles, j.Sessions, j.Count))
	}
	want := []string{
		"orders.victim_id = victims.id roles=2 sessions=2 count=2",
		"orders.amount = victims.id roles=1 sessions=60 count=60",
		"items.order_id = orders.id roles=1 sessions=1 count=100",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Joins:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if q := p.Queries(); q[0].Fingerprint != real.Fingerprint || len(q[1].Sessions) != 60 {
		t.Errorf("Queries = %+v", q)
	}
}

func TestProfileRetention(t *testing.T) {
	p := NewProfile("db", Limits{MaxQueries: 3, MaxAge: time.Hour})
	var shapes []Shape
	for i := range 5 {
		shapes = append(shapes, mustAnalyze(t, "SELECT a FROM t"+string(rune('a'+i))))
	}
	// t_a is seen again late, so it outlives t_b and t_c.
	for i, s := range shapes {
		p.Add(s, "", t0.Add(time.Duration(i)*time.Minute))
		if i == 2 {
			p.Add(shapes[0], "", t0.Add(10*time.Minute))
		}
	}
	var got []string
	for _, q := range p.Queries() {
		got = append(got, q.Relations[0].Name)
	}
	slices.Sort(got)
	if want := []string{"ta", "td", "te"}; !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v (least recently seen evicted)", got, want)
	}
	// Age: at t0+64m only t_a (last seen t0+10m) is within the hour.
	if n := p.Prune(t0.Add(65 * time.Minute)); n != 2 || p.Len() != 1 {
		t.Errorf("Prune dropped %d, left %d", n, p.Len())
	}
	if n := p.Prune(t0.Add(71 * time.Minute)); n != 1 || p.Len() != 0 {
		t.Errorf("Prune dropped %d, left %d", n, p.Len())
	}
}

func TestProfileRolesBounded(t *testing.T) {
	p := NewProfile("db", Limits{})
	s := mustAnalyze(t, "SELECT 1 FROM t")
	for i := range MaxRoles + 5 {
		p.Add(s, "role"+strings.Repeat("x", i), t0)
	}
	if q, _ := p.Query(s.Fingerprint); len(q.Roles) != MaxRoles || q.Count != MaxRoles+5 {
		t.Errorf("roles %d count %d", len(q.Roles), q.Count)
	}
}

func TestStoreSaveLoadForget(t *testing.T) {
	dir := t.TempDir()
	st := NewStore(dir, Limits{})
	p, err := st.Profile("shop/eu") // a name that needs escaping in a file name
	if err != nil {
		t.Fatal(err)
	}
	a := mustAnalyze(t, `SELECT * FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.name = 'Alice'`)
	b := mustAnalyze(t, `SELECT * FROM items WHERE sku = 'X-1'`)
	p.Add(a, "alice", t0)
	p.Add(b, "bob", t0)
	if err := st.Save(t0); err != nil {
		t.Fatal(err)
	}
	dbs, err := Databases(dir)
	if err != nil || !slices.Equal(dbs, []string{"shop/eu"}) {
		t.Fatalf("Databases = %v, %v", dbs, err)
	}
	// A fresh store (a restarted proxy) reads the same profile.
	p2, err := NewStore(dir, Limits{}).Profile("shop/eu")
	if err != nil || p2.Len() != 2 || !slices.Equal(p2.Joins(), p.Joins()) {
		t.Fatalf("reloaded: %d queries, %v; joins %v vs %v", p2.Len(), err, p2.Joins(), p.Joins())
	}
	// forget from the CLI while the proxy holds the profile: the file
	// loses it at once, the proxy at its next save, which does not write
	// it back.
	if n, err := ForgetInFile(dir, "shop/eu", a.Fingerprint); err != nil || n != 1 {
		t.Fatalf("ForgetInFile = %d, %v", n, err)
	}
	if r, err := ReadProfile(dir, "shop/eu", Limits{}, t0); err != nil || r.Len() != 1 {
		t.Fatalf("file after forget: %v", err)
	}
	if err := st.Save(t0); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Query(a.Fingerprint); ok {
		t.Error("proxy kept a forgotten fingerprint")
	}
	raw, err := os.ReadFile(Path(dir, "shop/eu"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), a.Fingerprint) {
		t.Error("file still names the forgotten fingerprint after the proxy saved")
	}
	// Forget the whole database.
	if n, err := ForgetInFile(dir, "shop/eu", ""); err != nil || n != 1 {
		t.Fatalf("ForgetInFile all = %d, %v", n, err)
	}
	p.Add(b, "bob", t0) // still held by the proxy until it saves
	if err := st.Save(t0); err != nil {
		t.Fatal(err)
	}
	if p.Len() != 0 {
		t.Errorf("proxy holds %d after the database was forgotten", p.Len())
	}
	if r, err := ReadProfile(dir, "shop/eu", Limits{}, t0); err != nil || r.Len() != 0 {
		t.Errorf("file after forget all: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*")); len(m) != 0 {
		t.Errorf("temp files left: %v", m)
	}
}

func TestStoreIgnoresOtherFormat(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(Path(dir, "db"), []byte(`{"format":99,"queries":[{"Fingerprint":"x"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := NewStore(dir, Limits{}).Profile("db")
	if err == nil || p == nil || p.Len() != 0 {
		t.Errorf("Profile = %v, %v; want an empty profile and the reason", p, err)
	}
}
