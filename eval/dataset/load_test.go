package dataset

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/internal/pgcluster"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

const sqlEvalDir = "../../datasets/sql-eval"

// testDataset builds a dataset directory from real sql-eval databases:
// restaurants (its metadata given a glossary as a list of lines), geography
// as it is, a database that is only a custom-format dump, and a folder with
// no data file.
func testDataset(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write := func(db, name string, b []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, "databases", db), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "databases", db, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(db, ext string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(sqlEvalDir, "databases", db, db+ext))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, db := range []string{"restaurants", "geography"} {
		write(db, db+".sql", read(db, ".sql"))
	}
	var meta map[string]any
	if err := json.Unmarshal(read("restaurants", ".json"), &meta); err != nil {
		t.Fatal(err)
	}
	meta["glossary"] = []string{"- rating: stars out of 5", "food_type names the cuisine"}
	b, err := json.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	write("restaurants", "restaurants.json", b)
	write("geography", "geography.json", read("geography", ".json"))
	write("dumponly", "dumponly.dump", []byte("PGDMP"))
	if err := os.MkdirAll(filepath.Join(dir, "databases", "nodata"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDatabases(t *testing.T) {
	for _, tt := range []struct {
		name    string
		dir     string
		want    []string
		wantErr error
	}{
		{"sql-eval", sqlEvalDir, []string{"academic", "advising", "atis", "geography", "restaurants", "scholar", "yelp"}, nil},
		{"folders without data left out", testDataset(t), []string{"dumponly", "geography", "restaurants"}, nil},
		{"no databases folder", t.TempDir(), nil, ErrDataset},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Databases(tt.dir)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Databases = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestGlossaryEntries(t *testing.T) {
	for _, tt := range []struct {
		name, text string
		want       []GlossaryEntry
	}{
		{"empty", "", nil},
		{"list lines", "- rating: stars out of 5\n* price: in USD\n\n", []GlossaryEntry{{"rating", "stars out of 5"}, {"price", "in USD"}}},
		{"no term", "  food_type names the cuisine  ", []GlossaryEntry{{"", "food_type names the cuisine"}}},
		{"colon in definition", "- time: hh:mm, 24 hours", []GlossaryEntry{{"time", "hh:mm, 24 hours"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := GlossaryEntries(tt.text); !slices.Equal(got, tt.want) {
				t.Errorf("GlossaryEntries(%q) = %+v, want %+v", tt.text, got, tt.want)
			}
		})
	}
}

// TestLoadTargets loads real sql-eval databases each into a database of its
// own (Load) and side by side into schemas of one shared database
// (LoadSchema), and checks tables, column comments, glossary and statistics
// where each way says they go.
func TestLoadTargets(t *testing.T) {
	c := pgtest.New(t, pgcluster.Options{})
	ctx := context.Background()
	ds := &Dataset{Name: FormatSQLEval, Dir: testDataset(t)}
	connect := func(ctx context.Context, db string) (*pgx.Conn, error) { return c.Connect(ctx, db) }
	prefix := pgtest.UniqueName(t, "ld") + "_"
	shared := pgtest.UniqueName(t, "shared")
	if err := c.CreateDatabase(ctx, shared); err != nil {
		t.Fatal(err)
	}
	sharedConn, err := c.Connect(ctx, shared)
	if err != nil {
		t.Fatal(err)
	}
	defer sharedConn.Close(ctx)
	const glossary = "- rating: stars out of 5\nfood_type names the cuisine"

	for _, tt := range []struct {
		name    string
		db      string
		schema  string // "": a database of its own
		analyze bool
		fails   bool
		wantErr error // when it fails, what the error wraps (nil: the server's error)
		gloss   string
	}{
		{name: "database", db: "restaurants", gloss: glossary},
		{name: "database analyzed", db: "geography", analyze: true},
		{name: "schema", db: "restaurants", schema: "rest", gloss: glossary},
		{name: "second schema of the same database", db: "geography", schema: "geo"},
		{name: "schema taken", db: "geography", schema: "geo", fails: true},
		{name: "dump into a schema", db: "dumponly", schema: "dump", fails: true, wantErr: ErrDataset},
		{name: "unknown database", db: "nosuch", schema: "nosuch", fails: true, wantErr: ErrDataset},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var l Loaded
			var err error
			conn, nsp := sharedConn, tt.schema
			if tt.schema == "" {
				l, err = Load(ctx, connect, ds, tt.db, LoadOptions{Prefix: prefix, Analyze: tt.analyze})
				nsp = "public"
			} else {
				l, err = LoadSchema(ctx, sharedConn, ds, tt.db, tt.schema)
			}
			if tt.fails {
				if err == nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want one wrapping %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.schema == "" {
				if l.Target != prefix+tt.db {
					t.Errorf("Target = %q, want %q", l.Target, prefix+tt.db)
				}
				if conn, err = c.Connect(ctx, l.Target); err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
			} else if l.Target != tt.schema {
				t.Errorf("Target = %q, want %q", l.Target, tt.schema)
			}
			meta, err := ReadMetadata(ds.Dir, tt.db)
			if err != nil {
				t.Fatal(err)
			}
			described := 0
			for table, cols := range meta {
				var found bool
				if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{nsp, table}.Sanitize()).Scan(&found); err != nil {
					t.Fatal(err)
				}
				if !found {
					t.Errorf("table %s.%s not loaded", nsp, table)
				}
				for _, col := range cols {
					if strings.TrimSpace(col.Description) != "" {
						described++
					}
				}
			}
			var comments int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_description d JOIN pg_class c ON c.oid = d.objoid
				JOIN pg_namespace n ON n.oid = c.relnamespace WHERE d.objsubid > 0 AND n.nspname = $1`, nsp).Scan(&comments); err != nil {
				t.Fatal(err)
			}
			if described == 0 || l.Comments != described || comments != described {
				t.Errorf("%d described columns, Loaded.Comments %d, comments in %s %d", described, l.Comments, nsp, comments)
			}
			if l.Glossary != tt.gloss {
				t.Errorf("Glossary = %q, want %q", l.Glossary, tt.gloss)
			}
			if tt.schema != "" {
				// The files' public.<table> must have gone to the schema.
				var public int
				if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&public); err != nil {
					t.Fatal(err)
				}
				if public != 0 {
					t.Errorf("%d tables left in public", public)
				}
			}
			if tt.analyze {
				var stats int
				if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stats WHERE schemaname = $1", nsp).Scan(&stats); err != nil {
					t.Fatal(err)
				}
				if stats == 0 {
					t.Error("no statistics after Analyze")
				}
			}
		})
	}
}

// TestLoadResolvesNames: metadata naming tables in mixed case (created
// unquoted, so folded), schema-qualified, or quoted, gets its comments; a
// description whose table or column is missing is left out with a warning
// and the rest still loads.
func TestLoadResolvesNames(t *testing.T) {
	c := pgtest.New(t, pgcluster.Options{})
	ctx := context.Background()
	dir := t.TempDir()
	db := "mixed"
	if err := os.MkdirAll(filepath.Join(dir, "databases", db), 0o755); err != nil {
		t.Fatal(err)
	}
	ddl := `CREATE TABLE sbCustomer (sbCustId text, name text);
CREATE SCHEMA consumer_div; CREATE TABLE consumer_div.coupons (id int);
CREATE TABLE "QuotedT" ("MixedCol" int);`
	meta := `{"table_metadata": {
  "sbCustomer": [{"column_name": "sbCustId", "data_type": "text", "column_description": "the customer"},
                 {"column_name": "gone", "data_type": "text", "column_description": "dropped long ago"}],
  "consumer_div.coupons": [{"column_name": "id", "data_type": "int", "column_description": "the coupon"}],
  "QuotedT": [{"column_name": "MixedCol", "data_type": "int", "column_description": "quoted"}],
  "nosuch": [{"column_name": "a", "data_type": "int", "column_description": "b"}]}}`
	for name, body := range map[string]string{db + ".sql": ddl, db + ".json": meta} {
		if err := os.WriteFile(filepath.Join(dir, "databases", db, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ds := &Dataset{Name: FormatSQLEval, Dir: dir}
	connect := func(ctx context.Context, db string) (*pgx.Conn, error) { return c.Connect(ctx, db) }
	l, err := Load(ctx, connect, ds, db, LoadOptions{Prefix: pgtest.UniqueName(t, "ld") + "_"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Comments != 3 || len(l.Warnings) != 2 {
		t.Fatalf("Comments = %d, Warnings = %q; want 3 and 2", l.Comments, l.Warnings)
	}
	if !strings.Contains(strings.Join(l.Warnings, "\n"), "sbCustomer.gone") || !strings.Contains(strings.Join(l.Warnings, "\n"), "nosuch") {
		t.Errorf("warnings %q should name sbCustomer.gone and nosuch", l.Warnings)
	}
	conn, err := c.Connect(ctx, l.Target)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var got string
	if err := conn.QueryRow(ctx, `SELECT string_agg(col_description(attrelid, attnum), ',' ORDER BY attrelid::regclass::text)
		FROM pg_attribute WHERE col_description(attrelid, attnum) IS NOT NULL`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "quoted,the coupon,the customer" {
		t.Errorf("comments = %q", got)
	}
}
