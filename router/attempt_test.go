package router

import (
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/proxy"
)

// A failed ask-sql: shows the attempt in its error rather than sending the
// user to ask-sql:, which is what they ran.
func TestShowAttempt(t *testing.T) {
	pe := &pg.Error{Code: pg.CodeSyntaxError, Message: "nlproxy: no usable SQL",
		Hint: "Rephrase the question, name the tables or columns you mean, or use ask-sql: to see the attempt."}
	showAttempt(pe, &engine.Failed{Trace: &engine.Trace{}, Candidates: []*engine.Candidate{{Generator: "direct", SQL: "SELECT\n  nme FROM t"}}})
	if !strings.Contains(pe.Detail, "Attempt (direct): SELECT nme FROM t") || !strings.Contains(pe.Detail, "Trace: ") {
		t.Errorf("detail = %q", pe.Detail)
	}
	if strings.Contains(pe.Hint, "ask-sql") || pe.Hint != "Rephrase the question, name the tables or columns you mean." {
		t.Errorf("hint = %q", pe.Hint)
	}
}

// Progress NOTICEs start once the ask has run ProgressAfter, say how long
// it has run, and --no-progress turns them off.
func TestProgress(t *testing.T) {
	var got []string
	req := proxy.TranslateRequest{Progress: func(m string) { got = append(got, m) }}
	now := time.Now()
	Translator{}.progress(req, now)("generating candidate 1/3") // under 2 s: nothing
	Translator{}.progress(req, now.Add(-9500*time.Millisecond))("generating candidate 2/3")
	if p := (Translator{NoProgress: true}).progress(req, now.Add(-time.Hour)); p != nil {
		t.Error("progress with NoProgress")
	}
	if p := (Translator{}).progress(proxy.TranslateRequest{}, now); p != nil {
		t.Error("progress without a client to send it to")
	}
	if len(got) != 1 || got[0] != "nlproxy: generating candidate 2/3 (9 s)" {
		t.Errorf("notices %q", got)
	}
}
