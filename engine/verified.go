package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/catalog/verified"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/prompts"
)

// VerifiedQueries gives the operator's verified queries of a database
// (verified.List for a file, verified.Shared for a file and the catalog
// store). Entries returned with an error still serve.
type VerifiedQueries interface {
	Verified(ctx context.Context, database string) ([]verified.Entry, error)
}

// verifiedUses counts, per database and entry, the asks an entry answered.
type verifiedUses struct {
	mu sync.Mutex
	n  map[string]int64
}

func (u *verifiedUses) add(database, name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n == nil {
		u.n = map[string]int64{}
	}
	u.n[database+"/"+name]++
}

// VerifiedUses returns how many asks each verified query answered since
// the start, keyed "database/name".
func (e *Engine) VerifiedUses() map[string]int64 {
	e.verifiedUses.mu.Lock()
	defer e.verifiedUses.mu.Unlock()
	out := make(map[string]int64, len(e.verifiedUses.n))
	for k, v := range e.verifiedUses.n {
		out[k] = v
	}
	return out
}

// maxParamWords bounds the words of a parameter value looked up in the
// value index (runs of 1..maxParamWords words of the question).
const maxParamWords = 4

// tryVerified answers the ask with a verified query when one matches it
// closely with every parameter filled, the asker's role is allowed and may
// read every table it names: the entry's SQL, parameters bound as string
// constants, sealed by the guard like generated SQL; it runs as the asker
// in the run scope. No model call is made. Otherwise the best complete
// near miss becomes the first example the model sees (a.verifiedExample).
func (e *Engine) tryVerified(ctx context.Context, a *ask) (*Result, bool) {
	if e.Verified == nil {
		return nil, false
	}
	es, err := e.Verified.Verified(ctx, a.req.Database)
	if err != nil {
		// Those returned with the error still serve (a file's, when a
		// shared store is down).
		e.Logger.Warn("verified queries unavailable", zap.String("database", a.req.Database), zap.Error(err))
	}
	var allowed []verified.Entry
	for _, en := range es {
		if en.Allowed(a.role()) {
			allowed = append(allowed, en)
		}
	}
	if len(allowed) == 0 {
		return nil, false
	}
	st := a.trace.begin("verified")
	defer a.trace.end(st)
	fill := e.paramFiller(ctx, a)
	for _, m := range verified.Rank(a.req.Question, allowed, fill) {
		if !m.Complete() {
			continue
		}
		sql, err := verified.Bind(m.Entry.SQL, m.Values)
		if err != nil || !e.pairUsable(a, memory.Pair{SQL: sql, Source: memory.PairOperator}) {
			continue
		}
		if !m.Answers() {
			if a.verifiedExample == nil {
				q := m.Entry.Question
				for name, v := range m.Values {
					q = strings.ReplaceAll(q, "{"+name+"}", v)
				}
				a.verifiedExample = &prompts.Example{Question: q, SQL: sql}
				st.Note = fmt.Sprintf("near miss %s (%.2f): a strong example", m.Entry.Name, m.Score)
			}
			continue
		}
		stmt, err := guard.Seal(sql, e.guardOptions(a))
		if err != nil {
			st.Note = fmt.Sprintf("%s matched (%.2f) but its SQL is refused: %v", m.Entry.Name, m.Score, err)
			e.Logger.Warn("verified query refused by the guard", zap.String("database", a.req.Database), zap.String("name", m.Entry.Name), zap.Error(err))
			continue
		}
		st.Note = fmt.Sprintf("answered by %s (%.2f)", m.Entry.Name, m.Score)
		e.verifiedUses.add(a.req.Database, m.Entry.Name)
		return &Result{Statement: stmt, Chosen: -1, Confidence: 1, Verified: m.Entry.Name}, true
	}
	return nil, false
}

// paramFiller finds, for a parameter's column, the values the question
// spells: exact value-index hits of runs of its words in that column, among
// the values the asker may see.
func (e *Engine) paramFiller(ctx context.Context, a *ask) func(column string) []verified.Filled {
	var hits []valueindex.Match
	looked := false
	return func(column string) []verified.Filled {
		if a.snap.Values == nil {
			return nil
		}
		if !looked {
			looked = true
			hits = visibleValues(a.schema0, a.sess.secured, a.snap.Values.Lookup(ctx, wordRuns(a.req.Question, maxParamWords), valueindex.LookupOptions{MinScore: 0.99}))
		}
		var out []verified.Filled
		for _, h := range hits {
			if !h.Exact || h.Alias {
				continue
			}
			if column == h.Schema+"."+h.Table+"."+h.Column || column == h.Table+"."+h.Column {
				out = append(out, verified.Filled{Text: h.Keyword, Value: h.Value})
			}
		}
		// The longest spelling first: "New York City" before "York".
		for i := 1; i < len(out); i++ {
			for j := i; j > 0 && len(out[j].Text) > len(out[j-1].Text); j-- {
				out[j], out[j-1] = out[j-1], out[j]
			}
		}
		return out
	}
}

// wordRuns are the runs of 1..n consecutive words of q (punctuation
// dropped), for looking values up.
func wordRuns(q string, n int) []string {
	words := strings.FieldsFunc(q, func(r rune) bool {
		return !(r == '\'' || r == '-' || r == '.' || r == '&' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r > 127)
	})
	var out []string
	seen := map[string]bool{}
	for i := range words {
		for k := 1; k <= n && i+k <= len(words); k++ {
			s := strings.Trim(strings.Join(words[i:i+k], " "), ".'")
			if s != "" && !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// withVerified puts the near-missed verified query first among the
// examples (bounded like them).
func (e *Engine) withVerified(a *ask, ex []prompts.Example) []prompts.Example {
	if a.verifiedExample == nil {
		return ex
	}
	out := append([]prompts.Example{*a.verifiedExample}, ex...)
	if len(out) > maxExamples {
		out = out[:maxExamples]
	}
	return out
}
