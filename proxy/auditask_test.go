package proxy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nlproxy/nlproxy/internal/askreport"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/redact"
)

func TestRedactRecord(t *testing.T) {
	const secret = "Ada-4711"
	rec := &AskRecord{User: "ann", Kind: MarkerAsk, Question: "orders of '" + secret + "' " + strings.Repeat("please ", 1<<20),
		Err: &pg.Error{Code: "22P02", Message: `invalid input syntax for type integer: "` + secret + `"`},
		Report: &askreport.Report{SQL: "SELECT * FROM orders WHERE customer = '" + secret + "'",
			Stages:     []askreport.Stage{{Name: "keywords", Note: "orders, " + secret}, {Name: "trial", Note: "guard: function " + secret + " refused"}},
			Candidates: []askreport.Candidate{{SQL: "SELECT '" + secret + "'", Problem: `column "` + secret + `" does not exist`}}}}
	orig, _ := json.Marshal(rec)
	for _, tc := range []struct {
		name string
		p    redact.Policy
		hide bool
	}{
		{"off: bounded only", redact.Policy{}, false},
		{"question and literals", redact.Policy{Questions: true, Literals: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := json.Marshal(RedactRecord(rec, tc.p))
			if err != nil {
				t.Fatal(err)
			}
			if len(out) > 8*redact.MaxField {
				t.Errorf("record is %d bytes", len(out))
			}
			if got := strings.Contains(string(out), secret); got == tc.hide {
				t.Errorf("secret shown: %v, want %v: %s", got, !tc.hide, out)
			}
			if tc.hide && !strings.Contains(string(out), `"Note":"guard: [redacted]"`) {
				t.Errorf("the guard note lost its label: %s", out)
			}
		})
	}
	if now, _ := json.Marshal(rec); string(now) != string(orig) {
		t.Error("RedactRecord changed its argument")
	}
}
