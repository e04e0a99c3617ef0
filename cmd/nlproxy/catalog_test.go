package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/internal/sampledb"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

func TestCatalogCLI(t *testing.T) {
	ctx := context.Background()
	c := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"})
	if err := c.CreateDatabase(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	conn, err := c.Connect(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	err = sampledb.Load(ctx, conn, sampledb.Small)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dsn := c.URL("postgres", pgtest.SuperuserPassword, "shop")
	dir := t.TempDir()
	cli := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if err := runCatalog(ctx, args, &out, &errb); err != nil {
			t.Fatalf("catalog %v: %v\n%s", args, err, errb.String())
		}
		return out.String()
	}

	out := cli("build", "--dsn", dsn, "--data-dir", dir)
	if !strings.Contains(out, "database shop: 14 tables") {
		t.Errorf("build output:\n%s", out)
	}
	if _, err := os.Stat(catalog.SnapshotPath(dir, "shop")); err != nil {
		t.Fatal(err)
	}
	if out := cli("build", "--dsn", dsn, "--data-dir", dir, "--skip-values"); !strings.Contains(out, "version 2") {
		t.Errorf("second build output:\n%s", out)
	}
	cli("build", "--dsn", dsn, "--data-dir", dir) // back to a snapshot with values

	ddl := cli("show", "--dsn", dsn, "--table", "orders,customers")
	for _, want := range []string{"CREATE TABLE orders (", "CREATE TABLE customers (", "FOREIGN KEY (customer_id) REFERENCES customers (customer_id)"} {
		if !strings.Contains(ddl, want) {
			t.Errorf("show ddl lacks %q:\n%s", want, ddl)
		}
	}
	if strings.Contains(ddl, "CREATE TABLE products") {
		t.Error("show --table rendered an unselected table")
	}
	var s catalog.Schema
	if err := json.Unmarshal([]byte(cli("show", "--dsn", dsn, "--format", "json", "--table", "returns")), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Tables) != 1 || len(s.Tables[0].ForeignKeys) != 1 || len(s.Tables[0].ForeignKeys[0].Columns) != 2 {
		t.Errorf("show json = %+v", s.Tables)
	}

	look := cli("lookup", "--dsn", dsn, "--data-dir", dir, "Los Angeles", "churned")
	for _, want := range []string{`"L.A."`, "public.addresses.city", "public.customers.flag"} {
		if !strings.Contains(look, want) {
			t.Errorf("lookup lacks %q:\n%s", want, look)
		}
	}

	for _, bad := range [][]string{{}, {"nope"}, {"show"}, {"show", "--dsn", dsn, "--format", "xml"},
		{"show", "--dsn", dsn, "--table", "missing"}, {"lookup", "--dsn", dsn}} {
		if err := runCatalog(ctx, bad, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
			t.Errorf("catalog %v succeeded", bad)
		}
	}
}
