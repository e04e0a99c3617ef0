package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/catalog/descindex"
)

// question is one row of questions.csv.
type question struct {
	Text, Query, DB, Category string
}

func readQuestions(path string) ([]question, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rows) < 1 {
		return nil, fmt.Errorf("%s: empty", path)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, h := range []string{"question", "query", "db_name"} {
		if _, ok := col[h]; !ok {
			return nil, fmt.Errorf("%s: no %q column", path, h)
		}
	}
	var out []question
	for _, r := range rows[1:] {
		q := question{Text: r[col["question"]], Query: r[col["query"]], DB: r[col["db_name"]]}
		if i, ok := col["query_category"]; ok {
			q.Category = r[i]
		}
		out = append(out, q)
	}
	return out, nil
}

// metadata is a database's <db>.json.
type metadata struct {
	Tables map[string][]struct {
		Column      string `json:"column_name"`
		Description string `json:"column_description"`
	} `json:"table_metadata"`
	Glossary string `json:"glossary"`
}

// publicRef matches the "public." qualification of the dump's objects.
var publicRef = regexp.MustCompile(`\bpublic\.`)

// loadDatabase loads sql-eval database db into schema db of the database
// conn is connected to, with its column descriptions as comments, and
// returns its glossary as description-index documents.
func loadDatabase(ctx context.Context, conn *pgx.Conn, dir, db string) ([]descindex.Doc, error) {
	ddl, err := os.ReadFile(filepath.Join(dir, "databases", db, db+".sql"))
	if err != nil {
		return nil, err
	}
	schema := pgx.Identifier{db}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return nil, fmt.Errorf("%s: %w", db, err)
	}
	if _, err := conn.Exec(ctx, publicRef.ReplaceAllLiteralString(string(ddl), schema+".")); err != nil {
		return nil, fmt.Errorf("%s: load: %w", db, err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "databases", db, db+".json"))
	if err != nil {
		return nil, err
	}
	var md metadata
	if err := json.Unmarshal(raw, &md); err != nil {
		return nil, fmt.Errorf("%s.json: %w", db, err)
	}
	for table, cols := range md.Tables {
		for _, c := range cols {
			if strings.TrimSpace(c.Description) == "" {
				continue
			}
			sql := fmt.Sprintf("COMMENT ON COLUMN %s.%s.%s IS %s", schema, pgx.Identifier{table}.Sanitize(),
				pgx.Identifier{c.Column}.Sanitize(), quoteLiteral(c.Description))
			if _, err := conn.Exec(ctx, sql); err != nil {
				return nil, fmt.Errorf("%s: %w", db, err)
			}
		}
	}
	return glossaryDocs(db, md.Glossary), nil
}

// glossaryDocs turns sql-eval's free-text glossary ("- term: definition"
// lines) into glossary documents scoped to the database's schema.
func glossaryDocs(schema, text string) []descindex.Doc {
	var out []descindex.Doc
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), "-*"))
		if line == "" {
			continue
		}
		term, def, ok := strings.Cut(line, ":")
		if !ok {
			term, def = "", line
		}
		out = append(out, descindex.Doc{Kind: descindex.KindGlossary, Schema: schema, Term: strings.TrimSpace(term), Text: strings.TrimSpace(def)})
	}
	return out
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
