// Package sqleval loads the sql-eval databases (datasets/sql-eval) for the
// benchmarks that measure schema linking on them.
package sqleval

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// Merged loads the databases the answerable questions use (restricted to
// only, when given) into one database of cluster c, one schema each, and
// builds its catalog snapshot with their glossaries. It returns the
// answerable questions of the loaded databases.
func Merged(ctx context.Context, c *pgcluster.Cluster, name string, ds *dataset.Dataset, only []string) (*catalog.Snapshot, []dataset.Question, error) {
	snaps, qs, err := MergedWith(ctx, c, name, ds, only, descindex.Options{})
	if err != nil {
		return nil, nil, err
	}
	return snaps[0], qs, nil
}

// MergedWith is Merged building one snapshot per description-index option
// set (with and without an embedder, say) of the same loaded database; an
// index with an embedder is embedded before it is returned.
func MergedWith(ctx context.Context, c *pgcluster.Cluster, name string, ds *dataset.Dataset, only []string, descs ...descindex.Options) ([]*catalog.Snapshot, []dataset.Question, error) {
	var qs []dataset.Question
	for _, q := range ds.Questions {
		if !q.Unanswerable {
			qs = append(qs, q)
		}
	}
	var dbs []string
	seen := map[string]bool{}
	for _, q := range qs {
		if !seen[q.DB] && Wanted(only, q.DB) {
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

// Wanted reports whether database db is among only (names may carry
// spaces around them); an empty only wants every database.
func Wanted(only []string, db string) bool {
	if len(only) == 0 {
		return true
	}
	return contains(only, db)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if strings.TrimSpace(y) == x {
			return true
		}
	}
	return false
}

// Budgets parses the benchmarks' -budgets flag: comma-separated positive
// token budgets.
func Budgets(s string) ([]int, error) {
	var bs []int
	for _, f := range strings.Split(s, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || b <= 0 {
			return nil, fmt.Errorf("bad -budgets: %s", s)
		}
		bs = append(bs, b)
	}
	return bs, nil
}

// Only splits the benchmarks' -dbs flag; "" is every database.
func Only(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// Open opens the sql-eval dataset in dir and starts the throwaway cluster
// it is loaded into; stop the cluster when done.
func Open(ctx context.Context, dir string) (*dataset.Dataset, *pgcluster.Cluster, error) {
	ds, err := dataset.OpenSQLEval(dir)
	if err != nil {
		return nil, nil, err
	}
	c, err := pgtest.Start(ctx, pgcluster.Options{})
	if err != nil {
		return nil, nil, err
	}
	return ds, c, nil
}
