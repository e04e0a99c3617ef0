package dataset

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Connector opens a session to a database of the target server as a role
// that may create databases.
type Connector func(ctx context.Context, database string) (*pgx.Conn, error)

// LoadOptions control how databases are created.
type LoadOptions struct {
	// Prefix is put before every database name ("" keeps the dataset's names).
	Prefix string
	// Replace drops an existing database of the same name first; otherwise
	// an existing one is an error.
	Replace bool
	// Readers are roles given USAGE and SELECT on the loaded schemas.
	Readers []string
	// PGRestore is the pg_restore binary for custom-format dumps
	// (default: found on PATH).
	PGRestore string
	// URL builds a libpq connection string for a database (pg_restore needs
	// one); only dumps need it.
	URL func(database string) string
	// Analyze runs ANALYZE once loaded: planner statistics, and the
	// catalog's stored examples read pg_stats.
	Analyze bool
}

// Loaded reports one database.
type Loaded struct {
	DB       string // the dataset's name
	Target   string // the name created on the server
	Comments int    // column descriptions loaded as COMMENT ON COLUMN
	Glossary string // the metadata's glossary text, for the catalog glossary
	// Warnings name the descriptions left out: their table or column was
	// not found.
	Warnings []string
}

// DatabaseFiles finds a database's files: <dir>/databases/<db>/<db>.sql (or
// .dump for pg_dump's custom format) and the optional <db>.json metadata.
func DatabaseFiles(dir, db string) (data, meta string, err error) {
	base := filepath.Join(dir, "databases", db, db)
	for _, ext := range []string{".sql", ".dump"} {
		if _, err := os.Stat(base + ext); err == nil {
			data = base + ext
			break
		}
	}
	if data == "" {
		return "", "", fmt.Errorf("%w: no %s.sql or %s.dump under %s", ErrDataset, db, db, filepath.Dir(base))
	}
	if _, err := os.Stat(base + ".json"); err == nil {
		meta = base + ".json"
	}
	return data, meta, nil
}

// Databases lists the databases of a dataset directory: the folders under
// dir/databases that hold a <db>.sql or <db>.dump, sorted.
func Databases(dir string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(dir, "databases"))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDataset, err)
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if _, _, err := DatabaseFiles(dir, e.Name()); err == nil {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no databases under %s", ErrDataset, filepath.Join(dir, "databases"))
	}
	return out, nil // os.ReadDir sorts by name
}

// Load creates and fills one database of ds on the target server.
func Load(ctx context.Context, connect Connector, ds *Dataset, db string, opts LoadOptions) (Loaded, error) {
	out := Loaded{DB: db, Target: opts.Prefix + db}
	data, meta, err := DatabaseFiles(ds.Dir, db)
	if err != nil {
		return out, err
	}
	admin, err := connect(ctx, "postgres")
	if err != nil {
		return out, fmt.Errorf("load %s: connect: %w", db, err)
	}
	ident := pgx.Identifier{out.Target}.Sanitize()
	if opts.Replace {
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			admin.Close(ctx)
			return out, fmt.Errorf("load %s: drop: %w", db, err)
		}
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+ident)
	admin.Close(ctx)
	if err != nil {
		return out, fmt.Errorf("load %s: create database %s: %w", db, out.Target, err)
	}
	conn, err := connect(ctx, out.Target)
	if err != nil {
		return out, fmt.Errorf("load %s: connect: %w", db, err)
	}
	defer conn.Close(ctx)
	if strings.HasSuffix(data, ".dump") {
		if err := restore(ctx, data, out.Target, opts); err != nil {
			return out, err
		}
	} else {
		b, err := os.ReadFile(data)
		if err != nil {
			return out, fmt.Errorf("%w: %w", ErrDataset, err)
		}
		// One simple-protocol message runs the whole file in one transaction.
		if _, err := conn.Exec(ctx, string(b), pgx.QueryExecModeSimpleProtocol); err != nil {
			return out, fmt.Errorf("load %s: %s: %w", db, data, err)
		}
	}
	if meta != "" {
		n, gloss, warnings, err := applyMetadata(ctx, conn, meta, "")
		if err != nil {
			return out, fmt.Errorf("load %s: %w", db, err)
		}
		out.Comments, out.Glossary, out.Warnings = n, gloss, warnings
	}
	if opts.Analyze {
		if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
			return out, fmt.Errorf("load %s: analyze: %w", db, err)
		}
	}
	for _, r := range opts.Readers {
		role := pgx.Identifier{r}.Sanitize()
		if _, err := conn.Exec(ctx, fmt.Sprintf(
			"DO $$DECLARE s text; BEGIN FOR s IN SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%%' AND nspname <> 'information_schema' LOOP "+
				"EXECUTE format('GRANT USAGE ON SCHEMA %%I TO %s', s); EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %%I TO %s', s); END LOOP; END$$",
			role, role)); err != nil {
			return out, fmt.Errorf("load %s: grant to %s: %w", db, r, err)
		}
	}
	return out, nil
}

