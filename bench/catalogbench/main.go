// Command catalogbench measures the catalog: introspection of a wide
// schema, snapshot build/save/load, value-index build and lookup recall.
// It starts its own throwaway Postgres (testkit/pgtest).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nlproxy/nlproxy/internal/pgcluster"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

func main() {
	only := flag.String("only", "introspect,values,recall,samplerecall", "comma-separated benchmarks to run: introspect, values, recall, samplerecall, large")
	flag.Parse()
	if err := run(context.Background(), strings.Split(*only, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "catalogbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, only []string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Minute)
	defer cancel()
	c, err := pgtest.Start(ctx, pgcluster.Options{})
	if err != nil {
		return err
	}
	defer c.Stop()
	benches := []struct {
		name string
		run  func(context.Context, *pgcluster.Cluster) error
	}{
		{"introspect", runIntrospectBench},
		{"values", runValueBench},
		{"recall", runRecallBench},
		{"samplerecall", runSampleRecallBench},
		{"large", runLargeBench}, // not in the default set: loads ≥ 1M orders
	}
	failed := false
	for _, b := range benches {
		want := false
		for _, o := range only {
			want = want || strings.TrimSpace(o) == b.name
		}
		if !want {
			continue
		}
		fmt.Printf("== %s\n", b.name)
		if err := b.run(ctx, c); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", b.name, err)
			failed = true
		}
	}
	if failed {
		return fmt.Errorf("some benchmarks failed")
	}
	return nil
}
