package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/embedding"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex/valuerecall"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/eval/compare"
	"github.com/nlproxy/nlproxy/eval/dataset"
)

// memoEmbedder embeds each distinct text once: the same question is
// previewed at every budget and the same pair question in every
// leave-one-out store, and the figures are about ranking, not model time.
// It counts what reached the server.
type memoEmbedder struct {
	inner embedding.Embedder
	mu    sync.Mutex
	vecs  map[string][]float32
	calls int
	texts int
	took  time.Duration
	// Failed calls: the indexes then fall back to the lexical ranking
	// without a word, so the figures must say how often.
	fails    int
	firstErr error
}

func (m *memoEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	m.mu.Lock()
	var miss []string
	for _, t := range texts {
		if _, ok := m.vecs[t]; !ok && !slices.Contains(miss, t) {
			miss = append(miss, t)
		}
	}
	m.mu.Unlock()
	if len(miss) > 0 {
		start := time.Now()
		vs, err := m.inner.Embed(ctx, miss)
		if err != nil {
			m.mu.Lock()
			m.fails++
			if m.firstErr == nil {
				m.firstErr = err
			}
			m.mu.Unlock()
			return nil, err
		}
		if len(vs) != len(miss) {
			return nil, fmt.Errorf("embedder returned %d vectors for %d texts", len(vs), len(miss))
		}
		m.mu.Lock()
		m.calls++
		m.texts += len(miss)
		m.took += time.Since(start)
		for i, t := range miss {
			m.vecs[t] = vs[i]
		}
		m.mu.Unlock()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = m.vecs[t]
	}
	return out, nil
}

// realEmbedder is the embedding model on the Ollama (or, with api
// "openai", OpenAI-compatible) server at host, after one probe call; an
// error says why there is none (no server, no such model).
func realEmbedder(ctx context.Context, host, api, model string) (*memoEmbedder, error) {
	client, err := llm.NewPool(llm.Config{Host: host, API: api, Models: map[llm.Role]string{llm.RoleEmbedding: model},
		CallTimeout: 5 * time.Minute, EmbedBatch: 8, Logger: zap.NewNop()}, nil, nil)
	if err != nil {
		return nil, err
	}
	m := &memoEmbedder{inner: llm.NewEmbedder(client, model), vecs: map[string][]float32{}}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := m.Embed(pctx, []string{"probe"}); err != nil {
		return nil, err
	}
	return m, nil
}

// embedReport is the lexical path beside the embedding one, same questions.
type embedReport struct {
	Model string `json:"model"`
	// Schema selection with the description/glossary index blended with
	// embeddings (what --embed-model does) against BM25 alone.
	Lexical *report `json:"lexical"`
	Embed   *report `json:"embed"`
	// Gold literals found when value retrieval reranks by embeddings
	// (LookupOptions.Embedder) instead of edit similarity alone.
	ValueLexical, ValueEmbed [2]int `json:"-"`
	// Perturbed stored values (valuerecall) looked up both ways.
	Perturbed map[string][2]valuerecall.Result `json:"perturbed_values"`
	// Remembered pairs: questions for which a pair reading the same tables
	// exists, and for how many the prompt's examples include one.
	Pairs pairFigures `json:"pairs"`
	// What reached the embedding server.
	EmbedCalls int     `json:"embed_calls"`
	EmbedTexts int     `json:"embed_texts"`
	EmbedSecs  float64 `json:"embed_seconds"`
	EmbedFails int     `json:"embed_failures"`
	FirstError string  `json:"first_embed_error,omitempty"`
}

type pairFigures struct {
	Questions  int `json:"questions_with_a_same_table_pair"`
	HitLexical int `json:"hit_lexical"`
	HitEmbed   int `json:"hit_embed"`
	// Examples shown and how many of them read the question's tables.
	ShownLexical, ShownEmbed int
	RelLexical, RelEmbed     int
}

