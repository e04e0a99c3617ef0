package main

import (
	"bytes"
	"context"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	c := pgtest.New(t, pgtest.Options{})
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
