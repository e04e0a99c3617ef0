// Package sqlscan splits SQL text into tokens where PostgreSQL's scanner
// would: strings (with their E, U&, B and X prefixes, quote doubling,
// backslash escapes and continuation across a newline), dollar quotes,
// quoted identifiers, nested comments and parameters. It tells where each
// token begins and ends; it does not parse. The marker and lifecycle
// readers of the relay, the model-output extractor and the guard's literal
// editing all read SQL through it, so they agree with each other and with
// the server on where a quote or a comment ends.
//
// It is pure Go on purpose: the relay builds with CGO_ENABLED=0, so
// pg_query's scanner (cgo) cannot serve it. Tests check it against
// pg_query's scanner and against a real server.
package sqlscan

import (
	"iter"
	"strings"
)

// Kind is what a token is.
type Kind uint8

const (
	// EOF is the token after the last one (Start = End = len(src)).
	EOF Kind = iota
	// Space is a run of whitespace.
	Space
	// LineComment is "--" up to, not including, the end of the line.
	LineComment
	// BlockComment is "/* … */", nested ones included.
	BlockComment
	// String is '…', E'…', U&'…', B'…' or X'…', with any continuation
	// ('a'<newline>'b' is one constant).
	String
	// DollarString is $$…$$ or $tag$…$tag$.
	DollarString
	// Ident is an unquoted identifier or keyword.
	Ident
	// QuotedIdent is "…" or U&"…".
	QuotedIdent
	// Param is $1, $2, ….
	Param
	// Number is a numeric constant (loosely: the scanner only needs its end).
	Number
	// Op is one byte of an operator or of punctuation.
	Op
)

// Trivia reports whether the server skips tokens of kind k.
func (k Kind) Trivia() bool { return k == Space || k == LineComment || k == BlockComment }

// Token is one token of the text: src[Start:End].
type Token struct {
	Kind       Kind
	Start, End int
	// Unterminated: a string, quoted identifier, dollar quote or block
	// comment runs to the end of the text without its closing delimiter
	// (the server's syntax error).
	Unterminated bool
}

// Options are the session settings that change where tokens end.
type Options struct {
	// NonStandardStrings is standard_conforming_strings = off: a
	// backslash escapes in '…' as it does in E'…'.
	NonStandardStrings bool
	// Encoding is the client_encoding the text is written in.
	Encoding Encoding
}

// Scanner reads the tokens of one text in order.
type Scanner struct {
	src string
	pos int
	o   Options
}

// NewScanner returns a scanner at the start of src.
func NewScanner(src string, o Options) *Scanner { return &Scanner{src: src, o: o} }

// Tokens yields the tokens of src, EOF excluded.
func Tokens(src string, o Options) iter.Seq[Token] {
	return func(yield func(Token) bool) {
		s := NewScanner(src, o)
		for t := s.Next(); t.Kind != EOF; t = s.Next() {
			if !yield(t) {
				return
			}
		}
	}
}

// TokenAt returns the token that starts at src[start] (a position the
// caller knows to be a token's start, e.g. one pg_query reported).
func TokenAt(src string, start int, o Options) Token {
	s := &Scanner{src: src, pos: start, o: o}
	return s.Next()
}

// Next returns the next token; EOF at the end of the text.
func (s *Scanner) Next() Token {
	i := s.pos
	if i >= len(s.src) {
		return Token{Kind: EOF, Start: len(s.src), End: len(s.src)}
	}
	k, end, ok := s.token(i)
	s.pos = end
	return Token{Kind: k, Start: i, End: end, Unterminated: !ok}
}

// token reads the token at i: its kind, its end, and false when it is not
// terminated.
func (s *Scanner) token(i int) (Kind, int, bool) {
	src, c := s.src, s.src[i]
	switch {
	case isSpace(c):
		j := i + 1
		for j < len(src) && isSpace(src[j]) {
			j++
		}
		return Space, j, true
	case strings.HasPrefix(src[i:], "--"):
		return LineComment, lineEnd(src, i), true
	case strings.HasPrefix(src[i:], "/*"):
		end, ok := blockCommentEnd(src, i)
		return BlockComment, end, ok
	case c == '\'':
		end, ok := s.stringEnd(i, s.plainMode())
		return String, end, ok
	case c == '"':
		end, ok := quotedEnd(src, i, '"', qDouble, s.o.Encoding)
		return QuotedIdent, end, ok
	case c == '$':
		return s.dollar(i)
	case isDigit(c) || (c == '.' && i+1 < len(src) && isDigit(src[i+1])):
		return Number, numberEnd(src, i), true
	case identStart(c):
		return s.word(i)
	}
	return Op, i + 1, true
}

// word reads an identifier, or a string or quoted identifier with a
// prefix (E'…', B'…', X'…', U&'…', U&"…").
func (s *Scanner) word(i int) (Kind, int, bool) {
	src := s.src
	if i+1 < len(src) && src[i+1] == '\'' {
		switch src[i] | 0x20 {
		case 'e':
			end, ok := s.stringEnd(i+1, qEscape)
			return String, end, ok
		case 'b', 'x':
			end, ok := s.stringEnd(i+1, qBits)
			return String, end, ok
		}
	}
	if src[i]|0x20 == 'u' && strings.HasPrefix(src[i+1:], "&'") {
		end, ok := s.stringEnd(i+2, qDouble)
		return String, end, ok
	}
	if src[i]|0x20 == 'u' && strings.HasPrefix(src[i+1:], `&"`) {
		end, ok := quotedEnd(src, i+2, '"', qDouble, s.o.Encoding)
		return QuotedIdent, end, ok
	}
	j := i
	for j < len(src) && identCont(src[j]) {
		j += s.o.Encoding.charLen(src, j)
	}
	return Ident, j, true
}

