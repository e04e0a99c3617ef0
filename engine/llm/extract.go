package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/nlproxy/nlproxy/internal/sqlscan"
)

// Small local models wrap their answers in reasoning, prose, Markdown fences
// and tags; the helpers here dig the payload out. Choices, each covered by a
// test:
//   - <think>/<thinking>/<reasoning> blocks are removed; an unterminated one
//     runs to the end; a closing tag with no opening one (templates that put
//     the opening tag in the prompt) drops everything before it.
//   - Among fenced blocks the LAST one holding a statement wins: models
//     self-correct ("Actually, the correct query is ...") and echo the schema
//     (CREATE TABLE ...) before the answer, never after.
//   - Without fences, <sql>…</sql> tags; without those, the first SELECT or
//     WITH that starts a line (or follows ':' or '`'), up to a top-level ';',
//     a blank line, or the end. Title-case "Select"/"With" at a sentence
//     start is prose, not SQL, outside code blocks.

var (
	reThinkOpen  = regexp.MustCompile(`(?i)<\s*(think|thinking|reasoning)\s*>`)
	reThinkClose = regexp.MustCompile(`(?i)<\s*/\s*(think|thinking|reasoning)\s*>`)
	reSQLTag     = regexp.MustCompile(`(?is)<\s*sql\s*>(.*?)(?:<\s*/\s*sql\s*>|$)`)
	// A statement start inside code: line start, optional '(' for
	// parenthesized set operations.
	reCodeStart = regexp.MustCompile(`(?im)^[ \t]*(?:\(\s*)*\b(select|with)\b`)
	// A statement start in prose: also after "SQL:" or an inline backtick.
	reProseStart = regexp.MustCompile(`(?im)(?:^[ \t>*-]*|:[ \t]*|` + "`" + `)(?:\(\s*)*\b(select|with)\b`)
	reWithCTE    = regexp.MustCompile(`(?is)^with\s+(?:recursive\s+)?(?:"[^"]+"|[\p{L}_][\p{L}\p{N}_$]*)\s*(?:\([^)]*\)\s*)?as\s*(?:not\s+materialized\s*|materialized\s*)?\(`)
)

// StripThink removes reasoning blocks from model output.
func StripThink(s string) string {
	for {
		open := reThinkOpen.FindStringIndex(s)
		closeTag := reThinkClose.FindStringIndex(s)
		switch {
		case closeTag != nil && (open == nil || closeTag[0] < open[0]):
			s = s[closeTag[1]:]
		case open != nil:
			rest := s[open[1]:]
			if c := reThinkClose.FindStringIndex(rest); c != nil {
				s = s[:open[0]] + rest[c[1]:]
			} else {
				s = s[:open[0]]
			}
		default:
			return strings.TrimSpace(s)
		}
	}
}

type fence struct {
	lang string
	body string
}

// fences returns the Markdown code blocks of s in order. Inline fences
// ("```sql SELECT 1```") and an unterminated last fence (output cut off by
// num_predict) count too.
func fences(s string) []fence {
	var out []fence
	for {
		i := strings.Index(s, "```")
		if i < 0 {
			return out
		}
		j := i
		for j < len(s) && s[j] == '`' {
			j++
		}
		rest := s[j:]
		k := strings.Index(rest, "```")
		nl := strings.IndexByte(rest, '\n')
		var f fence
		var inner string
		if nl < 0 || (k >= 0 && k < nl) {
			// Inline: the language tag, if any, is a known word before a space.
			if k >= 0 {
				inner = rest[:k]
			} else {
				inner = rest
			}
			if word, body, ok := strings.Cut(strings.TrimLeft(inner, " \t"), " "); ok && isLangTag(word) {
				f.lang, inner = strings.ToLower(word), body
			}
		} else {
			if fs := strings.Fields(rest[:nl]); len(fs) > 0 {
				f.lang = strings.ToLower(fs[0])
			}
			rest = rest[nl+1:]
			k = strings.Index(rest, "```")
			if k >= 0 {
				inner = rest[:k]
			} else {
				inner = rest
			}
		}
		f.body = inner
		out = append(out, f)
		if k < 0 {
			return out
		}
		s = rest[k:]
		for len(s) > 0 && s[0] == '`' {
			s = s[1:]
		}
	}
}

func isLangTag(w string) bool {
	w = strings.ToLower(w)
	return isSQLLang(w) || isJSONLang(w)
}

func isSQLLang(l string) bool {
	return strings.Contains(l, "sql") || strings.HasPrefix(l, "postgres")
}

func isJSONLang(l string) bool { return l == "json" || l == "jsonc" || l == "json5" }

