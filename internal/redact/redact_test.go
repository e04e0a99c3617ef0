package redact

import (
	"strings"
	"testing"
)

func TestRedactQuestionLiterals(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"orders of 'Ada Lovelace' over 1,250.75", "orders of ? over ?"},
		{"customers named \"Bob\" in 2024?", "customers named ? in ??"},
		{"what's the total", "what's the total"}, // an apostrophe is not a quote
		{"sales in «Zürich» and “Genève”", "sales in ? and ?"},
		{"top 5 products", "top ? products"},
		{"version 1.2.3", "version ?"},
		{"no literals here", "no literals here"},
	} {
		if got := QuestionLiterals(tc.in); got != tc.want {
			t.Errorf("QuestionLiterals(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSQL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"SELECT * FROM t WHERE name = 'Ada' AND n > 3", "SELECT * FROM t WHERE name = $1 AND n > $2"},
		{"SELECT count(*) FROM orders", "SELECT count(*) FROM orders"},
		{"SELECT 'unterminated", "[redacted]"},
		{"", ""},
	} {
		if got := SQL(tc.in); got != tc.want {
			t.Errorf("SQL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestClip(t *testing.T) {
	long := strings.Repeat("a", 30) + "\u00e9" + strings.Repeat("b", 30) // 62 bytes
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 40, "short"},
		{long[:40], 40, long[:40]},
		{long, 40, strings.Repeat("a", 16) + "…(+46 bytes)"},
		{long, 55, strings.Repeat("a", 30) + "…(+32 bytes)"}, // never half a rune
	} {
		got := Clip(tc.in, tc.n)
		if got != tc.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
		if len(got) > tc.n || Clip(got, tc.n) != got {
			t.Errorf("Clip(%q, %d) = %q: longer than the bound or not stable", tc.in, tc.n, got)
		}
	}
}

func TestPolicy(t *testing.T) {
	const q = "orders of 'Ada' over 10"
	const sql = "SELECT * FROM orders WHERE customer = 'Ada' AND amount > 10"
	const note = "trial: invalid input syntax for type integer: \"Ada\""
	huge := strings.Repeat("'Ada' 7 ", MaxField/4)
	for _, tc := range []struct {
		name                   string
		p                      Policy
		question, sqlOut, text string
	}{
		{"off", Policy{}, q, sql, note},
		{"literals", Policy{Literals: true}, "orders of ? over ?", "SELECT * FROM orders WHERE customer = $1 AND amount > $2", "trial: invalid input syntax for type integer: ?"},
		{"question", Policy{Questions: true}, Digest(q), sql, "trial: [redacted]"},
		{"both", Policy{Questions: true, Literals: true}, Digest(q), "SELECT * FROM orders WHERE customer = $1 AND amount > $2", "trial: [redacted]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Question(q); got != tc.question {
				t.Errorf("Question = %q, want %q", got, tc.question)
			}
			if got := tc.p.SQL(sql); got != tc.sqlOut {
				t.Errorf("SQL = %q, want %q", got, tc.sqlOut)
			}
			if got := tc.p.Text(note); got != tc.text {
				t.Errorf("Text = %q, want %q", got, tc.text)
			}
			// Every field stays bounded, whatever it is given.
			for what, got := range map[string]string{"question": tc.p.Question(huge), "sql": tc.p.SQL("SELECT '" + huge + "'"), "text": tc.p.Text(huge)} {
				if len(got) > MaxField {
					t.Errorf("%s: %d bytes", what, len(got))
				}
				if (tc.p.Literals || tc.p.Questions && what != "sql") && strings.Contains(got, "Ada") {
					t.Errorf("%s keeps the literal", what)
				}
			}
		})
	}
	if got := (Policy{Questions: true}).Text("keywords ada, lovelace"); got != "[redacted]" {
		t.Errorf("a note without a label: %q", got)
	}
	// Notes hold the question's words unquoted: either redaction keeps
	// only their label.
	for _, p := range []Policy{{Literals: true}, {Questions: true}} {
		if got := p.Note("orders, Ada"); got != "[redacted]" {
			t.Errorf("%+v: Note = %q", p, got)
		}
		if got := p.Note("guard: function ada() refused"); got != "guard: [redacted]" {
			t.Errorf("%+v: Note = %q", p, got)
		}
	}
	if got := (Policy{}).Note("orders, Ada"); got != "orders, Ada" {
		t.Errorf("Note without redaction = %q", got)
	}
}
