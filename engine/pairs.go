package engine

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/embedding"
	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/prompts"
)

// maxPairsPerDatabase bounds what MemoryPairs keeps per database (oldest
// accepted pairs go first; operator pairs are kept).
const maxPairsPerDatabase = 1000

// MemoryPairs is an in-process PairStore; with an Embedder it is also a
// SimilarPairStore. Safe for concurrent use.
type MemoryPairs struct {
	// Embedder, when set (before first use), embeds each pair's question
	// as it is added, for SimilarPairs.
	Embedder embedding.Embedder

	mu sync.Mutex
	db map[string][]memPair
}

type memPair struct {
	memory.Pair
	vec []float32 // nil: not embedded (no embedder, or it failed)
}

// AddPair implements PairStore; a pair with the same normalized question
// and role replaces the earlier one.
func (s *MemoryPairs) AddPair(ctx context.Context, database string, p memory.Pair) error {
	mp := memPair{Pair: p}
	if s.Embedder != nil {
		// Outside the lock: a slow model must not hold up other asks. A
		// failure only leaves this pair to the word ranking.
		if vs, err := s.Embedder.Embed(ctx, []string{p.Question}); err == nil && len(vs) == 1 {
			mp.vec = vs[0]
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		s.db = map[string][]memPair{}
	}
	list := s.db[database]
	nq := NormalizeQuestion(p.Question)
	for i := range list {
		if NormalizeQuestion(list[i].Question) == nq && list[i].Role == p.Role {
			if list[i].Source == memory.PairOperator && p.Source != memory.PairOperator {
				return nil // an operator's pair is not overwritten by usage
			}
			list[i] = mp
			return nil
		}
	}
	list = append(list, mp)
	if len(list) > maxPairsPerDatabase {
		for i := range list {
			if list[i].Source != memory.PairOperator {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
	}
	s.db[database] = list
	return nil
}

// Pairs implements PairStore.
func (s *MemoryPairs) Pairs(_ context.Context, database string) ([]memory.Pair, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]memory.Pair, 0, len(s.db[database]))
	for _, mp := range s.db[database] {
		out = append(out, mp.Pair)
	}
	return out, nil
}

// SimilarPairs implements SimilarPairStore: the k embedded pairs nearest
// to question by cosine similarity, nearest first.
func (s *MemoryPairs) SimilarPairs(ctx context.Context, database, question string, k int) ([]memory.Pair, error) {
	if s.Embedder == nil {
		return nil, memory.ErrNoEmbedder
	}
	vs, err := s.Embedder.Embed(ctx, []string{question})
	if err != nil {
		return nil, fmt.Errorf("engine: embed the question: %w", err)
	}
	if len(vs) != 1 {
		return nil, fmt.Errorf("engine: embed the question: %d vectors for 1 text", len(vs))
	}
	type scored struct {
		p   memory.Pair
		sim float32
	}
	s.mu.Lock()
	var all []scored
	for _, mp := range s.db[database] {
		if mp.vec != nil {
			all = append(all, scored{mp.Pair, embedding.Cosine(vs[0], mp.vec)})
		}
	}
	s.mu.Unlock()
	sort.SliceStable(all, func(i, j int) bool { return all[i].sim > all[j].sim })
	out := make([]memory.Pair, 0, min(k, len(all)))
	for i := 0; i < len(all) && i < k; i++ {
		out = append(out, all[i].p)
	}
	return out, nil
}

// maxExamples is how many remembered pairs a prompt shows.
const maxExamples = 3

// similarPairs picks, among the pairs usable by the asker (usable), those
// whose questions share the most words with the question (Jaccard over
// descindex tokens), best first.
func similarPairs(question string, pairs []memory.Pair, n int, usable func(memory.Pair) bool) []prompts.Example {
	q := tokenSet(question)
	type scored struct {
		p     memory.Pair
		score float64
	}
	var ss []scored
	for _, p := range pairs {
		if !usable(p) {
			continue
		}
		t := tokenSet(p.Question)
		inter := 0
		for w := range t {
			if q[w] {
				inter++
			}
		}
		if inter == 0 {
			continue
		}
		ss = append(ss, scored{p, float64(inter) / float64(len(q)+len(t)-inter)})
	}
	sort.SliceStable(ss, func(i, j int) bool { return ss[i].score > ss[j].score })
	var out []prompts.Example
	for i := 0; i < len(ss) && i < n; i++ {
		out = append(out, prompts.Example{Question: ss[i].p.Question, SQL: ss[i].p.SQL})
	}
	return out
}

func tokenSet(s string) map[string]bool {
	out := map[string]bool{}
	for _, t := range descindex.Tokenize(strings.ToLower(s)) {
		out[t] = true
	}
	return out
}
