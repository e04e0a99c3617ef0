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
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine/multidb"
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
	names, err := databases(dir)
	if err != nil {
		return err
	}
	qs, err := questions(filepath.Join(dir, "questions.csv"))
	if err != nil {
		return err
	}
	c, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		return err
	}
	defer c.Stop()
	for _, n := range names {
		if err := load(ctx, c, dir, n); err != nil {
			return fmt.Errorf("load %s: %w", n, err)
		}
	}
	mgr := &catalog.Manager{Connect: func(ctx context.Context, database string) (*pgx.Conn, error) { return c.Connect(ctx, database) }}
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
		top := mem.Top(ctx, q.text, len(names))
		rank := 0
		for i, cd := range top {
			if cd.Database == q.db {
				rank = i + 1
				break
			}
		}
		p := res.PerDB[q.db]
		p.Questions++
		if rank == 1 {
			p.Top1++
		} else if len(top) > 0 {
			res.Confused[q.db+"→"+top[0].Database]++
		}
		if rank >= 1 && rank <= 3 {
			p.Top3++
		} else {
			res.Misses = append(res.Misses, map[string]string{"db": q.db, "question": q.text, "top1": top[0].Database})
		}
		res.PerDB[q.db] = p
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
			golds[i] = q.gold
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

func databases(dir string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(dir, "databases"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no databases under " + dir)
	}
	return out, nil
}

type question struct{ text, db, gold string }

func questions(path string) ([]question, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) < 2 {
		return nil, errors.New("no questions in " + path)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	qi, di, gi := col["question"], col["db_name"], col["query"]
	var out []question
	for _, r := range recs[1:] {
		out = append(out, question{text: r[qi], db: r[di], gold: r[gi]})
	}
	return out, nil
}

// load creates the database, runs its SQL, turns the JSON column
// descriptions into comments and analyzes it.
func load(ctx context.Context, c *pgtest.Cluster, dir, name string) error {
	if err := c.CreateDatabase(ctx, name); err != nil {
		return err
	}
	sql, err := os.ReadFile(filepath.Join(dir, "databases", name, name+".sql"))
	if err != nil {
		return err
	}
	if err := c.Exec(ctx, name, string(sql)); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dir, "databases", name, name+".json"))
	if err != nil {
		return err
	}
	var meta struct {
		Tables map[string][]struct {
			Column      string `json:"column_name"`
			Description string `json:"column_description"`
		} `json:"table_metadata"`
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return err
	}
	var stmts []string
	for table, cols := range meta.Tables {
		for _, col := range cols {
			if col.Description == "" {
				continue
			}
			stmts = append(stmts, fmt.Sprintf("COMMENT ON COLUMN public.%s.%s IS '%s'",
				pgx.Identifier{table}.Sanitize(), pgx.Identifier{col.Column}.Sanitize(), strings.ReplaceAll(col.Description, "'", "''")))
		}
	}
	stmts = append(stmts, "ANALYZE")
	return c.Exec(ctx, name, strings.Join(stmts, ";\n"))
}
