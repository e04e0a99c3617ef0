package sampledb

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// WideSchema creates tables w001…wNNN in conn's current schema, each with
// cols columns of mixed types, a primary key, a foreign key to the previous
// table, a two-column unique key, comments on every table and column, and a
// few rows (ANALYZEd, so pg_stats is populated as in a live database).
func WideSchema(ctx context.Context, conn *pgx.Conn, tables, cols int) error {
	if tables < 1 || cols < 3 {
		return fmt.Errorf("sampledb: wide schema needs ≥1 table and ≥3 columns, got %d×%d", tables, cols)
	}
	types := []string{"text", "integer", "numeric(12,2)", "timestamp with time zone", "boolean", "character varying(40)", "date", "bigint"}
	defaults := []string{"''", "0", "0", "now()", "false", "''", "current_date", "0"}
	var b strings.Builder
	for t := 1; t <= tables; t++ {
		name := fmt.Sprintf("w%03d", t)
		fmt.Fprintf(&b, "CREATE TABLE %s (\n  id integer PRIMARY KEY,\n  parent_id integer", name)
		if t > 1 {
			fmt.Fprintf(&b, " REFERENCES w%03d", t-1)
		}
		for c := 3; c <= cols; c++ {
			fmt.Fprintf(&b, ",\n  c%02d %s", c, types[c%len(types)])
			if c%4 == 0 { // some NOT NULL columns, with a type-correct default
				fmt.Fprintf(&b, " NOT NULL DEFAULT %s", defaults[c%len(types)])
			}
		}
		b.WriteString(",\n  UNIQUE (parent_id, c03)\n);\n")
		fmt.Fprintf(&b, "COMMENT ON TABLE %s IS 'synthetic table %d';\n", name, t)
		fmt.Fprintf(&b, "COMMENT ON COLUMN %s.parent_id IS 'link to the previous table';\n", name)
		for c := 3; c <= cols; c++ {
			fmt.Fprintf(&b, "COMMENT ON COLUMN %s.c%02d IS 'attribute %d of table %d';\n", name, c, c, t)
		}
		fmt.Fprintf(&b, "INSERT INTO %s (id) SELECT g FROM generate_series(1, 10) g;\n", name)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("sampledb: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, b.String()); err != nil {
		return fmt.Errorf("sampledb: wide schema: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("sampledb: commit: %w", err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("sampledb: analyze: %w", err)
	}
	return nil
}
