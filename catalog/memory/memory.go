// Package memory is what nlproxy remembers across asks: question→SQL pairs
// shown as few-shot examples, and translations cached for re-asked
// questions, with the interfaces a store implements to share them between
// replicas. The engine uses these types; catalog/store implements the
// interfaces without knowing the engine.
package memory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
)

// Pair is a question→SQL pair remembered for a database, shown to the model
// as a few-shot example when a new question resembles it.
type Pair struct {
	Question string
	SQL      string
	// Source: PairOperator (added by an operator), PairAccepted (an ask
	// that a user re-ran unchanged) or PairWorkload (written by the model
	// from a query the database runs).
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
	// PairWorkload pairs are shown to every role that may read every
	// relation and column their SQL names.
	PairWorkload = "workload"
)

// PairStore remembers pairs per database. MemoryPairs keeps them in the
// process; a shared store lets replicas learn from each other.
type PairStore interface {
	AddPair(ctx context.Context, database string, p Pair) error
	Pairs(ctx context.Context, database string) ([]Pair, error)
}

// SimilarPairStore is a PairStore that can also rank its pairs by how near
// their questions are in meaning (an embedding model): the examples a
// prompt shows are then the k nearest, as DAIL-SQL picks them, rather than
// those sharing the most words. An error (no embedding model, the model
// down) makes the engine fall back to words.
type SimilarPairStore interface {
	PairStore
	SimilarPairs(ctx context.Context, database, question string, k int) ([]Pair, error)
}

// ErrNoEmbedder: the pair store has no embedding model to rank by meaning.
var ErrNoEmbedder = errors.New("engine: no embedding model for similar pairs")

// NormalizeQuestion folds case, whitespace and trailing punctuation so that
// "How many orders?" and "how many  orders" share a cache entry.
func NormalizeQuestion(q string) string {
	q = strings.ToLower(strings.Join(strings.Fields(q), " "))
	return strings.TrimRightFunc(q, func(r rune) bool { return unicode.IsPunct(r) || unicode.IsSpace(r) })
}

// CacheEntry is what the cache keeps of an answer: the SQL and the
// confidence it was chosen with (-1: unknown), so that a re-asked question
// reports the same confidence.
type CacheEntry struct {
	SQL        string
	Confidence float64
	// Rewrites are the literals literal correction changed in SQL, told
	// again with each answer served from the cache.
	Rewrites []LiteralRewrite
}

// LiteralRewrite is one string literal that literal correction changed, for
// the NOTICE, the trace and the evaluation harness.
type LiteralRewrite struct {
	Table  string `json:"table"` // "schema.table"
	Column string `json:"column"`
	From   string `json:"from"`
	To     string `json:"to"`
	// Kind is RewriteCase, RewriteSpace, RewriteValue or RewriteCode.
	Kind string `json:"kind"`
}

// Kinds of literal rewrites.
const (
	RewriteCase  = "case"       // the stored value differs only in letter case
	RewriteSpace = "whitespace" // … only in spaces (padded codes)
	RewriteValue = "value"      // the closest stored value
	RewriteCode  = "code"       // a pattern's text replaced by the data's code
)

// String is the rewrite as people read it: t.c: 'spanish' → 'Spanish' (letter case only).
func (r LiteralRewrite) String() string {
	s := fmt.Sprintf("%s.%s: %s → %s", r.Table, r.Column, quoted(r.From), quoted(r.To))
	switch r.Kind {
	case RewriteCase:
		s += " (letter case only)"
	case RewriteSpace:
		s += " (whitespace only)"
	case RewriteCode:
		s += " (the data's code)"
	}
	return s
}

func quoted(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// CacheBackend is a second cache level shared by proxy replicas (the
// catalog store). Keys are opaque digests; failures only cost a miss.
type CacheBackend interface {
	GetEntry(ctx context.Context, key string) (t CacheEntry, ok bool, err error)
	PutEntry(ctx context.Context, key string, t CacheEntry, expires time.Time) error
}