// perturbedPerClass: the value cases per perturbation class; each is one
// embedding call of 21 texts.
const perturbedPerClass = 40

// compareEmbeddings measures the same questions twice: snaps[0] built
// lexically, snaps[1] with the embedder in its description index.
func compareEmbeddings(ctx context.Context, lex, emb *catalog.Snapshot, qs []dataset.Question, budgets []int, m *memoEmbedder, model string) (*embedReport, error) {
	er := &embedReport{Model: model, Perturbed: map[string][2]valuerecall.Result{}}
	var err error
	if er.Lexical, err = evaluate(ctx, lex, qs, budgets, nil, sameName); err != nil {
		return nil, err
	}
	// Batched up front: the questions (remembered pairs) and the
	// description searches (question and lexical keywords, as the engine
	// words them); a text not seen here is embedded when needed.
	var texts []string
	pe := &engine.Engine{}
	for _, q := range qs {
		ch := pe.PreviewSchema(ctx, lex, q.Question, budgets[0], nil)
		texts = append(texts, q.Question, q.Question+" "+strings.Join(ch.Keywords, " "))
	}
	if _, err := m.Embed(ctx, texts); err != nil {
		return nil, fmt.Errorf("embed the questions: %w", err)
	}
	// Values as the engine would find them if it passed the embedder.
	embedValues := func(ctx context.Context, snap *catalog.Snapshot, keywords []string) []valueindex.Match {
		return snap.Values.Lookup(ctx, keywords, valueindex.LookupOptions{Embedder: m})
	}
	if er.Embed, err = evaluateWith(ctx, emb, qs, budgets, nil, sameName, embedValues); err != nil {
		return nil, err
	}
	er.ValueLexical = [2]int{er.Lexical.Rows[""].LiteralsFound, er.Lexical.Rows[""].Literals}
	er.ValueEmbed = [2]int{er.Embed.Rows[""].LiteralsFound, er.Embed.Rows[""].Literals}

	cases := valuerecall.Generate(lex.Values, 42, perturbedPerClass)
	l := valuerecall.EvaluateWith(ctx, lex.Values, cases, nil)
	e := valuerecall.EvaluateWith(ctx, lex.Values, cases, m)
	for _, cl := range valuerecall.Classes() {
		er.Perturbed[string(cl)] = [2]valuerecall.Result{l[cl], e[cl]}
	}
	if er.Pairs, err = comparePairs(ctx, lex, qs, m); err != nil {
		return nil, err
	}
	er.EmbedCalls, er.EmbedTexts, er.EmbedSecs, er.EmbedFails = m.calls, m.texts, m.took.Seconds(), m.fails
	if m.firstErr != nil {
		er.FirstError = m.firstErr.Error()
	}
	return er, nil
}

// comparePairs: every question of a database is asked with the others'
// (question, gold SQL) remembered (leave one out), once ranked by words and
// once by the embedder; an example helps when it reads the same tables.
func comparePairs(ctx context.Context, snap *catalog.Snapshot, qs []dataset.Question, m *memoEmbedder) (pairFigures, error) {
	type pq struct {
		q      dataset.Question
		sql    string
		tables string
	}
	var all []pq
	for _, q := range qs {
		sql := compare.Alternatives(q.Gold)[0]
		ts, err := goldTables(sql)
		if err != nil {
			return pairFigures{}, err
		}
		all = append(all, pq{q, sql, fmt.Sprint(ts)})
	}
	var f pairFigures
	sqlTables := map[string]string{}
	for _, p := range all {
		sqlTables[p.sql] = p.tables
	}
	for i, p := range all {
		has := false
		for j, o := range all {
			if j != i && o.q.DB == p.q.DB && o.tables == p.tables {
				has = true
			}
		}
		if !has {
			continue
		}
		f.Questions++
		for k, emb := range []embedding.Embedder{nil, m} {
			store := &engine.MemoryPairs{}
			if emb != nil {
				store.Embedder = emb
			}
			for j, o := range all {
				if j != i && o.q.DB == p.q.DB {
					if err := store.AddPair(ctx, snap.Database, engine.Pair{Question: o.q.Question, SQL: o.sql, Source: engine.PairOperator}); err != nil {
						return f, err
					}
				}
			}
			e := &engine.Engine{Pairs: store}
			ex := e.PreviewExamples(ctx, snap, p.q.Question, []string{p.q.DB})
			rel := 0
			for _, x := range ex {
				if sqlTables[x.SQL] == p.tables {
					rel++
				}
			}
			if k == 0 {
				f.ShownLexical += len(ex)
				f.RelLexical += rel
				if rel > 0 {
					f.HitLexical++
				}
			} else {
				f.ShownEmbed += len(ex)
				f.RelEmbed += rel
				if rel > 0 {
					f.HitEmbed++
				}
			}
		}
	}
	return f, nil
}

