package valueindex

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// testCluster is started once for the package; nil when Postgres is absent.
var testCluster *pgcluster.Cluster

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	c, err := pgtest.Start(ctx, pgcluster.Options{})
	cancel()
	switch {
	case errors.Is(err, pgtest.ErrNoPostgres):
		fmt.Fprintln(os.Stderr, "valueindex: no postgres, DB tests skip:", err)
	case err != nil:
		fmt.Fprintln(os.Stderr, "valueindex: start postgres:", err)
		os.Exit(1)
	default:
		testCluster = c
	}
	code := m.Run()
	if testCluster != nil {
		if err := testCluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop postgres:", err)
		}
	}
	os.Exit(code)
}

const buildSchema = `
CREATE TYPE mood AS ENUM ('happy', 'sad', 'so-so');
CREATE SCHEMA "Sales Dept";
CREATE TABLE "Sales Dept"."Weird ""Table""" (
	"City Name" text, code varchar(10), price numeric, customer_id text, "contactInfo" text,
	password text, notes text, m mood, cat char(5), "ownerId" text, secret_sauce text, remark text
);
COMMENT ON COLUMN "Sales Dept"."Weird ""Table""".remark IS 'PII: free text about the person';
INSERT INTO "Sales Dept"."Weird ""Table"""
SELECT (ARRAY['Boston','Chicago','Denver','Austin','Miami'])[1 + (i % 15) / 3 + CASE WHEN i % 15 < 6 THEN 0 ELSE 0 END],
       'C' || (i % 7), i, 'cust-' || i, 'user' || i || '@example.com',
       'hunter' || i, CASE WHEN i % 2 = 0 THEN repeat('long text ', 20) ELSE 'short note ' || (i % 3) END,
       'happy', 'ab', 'o' || i, 'ketchup', 'likes cats'
FROM generate_series(1, 300) i;
-- Make the frequencies distinct: Boston > Chicago > Denver > Austin > Miami.
INSERT INTO "Sales Dept"."Weird ""Table""" ("City Name")
SELECT c FROM (VALUES ('Boston', 50), ('Chicago', 40), ('Denver', 30), ('Austin', 20)) v(c, n), generate_series(1, n);
CREATE TABLE big (label text);
INSERT INTO big SELECT 'label ' || i FROM generate_series(1, 20000) i;
CREATE VIEW bigview AS SELECT label FROM big;
CREATE TABLE locked (label text);
INSERT INTO locked VALUES ('never read');
CREATE TABLE tiny (label text);
INSERT INTO tiny VALUES ('alpha'), ('beta'), ('gamma');
CREATE TABLE audit (x int);
CREATE FUNCTION touch() RETURNS text LANGUAGE plpgsql AS $$ BEGIN INSERT INTO audit VALUES (1); RETURN 'x'; END $$;
CREATE VIEW writer AS SELECT touch() AS w;
ANALYZE;
`

func buildFixture(t *testing.T) (*pgx.Conn, []Column) {
	t.Helper()
	if testCluster == nil {
		t.Skip("no postgres")
	}
	conn := fixtureDB(t)
	const sch, tbl = "Sales Dept", `Weird "Table"`
	col := func(name, typ string) Column {
		return Column{Schema: sch, Table: tbl, Name: name, Type: typ, RowEstimate: 440}
	}
	remark := col("remark", "text")
	remark.Comment = "PII: free text about the person"
	return conn, []Column{
		col("City Name", "text"),
		col("code", "character varying(10)"),
		col("price", "numeric"),
		col("customer_id", "text"),
		col("contactInfo", "text"),
		col("password", "text"),
		col("notes", "text"),
		{Schema: sch, Table: tbl, Name: "m", Type: "mood", IsEnum: true, EnumLabels: []string{"happy", "sad", "so-so"}},
		col("cat", "character(5)"),
		col("ownerId", "text"),
		col("secret_sauce", "text"),
		remark,
	}
}

