// Command recall measures schema selection on real databases nobody here
// wrote: the sql-eval databases (datasets/sql-eval) loaded into ONE throwaway
// database, one schema each, with their column descriptions as COMMENT ON and
// their glossaries in the description index. For every question it runs the
// engine's model-free front (lexical keywords — what the keyword stage falls
// back to when the model's call fails —, value and description retrieval,
// deterministic schema selection) at each token budget and reports:
//
//   - gold-table recall: the share of questions whose gold tables (of at
//     least one accepted gold alternative) are all shown in detail;
//   - stored-value retrieval: the share of the gold SQL's string literals
//     compared with text columns that value retrieval found (same column,
//     same value after normalization; LIKE patterns: contained).
//
// No model, no question-specific tuning: the questions only score.
//
//	go run ./bench/recall                       # all seven databases
//	go run ./bench/recall -v                    # also list the misses
//	go run ./bench/recall -dbs geography,yelp -budgets 4000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/integration/pgtest"
)

func main() {
	dir := flag.String("dir", filepath.Join("datasets", "sql-eval"), "sql-eval directory (databases/, questions.csv)")
	dbs := flag.String("dbs", "", "comma-separated databases (default: every one questions.csv names)")
	budgets := flag.String("budgets", "1000,2000,4000", "schema token budgets")
	verbose := flag.Bool("v", false, "list the questions whose gold tables were missed at the largest budget, and missed literals")
	jsonOut := flag.String("json", "", "also write the report as JSON to this file")
	ollama := flag.String("ollama", envOr("NLPROXY_REAL_OLLAMA", "http://127.0.0.1:11434"), "model server for -embed-model (env NLPROXY_REAL_OLLAMA)")
	api := flag.String("llm-api", "ollama", "API of the -ollama server: ollama or openai")
	embedModel := flag.String("embed-model", os.Getenv("NLPROXY_REAL_EMBED_MODEL"), "embedding model: also measure every retrieval with it, beside the lexical path (env NLPROXY_REAL_EMBED_MODEL)")
	hard := flag.Bool("hard", false, "the harder benchmark: every schema on the search_path beside distractor schemas (renamed, prefixed and camelCase copies, the sample and wide databases)")
	flag.Parse()
	var bs []int
	for _, f := range strings.Split(*budgets, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || b <= 0 {
			fmt.Fprintln(os.Stderr, "recall: bad -budgets:", *budgets)
			os.Exit(2)
		}
		bs = append(bs, b)
	}
	var only []string
	if *dbs != "" {
		only = strings.Split(*dbs, ",")
	}
	if *embedModel != "" && !*hard {
		if err := runEmbed(context.Background(), *dir, only, bs, *ollama, *api, *embedModel, *jsonOut); err != nil {
			fmt.Fprintln(os.Stderr, "recall:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(context.Background(), *dir, only, bs, *hard, *verbose, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "recall:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dir string, only []string, budgets []int, hard, verbose bool, jsonOut string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	ds, err := dataset.OpenSQLEval(dir)
	if err != nil {
		return err
	}
	c, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		return err
	}
	defer c.Stop()
	var snap *catalog.Snapshot
	var qs []dataset.Question
	var path []string
	names := func(_, t string) string { return t }
	if hard {
		snap, qs, path, err = setupHard(ctx, c, "sqleval_warehouse", ds, only)
		names = goldName
	} else {
		snap, qs, err = setup(ctx, c, "sqleval_merged", ds, only)
	}
	if err != nil {
		return err
	}
	rep, err := evaluate(ctx, snap, qs, budgets, path, names)
	if err != nil {
		return err
	}
	rep.print(os.Stdout, verbose)
	if jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(jsonOut, b, 0o644)
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// runEmbed measures every retrieval twice, lexically and with the
// embedding model; without a reachable server it says so and measures
// the lexical path alone.
func runEmbed(ctx context.Context, dir string, only []string, budgets []int, host, api, model, jsonOut string) error {
	ctx, cancel := context.WithTimeout(ctx, 40*time.Minute)
	defer cancel()
	m, err := realEmbedder(ctx, host, api, model)
	if err != nil {
		fmt.Printf("embedding comparison skipped: no embedding model %q at %s (%v); lexical figures only\n\n", model, host, err)
		return run(ctx, dir, only, budgets, false, false, jsonOut)
	}
	ds, err := dataset.OpenSQLEval(dir)
	if err != nil {
		return err
	}
	c, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		return err
	}
	defer c.Stop()
	start := time.Now()
	snaps, qs, err := setupWith(ctx, c, "sqleval_merged", ds, only, descindex.Options{}, descindex.Options{Embedder: m})
	if err != nil {
		return err
	}
	fmt.Printf("loaded %d questions; description index embedded in %s\n", len(qs), time.Since(start).Round(time.Second))
	er, err := compareEmbeddings(ctx, snaps[0], snaps[1], qs, budgets, m, model)
	if err != nil {
		return err
	}
	er.Lexical.print(os.Stdout, false)
	er.print(os.Stdout)
	if jsonOut != "" {
		b, err := json.MarshalIndent(er, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(jsonOut, b, 0o644)
	}
	return nil
}

// setup loads the databases the answerable questions use (restricted to
// only, when given) into one database of cluster c, one schema each, and
// builds its catalog snapshot with their glossaries. It returns the
// answerable questions of the loaded databases.
func setup(ctx context.Context, c *pgtest.Cluster, name string, ds *dataset.Dataset, only []string) (*catalog.Snapshot, []dataset.Question, error) {
	snaps, qs, err := setupWith(ctx, c, name, ds, only, descindex.Options{})
	if err != nil {
		return nil, nil, err
	}
	return snaps[0], qs, nil
}

// setupWith is setup building one snapshot per description-index option
// set (with and without an embedder), of the same loaded database.
func setupWith(ctx context.Context, c *pgtest.Cluster, name string, ds *dataset.Dataset, only []string, descs ...descindex.Options) ([]*catalog.Snapshot, []dataset.Question, error) {
	var qs []dataset.Question
	for _, q := range ds.Questions {
		if !q.Unanswerable {
			qs = append(qs, q)
		}
	}
	var dbs []string
	seen := map[string]bool{}
	for _, q := range qs {
		if !seen[q.DB] && (len(only) == 0 || contains(only, q.DB)) {
			seen[q.DB] = true
			dbs = append(dbs, q.DB)
		}
	}
	if len(dbs) == 0 {
		return nil, nil, fmt.Errorf("no questions for databases %v", only)
	}
	if err := c.CreateDatabase(ctx, name); err != nil {
		return nil, nil, err
	}
	conn, err := c.Connect(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close(ctx)
	opts := catalog.BuildOptions{}
	for _, db := range dbs {
		l, err := dataset.LoadSchema(ctx, conn, ds, db, db)
		if err != nil {
			return nil, nil, err
		}
		for _, g := range dataset.GlossaryEntries(l.Glossary) {
			opts.Glossary = append(opts.Glossary, descindex.Doc{Kind: descindex.KindGlossary, Schema: db, Term: g.Term, Text: g.Definition})
		}
		opts.Introspect.Schemas = append(opts.Introspect.Schemas, db)
	}
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		return nil, nil, err
	}
	var snaps []*catalog.Snapshot
	for _, d := range descs {
		opts.Descriptions = d
		snap, err := catalog.Build(ctx, conn, name, opts)
		if err != nil {
			return nil, nil, err
		}
		if err := snap.Descriptions.Embed(ctx); err != nil {
			return nil, nil, err
		}
		snaps = append(snaps, snap)
	}
	var out []dataset.Question
	for _, q := range qs {
		if seen[q.DB] {
			out = append(out, q)
		}
	}
	return snaps, out, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if strings.TrimSpace(y) == x {
			return true
		}
	}
	return false
}
