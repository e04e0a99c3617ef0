package pgtest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/internal/pgcluster"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

func TestClusterAuthMethods(t *testing.T) {
	for _, method := range []string{"trust", "md5", "scram-sha-256"} {
		t.Run(method, func(t *testing.T) {
			c := pgtest.New(t, pgcluster.Options{AuthMethod: method, TLS: method == "scram-sha-256"})
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, c.DSN("postgres"))
			if err != nil {
				t.Fatalf("connect over TCP with %s: %v", method, err)
			}
			defer conn.Close(ctx)
			var hba string
			if err := conn.QueryRow(ctx, "SELECT auth_method FROM pg_hba_file_rules WHERE type = 'host' LIMIT 1").Scan(&hba); err != nil {
				t.Fatal(err)
			}
			if hba != method {
				t.Fatalf("pg_hba method = %q, want %q", hba, method)
			}
			if _, err := pgx.Connect(ctx, c.URL(pgtest.Superuser, "wrong", "postgres")); method != "trust" && err == nil {
				t.Fatalf("wrong password accepted under %s", method)
			}
		})
	}
}

func TestUniqueName(t *testing.T) {
	seen := map[string]bool{}
	for _, prefix := range []string{"db", "TestBuild/Sample And Timeout", strings.Repeat("x", 80)} {
		for range 3 {
			n := pgtest.UniqueName(t, prefix)
			if seen[n] {
				t.Fatalf("UniqueName(%q) repeated %q", prefix, n)
			}
			seen[n] = true
			if len(n) > 63 || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
				t.Fatalf("UniqueName(%q) = %q: not a plain identifier of at most 63 bytes", prefix, n)
			}
		}
	}
}
