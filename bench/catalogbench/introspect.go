package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/internal/sampledb"
)

// runIntrospectBench measures introspection of a synthetic 200×20 schema
// (target < 2 s), prompt rendering of it, and a full snapshot build, save
// and load of the Small sample database.
func runIntrospectBench(ctx context.Context, c *pgcluster.Cluster) error {
	const tables, cols, runs = 200, 20, 10
	if err := c.CreateDatabase(ctx, "widebench"); err != nil {
		return err
	}
	conn, err := c.Connect(ctx, "widebench")
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	start := time.Now()
	if err := sampledb.WideSchema(ctx, conn, tables, cols); err != nil {
		return err
	}
	fmt.Printf("wide schema %d tables × %d columns created in %v\n", tables, cols, time.Since(start).Round(time.Millisecond))

	var durs []time.Duration
	var s *catalog.Schema
	for range runs + 1 { // the first run warms the server's catalog caches and is dropped
		start := time.Now()
		if s, err = catalog.Introspect(ctx, conn, catalog.IntrospectOptions{}); err != nil {
			return err
		}
		durs = append(durs, time.Since(start))
	}
	cold := durs[0]
	durs = durs[1:]
	slices.Sort(durs)
	n := 0
	for _, t := range s.Tables {
		n += len(t.Columns)
	}
	fmt.Printf("introspect wide schema (%d tables, %d columns, 6 queries): cold %v; warm min %v median %v max %v over %d runs (target < 2s)\n",
		len(s.Tables), n, cold, durs[0], durs[len(durs)/2], durs[len(durs)-1], runs)
	start = time.Now()
	ddl := s.RenderFull(catalog.RenderOptions{})
	fmt.Printf("render full wide schema: %d bytes in %v\n", len(ddl), time.Since(start).Round(time.Microsecond))

	if err := c.CreateDatabase(ctx, "samplebench"); err != nil {
		return err
	}
	sconn, err := c.Connect(ctx, "samplebench")
	if err != nil {
		return err
	}
	defer sconn.Close(ctx)
	start = time.Now()
	if err := sampledb.Load(ctx, sconn, sampledb.Small); err != nil {
		return err
	}
	fmt.Printf("sampledb.Small load (%d orders): %v\n", sampledb.Small.Orders, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	snap, err := catalog.Build(ctx, sconn, "samplebench", catalog.BuildOptions{})
	if err != nil {
		return err
	}
	build := time.Since(start)
	dir, err := os.MkdirTemp("", "catalogbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	start = time.Now()
	if err := catalog.SaveSnapshot(dir, snap); err != nil {
		return err
	}
	save := time.Since(start)
	fi, err := os.Stat(catalog.SnapshotPath(dir, "samplebench"))
	if err != nil {
		return err
	}
	start = time.Now()
	if _, err := catalog.LoadSnapshot(dir, "samplebench", descindex.Options{}); err != nil {
		return err
	}
	fmt.Printf("sample snapshot: build %v (%d values, %d descriptions), save %v, load %v, file %d KiB\n",
		build.Round(time.Millisecond), snap.Values.Len(), snap.Descriptions.Len(), save.Round(time.Microsecond),
		time.Since(start).Round(time.Microsecond), fi.Size()/1024)
	return nil
}

// runLargeBench loads sampledb.Large (≥ 1M orders) and builds its snapshot
// (the value index samples the big tables with TABLESAMPLE).
func runLargeBench(ctx context.Context, c *pgcluster.Cluster) error {
	if err := c.CreateDatabase(ctx, "largebench"); err != nil {
		return err
	}
	conn, err := c.Connect(ctx, "largebench")
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	start := time.Now()
	if err := sampledb.Load(ctx, conn, sampledb.Large); err != nil {
		return err
	}
	load := time.Since(start)
	var orders, lines int64
	if err := conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM order_lines)").Scan(&orders, &lines); err != nil {
		return err
	}
	fmt.Printf("sampledb.Large load: %d orders, %d order lines in %v (incl. ANALYZE)\n", orders, lines, load.Round(time.Millisecond))
	start = time.Now()
	snap, err := catalog.Build(ctx, conn, "largebench", catalog.BuildOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("large snapshot build: %v (%d values)\n", time.Since(start).Round(time.Millisecond), snap.Values.Len())
	return nil
}
