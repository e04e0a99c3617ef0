package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestConfigSchemas: the catalog's schema list from YAML, NLPROXY_SCHEMAS
// and --schemas, with the usual precedence, and its validation.
func TestConfigSchemas(t *testing.T) {
	dir := t.TempDir()
	yamlPath := filepath.Join(dir, "nlproxy.yaml")
	if err := os.WriteFile(yamlPath, []byte("upstreams: [{url: postgres://db/app}]\nengine:\n  schemas: [consumer_div, \"Sales EU\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyYAML := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(emptyYAML, []byte("upstreams: [{url: postgres://db/app}]\nengine:\n  schemas: [a, \"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	up := []string{"--upstream", "postgres://db/app"}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    []string
		wantErr string
	}{
		{name: "default: every usable schema", args: up, want: nil},
		{name: "yaml", args: []string{"--config", yamlPath}, want: []string{"consumer_div", "Sales EU"}},
		{name: "env beats yaml", args: []string{"--config", yamlPath}, env: map[string]string{"NLPROXY_SCHEMAS": "hr, sales"}, want: []string{"hr", "sales"}},
		{name: "flag beats env", args: append([]string{"--schemas", "a,,b ,"}, up...), env: map[string]string{"NLPROXY_SCHEMAS": "hr"}, want: []string{"a", "b"}},
		{name: "empty flag means every schema", args: []string{"--config", yamlPath, "--schemas", ""}, want: nil},
		{name: "empty name in yaml", args: []string{"--config", emptyYAML}, wantErr: "empty schema name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loadConfig(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.Engine.Schemas, tt.want) {
				t.Errorf("schemas = %q, want %q", c.Engine.Schemas, tt.want)
			}
			// The catalog manager the engine uses gets the list.
			parts, err := buildEngine(c, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			defer parts.Close()
			if got := parts.catalogs.IntrospectOptions.Schemas; !slices.Equal(got, tt.want) {
				t.Errorf("catalog manager schemas = %q, want %q", got, tt.want)
			}
		})
	}
}
