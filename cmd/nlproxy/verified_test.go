package main

import (
	"bytes"
	"context"
	"fmt"

	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/catalog/store"
	"github.com/nlproxy/nlproxy/catalog/verified"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
	"github.com/nlproxy/nlproxy/workload"
	"gopkg.in/yaml.v3"
)

// TestVerifiedCLI: add writes an entry the file then lists, a bad entry
// (SQL the guard refuses, a parameter not in the question) is refused
// without touching the file, remove takes it out.
func TestVerifiedCLI(t *testing.T) {
	t.Setenv("NLPROXY_CATALOG_STORE", "")
	file := filepath.Join(t.TempDir(), "verified.yaml")
	cli := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := run(context.Background(), append([]string{"verified"}, args...), &out, &errb)
		return out.String() + errb.String(), err
	}
	if out, err := cli("add", "--file", file, "--db", "shop", "--name", "orders_in_city",
		"--question", "orders in {city}", "--paraphrase", "how many orders from {city}",
		"--sql", "SELECT count(*) FROM orders o JOIN addresses a ON a.customer_id = o.customer_id WHERE a.city = :city",
		"--param", "city=addresses.city", "--role", "analyst"); err != nil {
		t.Fatalf("add: %v\n%s", err, out)
	}
	for name, args := range map[string][]string{
		"write":            {"--name", "wipe", "--question", "wipe orders", "--sql", "DELETE FROM orders"},
		"param not placed": {"--name", "by_city", "--question", "orders by city", "--sql", "SELECT 1 WHERE :city = ''", "--param", "city=addresses.city"},
		"duplicate":        {"--name", "orders_in_city", "--question", "orders", "--sql", "SELECT 1"},
	} {
		if out, err := cli(append([]string{"add", "--file", file, "--db", "shop"}, args...)...); err == nil {
			t.Errorf("add %s: accepted\n%s", name, out)
		}
	}
	out, err := cli("list", "--file", file)
	if err != nil || !strings.Contains(out, "orders_in_city") || !strings.Contains(out, "city=addresses.city") || !strings.Contains(out, "analyst") || strings.Contains(out, "wipe") {
		t.Fatalf("list = %q, %v", out, err)
	}
	if out, err := cli("remove", "--file", file, "--db", "shop", "--name", "orders_in_city"); err != nil {
		t.Fatalf("remove: %v\n%s", err, out)
	}
	if out, err := cli("list", "--file", file); err != nil || strings.Contains(out, "orders_in_city") {
		t.Errorf("after remove: %q, %v", out, err)
	}
	if _, err := cli("remove", "--file", file, "--db", "shop", "--name", "orders_in_city"); err == nil {
		t.Error("removing a missing entry succeeded")
	}
}

