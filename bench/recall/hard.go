package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/bench/internal/sqleval"
	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/internal/sampledb"
)

// The harder benchmark (-hard) is the shape of a warehouse: the seven
// sql-eval databases in one database, a schema each, every schema on the
// search_path, beside distractor schemas whose tables compete with theirs
// for the same words. Five question-bearing schemas carry naming styles met
// in real schemas: camelCase with a prefix (quoted, so the case survives),
// a snake_case prefix, a prefix glued on without separator or case change
// on tables and columns (written unquoted, so PostgreSQL folds the names to
// lower case: rsfoodtype), and abbreviated words (crs_offr). Distractors
// hold plain, prefixed and camelCase copies of sql-eval tables, the
// business sample database and a synthetic wide schema. Questions score
// only against their own schema; distractors bear none.

// A renaming rewrites a question-bearing schema's names after loading
// (gold SQL names the original ones; scoring maps them).
type renaming struct {
	table  func(string) string
	column func(string) string // nil: columns keep their names
	// folded: the new names are written unquoted, as DDL written for
	// another database is, and PostgreSQL stores them in lower case.
	folded bool
}

var renamed = map[string]renaming{
	"geography":   {table: func(t string) string { return "geo" + camel(t) }}, // geoBorderInfo
	"yelp":        {table: func(t string) string { return "yp_" + t }},        // yp_business
	"restaurants": {table: glued("rs"), column: glued("rs"), folded: true},    // rsRestaurant, rsFoodType → rsrestaurant, rsfoodtype
	"scholar":     {table: glued("sc"), column: glued("sc"), folded: true},    // scPaperKeyphrase, scAuthorName → scpaperkeyphrase, scauthorname
	"advising":    {table: abbreviated, column: abbreviated, folded: true},    // course_offering → crs_offr
}

// glued prefixes a name with p, its words run together in camelCase
// (food_type → rsFoodType).
func glued(p string) func(string) string {
	return func(n string) string { return p + camel(n) }
}

func camel(n string) string {
	var b strings.Builder
	for _, w := range strings.Split(n, "_") {
		b.WriteString(upperFirst(w))
	}
	return b.String()
}

// abbreviations are the word abbreviations of the abbreviated schema, as
// they are commonly written in legacy schemas.
var abbreviations = map[string]string{
	"comment": "cmt", "instructor": "instr", "course": "crs", "offering": "offr", "prerequisite": "prereq",
	"count": "cnt", "program": "prog", "requirement": "req", "semester": "sem", "student": "stu", "record": "rec",
	"name": "nm", "department": "dept", "number": "nbr", "credits": "cred", "credit": "cred", "description": "descr",
	"enrolled": "enrl", "total": "tot", "category": "cat", "section": "sect", "address": "addr", "additional": "addl",
	"predicted": "pred", "graduation": "grad", "transfer": "xfer", "source": "src", "firstname": "fname",
	"lastname": "lname", "text": "txt", "year": "yr", "semesters": "sems", "reviews": "revs",
}

// abbreviated writes each word of a snake_case name abbreviated when it
// has a common abbreviation (course_offering → crs_offr).
func abbreviated(n string) string {
	ws := strings.Split(n, "_")
	for i, w := range ws {
		if a, ok := abbreviations[w]; ok {
			ws[i] = a
		}
	}
	return strings.Join(ws, "_")
}

// copies: distractor schema → its tables, copied from a sql-eval schema's
// table under a new name with the first copyColumns columns.
var copies = []struct {
	schema string
	tables [][3]string // source schema, source table, new name
}{
	{"crm", [][3]string{ // prefixed
		{"yelp", "business", "crm_business"}, {"yelp", "users", "crm_users"},
		{"academic", "author", "crm_author"}, {"academic", "journal", "crm_journal"},
		{"geography", "city", "crm_city"},
	}},
	{"sb", [][3]string{ // camelCase with a prefix
		{"restaurants", "restaurant", "sbRestaurant"}, {"advising", "student", "sbStudent"},
		{"atis", "airline", "sbAirline"}, {"scholar", "paper", "sbPaper"},
	}},
	{"mart", [][3]string{ // plain names competing with the renamed schemas
		{"yelp", "business", "business"}, {"yelp", "review", "review"},
		{"restaurants", "restaurant", "restaurant"}, {"restaurants", "location", "location"},
		{"academic", "author", "author"}, {"scholar", "paper", "paper"}, {"scholar", "venue", "venue"},
		{"advising", "course", "course"}, {"advising", "student", "student"}, {"advising", "instructor", "instructor"},
		{"geography", "state", "state"},
	}},
}

