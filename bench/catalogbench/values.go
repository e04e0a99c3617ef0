package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex/valuerecall"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
)

// valueBenchDB holds the synthetic value-index workload.
const valueBenchDB = "valuebench"

// valueBenchSchema creates ≥ 1.2 million distinct text values: 1,040,000
// people names (100 first names × 400 generated surnames × 26 middle
// initials, all distinct), 150,000 company names, plus small messy columns
// (cities with punctuation and accents, state codes, products, departments)
// and columns the index must skip (emails, ids, secrets).
const valueBenchSchema = `
CREATE TABLE people (person_id bigint PRIMARY KEY, full_name text NOT NULL, email text, password_hash text);
INSERT INTO people
SELECT i,
  (ARRAY['James','Mary','Robert','Patricia','John','Jennifer','Michael','Linda','David','Elizabeth','William',
   'Barbara','Richard','Susan','Joseph','Jessica','Thomas','Sarah','Charles','Karen','Christopher','Lisa','Daniel',
   'Nancy','Matthew','Betty','Anthony','Margaret','Mark','Sandra','Donald','Ashley','Steven','Kimberly','Paul',
   'Emily','Andrew','Donna','Joshua','Michelle','Kenneth','Carol','Kevin','Amanda','Brian','Dorothy','George',
   'Melissa','Timothy','Deborah','Ronald','Stephanie','Edward','Rebecca','Jason','Sharon','Jeffrey','Laura','Ryan',
   'Cynthia','Jacob','Kathleen','Gary','Amy','Nicholas','Angela','Eric','Shirley','Jonathan','Anna','Stephen',
   'Brenda','Larry','Pamela','Justin','Emma','Scott','Nicole','Brandon','Helen','Benjamin','Samantha','Samuel',
   'Katherine','Gregory','Christine','Alexander','Debra','Frank','Rachel','Patrick','Carolyn','Raymond','Janet',
   'José','Zoë','Siobhán','Björn','François','Chloé'])[1 + i % 100]
  || ' ' || chr(65 + (i / 40000) % 26) || '. ' ||
  (ARRAY['Ander','Bal','Cal','Dun','Ell','Fair','Gold','Har','Ing','John','Kings','Lang','Mac','North','Old',
   'Pem','Quin','Ross','Stan','Thorn'])[1 + (i / 100) % 20] ||
  (ARRAY['son','ton','ford','well','worth','field','man','ley','wood','berg','stein','ard','ington','by','ridge',
   'er','sen','ez','ski','o''brien'])[1 + (i / 2000) % 20],
  'p' || i || '@mail.example', md5(i::text)
FROM generate_series(0, 1039999) i;
CREATE TABLE companies (company_id int PRIMARY KEY, name text, website text, industry text);
INSERT INTO companies
SELECT i,
  (ARRAY['Blue','Red','Green','Silver','Golden','Northern','Southern','Eastern','Western','Pacific','Atlantic',
   'Global','United','Advanced','Premier','First','Royal','Summit','Pioneer','Liberty','Apex','Crescent','Evergreen',
   'Granite','Harbor'])[1 + i % 25] || ' ' ||
  (ARRAY['River','Mountain','Valley','Ocean','Forest','Bridge','Star','Stone','Lake','Field','Rock','Bay','Creek',
   'Hill','Point','Ridge','Canyon','Meadow','Island','Peak'])[1 + (i / 25) % 20] || ' ' ||
  (ARRAY['Logistics','Holdings','Partners','Systems','Foods','Media','Energy','Capital','Health','Labs','Motors',
   'Textiles','Analytics','Foundry','Outfitters'])[1 + (i / 500) % 15] ||
  (ARRAY['',' Inc.',' LLC',' & Co.',' Ltd.',' Group',' Corp.',' GmbH',' S.A.',' Co-op'])[1 + (i / 7500) % 10] ||
  CASE WHEN i >= 75000 THEN ' #' || (i / 75000) ELSE '' END,
  'https://c' || i || '.example.com',
  (ARRAY['Retail','Manufacturing','Health Care','Financial Services','Information Technology'])[1 + i % 5]
FROM generate_series(0, 149999) i;
CREATE TABLE cities (city text, state_code char(2), country text);
INSERT INTO cities VALUES
 ('Los Angeles','CA','United States'),('New York City','NY','United States'),('San Francisco','CA','United States'),
 ('St. Louis','MO','United States'),('Las Vegas','NV','United States'),('Salt Lake City','UT','United States'),
 ('Kansas City','MO','United States'),('Winston-Salem','NC','United States'),('Coeur d''Alene','ID','United States'),
 ('São Paulo','SP','Brazil'),('Zürich','ZH','Switzerland'),('Montréal','QC','Canada'),('Köln','NW','Germany'),
 ('Malmö','M','Sweden'),('Washington, D.C.','DC','United States'),('Fort Worth','TX','United States'),
 ('El Paso','TX','United States'),('Colorado Springs','CO','United States'),('Virginia Beach','VA','United States');
CREATE TABLE stores (store_code text, region text, manager_email text);
INSERT INTO stores VALUES ('LA','West','a@x.example'),('NYC','East','b@x.example'),('SF','West','c@x.example'),
 ('STL','Midwest','d@x.example'),('SLC','Mountain','e@x.example'),('KC','Midwest','f@x.example');
CREATE TABLE products (sku text, product_name text, category text);
INSERT INTO products
SELECT 'SKU-' || lpad(i::text, 6, '0'),
  (ARRAY['Coca-Cola','Dr. Pepper','M&M''s','Ben & Jerry''s','7-Up','Häagen-Dazs','Kellogg''s','Hershey''s',
   'Campbell''s','Pop-Tarts','Post-it','Wi-Fi','USB-C','T-Shirt','Jell-O','Kit Kat','Red Bull','Band-Aid',
   'Q-tips','Ziploc'])[1 + i % 20] || ' ' ||
  (ARRAY['Classic','Diet','Extra-Strength','Mini','Family Size','Sugar-Free','Original','Deluxe','Lite','Max'])[1 + (i / 20) % 10]
  || ' ' || (ARRAY['0.5L','12 oz','(XL)','3x3','2m','100 ct','Gallon','Pack of 6','Vanilla','Cherry'])[1 + (i / 200) % 10]
  || CASE WHEN i >= 2000 THEN ' v' || (i / 2000) ELSE '' END,
  (ARRAY['Beverages','Snacks','Household','Electronics','Apparel','Health'])[1 + i % 6]
FROM generate_series(0, 5999) i;
CREATE TABLE departments (dept_name text);
INSERT INTO departments VALUES ('Human Resources'),('Research and Development'),('Information Technology'),
 ('Customer Service'),('Quality Assurance'),('Public Relations'),('Accounts Payable'),('Supply Chain Management');
ANALYZE;
`

