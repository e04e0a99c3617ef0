package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/catalog/descindex"
	"go.uber.org/zap"
)

// TestSemanticModelOption: --semantic-model takes an OSI YAML file like a
// dbt manifest; its descriptions reach the catalog manager's glossary and
// its relationships the engine's join paths; a malformed file stops the
// start with an error naming it.
func TestSemanticModelOption(t *testing.T) {
	osi := filepath.Join("..", "..", "catalog", "semantic", "testdata", "osi", "shop.yaml")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("semantic_model:\n  - name: m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		files   []string
		wantErr string
	}{
		{name: "osi", files: []string{osi}},
		{name: "malformed", files: []string{osi, bad}, wantErr: bad + ": semantic_model[0].datasets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--upstream", "postgres://db/app"}
			for _, f := range tc.files {
				args = append(args, "--semantic-model", f)
			}
			c, err := loadConfig(args, func(string) string { return "" }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			parts, err := buildEngine(c, zap.NewNop())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer parts.Close()
			if !slices.ContainsFunc(parts.catalogs.Glossary, func(d descindex.Doc) bool { return d.Term == "revenue" && d.SQLHint == "SUM(amt2)" }) {
				t.Errorf("glossary %+v lacks the metric revenue", parts.catalogs.Glossary)
			}
			var joins []string
			for _, j := range parts.engine.SemanticJoins {
				joins = append(joins, j.From+"="+j.To)
			}
			if !slices.Contains(joins, "public.orders.customer_id=public.customers.customer_id") {
				t.Errorf("join paths %q lack orders → customers", joins)
			}
		})
	}
}
