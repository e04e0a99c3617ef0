// Command multidbrecall measures the database selection memory of
// questions across databases (engine/multidb): the seven sql-eval databases
// are loaded into a throwaway Postgres as separate databases (column
// descriptions as COMMENT ON COLUMN, ANALYZE for stored examples), their
// catalog snapshots are built as the proxy builds them, and for each of the
// 190 questions the rank of its own database is recorded. It reports
// recall@1, recall@3 and the mean reciprocal rank of the lexical (BM25)
// path; no model is involved.
//
//	go run ./bench/multidbrecall [-data datasets/sql-eval] [-json out.json]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine/multidb"
	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/integration/pgtest"
)

func main() {
	data := flag.String("data", "datasets/sql-eval", "sql-eval directory (databases/, questions.csv)")
	jsonOut := flag.String("json", "", "also write the figures as JSON to this file")
	pairs := flag.Int("pairs", 40, "two-database questions to run through the whole path with a scripted model (0: none)")
	topK := flag.Int("top-k", 3, "candidates the selection memory gives the planner in the two-database run")
	flag.Parse()
	if err := run(context.Background(), *data, *jsonOut, *pairs, *topK); err != nil {
		fmt.Fprintln(os.Stderr, "multidbrecall:", err)
		os.Exit(1)
	}
}

// Result is what the run reports.
type Result struct {
	Databases int                 `json:"databases"`
	Questions int                 `json:"questions"`
	Recall1   float64             `json:"recall_at_1"`
	Recall3   float64             `json:"recall_at_3"`
	MRR       float64             `json:"mrr"`
	PerDB     map[string]PerDB    `json:"per_database"`
	Confused  map[string]int      `json:"top1_confusions"` // "asked→chosen"
	Misses    []map[string]string `json:"top3_misses,omitempty"`
	Pairs     *PairResult         `json:"two_database,omitempty"`
}

// PerDB is one database's share.
type PerDB struct {
	Questions int `json:"questions"`
	Top1      int `json:"top1"`
	Top3      int `json:"top3"`
}

func run(ctx context.Context, dir, jsonOut string, pairs, topK int) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	names, err := dataset.Databases(dir)
	if err != nil {
		return err
	}
	ds, err := dataset.OpenSQLEval(dir)
	if err != nil {
		return err
	}
	ds.Filter(nil, false)
	qs := ds.Questions
	if len(qs) == 0 {
		return fmt.Errorf("no questions in %s", dir)
	}
	c, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		return err
	}
	defer c.Stop()
	connect := func(ctx context.Context, database string) (*pgx.Conn, error) { return c.Connect(ctx, database) }
	for _, n := range names {
		if _, err := dataset.Load(ctx, connect, ds, n, dataset.LoadOptions{Analyze: true}); err != nil {
			return err
		}
	}
	mgr := &catalog.Manager{Connect: connect}
	defer mgr.Close()
	var snaps []*catalog.Snapshot
	for _, n := range names {
		s, err := mgr.Get(ctx, n)
		if err != nil {
			return fmt.Errorf("catalog %s: %w", n, err)
		}
		snaps = append(snaps, s)
	}
	mem := multidb.NewMemory(snaps, nil)

	res := Result{Databases: len(names), Questions: len(qs), PerDB: map[string]PerDB{}, Confused: map[string]int{}}
	var rr float64
	for _, q := range qs {
		top := mem.Top(ctx, q.Question, len(names))
		rank := 0
		for i, cd := range top {
			if cd.Database == q.DB {
				rank = i + 1
				break
			}
		}
		p := res.PerDB[q.DB]
		p.Questions++
		if rank == 1 {
			p.Top1++
		} else if len(top) > 0 {
			res.Confused[q.DB+"→"+top[0].Database]++
		}
		if rank >= 1 && rank <= 3 {
			p.Top3++
		} else {
			res.Misses = append(res.Misses, map[string]string{"db": q.DB, "question": q.Question, "top1": top[0].Database})
		}
		res.PerDB[q.DB] = p
		if rank > 0 {
			rr += 1 / float64(rank)
		}
	}
	var t1, t3 int
	for _, p := range res.PerDB {
		t1 += p.Top1
		t3 += p.Top3
	}
	res.Recall1 = float64(t1) / float64(len(qs))
	res.Recall3 = float64(t3) / float64(len(qs))
	res.MRR = rr / float64(len(qs))
	report(os.Stdout, res, names)
	if pairs > 0 {
		golds := make([]string, len(qs))
		for i, q := range qs {
			golds[i] = q.Gold
		}
		pr, err := runPairs(ctx, c, mgr, names, qs, golds, pairs, topK)
		if err != nil {
			return fmt.Errorf("two-database run: %w", err)
		}
		res.Pairs = &pr
		reportPairs(os.Stdout, pr)
	}
	if jsonOut != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(jsonOut, b, 0o644)
	}
	return nil
}

func report(w io.Writer, r Result, names []string) {
	fmt.Fprintf(w, "database selection memory, lexical (BM25), %d databases, %d questions\n", r.Databases, r.Questions)
	fmt.Fprintf(w, "recall@1 %.3f  recall@3 %.3f  MRR %.3f\n\n", r.Recall1, r.Recall3, r.MRR)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "database\tquestions\ttop-1\ttop-3")
	for _, n := range names {
		p := r.PerDB[n]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", n, p.Questions, p.Top1, p.Top3)
	}
	tw.Flush()
	if len(r.Confused) > 0 {
		keys := make([]string, 0, len(r.Confused))
		for k := range r.Confused {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			return r.Confused[keys[i]] > r.Confused[keys[j]] || r.Confused[keys[i]] == r.Confused[keys[j]] && keys[i] < keys[j]
		})
		fmt.Fprint(w, "\ntop-1 confusions (asked→chosen):")
		for _, k := range keys {
			fmt.Fprintf(w, " %s %d", k, r.Confused[k])
		}
		fmt.Fprintln(w)
	}
}
