package sqlscan

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// ErrLiteral: a string constant's text is not one the server would accept
// (bad escape, NUL, unterminated), or is not a character string.
var ErrLiteral = errors.New("sqlscan: not a valid string constant")

// Split returns the statements of src, cut at each ';' outside strings,
// identifiers, comments and dollar quotes, without the ';'. Statements of
// only whitespace and comments (which the server skips) are left out.
func Split(src string, o Options) []string {
	var out []string
	start, empty := 0, true
	for t := range Tokens(src, o) {
		switch {
		case t.Kind == Op && src[t.Start] == ';':
			if !empty {
				out = append(out, src[start:t.Start])
			}
			start, empty = t.End, true
		case !t.Kind.Trivia():
			empty = false
		}
	}
	if !empty {
		out = append(out, src[start:])
	}
	return out
}

// Decode returns the value of the string constant tok (a whole String or
// DollarString token) as the server reads it, with a UTF-8 server: quotes
// undone, escapes resolved, continuations joined. Unicode escapes are
// written as UTF-8; other bytes are kept as they are. A U&'…' constant is
// read with the default escape character (a UESCAPE clause is the
// caller's). Bit strings (B'…', X'…') are not character strings: ErrLiteral.
func Decode(tok string, o Options) (string, error) {
	t := TokenAt(tok, 0, o)
	if t.End != len(tok) || t.Unterminated {
		return "", ErrLiteral
	}
	switch {
	case t.Kind == DollarString:
		n := strings.IndexByte(tok[1:], '$') + 2
		return tok[n : len(tok)-n], nil
	case t.Kind != String:
		return "", ErrLiteral
	}
	body, m := tok, plainStrings(o)
	switch tok[0] | 0x20 {
	case 'e':
		body, m = tok[1:], qEscape
	case 'u':
		return decodeRuns(tok[2:], qDouble, o.Encoding, unicodeEscapes)
	case 'b', 'x':
		return "", ErrLiteral
	}
	if m == qEscape {
		return decodeRuns(body, m, o.Encoding, backslashEscapes)
	}
	return decodeRuns(body, m, o.Encoding, nil)
}

func plainStrings(o Options) quoteMode {
	if o.NonStandardStrings {
		return qEscape
	}
	return qDouble
}

// escapeFunc decodes the escape at body[i] (a backslash) into b and
// returns the index after it.
type escapeFunc func(b *strings.Builder, body string, i int, enc Encoding) (int, error)

// decodeRuns decodes the quoted runs of s (the first at s[0]) read in mode
// m, joined across continuations; esc is nil when a backslash is an
// ordinary character.
func decodeRuns(s string, m quoteMode, enc Encoding, esc escapeFunc) (string, error) {
	var b strings.Builder
	for i := 0; ; {
		end, ok := quotedEnd(s, i, '\'', m, enc)
		if !ok {
			return "", ErrLiteral
		}
		if err := decodeRun(&b, s[i+1:end-1], enc, esc); err != nil {
			return "", err
		}
		next, more := continuation(s, end)
		if !more {
			return b.String(), nil
		}
		i = next
	}
}

// decodeRun decodes the inside of one quoted run.
func decodeRun(b *strings.Builder, body string, enc Encoding, esc escapeFunc) error {
	for i := 0; i < len(body); {
		switch {
		case body[i] == '\'': // doubled
			b.WriteByte('\'')
			i += 2
		case body[i] == '\\' && esc != nil:
			var err error
			if i, err = esc(b, body, i, enc); err != nil {
				return err
			}
		case body[i] == 0:
			return ErrLiteral
		default:
			n := enc.charLen(body, i)
			b.WriteString(body[i : i+n])
			i += n
		}
	}
	return nil
}

// backslashEscapes decodes E'…' escapes: \b \f \n \r \t, octal \ooo,
// hexadecimal \xhh, \uXXXX and \UXXXXXXXX; any other character stands for
// itself.
func backslashEscapes(b *strings.Builder, body string, i int, enc Encoding) (int, error) {
	if i+1 >= len(body) {
		return 0, ErrLiteral
	}
	c := body[i+1]
	switch {
	case strings.IndexByte("bfnrt", c) >= 0:
		b.WriteByte("\b\f\n\r\t"[strings.IndexByte("bfnrt", c)])
		return i + 2, nil
	case '0' <= c && c <= '7':
		n, j := digits(body, i+1, 3, 8)
		return j, writeByte(b, byte(n))
	case c == 'x' && i+2 < len(body) && hexDigit(body[i+2]) >= 0:
		n, j := digits(body, i+2, 2, 16)
		return j, writeByte(b, byte(n))
	case c == 'u':
		return unicodeEscape(b, body, i+2, 4, `\u`)
	case c == 'U':
		return unicodeEscape(b, body, i+2, 8, `\U`)
	}
	n := enc.charLen(body, i+1)
	b.WriteString(body[i+1 : i+1+n])
	return i + 1 + n, nil
}

// unicodeEscapes decodes U&'…' escapes with the default escape character:
// \\, \XXXX and \+XXXXXX.
func unicodeEscapes(b *strings.Builder, body string, i int, _ Encoding) (int, error) {
	switch {
	case i+1 < len(body) && body[i+1] == '\\':
		b.WriteByte('\\')
		return i + 2, nil
	case i+1 < len(body) && body[i+1] == '+':
		return unicodeEscape(b, body, i+2, 6, `\+`)
	}
	return unicodeEscape(b, body, i+1, 4, `\`)
}

// unicodeEscape decodes width hex digits at body[i] as a code point; a
// high surrogate must be followed by the same form of escape holding the
// low one.
func unicodeEscape(b *strings.Builder, body string, i, width int, next string) (int, error) {
	r, j, ok := hexRune(body, i, width)
	if !ok {
		return 0, ErrLiteral
	}
	if 0xD800 <= r && r <= 0xDBFF {
		if !strings.HasPrefix(body[j:], next) {
			return 0, ErrLiteral
		}
		lo, k, ok := hexRune(body, j+len(next), width)
		if !ok || lo < 0xDC00 || lo > 0xDFFF {
			return 0, ErrLiteral
		}
		r, j = 0x10000+(r-0xD800)<<10+(lo-0xDC00), k
	}
	if r == 0 || !utf8.ValidRune(r) {
		return 0, ErrLiteral
	}
	b.WriteRune(r)
	return j, nil
}

func hexRune(body string, i, width int) (rune, int, bool) {
	if i+width > len(body) {
		return 0, 0, false
	}
	n, j := digits(body, i, width, 16)
	return rune(n), j, j == i+width
}

// digits reads up to max digits of base at body[i].
func digits(body string, i, max, base int) (int, int) {
	n, j := 0, i
	for ; j < len(body) && j < i+max; j++ {
		d := hexDigit(body[j])
		if d < 0 || d >= base {
			break
		}
		n = n*base + d
	}
	return n, j
}

func hexDigit(c byte) int {
	switch {
	case isDigit(c):
		return int(c - '0')
	case 'a' <= c|0x20 && c|0x20 <= 'f':
		return int(c|0x20-'a') + 10
	}
	return -1
}

func writeByte(b *strings.Builder, c byte) error {
	if c == 0 {
		return ErrLiteral // text cannot hold NUL
	}
	b.WriteByte(c)
	return nil
}
