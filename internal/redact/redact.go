// Package redact is how every record of an ask — the engine's log lines,
// the audit log, the admin page — withholds what the operator asked to
// withhold (--audit-redact) and stays bounded: one policy, applied the same
// way wherever an ask is written down.
package redact

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxField bounds every text field of a record (question, SQL, notes,
// errors): longer text is cut, with a marker saying how much was left out.
const MaxField = 16 << 10

// Policy says what a record withholds. The zero value withholds nothing
// but still bounds every field.
type Policy struct {
	// Questions replaces the question with a digest (equal questions keep
	// equal digests, so repeats can still be counted); free text that may
	// echo it (stage notes, errors) keeps only its leading label.
	Questions bool
	// Literals replaces constants in SQL with $1, $2… and quoted text and
	// numbers in the question and in free text with ?.
	Literals bool
}

// Question is the question as a record may show it.
func (p Policy) Question(q string) string {
	switch {
	case p.Questions:
		return Digest(q)
	case p.Literals:
		return clipThen(q, MaxField, QuestionLiterals)
	}
	return Clip(q, MaxField)
}

// SQL is SQL (generated or the user's) as a record may show it.
func (p Policy) SQL(sql string) string {
	if p.Literals && sql != "" {
		if len(sql) > MaxField {
			return fmt.Sprintf("[redacted: %d bytes]", len(sql)) // a cut statement would not parse
		}
		return Clip(SQL(sql), MaxField)
	}
	return Clip(sql, MaxField)
}

// Text is free text that may quote values or echo the question (a stage
// note, a server's or the engine's error message) as a record may show it.
// Under Questions only a leading label such as "guard:" is kept: metrics
// and people still see which kind of note it was.
func (p Policy) Text(s string) string {
	switch {
	case s == "":
		return ""
	case p.Questions:
		if i := strings.IndexByte(s, ':'); i > 0 && i <= 32 && isLabel(s[:i]) {
			return s[:i+1] + " [redacted]"
		}
		return "[redacted]"
	case p.Literals:
		return clipThen(s, MaxField, QuestionLiterals)
	}
	return Clip(s, MaxField)
}

// Note is a trace note (what a stage chose: keywords and literals taken
// from the question, values matched in the database, a server's error) as
// a record may show it. Its words come from the question unquoted, so
// under either redaction only a leading label such as "guard:" is kept.
func (p Policy) Note(s string) string {
	if p.On() {
		return Policy{Questions: true}.Text(s)
	}
	return Clip(s, MaxField)
}

// On reports whether the policy withholds anything.
func (p Policy) On() bool { return p.Questions || p.Literals }

func isLabel(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// clipThen is Clip with f applied to the part kept (f never lengthens
// text by much: it replaces literals with "?").
func clipThen(s string, n int, f func(string) string) string {
	cut := clipAt(s, n)
	if cut == len(s) {
		return f(s)
	}
	return f(s[:cut]) + fmt.Sprintf("…(+%d bytes)", len(s)-cut)
}

// clipRoom is kept for the marker, so that clipped text is at most n
// bytes and clipping it again changes nothing.
const clipRoom = 24

func clipAt(s string, n int) int {
	if len(s) <= n {
		return len(s)
	}
	cut := max(n-clipRoom, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return cut
}

// Clip cuts s to at most n bytes, marker included (at a rune boundary),
// and says how many were left out: "…(+N bytes)".
func Clip(s string, n int) string {
	cut := clipAt(s, n)
	if cut == len(s) {
		return s
	}
	return s[:cut] + fmt.Sprintf("…(+%d bytes)", len(s)-cut)
}

// Digest stands for a redacted question.
func Digest(q string) string {
	sum := sha256.Sum256([]byte(q))
	return "redacted:" + hex.EncodeToString(sum[:8])
}

// QuestionLiterals replaces quoted text and numbers in a question with
// "?": those are where names, ids and amounts appear.
func QuestionLiterals(q string) string {
	var b strings.Builder
	rs := []rune(q)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == '\'' || c == '"' || c == '“' || c == '‘' || c == '«':
			closeWith := map[rune]rune{'\'': '\'', '"': '"', '“': '”', '‘': '’', '«': '»'}[c]
			j := i + 1
			for j < len(rs) && rs[j] != closeWith {
				j++
			}
			if j == len(rs) { // unbalanced: an apostrophe in a word
				b.WriteRune(c)
				continue
			}
			b.WriteString("?")
			i = j
		case unicode.IsDigit(c):
			// 1,250.75 is one number: a separator counts when a digit follows.
			for i+1 < len(rs) && (unicode.IsDigit(rs[i+1]) ||
				(rs[i+1] == '.' || rs[i+1] == ',') && i+2 < len(rs) && unicode.IsDigit(rs[i+2])) {
				i++
			}
			b.WriteString("?")
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}
