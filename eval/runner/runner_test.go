package runner

import (
	"strings"
	"testing"
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
