package descindex

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// GlossaryEntry is one term of a glossary file.
//
// The glossary is YAML: either a list of entries or a mapping with a
// "terms" list. Only term and definition are required.
//
//	terms:
//	  - term: active customer
//	    definition: A customer with at least one order in the last 90 days.
//	    sql: "EXISTS (SELECT 1 FROM sales.orders o WHERE o.customer_id = c.id AND o.ordered_at > now() - interval '90 days')"
//	    table: sales.customers   # optional: schema.table (or table) it applies to
//	    column: status           # optional
//	  - term: ARR
//	    definition: Annual recurring revenue; sum of active subscription amounts times 12.
type GlossaryEntry struct {
	Term       string `yaml:"term"`
	Definition string `yaml:"definition"`
	SQL        string `yaml:"sql,omitempty"`
	Table      string `yaml:"table,omitempty"`
	Column     string `yaml:"column,omitempty"`
}

// ErrGlossary marks an invalid glossary file.
var ErrGlossary = errors.New("descindex: invalid glossary")

// LoadGlossary reads a YAML glossary file into glossary docs.
func LoadGlossary(path string) ([]Doc, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("descindex: read glossary: %w", err)
	}
	docs, err := ParseGlossary(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return docs, nil
}

// ParseGlossary parses YAML glossary data (see GlossaryEntry).
func ParseGlossary(r io.Reader) ([]Doc, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrGlossary, err)
	}
	var entries []GlossaryEntry
	if len(root.Content) > 0 {
		n := root.Content[0]
		if n.Kind == yaml.MappingNode {
			var wrapped struct {
				Terms []GlossaryEntry `yaml:"terms"`
			}
			if err := n.Decode(&wrapped); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrGlossary, err)
			}
			entries = wrapped.Terms
		} else if err := n.Decode(&entries); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrGlossary, err)
		}
	}
	docs := make([]Doc, 0, len(entries))
	for i, e := range entries {
		if strings.TrimSpace(e.Term) == "" || strings.TrimSpace(e.Definition) == "" {
			return nil, fmt.Errorf("%w: entry %d needs term and definition", ErrGlossary, i+1)
		}
		d := Doc{Kind: KindGlossary, Term: e.Term, Text: e.Definition, SQLHint: e.SQL, Column: e.Column, Table: e.Table}
		if s, t, ok := strings.Cut(e.Table, "."); ok {
			d.Schema, d.Table = s, t
		}
		docs = append(docs, d)
	}
	return docs, nil
}
