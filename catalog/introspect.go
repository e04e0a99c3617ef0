package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/internal/ownconn"
)

// IntrospectOptions configure Introspect. Zero values take the defaults.
type IntrospectOptions struct {
	// Schemas narrows introspection to these schemas, read in this order.
	// Empty means every schema the connection's role may use (USAGE) except
	// the system ones (pg_catalog, information_schema, pg_toast*, pg_temp_*):
	// those on the role's search_path first, in path order, then the others
	// by name. Listed schemas that do not exist, are system schemas or lack
	// USAGE are skipped, as the role could not query their tables anyway.
	Schemas []string
	// MaxExamples is how many most-common values per column are kept as
	// stored examples (default 3; negative: none).
	MaxExamples int
	// MaxExampleLen drops longer example values (default 60 bytes).
	MaxExampleLen int
	// NoStats skips the pg_stats query (null fraction, distinct estimate,
	// examples).
	NoStats bool
}

func (o IntrospectOptions) withDefaults() IntrospectOptions {
	if o.MaxExamples == 0 {
		o.MaxExamples = 3
	}
	if o.MaxExampleLen <= 0 {
		o.MaxExampleLen = 60
	}
	return o
}

func isTx(q Querier) bool { _, ok := q.(pgx.Tx); return ok }

// ErrNoSchemas is returned when no schema is to be read: the role may use
// none, or none of the listed ones.
var ErrNoSchemas = errors.New("catalog: no schemas to introspect")

