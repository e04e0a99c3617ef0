package workload

import (
	"hash/maphash"
	"unicode/utf8"
)

// textKey writes to h a key for sql in which the constants a statement
// differs by from another run of it (numbers, plain '…' strings) and its
// comments count as one marker each, so that the relay can tell a repeat
// from a new shape without pg_query. The rule it keeps: two texts with
// equal keys have equal pg_query fingerprints (TestTextKeyImpliesFingerprint).
// It reads the text as pg_query does (standard_conforming_strings on), and
// wherever it is not sure — a prefixed string (E'…', B'…', U&'…'), a
// dollar quote, a number glued to a name, something unterminated, a literal
// not in UTF-8 — it reports false and the caller keys the raw text instead
// (a split key only costs another fingerprint; a merged one would count a
// run against another shape). No allocation.
func textKey(h *maphash.Hash, sql []byte) bool {
	start := 0 // sql[start:i] is waiting to be written as it is
	mark := func(i, end int, m byte) {
		h.Write(sql[start:i])
		h.WriteByte(0) // a marker: no statement text holds a NUL
		h.WriteByte(m)
		start = end
	}
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\'':
			if i > 0 && (identByte(sql[i-1]) || sql[i-1] == '&') {
				return false // E'…', B'…', X'…', N'…', U&'…' or a name glued to it
			}
			end, ok := quoted(sql, i, '\'')
			if !ok || !utf8.Valid(sql[i:end]) {
				return false
			}
			mark(i, end, 's')
			i = end
		case c == '"':
			if i > 0 && sql[i-1] == '&' {
				return false // U&"…", whose UESCAPE string decides the name
			}
			end, ok := quoted(sql, i, '"')
			if !ok {
				return false
			}
			i = end // a name: kept as it is
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			end := i + 2
			for end < len(sql) && sql[end] != '\n' && sql[end] != '\r' {
				end++
			}
			mark(i, end, 'c')
			i = end
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			end, ok := blockComment(sql, i)
			if !ok {
				return false
			}
			mark(i, end, 'c')
			i = end
		case c == '$':
			if i > 0 && identByte(sql[i-1]) {
				i++ // inside a name (a$b)
				continue
			}
			if i+1 < len(sql) && isDigit(sql[i+1]) {
				i += 2 // a parameter, $1: kept, digits and all
				for i < len(sql) && isDigit(sql[i]) {
					i++
				}
				continue
			}
			return false // a dollar quote
		case isDigit(c) && (i == 0 || !identByte(sql[i-1]) && sql[i-1] != '.'):
			end, ok := number(sql, i)
			if !ok {
				return false
			}
			if sizeOfType(sql, i) {
				i = end // float(24) and int[3] are types, not values
				continue
			}
			mark(i, end, 'n')
			i = end
		default:
			i++
		}
	}
	h.Write(sql[start:])
	return true
}

// quoted is the end of the quoted string or name starting at sql[i] (a
// doubled quote stands for itself); false when unterminated.
func quoted(sql []byte, i int, q byte) (int, bool) {
	for j := i + 1; j < len(sql); j++ {
		if sql[j] == q {
			if j+1 < len(sql) && sql[j+1] == q {
				j++
				continue
			}
			return j + 1, true
		}
	}
	return 0, false
}

// blockComment is the end of the /* … */ comment starting at sql[i];
// they nest, as in Postgres.
func blockComment(sql []byte, i int) (int, bool) {
	depth := 0
	for j := i; j+1 < len(sql); {
		switch {
		case sql[j] == '/' && sql[j+1] == '*':
			depth++
			j += 2
		case sql[j] == '*' && sql[j+1] == '/':
			depth--
			j += 2
			if depth == 0 {
				return j, true
			}
		default:
			j++
		}
	}
	return 0, false
}

// number is the end of the numeric constant starting at sql[i]: digits
// (with _), a fraction, an exponent. False for what Postgres reads
// otherwise: 0x…, 0o…, 0b…, and digits glued to a name or a second dot.
func number(sql []byte, i int) (int, bool) {
	// digits: 1_000 is a number, 1__0 and 1_ are not (an _ between digits).
	digits := func(j int) int {
		for j < len(sql) && (isDigit(sql[j]) || sql[j] == '_' && j+1 < len(sql) && isDigit(sql[j+1]) && j > 0 && isDigit(sql[j-1])) {
			j++
		}
		return j
	}
	j := digits(i)
	if j < len(sql) && sql[j] == '.' && !(j+1 < len(sql) && sql[j+1] == '.') {
		j = digits(j + 1)
	}
	if j < len(sql) && (sql[j] == 'e' || sql[j] == 'E') {
		k := j + 1
		if k < len(sql) && (sql[k] == '+' || sql[k] == '-') {
			k++
		}
		if k >= len(sql) || !isDigit(sql[k]) {
			return 0, false
		}
		j = digits(k)
	}
	if j < len(sql) && (identByte(sql[j]) || sql[j] == '.') {
		return 0, false
	}
	return j, true
}

// sizeOfType reports whether the number at sql[i] is one of the few whose
// value pg_query's fingerprint keeps: an array bound (int[3]), float(p)
// (float4 or float8), and the precision of current_time(p),
// current_timestamp(p), localtime(p) and localtimestamp(p).
func sizeOfType(sql []byte, i int) bool {
	j := skipSpaceBack(sql, i)
	if j == 0 {
		return false
	}
	switch sql[j-1] {
	case '[':
		return true
	case '(':
	default:
		return false
	}
	end := skipSpaceBack(sql, j-1)
	k := end
	for k > 0 && identByte(sql[k-1]) {
		k--
	}
	for _, w := range [...]string{"float", "current_time", "current_timestamp", "localtime", "localtimestamp"} {
		if equalFoldASCII(sql[k:end], w) {
			return true
		}
	}
	return false
}

func skipSpaceBack(sql []byte, i int) int {
	for i > 0 && (sql[i-1] == ' ' || sql[i-1] == '\t' || sql[i-1] == '\n' || sql[i-1] == '\r' || sql[i-1] == '\f') {
		i--
	}
	return i
}

// equalFoldASCII: b is w, ASCII letters in either case (w is lower case).
func equalFoldASCII(b []byte, w string) bool {
	if len(b) != len(w) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[i] {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// identByte: a byte that can continue a name or keyword (Postgres counts
// every byte over 0x7F as a letter).
func identByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) || c == '_' || c == '$' || c >= 0x80
}