// publicRef matches the "public." qualification sql-eval's files give
// their objects.
var publicRef = regexp.MustCompile(`\bpublic\.`)

// LoadSchema loads database db of ds into a new schema of the database conn
// is connected to, so that several dataset databases share one database
// (names stay apart by schema). The file's "public." qualifications are
// rewritten to the schema; column descriptions become comments there.
// Loaded.Target is the schema. Only plain SQL files can be loaded this way.
func LoadSchema(ctx context.Context, conn *pgx.Conn, ds *Dataset, db, schema string) (Loaded, error) {
	out := Loaded{DB: db, Target: schema}
	data, meta, err := DatabaseFiles(ds.Dir, db)
	if err != nil {
		return out, err
	}
	if !strings.HasSuffix(data, ".sql") {
		return out, fmt.Errorf("%w: %s: only a .sql file loads into a schema", ErrDataset, data)
	}
	b, err := os.ReadFile(data)
	if err != nil {
		return out, fmt.Errorf("%w: %w", ErrDataset, err)
	}
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		return out, fmt.Errorf("load %s: create schema %s: %w", db, schema, err)
	}
	sql := publicRef.ReplaceAllLiteralString(string(b), ident+".")
	if _, err := conn.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
		return out, fmt.Errorf("load %s: %s: %w", db, data, err)
	}
	if meta != "" {
		n, gloss, warnings, err := applyMetadata(ctx, conn, meta, schema)
		if err != nil {
			return out, fmt.Errorf("load %s: %w", db, err)
		}
		out.Comments, out.Glossary, out.Warnings = n, gloss, warnings
	}
	return out, nil
}

func restore(ctx context.Context, dump, target string, opts LoadOptions) error {
	if opts.URL == nil {
		return fmt.Errorf("%w: %s is a dump; pg_restore needs a connection URL", ErrDataset, dump)
	}
	bin := opts.PGRestore
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("pg_restore"); err != nil {
			return fmt.Errorf("load %s: pg_restore not found: %w", dump, err)
		}
	}
	cmd := exec.CommandContext(ctx, bin, "--no-owner", "--no-privileges", "--exit-on-error", "-d", opts.URL(target), dump)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("load %s: pg_restore: %w: %s", dump, err, strings.TrimSpace(string(b)))
	}
	return nil
}

// metadata is sql-eval's <db>.json.
type metadata struct {
	Tables   map[string][]ColumnMeta `json:"table_metadata"`
	Glossary json.RawMessage         `json:"glossary"`
}

// ColumnMeta is one column of sql-eval's table_metadata.
type ColumnMeta struct {
	Name        string `json:"column_name"`
	Type        string `json:"data_type"`
	Description string `json:"column_description"`
}

// ReadMetadata reads the table metadata of a database (nil when it has none).
func ReadMetadata(dir, db string) (map[string][]ColumnMeta, error) {
	_, meta, err := DatabaseFiles(dir, db)
	if err != nil || meta == "" {
		return nil, err
	}
	m, err := readMeta(meta)
	if err != nil {
		return nil, err
	}
	return m.Tables, nil
}

func readMeta(path string) (*metadata, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDataset, err)
	}
	var m metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrDataset, path, err)
	}
	return &m, nil
}