// TestVerifiedCLIStore: with --catalog-store, add writes the store (not
// the file) and list, run as another replica's operator would, shows the
// store's entry over the file's of the same name; remove takes it out of
// the store and the file's entry shows again.
func TestVerifiedCLIStore(t *testing.T) {
	t.Setenv("NLPROXY_CATALOG_STORE", "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := pgtest.New(t, pgcluster.Options{})
	storeDB := pgtest.UniqueName(t, "store")
	if err := c.CreateDatabase(ctx, storeDB); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "verified.yaml")
	cli := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := run(ctx, append([]string{"verified"}, args...), &out, &errb)
		return out.String() + errb.String(), err
	}
	if out, err := cli("add", "--file", file, "--db", "shop", "--name", "revenue", "--question", "revenue in the file", "--sql", "SELECT 1"); err != nil {
		t.Fatalf("add to file: %v\n%s", err, out)
	}
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	withStore := []string{"--file", file, "--catalog-store", c.DSN(storeDB), "--db", "shop"}
	if out, err := cli(append([]string{"add", "--name", "revenue", "--question", "revenue from the store", "--sql", "SELECT 2"}, withStore...)...); err != nil {
		t.Fatalf("add to store: %v\n%s", err, out)
	}
	if out, err := cli(append([]string{"add", "--name", "wipe", "--question", "wipe", "--sql", "DELETE FROM orders"}, withStore...)...); err == nil {
		t.Errorf("a write was stored\n%s", out)
	}
	if after, _ := os.ReadFile(file); !bytes.Equal(before, after) {
		t.Error("add with a store changed the file")
	}
	// Another replica's operator: a store client of its own.
	out, err := cli("list", "--catalog-store", c.DSN(storeDB), "--file", file)
	if err != nil || !strings.Contains(out, "revenue from the store") || strings.Contains(out, "revenue in the file") || strings.Contains(out, "wipe") {
		t.Fatalf("list = %q, %v", out, err)
	}
	if out, err := cli(append([]string{"remove", "--name", "revenue"}, withStore...)...); err != nil {
		t.Fatalf("remove: %v\n%s", err, out)
	}
	if out, err := cli("list", "--catalog-store", c.DSN(storeDB), "--file", file); err != nil || !strings.Contains(out, "revenue in the file") || strings.Contains(out, "from the store") {
		t.Errorf("after remove: %q, %v", out, err)
	}
	if _, err := cli(append([]string{"remove", "--name", "revenue"}, withStore...)...); err == nil {
		t.Error("removing a missing store entry succeeded")
	}
}

