package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadExamples(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    int
		wantErr string
	}{
		{"two pairs", "- database: shop\n  question: How many orders?\n  sql: SELECT count(*) FROM orders\n- database: hr\n  question: Staff per team\n  sql: SELECT team, count(*) FROM staff GROUP BY team\n", 2, ""},
		{"empty file", "", 0, ""},
		{"missing sql", "- database: shop\n  question: How many orders?\n", 0, "item 1 needs database, question and sql"},
		{"not a list", "database: shop\n", 0, "examples"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "examples.yaml")
			if err := os.WriteFile(path, []byte(tt.body), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := loadExamples(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(got) != tt.want {
				t.Fatalf("got %d, %v; want %d", len(got), err, tt.want)
			}
		})
	}
	if _, err := loadExamples(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("a missing file loaded")
	}
}
