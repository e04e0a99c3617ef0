package catalog

import (
	"context"
	"fmt"
	"slices"
)

const visibleSQL = `
SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text, a.attname::pg_catalog.text
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
WHERE n.nspname = ANY($2) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND a.attnum > 0 AND NOT a.attisdropped
  AND pg_catalog.has_schema_privilege($1, n.oid, 'USAGE')
  AND pg_catalog.has_column_privilege($1, c.oid, a.attnum, 'SELECT')`

// VisibleTo returns the part of s that role may SELECT (table or column
// privileges, schema USAGE), checked in one query. The catalog is built
// with a catalog role; this keeps what the LLM sees to what the asking
// role could query itself.
func (s *Schema) VisibleTo(ctx context.Context, q Querier, role string) (*Schema, error) {
	var schemas []string
	for _, t := range s.Tables {
		if !slices.Contains(schemas, t.Schema) {
			schemas = append(schemas, t.Schema)
		}
	}
	rows, err := q.Query(ctx, visibleSQL, role, schemas)
	if err != nil {
		return nil, fmt.Errorf("catalog: privileges of %s: %w", role, err)
	}
	defer rows.Close()
	type key struct{ s, t, c string }
	ok := map[key]bool{}
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.s, &k.t, &k.c); err != nil {
			return nil, fmt.Errorf("catalog: privileges of %s: %w", role, err)
		}
		ok[k] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: privileges of %s: %w", role, err)
	}
	return s.Filter(func(t *Table, c *Column) bool { return ok[key{t.Schema, t.Name, c.Name}] }), nil
}

// Filter returns a copy of s holding only the columns keep accepts; tables
// left without columns are dropped, and so are keys that mention a dropped
// column or table. The copy gets its own fingerprint.
func (s *Schema) Filter(keep func(t *Table, c *Column) bool) *Schema {
	out := &Schema{Enums: map[string][]string{}}
	type key struct{ schema, table string } // not "schema.table": names may hold dots
	kept := map[key]map[string]bool{}
	srcOf := map[key]*Table{}
	for i := range s.Tables {
		t := &s.Tables[i]
		nt := *t
		nt.Columns, nt.PrimaryKey, nt.Uniques, nt.ForeignKeys = nil, nil, nil, nil
		cols := map[string]bool{}
		for j := range t.Columns {
			if keep(t, &t.Columns[j]) {
				nt.Columns = append(nt.Columns, t.Columns[j])
				cols[t.Columns[j].Name] = true
				if t.Columns[j].IsEnum {
					out.Enums[t.Columns[j].Type] = s.Enums[t.Columns[j].Type]
				}
			}
		}
		if len(nt.Columns) == 0 {
			continue
		}
		kept[key{t.Schema, t.Name}] = cols
		srcOf[key{t.Schema, t.Name}] = t
		out.Tables = append(out.Tables, nt)
	}
	all := func(cols map[string]bool, names []string) bool {
		for _, n := range names {
			if !cols[n] {
				return false
			}
		}
		return true
	}
	for i := range out.Tables {
		nt := &out.Tables[i]
		src := srcOf[key{nt.Schema, nt.Name}]
		cols := kept[key{nt.Schema, nt.Name}]
		if all(cols, src.PrimaryKey) {
			nt.PrimaryKey = src.PrimaryKey
		}
		for _, u := range src.Uniques {
			if all(cols, u) {
				nt.Uniques = append(nt.Uniques, u)
			}
		}
		for _, fk := range src.ForeignKeys {
			if ref, ok := kept[key{fk.RefSchema, fk.RefTable}]; ok && all(cols, fk.Columns) && all(ref, fk.RefColumns) {
				nt.ForeignKeys = append(nt.ForeignKeys, fk)
			}
		}
	}
	out.Fingerprint = fingerprint(out)
	return out
}
