package asksafety_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
)

// mallorysCalls counts the calls of mallory's functions in db so far. Each
// raises a WARNING naming the database, which the server log keeps whatever
// the transaction did next: a counter in a table or sequence cannot count
// inside the READ ONLY scope asks run in (nextval fails there), so a call
// that the scope let through would go unseen.
func mallorysCalls(tb testing.TB, cluster *pgcluster.Cluster, db string) int64 {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(cluster.Dir(), "postgres.log"))
	if err != nil {
		tb.Fatalf("server log: %v", err)
	}
	return int64(strings.Count(string(b), "mallory-called "+db+"\n"))
}

// checkCallDetector calls one of mallory's functions directly and checks
// the call is counted: the detector can see what it looks for.
func checkCallDetector(tb testing.TB, cluster *pgcluster.Cluster, admin *pgx.Conn, db string) {
	tb.Helper()
	before := mallorysCalls(tb, cluster, db)
	if _, err := admin.Exec(context.Background(), "SELECT mallory.chk('x')"); err != nil {
		tb.Fatal(err)
	}
	if mallorysCalls(tb, cluster, db) != before+1 {
		tb.Fatal("a direct call of mallory.chk is not in the server log: the call detector is blind")
	}
}