// ExtractSQL returns the SQL statement in a model's answer, without a
// trailing ';'. It fails with ErrBadOutput when there is none.
func ExtractSQL(text string) (string, error) {
	s := StripThink(text)
	if s == "" {
		return "", badOutput("extract-sql", errors.New("empty answer"), text)
	}
	// A JSON answer such as {"sql": "..."} (the model ignored the format).
	if strings.HasPrefix(s, "{") || strings.Contains(s, "```json") {
		var obj map[string]any
		if ExtractJSON(s, &obj) == nil {
			for _, k := range []string{"sql", "query", "SQL", "sql_query"} {
				if q, ok := obj[k].(string); ok {
					if stmt := statement(q, reCodeStart, false); stmt != "" {
						return stmt, nil
					}
				}
			}
		}
	}
	fs := fences(s)
	var sqlFences, plain []fence
	for _, f := range fs {
		switch {
		case isSQLLang(f.lang):
			sqlFences = append(sqlFences, f)
		case f.lang == "":
			plain = append(plain, f)
		}
	}
	for _, group := range [][]fence{sqlFences, plain} {
		for i := len(group) - 1; i >= 0; i-- {
			if stmt := statement(group[i].body, reCodeStart, false); stmt != "" {
				return stmt, nil
			}
		}
	}
	// A SQL fence holding something other than a query (DELETE, DROP, DO …)
	// is still the model's answer: return it so the guard can reject it with
	// a reason, instead of reporting "no SQL".
	for i := len(sqlFences) - 1; i >= 0; i-- {
		if body := strings.TrimRight(strings.TrimSpace(sqlFences[i].body), "; \t\n"); body != "" {
			return body, nil
		}
	}
	if tags := reSQLTag.FindAllStringSubmatch(s, -1); len(tags) > 0 {
		for i := len(tags) - 1; i >= 0; i-- {
			if stmt := statement(tags[i][1], reCodeStart, false); stmt != "" {
				return stmt, nil
			}
		}
	}
	// Prose: fenced blocks of other languages are not searched.
	if stmt := statement(s, reProseStart, true); stmt != "" {
		return stmt, nil
	}
	return "", badOutput("extract-sql", errors.New("no SELECT or WITH statement found"), text)
}

// statement finds the first statement start matched by re and returns the
// statement up to a top-level ';' (or, in prose, a blank line or closing
// backtick), trimmed. prose rejects title-case sentence starts.
func statement(s string, re *regexp.Regexp, prose bool) string {
	if prose {
		// Upper-case keywords first: "Note: select statements only." is
		// prose, the SELECT below it is the answer.
		if stmt := statementPass(s, re, prose, true); stmt != "" {
			return stmt
		}
	}
	return statementPass(s, re, prose, false)
}

func statementPass(s string, re *regexp.Regexp, prose, upperOnly bool) string {
	for _, m := range re.FindAllStringSubmatchIndex(s, -1) {
		kw := s[m[2]:m[3]]
		if prose && (kw == "Select" || kw == "With") {
			continue
		}
		if upperOnly && kw != strings.ToUpper(kw) {
			continue
		}
		// Start at the '(' of a parenthesized statement, else the keyword.
		start := m[2]
		if p := strings.IndexByte(s[m[0]:m[2]], '('); p >= 0 {
			start = m[0] + p
		}
		backtick := m[0] < len(s) && s[m[0]] == '`'
		end := sqlEnd(s[start:], prose, backtick)
		stmt := strings.TrimSpace(s[start : start+end])
		stmt = strings.TrimSpace(strings.TrimRight(stmt, "`"))
		if strings.EqualFold(kw, "with") && !reWithCTE.MatchString(strings.TrimLeft(stmt, "( \t\n")) {
			continue
		}
		if len(strings.Fields(stmt)) < 2 {
			continue // a bare keyword
		}
		return stmt
	}
	return ""
}

// sqlEnd returns the length of the statement at the start of s: up to the
// first ';' outside quotes, identifiers, comments and dollar quotes; in prose
// also up to a blank line, and after an inline backtick up to the next one.
// It reads with the one SQL scanner (internal/sqlscan), not pg_query's: a
// model's answer runs on into prose, and the ends looked for (a blank line,
// a backtick) are not SQL tokens; an apostrophe in "don't" opens a string
// that runs to the end, as it would on the server.
func sqlEnd(s string, prose, backtick bool) int {
	for t := range sqlscan.Tokens(s, sqlscan.Options{}) {
		switch {
		case t.Kind == sqlscan.Op && (s[t.Start] == ';' || (s[t.Start] == '`' && backtick)):
			return t.Start
		case t.Kind == sqlscan.Space && prose:
			if i := blankLine(s[t.Start:t.End], t.End == len(s)); i >= 0 {
				return t.Start + i
			}
		}
	}
	return len(s)
}

