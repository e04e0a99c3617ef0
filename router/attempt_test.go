package router

import (
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/internal/pg"
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
