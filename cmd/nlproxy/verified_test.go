package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifiedCLI: add writes an entry the file then lists, a bad entry
// (SQL the guard refuses, a parameter not in the question) is refused
// without touching the file, remove takes it out.
func TestVerifiedCLI(t *testing.T) {
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