// blankLine returns the index in space of a newline that ends the text or
// is followed by an empty line (spaces, tabs and carriage returns only);
// atEnd says space is the end of the text.
func blankLine(space string, atEnd bool) int {
	for i := strings.IndexByte(space, '\n'); i >= 0; {
		j := i + 1
		for j < len(space) && (space[j] == ' ' || space[j] == '\t' || space[j] == '\r') {
			j++
		}
		if (j == len(space) && atEnd) || (j < len(space) && space[j] == '\n') {
			return i
		}
		k := strings.IndexByte(space[i+1:], '\n')
		if k < 0 {
			return -1
		}
		i += 1 + k
	}
	return -1
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80 }

// ExtractJSON finds the JSON value in a model's answer and unmarshals it
// into v. It strips reasoning blocks, prefers ```json fences (the last
// first), then any fence, then the whole text; tries each '{' or '[' as the
// start of the outermost value; and tolerates // and /* */ comments,
// trailing commas and Python's True/False/None. It fails with ErrBadOutput.
func ExtractJSON(text string, v any) error {
	s := StripThink(text)
	var jsonF, plain []string
	for _, f := range fences(s) {
		switch {
		case isJSONLang(f.lang):
			jsonF = append(jsonF, f.body)
		case f.lang == "":
			plain = append(plain, f.body)
		}
	}
	var cands []string
	for i := len(jsonF) - 1; i >= 0; i-- {
		cands = append(cands, jsonF[i])
	}
	for i := len(plain) - 1; i >= 0; i-- {
		cands = append(cands, plain[i])
	}
	cands = append(cands, s)
	lastErr := errors.New("no JSON object or array found")
	for _, c := range cands {
		tries := 0
		for i := 0; i < len(c) && tries < 32; i++ {
			if c[i] != '{' && c[i] != '[' {
				continue
			}
			tries++
			end := matchBracket(c, i)
			if end < 0 {
				lastErr = errors.New("JSON value is not closed (output cut off?)")
				continue
			}
			raw := cleanJSON(c[i : end+1])
			if !json.Valid(raw) {
				lastErr = fmt.Errorf("invalid JSON near %q", head(string(raw), 60))
				continue
			}
			if err := json.Unmarshal(raw, v); err != nil {
				lastErr = err
				continue
			}
			return nil
		}
	}
	return badOutput("extract-json", lastErr, text)
}

// matchBracket returns the index closing the bracket at s[i], or -1.
func matchBracket(s string, i int) int {
	var stack []byte
	for j := i; j < len(s); j++ {
		switch c := s[j]; c {
		case '"':
			for j++; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' {
					j++
				}
			}
		case '{', '[':
			stack = append(stack, c)
		case '}', ']':
			if len(stack) == 0 {
				return -1
			}
			open := stack[len(stack)-1]
			if (open == '{') != (c == '}') {
				return -1
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return j
			}
		}
	}
	return -1
}

// cleanJSON removes comments, trailing commas and Python literals outside
// strings.
func cleanJSON(s string) []byte {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		end := i + 1
		switch c := s[i]; {
		case c == '"':
			end = jsonStringEnd(s, i)
			b = append(b, s[i:end]...)
		case strings.HasPrefix(s[i:], "//") || strings.HasPrefix(s[i:], "/*"):
			end = jsonCommentEnd(s, i)
		case c == ',':
			if !closerFollows(s, end) {
				b = append(b, c)
			}
		case isAlpha(c):
			for end < len(s) && isAlpha(s[end]) {
				end++
			}
			b = append(b, pythonLiteral(s[i:end])...)
		default:
			b = append(b, c)
		}
		i = end
	}
	return b
}

// jsonStringEnd returns the end of the JSON string opened at s[i].
func jsonStringEnd(s string, i int) int {
	j := i + 1
	for ; j < len(s) && s[j] != '"'; j++ {
		if s[j] == '\\' {
			j++
		}
	}
	return min(j+1, len(s))
}

// jsonCommentEnd returns the end of the // (with its newline) or /* */
// comment at s[i]; an unclosed /* runs to the end.
func jsonCommentEnd(s string, i int) int {
	closer := "\n"
	if s[i+1] == '*' {
		closer = "*/"
	}
	if k := strings.Index(s[i+2:], closer); k >= 0 {
		return i + 2 + k + len(closer)
	}
	return len(s)
}

// closerFollows reports whether only whitespace and // comments come
// before a '}' or ']' at s[j:]: a trailing comma.
func closerFollows(s string, j int) bool {
	for j < len(s) {
		switch {
		case s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r':
			j++
		case strings.HasPrefix(s[j:], "//"):
			for j < len(s) && s[j] != '\n' {
				j++
			}
		default:
			return s[j] == '}' || s[j] == ']'
		}
	}
	return false
}

// pythonLiteral maps Python's True, False and None to JSON.
func pythonLiteral(w string) string {
	switch w {
	case "True":
		return "true"
	case "False":
		return "false"
	case "None":
		return "null"
	}
	return w
}

func badOutput(op string, err error, text string) error {
	return &Error{Op: op, Kind: ErrBadOutput, Err: fmt.Errorf("%w; output: %q", err, head(text, 200))}
}

func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
