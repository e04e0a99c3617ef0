package engine

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/prompts"
)

// Pair is a question→SQL pair remembered for a database, shown to the model
// as a few-shot example when a new question resembles it.
type Pair struct {
	Question string
	SQL      string
	// Source: PairOperator (added by an operator) or PairAccepted (an ask
	// that a user re-ran unchanged).
	Source string
	// Role is who asked an accepted question: its pair is shown to that
	// role only, since a question can carry what its asker may see and
	// others may not. "" (operator pairs) is shown to everyone.
	Role string
	At   time.Time
}

// Pair sources.
const (
	PairOperator = "operator"
	PairAccepted = "accepted"
)

// PairStore remembers pairs per database. MemoryPairs keeps them in the
// process; a shared store lets replicas learn from each other.
type PairStore interface {
	AddPair(ctx context.Context, database string, p Pair) error
	Pairs(ctx context.Context, database string) ([]Pair, error)
}

// maxPairsPerDatabase bounds what MemoryPairs keeps per database (oldest
// accepted pairs go first; operator pairs are kept).
const maxPairsPerDatabase = 1000

// MemoryPairs is an in-process PairStore. Safe for concurrent use.
type MemoryPairs struct {
	mu sync.Mutex
	db map[string][]Pair
}

// AddPair implements PairStore; a pair with the same normalized question
// and role replaces the earlier one.
func (s *MemoryPairs) AddPair(_ context.Context, database string, p Pair) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		s.db = map[string][]Pair{}
	}
	list := s.db[database]
	nq := NormalizeQuestion(p.Question)
	for i := range list {
		if NormalizeQuestion(list[i].Question) == nq && list[i].Role == p.Role {
			if list[i].Source == PairOperator && p.Source != PairOperator {
				return nil // an operator's pair is not overwritten by usage
			}
			list[i] = p
			return nil
		}
	}
	list = append(list, p)
	if len(list) > maxPairsPerDatabase {
		for i := range list {
			if list[i].Source != PairOperator {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
	}
	s.db[database] = list
	return nil
}

// Pairs implements PairStore.
func (s *MemoryPairs) Pairs(_ context.Context, database string) ([]Pair, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Pair(nil), s.db[database]...), nil
}

// maxExamples is how many remembered pairs a prompt shows.
const maxExamples = 3

// similarPairs picks, among the pairs usable by the asker (usable), those
// whose questions share the most words with the question (Jaccard over
// descindex tokens), best first.
func similarPairs(question string, pairs []Pair, n int, usable func(Pair) bool) []prompts.Example {
	q := tokenSet(question)
	type scored struct {
		p     Pair
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
