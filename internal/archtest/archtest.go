// Package archtest holds the import rules of docs/architecture.md as data
// and checks a package graph against them; its test checks the module's
// own graph, so a forbidden arrow fails `go test`.
package archtest

import (
	"fmt"
	"path"
	"sort"
	"strings"
)

// Module is the import path every project package starts with.
const Module = "github.com/nlproxy/nlproxy"

// Rule forbids arrows from the packages From matches to the packages Deny
// matches, except those Allow matches. Patterns are module-relative: "x"
// matches x only, "x/..." matches x and everything under it.
type Rule struct {
	From  string
	Deny  []string
	Allow []string
	Why   string
}

// Rules are the arrows that must not exist between the non-test files of
// the project's packages. Tests may import more (a proxy test seals its
// statements with the real guard).
var Rules = []Rule{
	{From: "proxy/...", Deny: []string{"engine/...", "router/...", "guard/...", "catalog/..."}, Allow: []string{"guard/sealed"},
		Why: "the relay knows the engine only through its Translator interface, and the guard only through the cgo-free leaf"},
	{From: "engine/...", Deny: []string{"proxy/...", "router/...", "cmd/...", "mcpserver/..."},
		Why: "the engine knows nothing of the wire"},
	{From: "catalog/...", Deny: []string{"engine/...", "proxy/...", "router/...", "cmd/..."},
		Why: "the catalog sits below the engine"},
	{From: "guard/...", Deny: []string{"..."}, Allow: []string{"guard/...", "internal/pg", "internal/sqlscan"},
		Why: "the guard is a leaf both proxy and engine use"},
	{From: "guard/sealed", Deny: []string{"..."}, Allow: []string{"guard/internal/stmt", "internal/pg"},
		Why: "the sealed statement and its scopes import internal/pg only (and the type's own package)"},
	{From: "guard/internal/stmt", Deny: []string{"..."},
		Why: "the sealed statement type depends on nothing"},
	{From: "mcpserver/...", Deny: []string{"proxy/...", "router/...", "cmd/..."},
		Why: "the MCP server sits beside the router: it reaches the engine and the guard directly, never the wire relay"},
	{From: "workload/...", Deny: []string{"proxy/...", "engine/...", "router/...", "cmd/...", "catalog/...", "guard/..."},
		Why: "what the workload teaches is plain data; the engine reads it through engine/learned, the relay feeds it through proxy.StatementObserver"},
	{From: "internal/sqlscan", Deny: []string{"..."},
		Why: "the one SQL scanner (relay, guard, extractor) is pure Go and depends on nothing, so the cgo-free relay can use it"},
	{From: "internal/ownconn", Deny: []string{"..."},
		Why: "how the proxy runs its own connections is one leaf that the catalog, the workload reader, ask(all) and the store all import"},
	{From: "internal/uring", Deny: []string{"..."},
		Why: "the relay loop's io_uring is system calls and nothing of the project's (cgo-free, like the relay)"},
	{From: "internal/...", Deny: []string{"proxy/...", "engine/...", "router/...", "cmd/...", "catalog/...", "guard/...", "workload/...", "mcpserver/..."},
		Why: "internal/ is the shared vocabulary at the bottom"},
}

// BothSides are the package trees only cmd/nlproxy and router may import
// together.
var BothSides = [2]string{"proxy/...", "engine/..."}

// MayKnowBoth are the packages allowed to import both sides.
var MayKnowBoth = []string{"cmd/nlproxy", "router"}

// Match reports whether the module-relative package rel matches pattern.
func Match(pattern, rel string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return rel == pattern
}

func matchAny(patterns []string, rel string) bool {
	for _, p := range patterns {
		if Match(p, rel) {
			return true
		}
	}
	return false
}

// Check returns every broken rule in graph, which maps a module-relative
// package to the module-relative packages it imports (imports outside the
// module left out), sorted.
func Check(graph map[string][]string) []string {
	var out []string
	for from, imps := range graph {
		for _, r := range Rules {
			if !Match(r.From, from) {
				continue
			}
			for _, to := range imps {
				if matchAny(r.Deny, to) && !matchAny(r.Allow, to) && !Match(r.From, to) {
					out = append(out, fmt.Sprintf("%s imports %s: %s", from, to, r.Why))
				}
			}
		}
		var a, b bool
		for _, to := range imps {
			a = a || Match(BothSides[0], to)
			b = b || Match(BothSides[1], to)
		}
		if a && b && !matchAny(MayKnowBoth, from) {
			out = append(out, fmt.Sprintf("%s imports both %s and %s: only %s may", from, path.Dir(BothSides[0]), path.Dir(BothSides[1]), strings.Join(MayKnowBoth, " and ")))
		}
	}
	sort.Strings(out)
	return out
}
