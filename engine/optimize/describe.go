package optimize

import (
	"context"
	"fmt"
	"strings"

	"github.com/nlproxy/nlproxy/guard"
)

// describeFunctions are what the description query calls: stable catalog
// functions that read no user data.
func describeFunctions() []string {
	return []string{"pg_catalog.to_regclass", "pg_catalog.unnest", "pg_catalog.format_type",
		"pg_catalog.pg_get_indexdef", "pg_catalog.pg_get_constraintdef", "pg_catalog.string_agg"}
}

// maxDescribedTables bounds the tables described to the model.
const maxDescribedTables = 12

// describe renders the relations the original reads — columns with types,
// indexes, keys and the planner's row estimate — as the asking role sees
// them through its own session. It is context for the model only: on any
// error the prompt goes without it.
func (s *search) describe(ctx context.Context) string {
	var names []string
	for _, t := range guard.CheckedOf(s.req.Statement).Tables {
		name := quoteIdent(t.Name)
		if t.Schema != "" {
			name = quoteIdent(t.Schema) + "." + name
		}
		names = append(names, "'"+strings.ReplaceAll(name, "'", "''")+"'")
		if len(names) == maxDescribedTables {
			break
		}
	}
	if len(names) == 0 {
		return ""
	}
	sql := `SELECT c.oid::pg_catalog.regclass::text, c.reltuples::bigint,
  (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname) || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod) ||
      CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END, ', ' ORDER BY a.attnum)
     FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
  (SELECT pg_catalog.string_agg(pg_catalog.pg_get_constraintdef(k.oid), '; ' ORDER BY k.contype, k.conname)
     FROM pg_catalog.pg_constraint k WHERE k.conrelid = c.oid AND k.contype IN ('p', 'u', 'f')),
  (SELECT pg_catalog.string_agg(pg_catalog.pg_get_indexdef(i.indexrelid), '; ' ORDER BY i.indexrelid)
     FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid)
FROM pg_catalog.pg_class c
WHERE c.oid IN (SELECT pg_catalog.to_regclass(n) FROM pg_catalog.unnest(ARRAY[` + strings.Join(names, ", ") + `]::text[]) AS n)
ORDER BY 1`
	st, err := guard.Seal(sql, s.guardOptions(append(describeFunctions(), "pg_catalog.quote_ident")...))
	if err != nil {
		return ""
	}
	rows, err := s.req.Exec.Trial(ctx, st, s.limits(maxDescribedTables))
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, r := range rows.Values {
		if len(r) != 5 || r[0] == nil {
			continue
		}
		fmt.Fprintf(&b, "TABLE %s (%s)", *r[0], str(r[2]))
		if n := str(r[1]); n != "" && n != "-1" {
			fmt.Fprintf(&b, " -- about %s rows", n)
		}
		b.WriteString("\n")
		if k := str(r[3]); k != "" {
			b.WriteString("  keys: " + k + "\n")
		}
		if ix := str(r[4]); ix != "" {
			b.WriteString("  indexes: " + ix + "\n")
		}
	}
	return strings.TrimSpace(b.String())
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// quoteIdent quotes a name as written in the statement, as to_regclass
// expects: lowercase plain names stay plain.
func quoteIdent(name string) string {
	plain := name != ""
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			plain = false
			break
		}
	}
	if plain {
		return name
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}
