package runner

import (
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/internal/pg"
)

func TestMarker(t *testing.T) {
	tests := []struct{ profile, text, want string }{
		{"", "How many?", "/* ask-sql: How many? */"},
		{"max", "a */ b\nnext", "/* ask-sql(max): a * / b\nnext */"},
	}
	for _, tt := range tests {
		if got := Marker(tt.profile, tt.text); got != tt.want {
			t.Errorf("Marker(%q, %q) = %q, want %q", tt.profile, tt.text, got, tt.want)
		}
	}
}

func TestDecodeResults(t *testing.T) {
	good := `{"id":"a/q1","outcome":"correct"}` + "\n" + `{"id":"a/q2","outcome":"wrong"}` + "\n"
	rs, err := decodeResults(strings.NewReader(good+`{"id":"a/q3","outc`), "f")
	if err != nil || len(rs) != 2 {
		t.Fatalf("a cut-short last line: %d results, %v", len(rs), err)
	}
	if _, err := decodeResults(strings.NewReader(`{"id":`+"\n"+good), "f"); err == nil {
		t.Error("a bad line before good ones was accepted")
	}
	r := Result{Unanswerable: true, Outcome: Abstained}
	if !r.Right() || (Result{Outcome: Abstained}).Right() || !(Result{Outcome: Subset}).Right() {
		t.Error("Right()")
	}
}

// A failed ask-sql's error column reads back as the error a failed ask:
// gives, so abstentions and errors are counted as before.
func TestAskSQLError(t *testing.T) {
	tests := []struct{ col, code, msg, detail, hint string }{
		{pg.CodeAbstained + ": nlproxy: the data does not answer\nDETAIL: Missing: x\nHINT: Ask about the tables.", pg.CodeAbstained, "nlproxy: the data does not answer", "Missing: x", "Ask about the tables."},
		{pg.CodeNoUsableSQL + ": nlproxy: no usable SQL\nHINT: Rephrase.", pg.CodeNoUsableSQL, "nlproxy: no usable SQL", "", "Rephrase."},
		{pg.CodeQueryCanceled + ": timed out\nDETAIL: one\ntwo", pg.CodeQueryCanceled, "timed out", "one\ntwo", ""},
		{"no code here", "", "no code here", "", ""},
	}
	for _, tt := range tests {
		pe := askSQLError(tt.col)
		if pe.Code != tt.code || pe.Message != tt.msg || pe.Detail != tt.detail || pe.Hint != tt.hint {
			t.Errorf("%q: %q %q %q %q", tt.col, pe.Code, pe.Message, pe.Detail, pe.Hint)
		}
	}
	r := askFailed(Result{SQL: "SELECT 1"}, askSQLError(tests[0].col))
	if r.Outcome != Abstained || r.SQLState != pg.CodeAbstained || r.Error != "nlproxy: the data does not answer (Missing: x)" || r.SQL != "SELECT 1" {
		t.Errorf("abstained: %+v", r)
	}
	if r := askFailed(Result{}, askSQLError(tests[1].col)); r.Outcome != Error || r.SQLState != pg.CodeNoUsableSQL || r.Hint != "Rephrase." {
		t.Errorf("error: %+v", r)
	}
}