const (
	copyColumns            = 100
	wideTables, wideCols   = 30, 8
	sampleSchema, wideName = "sample", "wide"
)

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// goldName maps a gold SQL's table (or, column true, column) name of db to
// the loaded one.
func goldName(db, name string, column bool) string {
	r, ok := renamed[db]
	f := r.table
	if column {
		f = r.column
	}
	if !ok || f == nil {
		return name
	}
	if r.folded {
		return strings.ToLower(f(name))
	}
	return f(name)
}

// sameName is the naming of the databases loaded as they are.
func sameName(_, name string, _ bool) string { return name }

// setupHard loads the harder benchmark's database into cluster c and
// returns its snapshot, the answerable questions, and the search_path
// (every schema: question-bearing ones first, then distractors). Without
// comments, the renamed schemas' column comments are dropped: what their
// names alone tell.
func setupHard(ctx context.Context, c *pgcluster.Cluster, name string, ds *dataset.Dataset, only []string, comments bool) (*catalog.Snapshot, []dataset.Question, []string, error) {
	qs, dbs := questionsFor(ds, only)
	if len(dbs) == 0 {
		return nil, nil, nil, fmt.Errorf("no questions for databases %v", only)
	}
	// Copies read from every sql-eval schema they name: load those too.
	load := slices.Clone(dbs)
	for _, cp := range copies {
		for _, t := range cp.tables {
			if !slices.Contains(load, t[0]) {
				load = append(load, t[0])
			}
		}
	}
	if err := c.CreateDatabase(ctx, name); err != nil {
		return nil, nil, nil, err
	}
	conn, err := c.Connect(ctx, name)
	if err != nil {
		return nil, nil, nil, err
	}
	defer conn.Close(ctx)
	opts := catalog.BuildOptions{}
	for _, db := range load {
		l, err := dataset.LoadSchema(ctx, conn, ds, db, db)
		if err != nil {
			return nil, nil, nil, err
		}
		if slices.Contains(dbs, db) {
			for _, g := range dataset.GlossaryEntries(l.Glossary) {
				opts.Glossary = append(opts.Glossary, descindex.Doc{Kind: descindex.KindGlossary, Schema: db, Term: g.Term, Text: g.Definition})
			}
		}
	}
	for _, cp := range copies {
		if err := copySchema(ctx, conn, cp.schema, cp.tables); err != nil {
			return nil, nil, nil, err
		}
	}
	// Renamed after the copies, which read the original names.
	for _, db := range slices.Sorted(maps.Keys(renamed)) {
		if !slices.Contains(load, db) {
			continue
		}
		if err := rename(ctx, conn, db, renamed[db], comments); err != nil {
			return nil, nil, nil, err
		}
	}
	for _, s := range []string{sampleSchema, wideName} {
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+s+"; SET search_path = "+s); err != nil {
			return nil, nil, nil, err
		}
		if s == sampleSchema {
			err = sampledb.Load(ctx, conn, sampledb.Small)
		} else {
			err = sampledb.WideSchema(ctx, conn, wideTables, wideCols)
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s schema: %w", s, err)
		}
	}
	path := slices.Clone(load)
	for _, cp := range copies {
		path = append(path, cp.schema)
	}
	path = append(path, sampleSchema, wideName)
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		return nil, nil, nil, err
	}
	opts.Introspect.Schemas = path
	snap, err := catalog.Build(ctx, conn, name, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	return snap, qs, path, nil
}

