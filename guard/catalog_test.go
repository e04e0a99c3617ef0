package guard

import (
	"testing"
)

// builtins is the reviewed pg_catalog function list (PostgreSQL 15) as a
// Catalog, so unit tests judge calls as against a real 15.x server.
func builtins(t testing.TB) Builtins {
	t.Helper()
	b := Builtins{}
	for name, vol := range reviewedBuiltins() {
		b[name] = vol
	}
	if len(b) < 1000 {
		t.Fatalf("only %d functions on the reviewed list", len(b))
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

// TestUnreviewedBuiltinRefused: a pg_catalog function the server has but the
// reviewed list lacks is refused whatever its volatility, unless an
// operator allows it by name.
func TestUnreviewedBuiltinRefused(t *testing.T) {
	cat := builtins(t)
	cat["nlproxy_future_builtin"] = Immutable // what a newer minor release might add
	for _, tc := range []struct {
		name string
		opts Options
		want bool
	}{
		{"unreviewed immutable", Options{Catalog: cat}, false},
		{"allowed by name", Options{Catalog: cat, AllowFunctions: []string{"nlproxy_future_builtin"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Check("SELECT nlproxy_future_builtin(1)", tc.opts)
			if (err == nil) != tc.want {
				t.Fatalf("Check = %v, want accepted=%v", err, tc.want)
			}
		})
	}
	if _, err := Check("SELECT lower('A')", Options{Catalog: cat}); err != nil {
		t.Fatalf("a reviewed built-in was refused: %v", err)
	}
}