// TestVerifiedSuggestCLI: suggest drafts entries from two roles' accepted
// asks in the catalog store and from a workload profile file, and prints
// none of their literals; an operator pair is not a source, and a
// statement already verified is not suggested again. Each is checked
// against the catalog snapshot under the data directory and, through the
// configured upstream, against what the asking role may read: a workload
// query naming a column gone and an ask naming a column its role may not
// read are dropped, said so and counted.
func TestVerifiedSuggestCLI(t *testing.T) {
	t.Setenv("NLPROXY_CATALOG_STORE", "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := pgtest.New(t, pgcluster.Options{})
	storeDB, db := pgtest.UniqueName(t, "store"), pgtest.UniqueName(t, "shop")
	alice, bob := pgtest.UniqueName(t, "alice"), pgtest.UniqueName(t, "bob")
	for _, d := range []string{storeDB, db} {
		if err := c.CreateDatabase(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Exec(ctx, db, fmt.Sprintf(`CREATE ROLE %[1]s; CREATE ROLE %[2]s;
CREATE TABLE orders (id int, city text, amount numeric); CREATE TABLE customers (id int, email text); CREATE TABLE staff (name text, salary numeric);
GRANT SELECT ON orders, customers TO %[1]s; GRANT SELECT (id, amount) ON orders TO %[2]s;`, alice, bob)); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, c.DSN(storeDB), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	for _, p := range []memory.Pair{
		{Question: "orders in Paris above 30", SQL: "SELECT count(*) FROM orders o WHERE o.city = 'Paris' AND o.amount > 30", Source: memory.PairAccepted, Role: alice, At: now},
		{Question: "orders in Nice above 5", SQL: "SELECT count(*) FROM orders o WHERE o.city = 'Nice' AND o.amount > 5", Source: memory.PairAccepted, Role: alice, At: now},
		// bob may not read orders.city (any more).
		{Question: "orders in 'Lyon' above 77", SQL: "SELECT count(*) FROM orders o WHERE o.city = 'Lyon' AND o.amount > 77", Source: memory.PairAccepted, Role: bob, At: now},
		{Question: "salary of Mallory", SQL: "SELECT salary FROM staff WHERE name = 'Mallory'", Source: memory.PairOperator, At: now},
		{Question: "salary of Trent", SQL: "SELECT salary FROM staff WHERE name = 'Trent'", Source: memory.PairOperator, At: now},
	} {
		if err := st.AddPair(ctx, db, p); err != nil {
			t.Fatal(err)
		}
	}
	dataDir := t.TempDir()
	ws := workload.NewStore(dataDir, workload.Limits{})
	prof, err := ws.Profile(db)
	if err != nil && prof == nil {
		t.Fatal(err)
	}
	for _, sql := range []string{"SELECT id FROM customers WHERE email = 'eve@example.com'", "SELECT id FROM customers WHERE email = 'carol@example.com'",
		"SELECT sum(amount) FROM orders", "SELECT id FROM customers WHERE phone = '555-0101'"} {
		shape, err := workload.Analyze(sql)
		if err != nil {
			t.Fatal(err)
		}
		prof.AddRuns(shape, "carol", now, 3)
	}
	if err := ws.Save(now); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "verified.yaml")
	if err := verified.Write(file, []verified.Entry{{Name: "total", Database: db, Question: "total", SQL: "SELECT sum(amount) FROM orders"}}); err != nil {
		t.Fatal(err)
	}
	args := []string{"verified", "suggest", "--catalog-store", c.DSN(storeDB), "--data-dir", dataDir, "--file", file, "--db", db}

	// Without a catalog snapshot nothing can be checked: refused.
	t.Setenv("NLPROXY_UPSTREAM", "")
	var out, errb bytes.Buffer
	if err := run(ctx, args, &out, &errb); err == nil || !strings.Contains(err.Error(), "no catalog snapshot") {
		t.Fatalf("suggest without a snapshot: %v\n%s", err, out.String())
	}
	conn, err := c.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := catalog.Build(ctx, conn, db, catalog.BuildOptions{SkipValues: true})
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := catalog.SaveSnapshot(dataDir, snap); err != nil {
		t.Fatal(err)
	}

	// The snapshot alone: the gone column is dropped, privileges are not
	// checked (and it says so).
	out.Reset()
	errb.Reset()
	if err := run(ctx, args, &out, &errb); err != nil {
		t.Fatalf("suggest: %v\n%s", err, errb.String())
	}
	got := out.String()
	for _, want := range []string{"privileges were not checked", "seen 3 times (workload): column phone does not exist", "seen 3 times (asks)"} {
		if !strings.Contains(got, want) {
			t.Errorf("snapshot only: suggestions lack %q:\n%s", want, got)
		}
	}
	if !strings.Contains(errb.String(), "1 statements dropped") {
		t.Errorf("snapshot only: stderr %q lacks the count", errb.String())
	}

	// With the upstream: bob's ask is dropped too.
	t.Setenv("NLPROXY_UPSTREAM", c.DSN(db))
	out.Reset()
	errb.Reset()
	if err := run(ctx, args, &out, &errb); err != nil {
		t.Fatalf("suggest: %v\n%s", err, errb.String())
	}
	got = out.String()
	for _, want := range []string{"t1.city = :p1", "t1.amount > :p2", "in {p1} above {p2}", "email = :p1", "seen 2 times (asks)", "seen 6 times (workload)",
		"seen 1 times (asks of " + bob + "): role " + bob + " may not read column t1.city", "column phone does not exist"} {
		if !strings.Contains(got, want) {
			t.Errorf("suggestions lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "privileges were not checked") || !strings.Contains(errb.String(), "2 statements dropped") {
		t.Errorf("with the upstream: privileges unchecked, or stderr %q lacks the count:\n%s", errb.String(), got)
	}
	// The unique names may hold digits of the leaks looked for.
	shown := strings.NewReplacer(db, "DB", alice, "ALICE", bob, "BOB").Replace(got)
	for _, leak := range []string{"Paris", "Nice", "Lyon", "30", "77", "eve@", "carol@", "555", "Mallory", "Trent", "salary", "sum(amount)"} {
		if strings.Contains(shown, leak) {
			t.Errorf("suggestions carry %q:\n%s", leak, got)
		}
	}
	// What it prints reads back as one YAML list of entries, for the
	// operator to complete: the two seen often enough, not the verified one.
	var es []verified.Entry
	if err := yaml.Unmarshal(out.Bytes(), &es); err != nil || len(es) != 2 {
		t.Errorf("suggestions read back as %d entries: %v", len(es), err)
	}
}
