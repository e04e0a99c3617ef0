package main

import (
	"context"
	"fmt"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex/valuerecall"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/internal/sampledb"
)

// runRecallBench reports value-lookup recall@1 / recall@10 (right
// table.column and value) and column@1 per perturbation class, on the full
// workload (≥ 1M values) and on the workload at the default per-column cap
// (10,000 values/column), to show how scale and ambiguity move the numbers.
func runRecallBench(ctx context.Context, c *pgcluster.Cluster) error {
	for _, run := range []struct {
		name string
		opts valueindex.Options
	}{
		{"full (no per-column cap)", valueBenchOptions()},
		{"default cap 10k/column", valueindex.Options{}},
	} {
		ix, _, err := buildValueBenchIndex(ctx, c, run.opts)
		if err != nil {
			return fmt.Errorf("recall bench: %w", err)
		}
		cases := valuerecall.Generate(ix, 42, 300)
		res := valuerecall.Evaluate(ctx, ix, cases)
		fmt.Printf("value recall, %s, %d values:\n", run.name, ix.Len())
		fmt.Printf("  %-13s %5s %9s %10s %9s\n", "class", "n", "recall@1", "recall@10", "column@1")
		for _, cl := range valuerecall.Classes() {
			r := res[cl]
			fmt.Printf("  %-13s %5d %9.3f %10.3f %9.3f\n", cl, r.N, r.Recall1(), r.Recall10(), r.ColumnRecall1())
		}
	}
	return nil
}

// runSampleRecallBench measures recall on the sample database itself (the
// messy retail data `make run` serves): its stored values perturbed the way
// people type them, looked up in the index the catalog builds for it.
func runSampleRecallBench(ctx context.Context, c *pgcluster.Cluster) error {
	const db = "samplerecall"
	if err := c.CreateDatabase(ctx, db); err != nil {
		return err
	}
	conn, err := c.Connect(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if err := sampledb.Load(ctx, conn, sampledb.Small); err != nil {
		return err
	}
	snap, err := catalog.Build(ctx, conn, db, catalog.BuildOptions{})
	if err != nil {
		return err
	}
	ix := snap.Values
	cases := valuerecall.Generate(ix, 42, 300)
	res := valuerecall.Evaluate(ctx, ix, cases)
	fmt.Printf("value recall, sample database (sampledb.Small), %d values:\n", ix.Len())
	fmt.Printf("  %-13s %5s %9s %10s %9s\n", "class", "n", "recall@1", "recall@10", "column@1")
	for _, cl := range valuerecall.Classes() {
		r := res[cl]
		fmt.Printf("  %-13s %5d %9.3f %10.3f %9.3f\n", cl, r.N, r.Recall1(), r.Recall10(), r.ColumnRecall1())
	}
	return nil
}