// ensureValueBenchDB creates and loads the workload database once.
func ensureValueBenchDB(ctx context.Context, c *pgcluster.Cluster) error {
	conn, err := c.Connect(ctx, "postgres")
	if err != nil {
		return err
	}
	var exists bool
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", valueBenchDB).Scan(&exists)
	conn.Close(ctx)
	if err != nil || exists {
		return err
	}
	if err := c.CreateDatabase(ctx, valueBenchDB); err != nil {
		return err
	}
	return c.Exec(ctx, valueBenchDB, valueBenchSchema)
}

// introspectColumns lists every user column the way the catalog would hand
// them to valueindex.Build.
func introspectColumns(ctx context.Context, conn *pgx.Conn) ([]valueindex.Column, error) {
	rows, err := conn.Query(ctx, `
SELECT n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod), t.typtype = 'e',
       COALESCE((SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = a.atttypid), '{}'),
       GREATEST(c.reltuples, 0)::bigint, COALESCE(col_description(c.oid, a.attnum), '')
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_type t ON t.oid = a.atttypid
WHERE c.relkind IN ('r', 'v', 'm', 'p') AND a.attnum > 0 AND NOT a.attisdropped
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
ORDER BY 1, 2, a.attnum`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (valueindex.Column, error) {
		var col valueindex.Column
		err := r.Scan(&col.Schema, &col.Table, &col.Name, &col.Type, &col.IsEnum, &col.EnumLabels, &col.RowEstimate, &col.Comment)
		return col, err
	})
}

// valueBenchOptions lift the per-column cap so the 1M-name column is indexed
// whole (the default cap is 10,000 distinct values per column).
func valueBenchOptions() valueindex.Options {
	return valueindex.Options{MaxValuesPerColumn: 2_000_000, SampleThreshold: 10_000_000}
}

