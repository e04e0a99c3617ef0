package conversation

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHistoryBounds(t *testing.T) {
	var h History
	for i := 0; i < 5; i++ {
		h.Add(Turn{Question: strings.Repeat("q", i+1), SQL: "SELECT 1", Columns: []string{"a"}, Rows: i})
	}
	got := h.Turns()
	if len(got) != MaxTurns || got[0].Rows != 2 || got[len(got)-1].Rows != 4 {
		t.Fatalf("turns after 5 adds: %+v", got)
	}
	h.Add(Turn{Question: "long", SQL: strings.Repeat("é", 3000), Columns: make([]string, 40)})
	got = h.Turns()
	if total(got) > MaxBytes && len(got) > 1 {
		t.Errorf("history over its budget: %d bytes in %d turns", total(got), len(got))
	}
	last := got[len(got)-1]
	if !utf8.ValidString(last.SQL) || len(last.SQL) > maxSQL+len("…") || len(last.Columns) != maxColumns+1 {
		t.Errorf("turn not clipped: %d bytes of SQL, %d columns", len(last.SQL), len(last.Columns))
	}
	h.Reset()
	if h.Len() != 0 || len(h.Turns()) != 0 {
		t.Error("reset kept turns")
	}
	var nilH *History
	nilH.Add(Turn{Question: "x"})
	nilH.Reset()
	if nilH.Turns() != nil || nilH.Len() != 0 {
		t.Error("a nil history has turns")
	}
}

func TestTurnsAreCopies(t *testing.T) {
	var h History
	cols := []string{"a", "b"}
	h.Add(Turn{Question: "q", Columns: cols})
	cols[0] = "changed"
	ts := h.Turns()
	ts[0].Question = "other"
	if got := h.Turns()[0]; got.Question != "q" || got.Columns[0] != "a" {
		t.Errorf("history changed through a copy: %+v", got)
	}
}
