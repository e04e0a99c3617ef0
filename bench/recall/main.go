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

	"github.com/nlproxy/nlproxy/bench/internal/sqleval"
	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/integration/pgtest"
)

func main() {
	dir := flag.String("dir", filepath.Join("datasets", "sql-eval"), "sql-eval directory (databases/, questions.csv)")
	dbs := flag.String("dbs", "", "comma-separated databases (default: every one questions.csv names)")
	budgets := flag.String("budgets", "1000,2000,4000", "schema token budgets")
	verbose := flag.Bool("v", false, "list the questions whose gold tables were missed at the largest budget, and missed literals")
	jsonOut := flag.String("json", "", "also write the report as JSON to this file")
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
		snap, qs, err = sqleval.Merged(ctx, c, "sqleval_merged", ds, only)
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
