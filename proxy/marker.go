package proxy

import (
	"bytes"
	"strings"

	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/sqlscan"
)

// MarkerKind says which natural-language form a statement carries.
type MarkerKind int

const (
	// MarkerNone is ordinary SQL.
	MarkerNone MarkerKind = iota
	// MarkerAsk asks for SQL to be generated and run.
	MarkerAsk
	// MarkerAskSQL asks for the generated SQL text only.
	MarkerAskSQL
	// MarkerOptimize asks for the user's own SQL (Marker.Question) to be
	// optimized; the answer is a report, the SQL is not run as such.
	MarkerOptimize
)

func (k MarkerKind) String() string {
	switch k {
	case MarkerAsk:
		return "ask"
	case MarkerAskSQL:
		return "ask-sql"
	case MarkerOptimize:
		return "optimize"
	default:
		return "none"
	}
}

// Marker is a parsed natural-language statement.
type Marker struct {
	Kind     MarkerKind
	Question string
	// Profile is the word in `ask(<profile>):`, lower-cased; "" when the
	// marker names none. The proxy does not interpret it: the translator
	// decides which names exist.
	Profile string
	// Statement, for the table-function form (nlproxy.ask('…') in FROM,
	// see askfunc.go), is the whole statement: the answer takes the call's
	// place in it (Embed). "" for the other forms.
	Statement string

	unreadable error     // the question is not valid in the client's encoding
	invalid    *pg.Error // the table-function form is misused
}

// ParseMarker recognizes a natural-language statement. Forms (keywords are
// case-insensitive, leading whitespace is allowed):
//
//	-- ask: q          the question is the rest of the text; following lines
//	-- ask-sql: q      are part of it (a leading "--" on them is dropped)
//	/* ask: q */       the text inside the comment, plus any text after the
//	/* ask-sql: q */   comment (psql users type `/* ask: */ how many…;`)
//	ASK q              "ASK" followed by whitespace; the rest is the question
//	-- optimize: SQL   the user's SQL to optimize, in either comment form;
//	/* optimize: SQL */ later lines are SQL as written (comments stay comments)
//
// Each form may name a profile right after the keyword: `-- ask(max): q`,
// `/* ask-sql(fast): q */`, `ASK(balanced) q`.
//
// The question is trimmed and a trailing ';' dropped. An empty question
// (`/* ask: */;`, `ASK;`, `-- ask:`, or a comment with no question followed
// by SQL) is an ask that fails with "the question is empty". Ordinary SQL is
// rejected after looking at its first non-space bytes.
func ParseMarker(sql string) Marker {
	sc := sqlscan.NewScanner(sql, sqlscan.Options{})
	tok := sc.Next()
	if tok.Kind == sqlscan.Space {
		tok = sc.Next()
	}
	switch tok.Kind {
	case sqlscan.LineComment:
		return lineMarker(sql[tok.Start+2:])
	case sqlscan.BlockComment:
		if tok.Unterminated {
			return Marker{}
		}
		return blockMarker(sql[tok.Start+2:tok.End-2], sql[tok.End:])
	case sqlscan.Ident:
		if strings.EqualFold(sql[tok.Start:tok.End], "ask") {
			return askMarker(sql[tok.End:])
		}
	}
	return Marker{}
}

// lineMarker reads `-- ask: q` (s follows the dashes): the question is the
// rest of the text.
func lineMarker(s string) Marker {
	kind, profile, rest, ok := markerKeyword(s)
	switch {
	case !ok:
		return Marker{}
	case kind == MarkerOptimize:
		// SQL: a later line starting with "--" is its own comment, and
		// dropping the dashes would make it code (an alias, a filter).
		return finish(kind, profile, rest)
	}
	return finish(kind, profile, joinCommentLines(rest))
}

// blockMarker reads `/* ask: q */ after`: inside is the comment's text
// (nested comments included), after what follows it.
func blockMarker(inside, after string) Marker {
	kind, profile, rest, ok := markerKeyword(inside)
	if !ok {
		return Marker{}
	}
	q := strings.TrimSpace(rest)
	after = trimQuestion(after)
	switch {
	case after == "":
	case q == "" && kind != MarkerOptimize && looksLikeSQL(after):
		// `/* ask: */ SELECT 1;` asks nothing: SQL is not a question.
		return finish(kind, profile, "")
	case q == "":
		q = after
	default:
		q += "\n" + after
	}
	return finish(kind, profile, q)
}

// askMarker reads `ASK q` or `ASK(profile) q` (rest follows the keyword).
func askMarker(rest string) Marker {
	if trimQuestion(rest) == "" {
		return finish(MarkerAsk, "", "") // `ASK;`: an empty question
	}
	profile := ""
	if rest[0] == '(' {
		var ok bool
		if profile, rest, ok = markerProfile(rest); !ok {
			return Marker{}
		}
	} else if !isSpace(rest[0]) {
		return Marker{}
	}
	return finish(MarkerAsk, profile, rest)
}

// mightAskPrefix is how much of a Query or Parse body mightAsk needs when
// the message is not whole in the read buffer.
const mightAskPrefix = 256