// applyMetadata loads column descriptions as COMMENT ON COLUMN (the catalog
// reads comments) on the tables of schema (unqualified: the search path
// when "") and returns the glossary text. Names are resolved as Postgres
// resolves them: the metadata's table names may be schema-qualified
// ("consumer_div.coupons") and in mixed case for tables created unquoted
// ("sbCustomer" is sbcustomer); a quoted mixed-case name is found too. A
// description whose table or column cannot be found is left out with a
// warning; the others are loaded.
func applyMetadata(ctx context.Context, conn *pgx.Conn, path, schema string) (n int, gloss string, warnings []string, err error) {
	m, err := readMeta(path)
	if err != nil {
		return 0, "", nil, err
	}
	tables := make([]string, 0, len(m.Tables))
	for t := range m.Tables {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	var b strings.Builder
	for _, t := range tables {
		var described []ColumnMeta
		for _, c := range m.Tables[t] {
			if strings.TrimSpace(c.Description) != "" {
				described = append(described, c)
			}
		}
		if len(described) == 0 {
			continue
		}
		rel, cols, err := resolveTable(ctx, conn, t, schema)
		if err != nil {
			return 0, "", nil, fmt.Errorf("column comments: %w", err)
		}
		if rel == "" {
			warnings = append(warnings, fmt.Sprintf("table %s not found: %d column descriptions not loaded", t, len(described)))
			continue
		}
		for _, c := range described {
			col, ok := cols[c.Name]
			if !ok {
				col, ok = cols[strings.ToLower(c.Name)]
			}
			if !ok {
				warnings = append(warnings, fmt.Sprintf("column %s.%s not found: its description is not loaded", t, c.Name))
				continue
			}
			fmt.Fprintf(&b, "COMMENT ON COLUMN %s.%s IS %s;\n", rel, pgx.Identifier{col}.Sanitize(), quoteLiteral(c.Description))
			n++
		}
	}
	if n > 0 {
		if _, err := conn.Exec(ctx, b.String(), pgx.QueryExecModeSimpleProtocol); err != nil {
			return 0, "", nil, fmt.Errorf("column comments: %w", err)
		}
	}
	return n, glossaryText(m.Glossary), warnings, nil
}

// resolveTable finds the metadata's table name as Postgres would read it
// (unquoted parts folded to lower case), or else as one exact name; rel is
// the table as SQL text ("" when not found), cols its columns by name.
func resolveTable(ctx context.Context, conn *pgx.Conn, table, schema string) (rel string, cols map[string]string, err error) {
	exact := pgx.Identifier{table}.Sanitize()
	written := table
	if schema != "" {
		q := pgx.Identifier{schema}.Sanitize() + "."
		exact = q + exact
		if !strings.Contains(table, ".") {
			written = q + table
		}
	}
	var oid *uint32
	// to_regclass fails (rather than returning NULL) on text that is not a
	// name at all; the exact spelling is the fallback then too.
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1)::oid", written).Scan(&oid); err != nil || oid == nil {
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1)::oid", exact).Scan(&oid); err != nil {
			return "", nil, err
		}
	}
	if oid == nil {
		return "", nil, nil
	}
	rows, err := conn.Query(ctx, "SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped", *oid)
	if err != nil {
		return "", nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", nil, err
	}
	cols = make(map[string]string, len(names))
	for _, a := range names {
		cols[a] = a
	}
	if err := conn.QueryRow(ctx, "SELECT $1::oid::regclass::text", *oid).Scan(&rel); err != nil {
		return "", nil, err
	}
	return rel, cols, nil
}

// glossaryText accepts the glossary as a string or a list of strings.
func glossaryText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return strings.TrimSpace(s)
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err == nil {
		return strings.TrimSpace(strings.Join(list, "\n"))
	}
	return ""
}

// GlossaryEntry is one entry of a glossary.
type GlossaryEntry struct {
	Term       string // "" when the line names none
	Definition string
}

// GlossaryEntries splits glossary text into its entries: one per non-empty
// line, written "- term: definition" (the list mark is optional; a line
// without a colon is a definition with no term).
func GlossaryEntries(text string) []GlossaryEntry {
	var out []GlossaryEntry
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), "-*"))
		if line == "" {
			continue
		}
		term, def, ok := strings.Cut(line, ":")
		if !ok {
			term, def = "", line
		}
		out = append(out, GlossaryEntry{Term: strings.TrimSpace(term), Definition: strings.TrimSpace(def)})
	}
	return out
}

// quoteLiteral quotes s as a standard SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// GlossaryYAML renders loaded glossaries as the YAML file `nlproxy serve
// --glossary` reads: one entry per database with a glossary.
func GlossaryYAML(loaded []Loaded) []byte {
	var b strings.Builder
	for _, l := range loaded {
		if l.Glossary == "" {
			continue
		}
		js, _ := json.Marshal(l.Glossary) // a JSON string is a valid YAML scalar
		fmt.Fprintf(&b, "- term: %q\n  definition: %s\n", l.Target+" glossary", js)
	}
	return []byte(b.String())
}