func (er *embedReport) print(w io.Writer) {
	fmt.Fprintf(w, "\nlexical vs embeddings (%s), same questions, same run\n", er.Model)
	fmt.Fprintf(w, "%-34s %12s %12s\n", "", "lexical", "embeddings")
	for i, b := range er.Lexical.Budgets {
		l, e := er.Lexical.Rows[""], er.Embed.Rows[""]
		fmt.Fprintf(w, "%-34s %11.1f%% %11.1f%%\n", fmt.Sprintf("gold tables shown @%d tokens", b), pct(l.Hits[i], l.Questions), pct(e.Hits[i], e.Questions))
	}
	for i, b := range er.Lexical.Budgets {
		fl, fe := floor(er.Lexical, i), floor(er.Embed, i)
		fmt.Fprintf(w, "%-34s %11.1f%% %11.1f%%\n", fmt.Sprintf("  floor (worst database) @%d", b), fl, fe)
	}
	fmt.Fprintf(w, "%-34s %5.1f%% %2d/%d %5.1f%% %2d/%d\n", "gold literals retrieved", pct(er.ValueLexical[0], er.ValueLexical[1]), er.ValueLexical[0], er.ValueLexical[1],
		pct(er.ValueEmbed[0], er.ValueEmbed[1]), er.ValueEmbed[0], er.ValueEmbed[1])
	for _, cl := range valuerecall.Classes() {
		r := er.Perturbed[string(cl)]
		fmt.Fprintf(w, "%-34s %5.3f/%5.3f %5.3f/%5.3f\n", fmt.Sprintf("perturbed values %s (n=%d) r@1/r@10", cl, r[0].N), r[0].Recall1(), r[0].Recall10(), r[1].Recall1(), r[1].Recall10())
	}
	p := er.Pairs
	fmt.Fprintf(w, "%-34s %5.1f%% %6s %5.1f%%\n", fmt.Sprintf("pairs: same-table example shown (n=%d)", p.Questions), pct(p.HitLexical, p.Questions), "", pct(p.HitEmbed, p.Questions))
	fmt.Fprintf(w, "%-34s %5.1f%% %6s %5.1f%%\n", "pairs: examples reading its tables", pct(p.RelLexical, p.ShownLexical), "", pct(p.RelEmbed, p.ShownEmbed))
	fmt.Fprintf(w, "embedding server: %d calls, %d texts, %.1f s (each distinct text embedded once); %d failed calls (lexical fallback)\n",
		er.EmbedCalls, er.EmbedTexts, er.EmbedSecs, er.EmbedFails)
	if er.FirstError != "" {
		fmt.Fprintf(w, "first failure: %s\n", er.FirstError)
	}
}

func floor(r *report, i int) float64 {
	low := 101.0
	for _, db := range r.DBs {
		low = min(low, pct(r.Rows[db].Hits[i], r.Rows[db].Questions))
	}
	return low
}
