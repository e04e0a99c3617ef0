package catalog

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/internal/ownconn"
)

// Functions is what the SQL guard needs to know of a database beyond its
// tables: how volatile pg_catalog's functions are (pg_proc), what each user
// view is defined as, and which relations have row-level security. It is
// read by the catalog role and is the same for every asking role.
type Functions struct {
	// Builtin maps a pg_catalog function name to the most volatile
	// provolatile ('i', 's', 'v') among its overloads.
	Builtin map[string]byte `json:"builtin"`
	// Views maps "schema.view" to its definition (pg_get_viewdef).
	Views map[string]string `json:"views,omitempty"`
	// RowSecurity lists "schema.table" of tables with row-level security
	// enabled, and of views reading one directly or through other views.
	// Whether it applies to an asking role is decided at ask time.
	RowSecurity []string `json:"row_security,omitempty"`
}

const builtinFunctionsSQL = `
SELECT p.proname::pg_catalog.text,
       max(CASE p.provolatile WHEN 'v' THEN 2 WHEN 's' THEN 1 ELSE 0 END)
FROM pg_catalog.pg_proc p
WHERE p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace
GROUP BY p.proname`

const viewsSQL = `
SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text, pg_catalog.pg_get_viewdef(c.oid)
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'v'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\_%'`

// viewDepsSQL lists, for every user view, the relations its rules read.
const viewDepsSQL = `
SELECT DISTINCT vn.nspname::pg_catalog.text, v.relname::pg_catalog.text, rn.nspname::pg_catalog.text, r.relname::pg_catalog.text, r.relrowsecurity
FROM pg_catalog.pg_class v
JOIN pg_catalog.pg_namespace vn ON vn.oid = v.relnamespace
JOIN pg_catalog.pg_rewrite rw ON rw.ev_class = v.oid
JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND d.objid = rw.oid
  AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
JOIN pg_catalog.pg_class r ON r.oid = d.refobjid AND r.oid <> v.oid
JOIN pg_catalog.pg_namespace rn ON rn.oid = r.relnamespace
WHERE v.relkind IN ('v', 'm')`

const rowSecuritySQL = `
SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relrowsecurity`

// LoadFunctions reads Functions through q.
func LoadFunctions(ctx context.Context, q Querier) (*Functions, error) {
	// One pinned, read-only, bounded transaction (internal/ownconn); a
	// pgx.Tx of the caller's is used as it is.
	if b, ok := q.(ownconn.Beginner); ok {
		if _, isTx := q.(pgx.Tx); !isTx {
			tx, err := ownconn.BeginRead(ctx, b, pgx.RepeatableRead, introspectBounds)
			if err != nil {
				return nil, fmt.Errorf("catalog: functions: %w", err)
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			q = tx
		}
	}
	f := &Functions{Builtin: map[string]byte{}, Views: map[string]string{}}
	rows, err := q.Query(ctx, builtinFunctionsSQL)
	if err != nil {
		return nil, fmt.Errorf("catalog: functions: %w", err)
	}
	for rows.Next() {
		var name string
		var v int
		if err := rows.Scan(&name, &v); err != nil {
			rows.Close()
			return nil, fmt.Errorf("catalog: functions: %w", err)
		}
		f.Builtin[name] = "isv"[v]
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: functions: %w", err)
	}

	rows, err = q.Query(ctx, viewsSQL)
	if err != nil {
		return nil, fmt.Errorf("catalog: views: %w", err)
	}
	for rows.Next() {
		var schema, name, def string
		if err := rows.Scan(&schema, &name, &def); err != nil {
			rows.Close()
			return nil, fmt.Errorf("catalog: views: %w", err)
		}
		f.Views[schema+"."+name] = def
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: views: %w", err)
	}

	secured := map[string]bool{}
	rows, err = q.Query(ctx, rowSecuritySQL)
	if err != nil {
		return nil, fmt.Errorf("catalog: row security: %w", err)
	}
	for rows.Next() {
		var schema, name string
		if err := rows.Scan(&schema, &name); err != nil {
			rows.Close()
			return nil, fmt.Errorf("catalog: row security: %w", err)
		}
		secured[schema+"."+name] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: row security: %w", err)
	}
	reads := map[string][]string{}
	rows, err = q.Query(ctx, viewDepsSQL)
	if err != nil {
		return nil, fmt.Errorf("catalog: view dependencies: %w", err)
	}
	for rows.Next() {
		var vs, vn, rs, rn string
		var rls bool
		if err := rows.Scan(&vs, &vn, &rs, &rn, &rls); err != nil {
			rows.Close()
			return nil, fmt.Errorf("catalog: view dependencies: %w", err)
		}
		reads[vs+"."+vn] = append(reads[vs+"."+vn], rs+"."+rn)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: view dependencies: %w", err)
	}
	// A view over a secured relation is treated as secured: with
	// security_invoker the asker's policies apply, and a definer's view may
	// still filter by the asker (current_user in its WHERE).
	for changed := true; changed; {
		changed = false
		for view, deps := range reads {
			if secured[view] {
				continue
			}
			for _, d := range deps {
				if secured[d] {
					secured[view], changed = true, true
					break
				}
			}
		}
	}
	for k := range secured {
		f.RowSecurity = append(f.RowSecurity, k)
	}
	slices.Sort(f.RowSecurity)
	return f, nil
}

// Equal reports whether f and g say the same (empty and nil are alike).
func (f *Functions) Equal(g *Functions) bool {
	if f == nil || g == nil {
		return f == g
	}
	return maps.Equal(f.Builtin, g.Builtin) && maps.Equal(f.Views, g.Views) && slices.Equal(f.RowSecurity, g.RowSecurity)
}

// BuiltinVolatility implements guard.Catalog.
func (f *Functions) BuiltinVolatility(name string) (byte, bool) {
	if f == nil {
		return 0, false
	}
	v, ok := f.Builtin[name]
	return v, ok
}

// ViewDefinitions implements guard.Catalog: the definitions of the views
// called name in schema, or in any schema when schema is "".
func (f *Functions) ViewDefinitions(schema, name string) []string {
	if f == nil {
		return nil
	}
	if schema != "" {
		if d, ok := f.Views[schema+"."+name]; ok {
			return []string{d}
		}
		return nil
	}
	var out []string
	for k, d := range f.Views {
		if i := strings.LastIndexByte(k, '.'); i >= 0 && k[i+1:] == name {
			out = append(out, d)
		}
	}
	return out
}
