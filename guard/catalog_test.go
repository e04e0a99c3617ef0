package guard

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// builtins is PostgreSQL 15's pg_catalog function volatility, read from the
// golden file that TestPostgres checks against (and with -update writes
// from) a real server.
func builtins(t testing.TB) Builtins {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "pg_catalog_functions.golden"))
	if err != nil {
		t.Fatalf("%v (run the PostgreSQL test with -update to create it)", err)
	}
	defer f.Close()
	b := Builtins{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, vol, ok := strings.Cut(sc.Text(), " ")
		if !ok || len(vol) != 1 {
			t.Fatalf("bad line %q", sc.Text())
		}
		b[name] = vol[0]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(b) < 1000 {
		t.Fatalf("only %d functions in the golden file", len(b))
	}
	return b
}

// withCatalog gives opts the PostgreSQL 15 built-ins unless it has a catalog.
func withCatalog(t testing.TB, opts Options) Options {
	if opts.Catalog == nil {
		opts.Catalog = builtins(t)
	}
	return opts
}