// dollar reads what starts with '$': a parameter, a dollar quote, or the
// '$' alone.
func (s *Scanner) dollar(i int) (Kind, int, bool) {
	src := s.src
	j := i + 1
	if j < len(src) && isDigit(src[j]) {
		for j < len(src) && isDigit(src[j]) {
			j++
		}
		return Param, j, true
	}
	if j < len(src) && identStart(src[j]) {
		for j < len(src) && identCont(src[j]) && src[j] != '$' {
			j += s.o.Encoding.charLen(src, j)
		}
	}
	if j >= len(src) || src[j] != '$' {
		return Op, i + 1, true // not a delimiter: the server reads '$' alone
	}
	tag := src[i : j+1]
	k := strings.Index(src[j+1:], tag)
	if k < 0 {
		return DollarString, len(src), false
	}
	return DollarString, j + 1 + k + len(tag), true
}

// quoteMode is how a quoted run treats quotes and backslashes.
type quoteMode uint8

const (
	qDouble quoteMode = iota // a doubled quote is one quote
	qEscape                  // qDouble, and a backslash escapes the next character
	qBits                    // B'' and X'': no doubling
)

func (s *Scanner) plainMode() quoteMode {
	if s.o.NonStandardStrings {
		return qEscape
	}
	return qDouble
}

// stringEnd returns the end of a string constant whose first quote is at
// src[i], continuations included.
func (s *Scanner) stringEnd(i int, m quoteMode) (int, bool) {
	for {
		end, ok := quotedEnd(s.src, i, '\'', m, s.o.Encoding)
		if !ok {
			return end, false
		}
		next, more := continuation(s.src, end)
		if !more {
			return end, true
		}
		i = next
	}
}

// quotedEnd returns the index after the quote q that closes the run
// opened at src[i].
func quotedEnd(src string, i int, q byte, m quoteMode, enc Encoding) (int, bool) {
	j := i + 1
	for j < len(src) {
		switch c := src[j]; {
		case c == q && m != qBits && j+1 < len(src) && src[j+1] == q:
			j += 2
		case c == q:
			return j + 1, true
		case c == '\\' && m == qEscape && j+1 < len(src):
			j += 1 + enc.charLen(src, j+1)
		default:
			j += enc.charLen(src, j)
		}
	}
	return len(src), false
}

// continuation reports whether the string constant that ended at src[end]
// goes on: whitespace holding a newline (and comments) and then a quote;
// next is that quote.
func continuation(src string, end int) (next int, ok bool) {
	j := horizontalEnd(src, end)
	if j >= len(src) || (src[j] != '\n' && src[j] != '\r') {
		return 0, false
	}
	for j++; j < len(src); {
		switch {
		case isSpace(src[j]) && src[j] != '\v':
			j++
		case strings.HasPrefix(src[j:], "--") && lineEnd(src, j) < len(src):
			j = lineEnd(src, j) + 1 // a comment counts with its newline
		default:
			return j, src[j] == '\''
		}
	}
	return 0, false
}

// horizontalEnd skips spaces, tabs, form feeds and "--" comments, not
// the newline that ends them.
func horizontalEnd(src string, j int) int {
	for j < len(src) {
		switch {
		case src[j] == ' ' || src[j] == '\t' || src[j] == '\f':
			j++
		case strings.HasPrefix(src[j:], "--"):
			j = lineEnd(src, j)
		default:
			return j
		}
	}
	return j
}

func lineEnd(src string, i int) int {
	if k := strings.IndexAny(src[i:], "\r\n"); k >= 0 {
		return i + k
	}
	return len(src)
}

// blockCommentEnd returns the end of the (nested) comment opened at i.
// Every opener and closer holds a '*': it jumps from one to the next.
func blockCommentEnd(src string, i int) (int, bool) {
	depth, j := 1, i+2
	for {
		k := strings.IndexByte(src[j:], '*')
		if k < 0 {
			return len(src), false
		}
		k += j
		switch {
		case k > j && src[k-1] == '/': // a '/' not already part of a closer
			depth++
			j = k + 1
		case k+1 < len(src) && src[k+1] == '/':
			depth--
			j = k + 2
			if depth == 0 {
				return j, true
			}
		default:
			j = k + 1
		}
	}
}

// numberEnd returns the end of a numeric constant: digits, letters and
// '_' (hexadecimal, exponents, PostgreSQL 16's separators, and the junk
// the server rejects), one fraction after a decimal integer, and an
// exponent's sign.
func numberEnd(src string, i int) int {
	j := alnumEnd(src, i)
	if j < len(src) && src[j] == '.' && !strings.HasPrefix(src[j:], "..") &&
		strings.Trim(src[i:j], "0123456789_") == "" {
		j = alnumEnd(src, j+1)
	}
	if j+1 < len(src) && (src[j] == '+' || src[j] == '-') && src[j-1]|0x20 == 'e' && isDigit(src[j+1]) {
		j = alnumEnd(src, j+1)
	}
	return j
}

func alnumEnd(src string, j int) int {
	for j < len(src) && (isDigit(src[j]) || isLetter(src[j]) || src[j] == '_') {
		j++
	}
	return j
}

// isSpace is PostgreSQL's whitespace ({space}), and \v: the server (16,
// pg_query's) rejects a \v outside quotes and comments, so no text it
// accepts reads differently, and the relay has always skipped it before a
// marker.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// identStart: an identifier (and a dollar quote's tag) starts with a
// letter, '_' or any byte of a multibyte character.
func identStart(c byte) bool { return isLetter(c) || c == '_' || c >= 0x80 }

// identCont: later bytes may also be digits and '$' (so a$b$ is one
// identifier, not a dollar quote).
func identCont(c byte) bool { return identStart(c) || isDigit(c) || c == '$' }
