package archtest

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// moduleGraph reads the non-test imports of every package of the module
// with go/build (no go command, no type checking).
func moduleGraph(t *testing.T, ctx build.Context) (graph map[string][]string, external map[string][]string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	graph, external = map[string][]string{}, map[string][]string{}
	err = filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); dir != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
			return filepath.SkipDir
		}
		pkg, err := ctx.ImportDir(dir, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		graph[rel] = []string{}
		for _, imp := range pkg.Imports {
			if r, ok := strings.CutPrefix(imp, Module+"/"); ok {
				graph[rel] = append(graph[rel], r)
			} else {
				external[rel] = append(external[rel], imp)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(graph) < 20 || graph["proxy"] == nil || graph["engine"] == nil {
		t.Fatalf("read %d packages from %s; is the module root there?", len(graph), root)
	}
	return graph, external
}

// TestImportRules fails when a forbidden import arrow appears in the tree.
func TestImportRules(t *testing.T) {
	graph, _ := moduleGraph(t, build.Default)
	for _, v := range Check(graph) {
		t.Error(v)
	}
}

// TestRelayWithoutCgo: nothing the relay links, built without cgo, reaches
// pg_query (the Makefile's vet target builds ./proxy/... with
// CGO_ENABLED=0 as well).
func TestRelayWithoutCgo(t *testing.T) {
	ctx := build.Default
	ctx.CgoEnabled = false
	graph, external := moduleGraph(t, ctx)
	seen := map[string]bool{}
	var walk func(pkg, via string)
	walk = func(pkg, via string) {
		if seen[pkg] {
			return
		}
		seen[pkg] = true
		for _, imp := range external[pkg] {
			if strings.HasPrefix(imp, "github.com/pganalyze/pg_query_go") || imp == "C" {
				t.Errorf("the relay links %s through %s", imp, via+" → "+pkg)
			}
		}
		for _, imp := range graph[pkg] {
			walk(imp, via+" → "+pkg)
		}
	}
	for pkg := range graph {
		if Match("proxy/...", pkg) {
			walk(pkg, "")
		}
	}
	if !seen["guard/sealed"] {
		t.Error("the relay does not import guard/sealed: the walk is not reading the graph")
	}
}

// TestCheck: each kind of forbidden arrow is reported, and the allowed
// ones are not.
func TestCheck(t *testing.T) {
	for _, tt := range []struct {
		name  string
		graph map[string][]string
		want  int
	}{
		{"allowed", map[string][]string{
			"proxy": {"guard/sealed", "internal/pg"}, "engine": {"guard", "guard/sealed", "catalog", "catalog/memory"},
			"router": {"proxy", "engine"}, "cmd/nlproxy": {"proxy", "engine", "router"}, "guard": {"guard/sealed", "internal/pg"},
			"guard/sealed": {"guard/internal/stmt", "internal/pg"}, "catalog/store": {"catalog/memory"},
		}, 0},
		{"proxy to engine", map[string][]string{"proxy": {"engine/llm"}}, 1},
		{"proxy to the cgo guard", map[string][]string{"proxy": {"guard"}}, 1},
		{"engine to proxy", map[string][]string{"engine/askall": {"proxy"}}, 1},
		{"catalog to engine", map[string][]string{"catalog/store": {"engine"}}, 1},
		{"leaf to catalog", map[string][]string{"guard/sealed": {"catalog"}}, 2},
		{"leaf to the guard", map[string][]string{"guard/sealed": {"guard"}}, 1},
		{"a third package knows both", map[string][]string{"admin": {"proxy", "engine"}}, 1},
	} {
		got := Check(tt.graph)
		if len(got) != tt.want {
			t.Errorf("%s: %d violations %q, want %d", tt.name, len(got), got, tt.want)
		}
	}
}