// fixtureDB creates a database with buildSchema, named uniquely so -count=N
// and reruns against the package's one cluster never collide, and drops it
// when the test ends.
func fixtureDB(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	db := pgtest.UniqueName(t, t.Name())
	if err := testCluster.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := testCluster.Exec(context.Background(), "postgres", "DROP DATABASE "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("drop %s: %v", db, err)
		}
	})
	if err := testCluster.Exec(ctx, db, buildSchema); err != nil {
		t.Fatal(err)
	}
	conn, err := testCluster.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func statsByColumn(ix *Index) map[string]ColumnStat {
	m := make(map[string]ColumnStat)
	for _, s := range ix.Stats() {
		m[s.Table+"."+s.Column] = s
	}
	return m
}

func TestBuildSkipRulesAndCaps(t *testing.T) {
	conn, cols := buildFixture(t)
	ctx := context.Background()
	ix, err := Build(ctx, conn, cols, Options{MaxValuesPerColumn: 3})
	if err != nil {
		t.Fatal(err)
	}
	st := statsByColumn(ix)
	const tbl = `Weird "Table".`
	wantSkip := map[string]string{
		"price": SkipType, "customer_id": SkipNameLike, "ownerId": SkipNameLike, "contactInfo": SkipContent,
		"password": SkipSensitive, "secret_sauce": SkipSensitive, "remark": SkipSensitive,
	}
	for c, reason := range wantSkip {
		if got := st[tbl+c].Skipped; got != reason {
			t.Errorf("%s: skipped=%q, want %q", c, got, reason)
		}
	}
	for _, c := range []string{"City Name", "code", "notes", "m", "cat"} {
		if s := st[tbl+c]; s.Skipped != "" || s.Values == 0 {
			t.Errorf("%s: want indexed, got %+v", c, s)
		}
	}
	// Cap keeps the most frequent values.
	city := st[tbl+"City Name"]
	if city.Values != 3 || !city.Truncated {
		t.Errorf("city stat %+v, want 3 values truncated", city)
	}
	ci := -1
	for i, c := range ix.Columns() {
		if c.Column == "City Name" {
			ci = i
		}
	}
	got := []string{ix.Value(ci, 0), ix.Value(ci, 1), ix.Value(ci, 2)}
	if strings.Join(got, ",") != "Boston,Chicago,Denver" {
		t.Errorf("city values %v, want the three most frequent", got)
	}
	// Long values are not indexed; short ones are.
	ms := ix.Lookup(ctx, []string{"short note 1", "long text long text"}, LookupOptions{})
	var notes []string
	for _, m := range ms {
		if m.Column == "notes" {
			notes = append(notes, m.Value)
			if len(m.Value) > 100 {
				t.Errorf("long value indexed: %q", m.Value)
			}
		}
	}
	if len(notes) == 0 || notes[0] != "short note 1" {
		t.Errorf("notes matches %v", notes)
	}
	// Enum labels come from the catalog, bpchar is read as text.
	if ms := ix.Closest(ctx, "Sales Dept."+`Weird "Table"`, "m", "so so", 1); len(ms) != 1 || ms[0].Value != "so-so" {
		t.Errorf("enum lookup %+v", ms)
	}
	if ms := ix.Closest(ctx, `Weird "Table"`, "cat", "AB", 1); len(ms) != 1 || ms[0].Value != "ab" {
		t.Errorf("char lookup %+v", ms)
	}
	// Sensitive values never enter the index.
	for _, m := range ix.Lookup(ctx, []string{"hunter12", "ketchup", "likes cats", "user5@example.com"}, LookupOptions{MinScore: 0.01}) {
		if m.Column == "password" || m.Column == "secret_sauce" || m.Column == "remark" || m.Column == "contactInfo" {
			t.Errorf("skipped column leaked: %+v", m)
		}
	}
}