// Introspect reads tables, views, materialized views, columns, keys, enums,
// comments, row estimates and (unless NoStats) pg_stats of the configured
// schemas. It runs a fixed handful of catalog queries whatever the number of
// tables. Only objects the connection's role can see in pg_catalog are
// returned; pg_stats shows only columns the role may SELECT.
func Introspect(ctx context.Context, conn Querier, opts IntrospectOptions) (*Schema, error) {
	// One REPEATABLE READ snapshot makes the queries agree with each other
	// even while DDL runs concurrently. A pgx.Tx is used as it is.
	// Every query names what it reads pg_catalog-qualified, and the
	// transaction is pinned and bounded as ownconn says (see there).
	if b, ok := conn.(ownconn.Beginner); ok && !isTx(conn) {
		tx, err := ownconn.BeginRead(ctx, b, pgx.RepeatableRead, introspectBounds)
		if err != nil {
			return nil, fmt.Errorf("catalog: %w", err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		conn = tx
	}
	opts = opts.withDefaults()
	path, err := defaultSearchPath(ctx, conn)
	if err != nil {
		return nil, err
	}
	schemas, err := usableSchemas(ctx, conn, opts.Schemas, path)
	if err != nil {
		return nil, err
	}
	if len(schemas) == 0 {
		return nil, ErrNoSchemas
	}
	s := &Schema{Enums: map[string][]string{}}
	byOID, err := readRelations(ctx, conn, schemas, s)
	if err != nil {
		return nil, err
	}
	disp := displayer(path)
	usedEnums, err := readColumns(ctx, conn, schemas, s, byOID, disp)
	if err != nil {
		return nil, err
	}
	if err := readConstraints(ctx, conn, schemas, s, byOID); err != nil {
		return nil, err
	}
	if err := readEnums(ctx, conn, schemas, usedEnums, s, disp); err != nil {
		return nil, err
	}
	if !opts.NoStats {
		if err := readStats(ctx, conn, schemas, s, opts); err != nil {
			return nil, err
		}
	}
	s.Fingerprint = fingerprint(s)
	return s, nil
}

// schemasSQL lists the schemas to read. Names starting with pg_ are reserved
// for system schemas (pg_catalog, pg_toast, pg_temp_N, pg_toast_temp_N);
// has_schema_privilege is true for any schema a superuser sees.
const schemasSQL = `
SELECT n.nspname::pg_catalog.text
FROM pg_catalog.pg_namespace n
WHERE n.nspname NOT LIKE 'pg\_%' AND n.nspname <> 'information_schema'
  AND pg_catalog.has_schema_privilege(n.oid, 'USAGE')
  AND (pg_catalog.cardinality($1::pg_catalog.text[]) = 0 OR n.nspname::pg_catalog.text = ANY($1::pg_catalog.text[]))
ORDER BY CASE WHEN pg_catalog.cardinality($1::pg_catalog.text[]) = 0
              THEN pg_catalog.array_position($2::pg_catalog.text[], n.nspname::pg_catalog.text)
              ELSE pg_catalog.array_position($1::pg_catalog.text[], n.nspname::pg_catalog.text) END NULLS LAST,
         n.nspname`

// usableSchemas returns the schemas to read (see IntrospectOptions.Schemas).
func usableSchemas(ctx context.Context, conn Querier, only, path []string) ([]string, error) {
	if only == nil {
		only = []string{} // a NULL array would make cardinality NULL
	}
	rows, err := conn.Query(ctx, schemasSQL, only, path)
	if err != nil {
		return nil, fmt.Errorf("catalog: schemas: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("catalog: schemas: %w", err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: schemas: %w", err)
	}
	return out, nil
}

// searchPathSQL reads the search_path settings that apply to this role in
// this database (ALTER ROLE … IN DATABASE, ALTER ROLE, ALTER DATABASE, in
// that order of precedence) and the role's name. The session's own
// search_path is pinned (internal/ownconn), so it cannot say which schemas
// the role's sessions see first.
const searchPathSQL = `
SELECT r.rolname::pg_catalog.text,
  (SELECT s.setconfig FROM pg_catalog.pg_db_role_setting s WHERE s.setrole = r.oid AND s.setdatabase = d.oid),
  (SELECT s.setconfig FROM pg_catalog.pg_db_role_setting s WHERE s.setrole = r.oid AND s.setdatabase = 0),
  (SELECT s.setconfig FROM pg_catalog.pg_db_role_setting s WHERE s.setrole = 0 AND s.setdatabase = d.oid)
FROM pg_catalog.pg_roles r, pg_catalog.pg_database d
WHERE r.rolname = CURRENT_USER AND d.datname = pg_catalog.current_database()`

// defaultSearchPath is the schema list the role's sessions start with
// ("$user" expanded); "$user", public when nothing sets it.
func defaultSearchPath(ctx context.Context, conn Querier) ([]string, error) {
	rows, err := conn.Query(ctx, searchPathSQL)
	if err != nil {
		return nil, fmt.Errorf("catalog: search_path: %w", err)
	}
	defer rows.Close()
	var (
		user    string
		configs [3][]string
	)
	for rows.Next() {
		if err := rows.Scan(&user, &configs[0], &configs[1], &configs[2]); err != nil {
			return nil, fmt.Errorf("catalog: search_path: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: search_path: %w", err)
	}
	setting := `"$user", public`
found:
	for _, cfg := range configs {
		for _, kv := range cfg {
			if v, ok := strings.CutPrefix(kv, "search_path="); ok {
				setting = v
				break found
			}
		}
	}
	return parseSearchPath(setting, user), nil
}

// display writes names as the role's sessions would see them. Under the
// pinned search_path format_type and pg_get_expr qualify every name outside
// pg_catalog; the prompt has always shown the names of schemas on the role's
// default path unqualified, so those qualifiers are taken off again. It is
// display only: nothing here is resolved.
type display struct{ prefixes []string }

func displayer(path []string) display {
	var d display
	for _, s := range path {
		d.prefixes = append(d.prefixes, quoteIdentIfNeeded(s)+".")
	}
	return d
}

func (d display) name(n string) string {
	for _, p := range d.prefixes {
		if rest, ok := strings.CutPrefix(n, p); ok {
			return rest
		}
	}
	return n
}

func (d display) expr(e string) string {
	for _, p := range d.prefixes {
		e = strings.ReplaceAll(e, "'"+p, "'")
		e = strings.ReplaceAll(e, "::"+p, "::")
		e = strings.ReplaceAll(e, " "+p, " ")
		e = strings.ReplaceAll(e, "("+p, "(")
		if strings.HasPrefix(e, p) {
			e = e[len(p):]
		}
	}
	return e
}

// quoteIdentIfNeeded quotes like quote_ident (keywords aside): plain lower
// case names stay bare.
func quoteIdentIfNeeded(s string) string {
	plain := s != ""
	for i, r := range s {
		if !(r >= 'a' && r <= 'z' || r == '_' || i > 0 && (r >= '0' && r <= '9' || r == '$')) {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// parseSearchPath splits a search_path setting into schema names: quoted
// names kept as written, unquoted ones folded to lower case, "$user"
// replaced by user.
func parseSearchPath(setting, user string) []string {
	var out []string
	for _, part := range strings.Split(setting, ",") {
		p := strings.TrimSpace(part)
		switch {
		case p == `"$user"` || p == "$user":
			out = append(out, user)
		case len(p) >= 2 && p[0] == '"' && p[len(p)-1] == '"':
			out = append(out, strings.ReplaceAll(p[1:len(p)-1], `""`, `"`))
		case p != "":
			out = append(out, strings.ToLower(p))
		}
	}
	return out
}

const relationsSQL = `
SELECT c.oid, n.nspname::pg_catalog.text, c.relname::pg_catalog.text, c.relkind::pg_catalog.text,
       coalesce(d.description, ''), c.reltuples::pg_catalog.int8
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_description d ON d.objoid = c.oid AND d.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objsubid = 0
WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition
ORDER BY pg_catalog.array_position($1::pg_catalog.text[], n.nspname::pg_catalog.text), c.relname`

// readRelations fills s.Tables and returns oid → index into s.Tables.
func readRelations(ctx context.Context, conn Querier, schemas []string, s *Schema) (map[uint32]int, error) {
	rows, err := conn.Query(ctx, relationsSQL, schemas)
	if err != nil {
		return nil, fmt.Errorf("catalog: relations: %w", err)
	}
	defer rows.Close()
	byOID := map[uint32]int{}
	for rows.Next() {
		var (
			oid  uint32
			t    Table
			kind string
		)
		if err := rows.Scan(&oid, &t.Schema, &t.Name, &kind, &t.Comment, &t.RowEstimate); err != nil {
			return nil, fmt.Errorf("catalog: relations: %w", err)
		}
		switch kind {
		case "v":
			t.Kind, t.RowEstimate = KindView, -1
		case "m":
			t.Kind = KindMaterialized
		default: // r, p, f: queried like tables
			t.Kind = KindTable
		}
		if t.RowEstimate < 0 {
			t.RowEstimate = -1
		}
		byOID[oid] = len(s.Tables)
		s.Tables = append(s.Tables, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: relations: %w", err)
	}
	return byOID, nil
}

const columnsSQL = `
SELECT a.attrelid, a.attname::pg_catalog.text, pg_catalog.format_type(a.atttypid, a.atttypmod), NOT a.attnotnull,
       coalesce(pg_catalog.pg_get_expr(ad.adbin, ad.adrelid), ''), a.attidentity::pg_catalog.text, a.attgenerated::pg_catalog.text,
       coalesce(d.description, ''), t.typtype = 'e'
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
LEFT JOIN pg_catalog.pg_description d ON d.objoid = a.attrelid AND d.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objsubid = a.attnum
WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition
  AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attrelid, a.attnum`

// readColumns fills the tables' columns and returns the enum types used.
func readColumns(ctx context.Context, conn Querier, schemas []string, s *Schema, byOID map[uint32]int, disp display) ([]string, error) {
	rows, err := conn.Query(ctx, columnsSQL, schemas)
	if err != nil {
		return nil, fmt.Errorf("catalog: columns: %w", err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	var enums []string
	for rows.Next() {
		var (
			oid                 uint32
			c                   Column
			identity, generated string
		)
		if err := rows.Scan(&oid, &c.Name, &c.Type, &c.Nullable, &c.Default, &identity, &generated, &c.Comment, &c.IsEnum); err != nil {
			return nil, fmt.Errorf("catalog: columns: %w", err)
		}
		switch {
		case identity == "a":
			c.Default = "GENERATED ALWAYS AS IDENTITY"
		case identity == "d":
			c.Default = "GENERATED BY DEFAULT AS IDENTITY"
		case generated == "s":
			c.Default = "GENERATED ALWAYS AS (" + c.Default + ") STORED"
		}
		i, ok := byOID[oid]
		if !ok {
			continue // created between the two queries
		}
		if c.IsEnum && !seen[c.Type] {
			seen[c.Type] = true
			enums = append(enums, c.Type) // as format_type spells it, for enumsSQL
		}
		c.Type, c.Default = disp.name(c.Type), disp.expr(c.Default)
		s.Tables[i].Columns = append(s.Tables[i].Columns, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("catalog: columns: %w", err)
	}
	return enums, nil
}

// Unique indexes that back no constraint count as unique keys too; partial
// and expression indexes do not (they constrain only some rows/values).
const constraintsSQL = `
SELECT con.conrelid, con.contype::pg_catalog.text,
       array(SELECT a.attname::pg_catalog.text FROM pg_catalog.unnest(con.conkey) WITH ORDINALITY k(n, o)
             JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.n ORDER BY k.o),
       coalesce(rn.nspname::pg_catalog.text, ''), coalesce(rc.relname::pg_catalog.text, ''),
       array(SELECT a.attname::pg_catalog.text FROM pg_catalog.unnest(con.confkey) WITH ORDINALITY k(n, o)
             JOIN pg_catalog.pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.n ORDER BY k.o),
       con.conname::pg_catalog.text
FROM pg_catalog.pg_constraint con
JOIN pg_catalog.pg_class c ON c.oid = con.conrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_class rc ON rc.oid = con.confrelid
LEFT JOIN pg_catalog.pg_namespace rn ON rn.oid = rc.relnamespace
WHERE con.contype IN ('p', 'u', 'f') AND n.nspname = ANY($1)
UNION ALL
SELECT i.indrelid, 'u',
       array(SELECT a.attname::pg_catalog.text FROM pg_catalog.unnest(i.indkey::pg_catalog.int2[]) WITH ORDINALITY k(n, o)
             JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n ORDER BY k.o),
       '', '', '{}'::pg_catalog.text[], ic.relname::pg_catalog.text
FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_class c ON c.oid = i.indrelid
JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE i.indisunique AND NOT i.indisprimary AND i.indexprs IS NULL AND i.indpred IS NULL
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint x WHERE x.conindid = i.indexrelid AND x.contype IN ('p', 'u', 'x'))
  AND n.nspname = ANY($1)
ORDER BY 1, 2, 7`

func readConstraints(ctx context.Context, conn Querier, schemas []string, s *Schema, byOID map[uint32]int) error {
	rows, err := conn.Query(ctx, constraintsSQL, schemas)
	if err != nil {
		return fmt.Errorf("catalog: constraints: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			oid                    uint32
			typ, refSch, ref, name string
			cols, refCols          []string
		)
		if err := rows.Scan(&oid, &typ, &cols, &refSch, &ref, &refCols, &name); err != nil {
			return fmt.Errorf("catalog: constraints: %w", err)
		}
		i, ok := byOID[oid]
		if !ok {
			continue
		}
		t := &s.Tables[i]
		switch typ {
		case "p":
			t.PrimaryKey = cols
		case "u":
			t.Uniques = append(t.Uniques, cols)
		case "f":
			t.ForeignKeys = append(t.ForeignKeys, ForeignKey{Columns: cols, RefSchema: refSch, RefTable: ref, RefColumns: refCols})
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("catalog: constraints: %w", err)
	}
	return nil
}

const enumsSQL = `
SELECT pg_catalog.format_type(t.oid, NULL), pg_catalog.array_agg(e.enumlabel::pg_catalog.text ORDER BY e.enumsortorder)
FROM pg_catalog.pg_type t
JOIN pg_catalog.pg_enum e ON e.enumtypid = t.oid
JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname = ANY($1) OR pg_catalog.format_type(t.oid, NULL) = ANY($2)
GROUP BY t.oid`

func readEnums(ctx context.Context, conn Querier, schemas, used []string, s *Schema, disp display) error {
	rows, err := conn.Query(ctx, enumsSQL, schemas, used)
	if err != nil {
		return fmt.Errorf("catalog: enums: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			name   string
			labels []string
		)
		if err := rows.Scan(&name, &labels); err != nil {
			return fmt.Errorf("catalog: enums: %w", err)
		}
		s.Enums[disp.name(name)] = labels
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("catalog: enums: %w", err)
	}
	return nil
}

// most_common_vals is anyarray: it is read as its text form and parsed here
// (a cast to text[] would fail on array-typed columns).
const statsSQL = `
SELECT schemaname::pg_catalog.text, tablename::pg_catalog.text, attname::pg_catalog.text, null_frac::pg_catalog.float8, n_distinct::pg_catalog.float8,
       most_common_vals::pg_catalog.text
FROM pg_catalog.pg_stats
WHERE schemaname = ANY($1) AND NOT inherited`

func readStats(ctx context.Context, conn Querier, schemas []string, s *Schema, opts IntrospectOptions) error {
	type key struct{ s, t string }
	idx := make(map[key]int, len(s.Tables))
	for i, t := range s.Tables {
		idx[key{t.Schema, t.Name}] = i
	}
	rows, err := conn.Query(ctx, statsSQL, schemas)
	if err != nil {
		return fmt.Errorf("catalog: stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			sch, tab, col string
			st            ColumnStats
			mcv           *string
		)
		if err := rows.Scan(&sch, &tab, &col, &st.NullFrac, &st.NDistinct, &mcv); err != nil {
			return fmt.Errorf("catalog: stats: %w", err)
		}
		i, ok := idx[key{sch, tab}]
		if !ok {
			continue
		}
		c := s.Tables[i].Column(col)
		if c == nil {
			continue
		}
		if mcv != nil && opts.MaxExamples > 0 {
			for _, v := range parseArrayLiteral(*mcv) {
				if len(st.Examples) == opts.MaxExamples {
					break
				}
				if v != "" && len(v) <= opts.MaxExampleLen && !strings.ContainsAny(v, "\n\r") {
					st.Examples = append(st.Examples, v)
				}
			}
		}
		c.Stats = &st
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("catalog: stats: %w", err)
	}
	return nil
}

// parseArrayLiteral parses a one-dimensional Postgres array literal
// ({a,"b c",NULL}); NULL elements are dropped. Nested arrays yield nil.
func parseArrayLiteral(s string) []string {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil
	}
	body := s[1 : len(s)-1]
	var out []string
	for i := 0; i < len(body); {
		switch body[i] {
		case '{':
			return nil
		case '"':
			var b strings.Builder
			i++
			for i < len(body) && body[i] != '"' {
				if body[i] == '\\' && i+1 < len(body) {
					i++
				}
				b.WriteByte(body[i])
				i++
			}
			i++ // closing quote
			out = append(out, b.String())
		default:
			j := strings.IndexByte(body[i:], ',')
			if j < 0 {
				j = len(body) - i
			}
			if v := body[i : i+j]; v != "NULL" {
				out = append(out, v)
			}
			i += j
		}
		if i < len(body) && body[i] == ',' {
			i++
		}
	}
	return out
}

// introspectBounds bound each catalog query: generous, as a database of
// many thousand tables reads slowly, but never unbounded.
var introspectBounds = ownconn.Bounds{Statement: 2 * time.Minute}
