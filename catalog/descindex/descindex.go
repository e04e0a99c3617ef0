// Package descindex searches the catalog's descriptions — table and column
// comments (COMMENT ON, the "database catalog" CHESS retrieves context from)
// and a business glossary — for the passages relevant to a question. Ranking
// is BM25 over normalized tokens (identifiers split on '_' and camelCase,
// light stemming), blended with embedding cosine when an Embedder is given.
package descindex

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/nlproxy/nlproxy/catalog/embedding"
)

// Doc kinds.
const (
	KindTable    = "table"
	KindColumn   = "column"
	KindGlossary = "glossary"
)

// Doc is one searchable description.
type Doc struct {
	Kind                  string // KindTable, KindColumn or KindGlossary
	Schema, Table, Column string // what it describes (glossary: optional scope)
	Term                  string // glossary term
	Text                  string // comment or definition
	SQLHint               string // glossary: SQL expressing the term
	// Also are the other tables a glossary term reads ("schema.table"; a
	// metric over a join): it is shown only to roles that may read each,
	// and points linking at each.
	Also []string
}

// Hit is a ranked document.
type Hit struct {
	Doc
	Score float64
}

// Options tune the index. Zero values take the defaults.
type Options struct {
	// Embedder, when set, blends cosine similarity into the ranking:
	// (1-EmbedWeight)*bm25/max(bm25) + EmbedWeight*cosine.
	Embedder    embedding.Embedder
	EmbedWeight float64 // default 0.5
	K1, B       float64 // BM25 parameters (defaults 1.2, 0.75)
}

func (o Options) withDefaults() Options {
	if o.EmbedWeight == 0 {
		o.EmbedWeight = 0.5
	}
	if o.K1 == 0 {
		o.K1 = 1.2
	}
	if o.B == 0 {
		o.B = 0.75
	}
	return o
}

type posting struct {
	doc int32
	tf  float32
}

// Index is safe for concurrent use.
type Index struct {
	opts   Options
	docs   []Doc
	post   map[string][]posting
	docLen []float64
	avgLen float64

	mu   sync.Mutex
	vecs [][]float32 // per doc, computed on first need; nil until then
}

// New indexes docs.
func New(docs []Doc, opts Options) *Index {
	ix := &Index{opts: opts.withDefaults(), docs: slices.Clone(docs), post: make(map[string][]posting)}
	ix.docLen = make([]float64, len(docs))
	var total float64
	for i, d := range ix.docs {
		tf := make(map[string]float32)
		for _, t := range docTokens(d) {
			tf[t]++
		}
		n := 0.0
		for _, c := range tf {
			n += float64(c)
		}
		ix.docLen[i] = n
		total += n
		terms := make([]string, 0, len(tf))
		for t := range tf {
			terms = append(terms, t)
		}
		slices.Sort(terms) // deterministic posting order
		for _, t := range terms {
			ix.post[t] = append(ix.post[t], posting{int32(i), tf[t]})
		}
	}
	if len(docs) > 0 {
		ix.avgLen = total / float64(len(docs))
	}
	return ix
}

// Len is the number of documents.
func (ix *Index) Len() int { return len(ix.docs) }

// docTokens are the BM25 terms of a doc. Names count twice: a question that
// names a column should find it before a comment that merely mentions it.
func docTokens(d Doc) []string {
	var toks []string
	names := []string{d.Term}
	switch d.Kind {
	case KindColumn:
		names = append(names, d.Column)
		toks = append(toks, Tokenize(d.Table)...)
	case KindTable:
		names = append(names, d.Table)
	default:
		toks = append(toks, Tokenize(d.Table+" "+d.Column)...)
	}
	for _, n := range names {
		nt := Tokenize(n)
		toks = append(toks, nt...)
		toks = append(toks, nt...)
	}
	toks = append(toks, Tokenize(d.Text)...)
	return append(toks, Tokenize(d.SQLHint)...)
}

// embedText is what gets embedded for a doc.
func embedText(d Doc) string {
	var b strings.Builder
	switch d.Kind {
	case KindGlossary:
		fmt.Fprintf(&b, "%s: %s", d.Term, d.Text)
	case KindTable:
		fmt.Fprintf(&b, "table %s: %s", d.Table, d.Text)
	default:
		fmt.Fprintf(&b, "column %s.%s: %s", d.Table, d.Column, d.Text)
	}
	return b.String()
}

// Embed computes the document vectors now (otherwise the first Search with
// an Embedder does). It is a no-op without an Embedder or when done.
func (ix *Index) Embed(ctx context.Context) error {
	_, err := ix.vectors(ctx)
	return err
}