// TestBuildTimeout: a column whose read cannot finish (its table is locked
// by the test until Build returns) is skipped for the statement timeout, and
// the transaction stays usable for the columns after it.
func TestBuildTimeout(t *testing.T) {
	conn, _ := buildFixture(t)
	ctx := context.Background()
	holder, err := testCluster.Connect(ctx, conn.Config().Database)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	lock, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, "LOCK TABLE locked IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	cols := []Column{
		{Schema: "public", Table: "locked", Name: "label", Type: "text", RowEstimate: 1},
		{Schema: "public", Table: "tiny", Name: "label", Type: "text", RowEstimate: 3},
	}
	// The timeout bounds only the blocked read; the tiny read after it has a
	// full second for three rows.
	const timeout = time.Second
	start := time.Now()
	ix, err := Build(ctx, conn, cols, Options{StatementTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < timeout {
		t.Errorf("Build returned after %v, before the %v statement timeout could fire", d, timeout)
	}
	st := statsByColumn(ix)
	if s := st["locked.label"]; s.Skipped != SkipTimeout || s.Values != 0 {
		t.Errorf("locked: %+v, want skipped for the statement timeout", s)
	}
	if s := st["tiny.label"]; s.Skipped != "" || s.Values != 3 {
		t.Errorf("tiny: %+v, want its 3 values after the timed-out column", s)
	}
	if ms := ix.Closest(ctx, "tiny", "label", "beta", 1); len(ms) != 1 || ms[0].Value != "beta" {
		t.Errorf("tiny lookup %+v", ms)
	}
}

// TestBuildSample: a table above SampleThreshold is read with TABLESAMPLE; a
// view is not read at all (its definition could call a user's function).
func TestBuildSample(t *testing.T) {
	conn, _ := buildFixture(t)
	ctx := context.Background()
	cols := []Column{
		{Schema: "public", Table: "big", Name: "label", Type: "text", RowEstimate: 20000},
		{Schema: "public", Table: "bigview", Name: "label", Type: "text", RowEstimate: 20000},
	}
	ix, err := Build(ctx, conn, cols, Options{MaxValuesPerColumn: 100000, SampleThreshold: 1000, SampleRows: 2000})
	if err != nil {
		t.Fatal(err)
	}
	st := statsByColumn(ix)
	big := st["big.label"]
	if !big.Sampled || big.Values == 0 || big.Values >= 20000 || big.Skipped != "" {
		t.Errorf("big: %+v, want a sample of the 20000 values", big)
	}
	if s := st["bigview.label"]; !strings.HasPrefix(s.Skipped, SkipUserCode) || s.Values != 0 {
		t.Errorf("bigview: %+v, want skipped as a view", s)
	}
}

func TestBuildReadOnly(t *testing.T) {
	conn, _ := buildFixture(t)
	ctx := context.Background()
	cols := []Column{{Schema: "public", Table: "writer", Name: "w", Type: "text"}}
	ix, err := Build(ctx, conn, cols, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s := ix.Stats()[0]; !strings.HasPrefix(s.Skipped, SkipUserCode) {
		t.Errorf("writer view: %+v, want skipped before it is read", s)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM audit").Scan(&n); err != nil || n != 0 {
		t.Fatalf("audit rows = %d (%v), want 0", n, err)
	}
}

type queryOnly struct{ c *pgx.Conn }

func (q queryOnly) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return q.c.Query(ctx, sql, args...)
}

func TestBuildQueriers(t *testing.T) {
	conn, cols := buildFixture(t)
	ctx := context.Background()
	if _, err := Build(ctx, queryOnly{conn}, cols, Options{}); !errors.Is(err, ErrNoTransaction) {
		t.Fatalf("query-only querier: err = %v, want ErrNoTransaction", err)
	}
	// Inside the caller's transaction (savepoints), the caller's tx survives.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ix, err := Build(ctx, tx, cols, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if statsByColumn(ix)[`Weird "Table".City Name`].Values != 5 {
		t.Fatalf("stats %+v", ix.Stats())
	}
	var one int
	if err := tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("caller tx unusable after Build: %v", err)
	}
	// A cancelled context aborts the build.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Build(cctx, conn, cols, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled build: err = %v", err)
	}
}