// mightAsk is the relays' one entry decision on a client Query or Parse
// (feQuery, feParse): false means the message carries no ask in any form and is
// passed on untouched. Both relays call it (the goroutine relay's
// clientQuery and clientParse, the event loop's clientMsg), and both decide
// what it lets through with queryAsk and parseAsk, so a new form of ask is
// taught to the proxy here, once. body is the message body: whole when
// complete, else at least its first mightAskPrefix bytes.
//
// It runs for every relayed Query and Parse: it looks at the first bytes
// (a marker, transaction control then more statements) and scans the whole
// for the table-function form with a vectorized byte search; no
// allocation.
func mightAsk(typ byte, body []byte, complete bool) bool {
	switch typ {
	case feQuery:
		head := body[:min(len(body), 64)]
		if maybeMarker(head) || maybeTxPrefix(head, complete && len(body) <= 64) {
			return true
		}
	case feParse:
		// The statement name comes first; one longer than looked at is no
		// name a driver makes: read whole.
		i := bytes.IndexByte(body[:min(len(body), mightAskPrefix)], 0)
		if i < 0 || maybeMarker(body[i+1:min(len(body), i+65)]) {
			return true
		}
	default:
		return false
	}
	// A message longer than the read buffer cannot be scanned in place.
	return !complete || mayHoldAskFunc(body)
}

// maybeMarker is the hot-path pre-check on the first bytes of a statement:
// false means ParseMarker would certainly return MarkerNone.
func maybeMarker(b []byte) bool {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	if i == len(b) {
		// Only whitespace seen so far; cannot decide from a prefix.
		return true
	}
	switch b[i] {
	case '-', '/', 'a', 'A':
		return true
	}
	return false
}

// markerWords are the marker keywords after a comment opener, longest
// first where one starts another.
var markerWords = [...]struct {
	word string
	kind MarkerKind
}{{"optimize", MarkerOptimize}, {"ask-sql", MarkerAskSQL}, {"ask", MarkerAsk}}

// markerKeyword parses `ask:`, `ask-sql:` or either with `(<profile>)`,
// or `optimize:`, after the comment opener.
func markerKeyword(s string) (kind MarkerKind, profile, rest string, ok bool) {
	s = trimBlanks(s)
	for _, w := range markerWords {
		if len(s) > len(w.word) && strings.EqualFold(s[:len(w.word)], w.word) {
			kind, s = w.kind, s[len(w.word):]
			break
		}
	}
	if kind == MarkerNone {
		return MarkerNone, "", "", false
	}
	if s[0] == '(' && kind != MarkerOptimize {
		if profile, s, ok = markerProfile(s); !ok {
			return MarkerNone, "", "", false
		}
	}
	s = trimBlanks(s)
	if s == "" || s[0] != ':' {
		return MarkerNone, "", "", false
	}
	return kind, profile, s[1:], true
}

// trimBlanks drops leading spaces and tabs (a loop: this runs per marker).
func trimBlanks(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	return s
}

// maxProfileName bounds the word in `ask(<profile>)`.
const maxProfileName = 32

// markerProfile parses `(<word>)` at the start of s: a name of letters,
// digits, '_' or '-', lower-cased. Anything else is not a marker, so such
// text reaches Postgres unchanged.
func markerProfile(s string) (profile, rest string, ok bool) {
	end := strings.IndexByte(s, ')')
	if end < 2 || end > maxProfileName+1 {
		return "", "", false
	}
	name := s[1:end]
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return "", "", false
		}
	}
	return strings.ToLower(name), s[end+1:], true
}

func joinCommentLines(s string) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	lines := strings.Split(s, "\n")
	for j := 1; j < len(lines); j++ {
		l := strings.TrimLeft(lines[j], " \t")
		if strings.HasPrefix(l, "--") {
			lines[j] = l[2:]
		}
	}
	return strings.Join(lines, "\n")
}

func finish(kind MarkerKind, profile, q string) Marker {
	q = trimQuestion(q)
	switch {
	case q == "" && kind == MarkerOptimize:
		return Marker{}
	case q == "":
		// Every form of an empty ask fails alike (not an empty reply, not a
		// syntax error, not a wait for the model).
		return Marker{Kind: kind, Profile: profile, invalid: &pg.Error{Severity: "ERROR", Code: pg.CodeSyntaxError,
			Message: "nlproxy: the question is empty",
			Hint:    "Write the question after the marker, e.g. /* ask: how many orders are open? */"}}
	}
	return Marker{Kind: kind, Question: q, Profile: profile}
}

// looksLikeSQL: text starts with a keyword that begins a SQL statement.
func looksLikeSQL(text string) bool {
	word, _, _ := strings.Cut(strings.TrimSpace(text), " ")
	word, _, _ = strings.Cut(word, "\n")
	switch strings.ToUpper(strings.TrimRight(word, ";(")) {
	case "SELECT", "WITH", "VALUES", "TABLE", "INSERT", "UPDATE", "DELETE", "MERGE", "EXPLAIN", "SHOW", "SET",
		"CREATE", "DROP", "ALTER", "BEGIN", "COMMIT", "ROLLBACK", "COPY", "CALL", "DO", "GRANT", "REVOKE", "TRUNCATE":
		return true
	}
	return false
}

func trimQuestion(q string) string {
	q = strings.TrimSpace(q)
	for strings.HasSuffix(q, ";") {
		q = strings.TrimSpace(q[:len(q)-1])
	}
	return q
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