func (ix *Index) vectors(ctx context.Context) ([][]float32, error) {
	if ix.opts.Embedder == nil {
		return nil, nil
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.vecs != nil || len(ix.docs) == 0 {
		return ix.vecs, nil
	}
	texts := make([]string, len(ix.docs))
	for i, d := range ix.docs {
		texts[i] = embedText(d)
	}
	const batch = 64
	vecs := make([][]float32, 0, len(texts))
	for i := 0; i < len(texts); i += batch {
		v, err := ix.opts.Embedder.Embed(ctx, texts[i:min(len(texts), i+batch)])
		if err != nil {
			return nil, fmt.Errorf("descindex: embed docs: %w", err)
		}
		if len(v) != min(len(texts), i+batch)-i {
			return nil, fmt.Errorf("descindex: embedder returned %d vectors for %d texts", len(v), min(len(texts), i+batch)-i)
		}
		vecs = append(vecs, v...)
	}
	ix.vecs = vecs
	return vecs, nil
}

// Search returns the k best documents for query, best first. Embedding
// failures degrade to lexical ranking rather than failing the search.
func (ix *Index) Search(ctx context.Context, query string, k int) []Hit {
	if k <= 0 || len(ix.docs) == 0 {
		return nil
	}
	scores := ix.bm25(query)
	maxBM := 0.0
	for _, s := range scores {
		maxBM = max(maxBM, s)
	}
	if maxBM > 0 {
		for i := range scores {
			scores[i] /= maxBM
		}
	}
	if vecs, err := ix.vectors(ctx); err == nil && vecs != nil {
		if qv, err := ix.opts.Embedder.Embed(ctx, []string{query}); err == nil && len(qv) == 1 {
			w := ix.opts.EmbedWeight
			for i := range scores {
				scores[i] = (1-w)*scores[i] + w*math.Max(0, float64(embedding.Cosine(qv[0], vecs[i])))
			}
		}
	}
	order := make([]int, 0, len(scores))
	for i, s := range scores {
		if s > 0 {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case scores[a] > scores[b]:
			return -1
		case scores[a] < scores[b]:
			return 1
		}
		return 0
	})
	hits := make([]Hit, 0, min(k, len(order)))
	for _, i := range order[:min(k, len(order))] {
		hits = append(hits, Hit{Doc: ix.docs[i], Score: scores[i]})
	}
	return hits
}

func (ix *Index) bm25(query string) []float64 {
	scores := make([]float64, len(ix.docs))
	qt := Tokenize(query)
	slices.Sort(qt)
	qt = slices.Compact(qt)
	n := float64(len(ix.docs))
	k1, b := ix.opts.K1, ix.opts.B
	for _, t := range qt {
		ps := ix.post[t]
		if len(ps) == 0 {
			continue
		}
		df := float64(len(ps))
		idf := math.Log(1 + (n-df+0.5)/(df+0.5))
		for _, p := range ps {
			tf := float64(p.tf)
			norm := 1 - b + b*ix.docLen[p.doc]/max(ix.avgLen, 1)
			scores[p.doc] += idf * tf * (k1 + 1) / (tf + k1*norm)
		}
	}
	return scores
}

// stopword reports words too common in questions to rank by.
func stopword(w string) bool {
	switch w {
	case "a", "an", "the", "of", "in", "on", "for", "to", "and", "or", "is", "are", "was", "were", "be", "by",
		"with", "as", "at", "from", "this", "that", "it", "its", "which", "what", "who", "how", "many", "much",
		"me", "show", "list", "all", "each", "per", "do", "does", "did", "has", "have", "i":
		return true
	}
	return false
}

// Tokenize lowercases, splits identifiers on '_', digits and camelCase
// ("orderTotalUSD" → order total usd), drops stopwords and stems lightly.
func Tokenize(s string) []string {
	var out []string
	for _, t := range Split(s) {
		if !stopword(t) {
			out = append(out, Stem(t))
		}
	}
	return out
}

// Split breaks an identifier or phrase into lower-case parts at
// non-alphanumerics, digit boundaries and camelCase humps ("crmTxDate" →
// crm tx date, "HTTPServer2" → http server 2).
func Split(s string) []string {
	var out []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	rs := []rune(s)
	for i, r := range rs {
		switch {
		case unicode.IsLetter(r):
			if len(cur) > 0 && unicode.IsDigit(cur[len(cur)-1]) {
				flush()
			}
			if unicode.IsUpper(r) && len(cur) > 0 {
				prev := rs[i-1]
				nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
				if unicode.IsLower(prev) || (unicode.IsUpper(prev) && nextLower) {
					flush()
				}
			}
			cur = append(cur, r)
		case unicode.IsDigit(r):
			if len(cur) > 0 && !unicode.IsDigit(cur[len(cur)-1]) {
				flush()
			}
			cur = append(cur, r)
		default:
			flush()
		}
	}
	flush()
	return out
}

// Stem strips common English inflections (plural -s/-es/-ies, -ing, -ed)
// and a final silent e, so "hired", "hire" and "hiring" meet. It is
// deliberately light: being the same on both sides is what matters.
func Stem(t string) string {
	stripped := false
	switch {
	case len(t) > 4 && strings.HasSuffix(t, "ies"):
		return t[:len(t)-3] + "y"
	case len(t) > 4 && (strings.HasSuffix(t, "sses") || strings.HasSuffix(t, "shes") ||
		strings.HasSuffix(t, "ches") || strings.HasSuffix(t, "xes") || strings.HasSuffix(t, "uses")):
		t = t[:len(t)-2]
	case len(t) > 3 && strings.HasSuffix(t, "s") && !strings.HasSuffix(t, "ss") && !strings.HasSuffix(t, "us") && !strings.HasSuffix(t, "is"):
		t = t[:len(t)-1]
	case len(t) > 5 && strings.HasSuffix(t, "ing"):
		t, stripped = t[:len(t)-3], true
	case len(t) > 4 && strings.HasSuffix(t, "ed") && !strings.HasSuffix(t, "eed"):
		t, stripped = t[:len(t)-2], true
	}
	n := len(t)
	if stripped && n > 3 && t[n-1] == t[n-2] && !strings.ContainsRune("aeiouls", rune(t[n-1])) {
		return t[:n-1] // shipping → ship
	}
	if n > 3 && t[n-1] == 'e' && t[n-2] != 'e' {
		return t[:n-1]
	}
	return t
}