func buildValueBenchIndex(ctx context.Context, c *pgcluster.Cluster, opts valueindex.Options) (*valueindex.Index, time.Duration, error) {
	if err := ensureValueBenchDB(ctx, c); err != nil {
		return nil, 0, fmt.Errorf("value bench db: %w", err)
	}
	conn, err := c.Connect(ctx, valueBenchDB)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close(ctx)
	cols, err := introspectColumns(ctx, conn)
	if err != nil {
		return nil, 0, fmt.Errorf("introspect: %w", err)
	}
	start := time.Now()
	ix, err := valueindex.Build(ctx, conn, cols, opts)
	return ix, time.Since(start), err
}

// vmHWM reads the process's peak resident set size from /proc.
func vmHWM() string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "n/a"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "n/a"
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// runValueBench measures building the value index over ≥ 1M distinct values
// (time, Go heap, peak RSS), lookup latency for 5-keyword questions, and
// persistence size and load time.
func runValueBench(ctx context.Context, c *pgcluster.Cluster) error {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	ix, dur, err := buildValueBenchIndex(ctx, c, valueBenchOptions())
	if err != nil {
		return fmt.Errorf("value index build: %w", err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	fmt.Printf("value index build: %d distinct values in %d columns, %.2fs (GOMAXPROCS=%d)\n",
		ix.Len(), len(ix.Columns()), dur.Seconds(), runtime.GOMAXPROCS(0))
	fmt.Printf("  index arrays %.1f MiB; Go heap in use %.1f MiB, HeapSys %.1f MiB, Sys %.1f MiB, alloc during build %.1f MiB; VmHWM %s\n",
		float64(ix.MemoryBytes())/(1<<20), mib(after.HeapInuse), mib(after.HeapSys), mib(after.Sys),
		mib(after.TotalAlloc-before.TotalAlloc), vmHWM())
	for _, s := range ix.Stats() {
		tag := fmt.Sprintf("%d values", s.Values)
		if s.Skipped != "" {
			tag = "skipped: " + s.Skipped
		}
		fmt.Printf("  %s.%s.%s: %s\n", s.Schema, s.Table, s.Column, tag)
	}

	// Lookup latency: 5-keyword questions drawn from the recall generator
	// (a realistic mix of exact, typo'd, partial and abbreviated keywords).
	cases := valuerecall.Generate(ix, 11, 400)
	rng := rand.New(rand.NewPCG(3, 4))
	const questions = 2000
	lat := make([]time.Duration, 0, questions)
	for range 200 { // warm up
		ix.Lookup(ctx, []string{cases[rng.IntN(len(cases))].Keyword}, valueindex.LookupOptions{})
	}
	for range questions {
		kws := make([]string, 5)
		for i := range kws {
			kws[i] = cases[rng.IntN(len(cases))].Keyword
		}
		t0 := time.Now()
		ix.Lookup(ctx, kws, valueindex.LookupOptions{})
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	fmt.Printf("value lookup, 5 keywords/question, %d questions: p50 %v  p90 %v  p99 %v  max %v\n",
		questions, pct(0.50), pct(0.90), pct(0.99), lat[len(lat)-1])

	// Closest (literal correction) on the 1M-value column.
	lat = lat[:0]
	for i := range 1000 {
		cs := cases[i%len(cases)]
		t0 := time.Now()
		ix.Closest(ctx, cs.Schema+"."+cs.Table, cs.Column, cs.Keyword, 3)
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	fmt.Printf("value closest (literal correction), 1000 calls: p50 %v  p99 %v\n", pct(0.50), pct(0.99))

	var buf bytes.Buffer
	t0 := time.Now()
	n, err := ix.WriteTo(&buf)
	if err != nil {
		return err
	}
	wdur := time.Since(t0)
	want := ix.Len()
	ix = nil // measure the reload alone, not two indexes side by side
	runtime.GC()
	t0 = time.Now()
	ix2, err := valueindex.Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		return err
	}
	rdur := time.Since(t0)
	if ix2.Len() != want {
		return errors.New("value index: persisted index lost values")
	}
	fmt.Printf("value index persistence: %.1f MiB written in %v, read+rebuild in %v; VmHWM now %s\n",
		float64(n)/(1<<20), wdur.Round(time.Millisecond), rdur.Round(time.Millisecond), vmHWM())
	return nil
}
