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
	"time"

	"github.com/nlproxy/nlproxy/bench/internal/sqleval"
	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/eval/dataset"
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
	comments := flag.Bool("comments", true, "with -hard: keep the renamed schemas' column comments (false: their names alone)")
	hard := flag.Bool("hard", false, "the harder benchmark: every schema on the search_path beside distractor schemas (renamed, prefixed and camelCase copies, the sample and wide databases)")
	flag.Parse()
	bs, err := sqleval.Budgets(*budgets)
	if err != nil {
		fmt.Fprintln(os.Stderr, "recall:", err)
		os.Exit(2)
	}
	only := sqleval.Only(*dbs)
	if *embedModel != "" && !*hard {
		if err := runEmbed(context.Background(), *dir, only, bs, *ollama, *api, *embedModel, *jsonOut); err != nil {
			fmt.Fprintln(os.Stderr, "recall:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(context.Background(), *dir, only, bs, *hard, *comments, *verbose, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "recall:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dir string, only []string, budgets []int, hard, comments, verbose bool, jsonOut string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	ds, c, err := sqleval.Open(ctx, dir)
	if err != nil {
		return err
	}
	defer c.Stop()
	var snap *catalog.Snapshot
	var qs []dataset.Question
	var path []string
	names := sameName
	if hard {
		snap, qs, path, err = setupHard(ctx, c, "sqleval_warehouse", ds, only, comments)
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
		return run(ctx, dir, only, budgets, false, true, false, jsonOut)
	}
	ds, c, err := sqleval.Open(ctx, dir)
	if err != nil {
		return err
	}
	defer c.Stop()
	start := time.Now()
	snaps, qs, err := sqleval.MergedWith(ctx, c, "sqleval_merged", ds, only, descindex.Options{}, descindex.Options{Embedder: m})
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
