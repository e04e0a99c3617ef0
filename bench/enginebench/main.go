// Command enginebench measures the engine's own overhead per question: the
// `fast` pipeline (catalog, privileges, keywords, retrieval, schema
// selection, generation, guard, literal correction, fixer) driven through
// engine.Engine.Translate with a fake Ollama that answers instantly, on a
// real Postgres session, with the translation cache off. The time the
// trial SQL spends in Postgres is measured separately and subtracted.
//
// It runs on the sample database and on a wide synthetic schema and prints
// latency percentiles, LLM calls and prompt sizes per ask.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nlproxy/nlproxy/internal/pgcluster"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

func main() {
	n := flag.Int("n", 300, "asks per schema (after warm-up)")
	tables := flag.Int("tables", 200, "tables of the wide schema")
	cols := flag.Int("cols", 20, "columns per table of the wide schema")
	jsonOut := flag.String("json", "", "also write the results as JSON to this file")
	profiles := flag.String("profiles", "fast,balanced,max", "comma-separated profiles to measure")
	flag.Parse()
	if err := run(context.Background(), *n, *tables, *cols, *jsonOut, strings.Split(*profiles, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "enginebench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n, tables, cols int, jsonOut string, profiles []string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	c, err := pgtest.Start(ctx, pgcluster.Options{})
	if err != nil {
		return err
	}
	defer c.Stop()

	var results []result
	for _, s := range []scenario{sampleScenario(), wideScenario(tables, cols)} {
		for i, p := range profiles {
			r, err := runScenario(ctx, c, s, strings.TrimSpace(p), n, i == 0)
			if err != nil {
				return fmt.Errorf("%s/%s: %w", s.name, p, err)
			}
			results = append(results, r)
		}
	}
	printTable(os.Stdout, results)
	if jsonOut != "" {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	if !targetsMet(results) {
		return fmt.Errorf("targets missed (see the table)")
	}
	return nil
}
