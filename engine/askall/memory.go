package askall

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/embedding"
)

// Memory is the database selection memory: one summary per database
// (tables, columns, comments, stored examples), ranked against a question
// with BM25 and, when an embedder is given, blended with embedding cosine
// (descindex). It is independent of the chat model, so adding a database
// needs no prompt change, and it bounds what the planner must read to the
// top K databases.
type Memory struct {
	index *descindex.Index
	names []string
}

// Candidate is a database ranked for a question.
type Candidate struct {
	Database string
	Score    float64
}

// Maximum examples per column in a summary: enough for names of places,
// categories and statuses to match, few enough not to drown the schema.
const summaryExamples = 5

// NewMemory indexes the snapshots' summaries. emb may be nil (lexical only).
func NewMemory(snaps []*catalog.Snapshot, emb embedding.Embedder) *Memory {
	docs := make([]descindex.Doc, 0, len(snaps))
	names := make([]string, 0, len(snaps))
	for _, s := range snaps {
		docs = append(docs, descindex.Doc{Kind: descindex.KindGlossary, Term: s.Database, Text: Summary(s)})
		names = append(names, s.Database)
	}
	return &Memory{index: descindex.New(docs, descindex.Options{Embedder: emb}), names: names}
}

// Summary is the text a database is found by: per table its name, comment,
// column names, column comments and a few stored examples.
func Summary(s *catalog.Snapshot) string {
	var b strings.Builder
	if s.Schema == nil {
		return s.Database
	}
	for _, t := range s.Schema.Tables {
		b.WriteString(t.Name)
		if t.Comment != "" {
			b.WriteString(" — " + t.Comment)
		}
		b.WriteString(":")
		for _, c := range t.Columns {
			b.WriteString(" " + c.Name)
			if c.Comment != "" {
				b.WriteString(" (" + c.Comment + ")")
			}
			if c.Stats != nil && len(c.Stats.Examples) > 0 {
				ex := c.Stats.Examples[:min(len(c.Stats.Examples), summaryExamples)]
				b.WriteString(" [" + strings.Join(ex, ", ") + "]")
			}
			b.WriteString(";")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Top returns up to k databases for question, best first. Databases that
// share no term with the question come last, in their configured order,
// so a vague question still reaches k candidates.
func (m *Memory) Top(ctx context.Context, question string, k int) []Candidate {
	if k <= 0 || len(m.names) == 0 {
		return nil
	}
	hits := m.index.Search(ctx, question, len(m.names))
	out := make([]Candidate, 0, k)
	seen := map[string]bool{}
	for _, h := range hits {
		if len(out) == k {
			return out
		}
		out = append(out, Candidate{Database: h.Term, Score: h.Score})
		seen[h.Term] = true
	}
	for _, n := range m.names {
		if len(out) == k {
			break
		}
		if !seen[n] {
			out = append(out, Candidate{Database: n})
		}
	}
	return out
}

// Rank is the 1-based position of database among all ranked for question
// (0: not ranked), for recall measurements.
func (m *Memory) Rank(ctx context.Context, question, database string) int {
	for i, c := range m.Top(ctx, question, len(m.names)) {
		if c.Database == database {
			return i + 1
		}
	}
	return 0
}

// memoryKey identifies the snapshots a Memory was built from.
func memoryKey(snaps []*catalog.Snapshot) string {
	parts := make([]string, 0, len(snaps))
	for _, s := range snaps {
		fp := ""
		if s.Schema != nil {
			fp = s.Schema.Fingerprint
		}
		parts = append(parts, fmt.Sprintf("%s@%d/%s", s.Database, s.Version, fp))
	}
	sort.Strings(parts)
	return strings.Join(parts, "\x00")
}
