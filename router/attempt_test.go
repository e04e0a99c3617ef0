package router

import (
	"context"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/proxy"
)

// A failed ask-sql: answers with its row, not an ERROR: the columns of a
// success, the last attempt as sql, the trace, and the error column with
// the detail and hint on lines of their own.
func TestShowAttempt(t *testing.T) {
	pe := &pg.Error{Code: pg.CodeNoUsableSQL, Message: "nlproxy: no usable SQL", Detail: "the last attempt failed",
		Hint: "Rephrase the question, or name the tables or columns you mean."}
	f := &engine.Failed{Trace: &engine.Trace{}, Profile: "fast", Candidates: []*engine.Candidate{
		{Generator: "direct", SQL: "SELECT 1"}, {Generator: "cot", SQL: "SELECT\n  nme FROM t"}, {Generator: "empty"}}}
	row := failedRow(f, pe, time.Now())
	if len(row) != len(askSQLColumns) {
		t.Fatalf("%d values for %d columns", len(row), len(askSQLColumns))
	}
	got := map[string]*string{}
	for i, c := range askSQLColumns {
		got[c] = row[i]
	}
	want := map[string]string{"sql": "SELECT\n  nme FROM t", "llm_calls": "0", "cached": "false", "profile": "fast", "trace": "[]",
		"error": pg.CodeNoUsableSQL + ": nlproxy: no usable SQL\nDETAIL: the last attempt failed\nHINT: Rephrase the question, or name the tables or columns you mean."}
	for c, w := range want {
		if got[c] == nil || *got[c] != w {
			t.Errorf("%s = %v, want %q", c, got[c], w)
		}
	}
	for _, c := range []string{"confidence", "literals", "understood_as", "verified"} {
		if got[c] != nil {
			t.Errorf("%s = %q, want NULL", c, *got[c])
		}
	}
	if r := failedRow(&engine.Failed{}, &pg.Error{Code: pg.CodeQueryCanceled, Message: "timed out"}, time.Now()); *r[0] != "" || *r[12] != pg.CodeQueryCanceled+": timed out" {
		t.Errorf("no attempt: sql %q, error %q", *r[0], *r[12])
	}

	ask := proxy.TranslateRequest{Marker: proxy.Marker{Kind: proxy.MarkerAskSQL, Question: "how many?"}}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		req  proxy.TranslateRequest
		code string
		want bool
	}{
		{"no usable SQL", context.Background(), ask, pg.CodeNoUsableSQL, true},
		{"abstained", context.Background(), ask, pg.CodeAbstained, true},
		{"ask budget", context.Background(), ask, pg.CodeQueryCanceled, true},
		{"client cancelled", cancelled, ask, pg.CodeQueryCanceled, false},
		{"aborted transaction", context.Background(), ask, pg.CodeInFailedTransaction, false},
		{"empty question", context.Background(), proxy.TranslateRequest{Marker: proxy.Marker{Kind: proxy.MarkerAskSQL, Question: " "}}, pg.CodeSyntaxError, false},
	}
	for _, tt := range tests {
		if got := showsAttempt(tt.ctx, tt.req, &pg.Error{Code: tt.code}); got != tt.want {
			t.Errorf("%s: showsAttempt = %v, want %v", tt.name, got, tt.want)
		}
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
