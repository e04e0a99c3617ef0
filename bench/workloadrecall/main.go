// Command workloadrecall measures what a learned workload adds to schema
// linking on databases nobody here wrote: the sql-eval databases
// (datasets/sql-eval, none of which declares a foreign key) loaded into one
// throwaway database, one schema each, as bench/recall loads them.
//
// Leave-one-out: for each question, the workload is the gold SQL of every
// other question of its database, analysed with workload.Analyze as the
// proxy analyses what it relays (fingerprints counted, joins and filtered or
// grouped columns counted per statement). The engine's model-free front
// (lexical keywords, value and description retrieval, deterministic schema
// selection) runs for the question at each token budget without and with
// that workload, in the same run, and the report gives, for each:
//
//   - gold-table recall: the share of questions whose gold tables (of at
//     least one accepted gold alternative) are all shown in detail;
//   - gold join path: of the questions whose gold SQL joins, the share whose
//     every join predicate (a.x = b.y, aliases resolved) is among the join
//     paths the prompt lists under the schema.
//
// No model; the questions only score.
//
//	go run ./bench/workloadrecall
//	go run ./bench/workloadrecall -dbs academic,atis -budgets 2000 -v
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nlproxy/nlproxy/bench/internal/sqleval"
)

func main() {
	dir := flag.String("dir", filepath.Join("datasets", "sql-eval"), "sql-eval directory (databases/, questions.csv)")
	dbs := flag.String("dbs", "", "comma-separated databases (default: every one questions.csv names)")
	budgets := flag.String("budgets", "1000,2000,4000", "schema token budgets")
	verbose := flag.Bool("v", false, "list the questions whose gold join path is offered with the workload only, or with neither, at the largest budget")
	jsonOut := flag.String("json", "", "also write the report as JSON to this file")
	flag.Parse()
	bs, err := sqleval.Budgets(*budgets)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workloadrecall:", err)
		os.Exit(2)
	}
	only := sqleval.Only(*dbs)
	if err := run(context.Background(), *dir, only, bs, *verbose, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "workloadrecall:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dir string, only []string, budgets []int, verbose bool, jsonOut string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	ds, c, err := sqleval.Open(ctx, dir)
	if err != nil {
		return err
	}
	defer c.Stop()
	snap, qs, err := sqleval.Merged(ctx, c, "sqleval_workload", ds, only)
	if err != nil {
		return err
	}
	rep, err := evaluate(ctx, snap, qs, budgets)
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
