// Command askallrecall measures the database selection memory of
// questions across databases (engine/askall): the seven sql-eval databases
// are loaded into a throwaway Postgres as separate databases (column
// descriptions as COMMENT ON COLUMN, ANALYZE for stored examples), their
// catalog snapshots are built as the proxy builds them, and for each of the
// 190 questions the rank of its own database is recorded. It reports
// recall@1, recall@3 and the mean reciprocal rank of the lexical (BM25)
// path; no model is involved. With -embed-model (a real embedding model on
// the -ollama server) it ranks the same questions again with embeddings
// blended in, in the same run.
//
//	go run ./bench/askallrecall [-data datasets/sql-eval] [-json out.json]
//	go run ./bench/askallrecall -pairs 0 -embed-model all-minilm -ollama http://127.0.0.1:11434
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/embedding"
	"github.com/nlproxy/nlproxy/engine/askall"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

func main() {
	data := flag.String("data", "datasets/sql-eval", "sql-eval directory (databases/, questions.csv)")
	jsonOut := flag.String("json", "", "also write the figures as JSON to this file")
	pairs := flag.Int("pairs", 40, "two-database questions to run through the whole path with a scripted model (0: none)")
	topK := flag.Int("top-k", 3, "candidates the selection memory gives the planner in the two-database run")
	host := flag.String("ollama", envOr("NLPROXY_REAL_OLLAMA", "http://127.0.0.1:11434"), "model server for -embed-model (env NLPROXY_REAL_OLLAMA)")
	api := flag.String("llm-api", "ollama", "API of the -ollama server: ollama or openai")
	embedModel := flag.String("embed-model", os.Getenv("NLPROXY_REAL_EMBED_MODEL"), "embedding model: also rank with it, beside the lexical memory (env NLPROXY_REAL_EMBED_MODEL)")
	flag.Parse()
	var emb embedding.Embedder
	if *embedModel != "" {
		var err error
		if emb, err = embedder(context.Background(), *host, *api, *embedModel); err != nil {
			fmt.Printf("embedding comparison skipped: no embedding model %q at %s (%v); lexical figures only\n\n", *embedModel, *host, err)
			emb = nil
		}
	}
	if err := run(context.Background(), *data, *jsonOut, *pairs, *topK, emb, *embedModel); err != nil {
		fmt.Fprintln(os.Stderr, "askallrecall:", err)
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
	Embed     *Result             `json:"with_embeddings,omitempty"`
}

// PerDB is one database's share.
type PerDB struct {
	Questions int `json:"questions"`
	Top1      int `json:"top1"`
	Top3      int `json:"top3"`
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, dir, jsonOut string, pairs, topK int, emb embedding.Embedder, embedModel string) error {
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
	c, err := pgtest.Start(ctx, pgcluster.Options{})
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
	res := selectionRecall(ctx, askall.NewMemory(snaps, nil), names, qs)
	fmt.Fprintln(os.Stdout, "lexical (BM25):")
	report(os.Stdout, res, names)
	if emb != nil {
		// The same questions ranked by the memory blended with embeddings
		// (what --embed-model gives ask(all)).
		start := time.Now()
		if c, ok := emb.(*countingEmbedder); ok {
			// The questions in batches up front rather than one call each.
			texts := make([]string, len(qs))
			for i, q := range qs {
				texts[i] = q.Question
			}
			if err := c.prewarm(ctx, texts); err != nil {
				return fmt.Errorf("embed the questions: %w", err)
			}
		}
		er := selectionRecall(ctx, askall.NewMemory(snaps, emb), names, qs)
		fmt.Fprintf(os.Stdout, "\nwith embeddings (%s), same questions, %s:\n", embedModel, time.Since(start).Round(time.Second))
		if c, ok := emb.(*countingEmbedder); ok {
			fmt.Fprintf(os.Stdout, "embedding calls %d, failed %d (ranked by words alone)", c.calls, c.fails)
			if c.firstErr != nil {
				fmt.Fprintf(os.Stdout, "; first failure: %v", c.firstErr)
			}
			fmt.Fprintln(os.Stdout)
		}
		report(os.Stdout, er, names)
		res.Embed = &er
	}
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

// selectionRecall ranks every question's own database with mem.
func selectionRecall(ctx context.Context, mem *askall.Memory, names []string, qs []dataset.Question) Result {
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
	return res
}

// embedder is the embedding model on the server at host after one probe
// call; an error says why there is none.
func embedder(ctx context.Context, host, api, model string) (embedding.Embedder, error) {
	client, err := llm.NewPool(llm.Config{Host: host, API: api, Models: map[llm.Role]string{llm.RoleEmbedding: model},
		CallTimeout: 5 * time.Minute, Logger: zap.NewNop()}, nil, nil)
	if err != nil {
		return nil, err
	}
	e := &countingEmbedder{inner: llm.NewEmbedder(client, model)}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := e.Embed(pctx, []string{"probe"}); err != nil {
		return nil, err
	}
	return e, nil
}

func report(w io.Writer, r Result, names []string) {
	fmt.Fprintf(w, "database selection memory, %d databases, %d questions\n", r.Databases, r.Questions)
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

// countingEmbedder counts failed calls (the memory then ranks by words
// alone without a word, so the figures must say how often) and answers
// prewarmed texts from memory.
type countingEmbedder struct {
	inner    embedding.Embedder
	mu       sync.Mutex
	calls    int
	fails    int
	firstErr error
	kept     map[string][]float32 // prewarmed single texts
}

// prewarm embeds texts in one call (the client batches it) and keeps
// their vectors for later single-text calls.
func (c *countingEmbedder) prewarm(ctx context.Context, texts []string) error {
	vs, err := c.Embed(ctx, texts)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kept = map[string][]float32{}
	for i, t := range texts {
		c.kept[t] = vs[i]
	}
	return nil
}

func (c *countingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	c.mu.Lock()
	if v, ok := c.kept[texts[0]]; ok && len(texts) == 1 {
		c.mu.Unlock()
		return [][]float32{v}, nil
	}
	c.mu.Unlock()
	v, err := c.inner.Embed(ctx, texts)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if err != nil {
		c.fails++
		if c.firstErr == nil {
			c.firstErr = err
		}
	}
	return v, err
}