// copySchema creates schema with copies of tables (their first copyColumns
// columns, with comments and rows).
func copySchema(ctx context.Context, conn *pgx.Conn, schema string, tables [][3]string) error {
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return err
	}
	for _, t := range tables {
		rows, err := conn.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), col_description(a.attrelid, a.attnum)
			FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum LIMIT $2`,
			pgx.Identifier{t[0], t[1]}.Sanitize(), copyColumns)
		if err != nil {
			return err
		}
		var cols, defs, comments []string
		for rows.Next() {
			var n, typ string
			var cm *string
			if err := rows.Scan(&n, &typ, &cm); err != nil {
				return err
			}
			id := pgx.Identifier{n}.Sanitize()
			cols = append(cols, id)
			defs = append(defs, id+" "+typ)
			if cm != nil {
				comments = append(comments, id+"\x00"+*cm)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		dst := pgx.Identifier{schema, t[2]}.Sanitize()
		src := pgx.Identifier{t[0], t[1]}.Sanitize()
		sql := fmt.Sprintf("CREATE TABLE %s (%s); INSERT INTO %s SELECT %s FROM %s;", dst, strings.Join(defs, ", "), dst, strings.Join(cols, ", "), src)
		for _, cm := range comments {
			col, text, _ := strings.Cut(cm, "\x00")
			sql += fmt.Sprintf("COMMENT ON COLUMN %s.%s IS '%s';", dst, col, strings.ReplaceAll(text, "'", "''"))
		}
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("copy %s.%s: %w", t[0], t[1], err)
		}
	}
	return nil
}

// rename applies r to schema db's tables and columns; without comments it
// drops the column comments too.
func rename(ctx context.Context, conn *pgx.Conn, db string, r renaming, comments bool) error {
	ts, err := tablesOf(ctx, conn, db)
	if err != nil {
		return err
	}
	// Written unquoted when folded, as the DDL of another database would
	// be (the names are plain words: nothing to escape).
	ident := func(n string) string {
		if r.folded {
			return n
		}
		return pgx.Identifier{n}.Sanitize()
	}
	for _, t := range ts {
		cols, err := columnsOf(ctx, conn, db, t)
		if err != nil {
			return err
		}
		tbl := pgx.Identifier{db, t}.Sanitize()
		var sql []string
		for _, c := range cols {
			if !comments {
				sql = append(sql, fmt.Sprintf("COMMENT ON COLUMN %s.%s IS NULL", tbl, pgx.Identifier{c}.Sanitize()))
			}
			if r.column != nil && goldName(db, c, true) != c {
				sql = append(sql, fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s TO %s", tbl, pgx.Identifier{c}.Sanitize(), ident(r.column(c))))
			}
		}
		if goldName(db, t, false) != t {
			sql = append(sql, fmt.Sprintf("ALTER TABLE %s RENAME TO %s", tbl, ident(r.table(t))))
		}
		if len(sql) == 0 {
			continue
		}
		if _, err := conn.Exec(ctx, strings.Join(sql, "; ")); err != nil {
			return fmt.Errorf("rename %s.%s: %w", db, t, err)
		}
	}
	return nil
}

func columnsOf(ctx context.Context, conn *pgx.Conn, schema, table string) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT attname::text FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
		pgx.Identifier{schema, table}.Sanitize())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func tablesOf(ctx context.Context, conn *pgx.Conn, schema string) ([]string, error) {
	rows, err := conn.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1", schema)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// questionsFor returns the answerable questions of the databases in only
// (all when empty) and those databases in first-question order.
func questionsFor(ds *dataset.Dataset, only []string) ([]dataset.Question, []string) {
	var qs []dataset.Question
	var dbs []string
	for _, q := range ds.Questions {
		if q.Unanswerable || !sqleval.Wanted(only, q.DB) {
			continue
		}
		if !slices.Contains(dbs, q.DB) {
			dbs = append(dbs, q.DB)
		}
		qs = append(qs, q)
	}
	return qs, dbs
}
