// Package conversation holds the recent asks of one client session, so a
// follow-up question ("only in 2024", "and their cities?") can be read
// against them. The proxy gives each session its own History and drops it
// with the session; it is never shared, stored or cached across sessions.
// A turn keeps the question, the settled SQL, the result's columns and row
// count, never rows.
package conversation

import (
	"strings"
	"sync"
)

// Bounds of a history: the few latest turns, within a small budget of
// text (about MaxBytes/4 tokens of prompt).
const (
	MaxTurns = 3
	MaxBytes = 2400
	// Per turn, the longest question and SQL kept, and the columns named.
	maxQuestion = 400
	maxSQL      = 1000
	maxColumns  = 16
)

// Turn is one answered ask.
type Turn struct {
	Question string // as asked
	// Standalone is the question as the engine understood it when it was
	// a follow-up ("" when it stood alone).
	Standalone string
	SQL        string   // the settled SQL, as the model may see it
	Columns    []string // the result's column names
	Rows       int      // rows of the trial run
	More       bool     // the trial run stopped at its row limit
}

// Asked is the question the turn answered: the standalone reading when
// there was one.
func (t Turn) Asked() string {
	if t.Standalone != "" {
		return t.Standalone
	}
	return t.Question
}

func (t Turn) size() int {
	n := len(t.Question) + len(t.Standalone) + len(t.SQL)
	for _, c := range t.Columns {
		n += len(c) + 2
	}
	return n + 16
}

// History is a session's recent turns; the zero value is empty and ready.
// Safe for concurrent use (the relay resets it while an ask may read it).
type History struct {
	mu    sync.Mutex
	turns []Turn
}

// Turns returns a copy of the turns, oldest first; nil for a nil History.
func (h *History) Turns() []Turn {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Turn(nil), h.turns...)
}

// Add appends a turn, clipped, and drops the oldest ones beyond MaxTurns
// or MaxBytes. A nil History ignores it.
func (h *History) Add(t Turn) {
	if h == nil {
		return
	}
	t.Question = clip(t.Question, maxQuestion)
	t.Standalone = clip(t.Standalone, maxQuestion)
	t.SQL = clip(t.SQL, maxSQL)
	if len(t.Columns) > maxColumns {
		t.Columns = append(t.Columns[:maxColumns:maxColumns], "…")
	} else {
		t.Columns = append([]string(nil), t.Columns...)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.turns = append(h.turns, t)
	if len(h.turns) > MaxTurns {
		h.turns = h.turns[len(h.turns)-MaxTurns:]
	}
	for total(h.turns) > MaxBytes && len(h.turns) > 1 {
		h.turns = h.turns[1:]
	}
}

// Reset forgets every turn (DISCARD ALL, the ask(new) marker).
func (h *History) Reset() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.turns = nil
	h.mu.Unlock()
}

// Len is the number of turns kept.
func (h *History) Len() int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.turns)
}

func total(ts []Turn) int {
	n := 0
	for _, t := range ts {
		n += t.size()
	}
	return n
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary.
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
