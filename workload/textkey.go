package workload

import (
	"hash/maphash"
	"unicode/utf8"
	"unsafe"

	"github.com/nlproxy/nlproxy/internal/sqlscan"
)

// textKey writes to h a key for sql in which the constants a statement
// differs by from another run of it (numbers, plain '…' strings) and its
// comments count as one marker each, so that the relay can tell a repeat
// from a new shape without pg_query. The rule it keeps: two texts with
// equal keys have equal pg_query fingerprints (TestTextKeyImpliesFingerprint).
// It reads the text with the one SQL scanner (internal/sqlscan) as
// pg_query does (standard_conforming_strings on), and
// wherever it is not sure — a prefixed string (E'…', B'…', U&'…'), a
// dollar quote, a number glued to a name, something unterminated, a literal
// not in UTF-8 — it reports false and the caller keys the raw text instead
// (a split key only costs another fingerprint; a merged one would count a
// run against another shape). No allocation.
func textKey(h *maphash.Hash, sql []byte) bool {
	// The scanner reads strings; the relay's buffer is not changed while
	// it does, and nothing keeps the string.
	src := unsafe.String(unsafe.SliceData(sql), len(sql))
	start := 0 // sql[start:] up to the next marker is written as it is
	mark := func(t sqlscan.Token, m byte) {
		h.Write(sql[start:t.Start])
		h.WriteByte(0) // a marker: no statement text holds a NUL
		h.WriteByte(m)
		start = t.End
	}
	sc := sqlscan.NewScanner(src, sqlscan.Options{})
	for t := sc.Next(); t.Kind != sqlscan.EOF; t = sc.Next() {
		if t.Unterminated {
			return false
		}
		switch t.Kind {
		case sqlscan.LineComment, sqlscan.BlockComment:
			mark(t, 'c')
		case sqlscan.String:
			if sql[t.Start] != '\'' || !utf8.ValidString(src[t.Start:t.End]) {
				return false // E'…', B'…', X'…', U&'…'; or another encoding
			}
			mark(t, 's')
		case sqlscan.DollarString:
			return false
		case sqlscan.QuotedIdent:
			if sql[t.Start] != '"' {
				return false // U&"…", whose UESCAPE string decides the name
			}
		case sqlscan.Number:
			if t.Start > 0 && (identByte(sql[t.Start-1]) || sql[t.Start-1] == '.') || sql[t.Start] == '.' {
				continue // t.1, .5: kept as they are
			}
			if end, ok := number(sql, t.Start); !ok || end != t.End {
				return false // 0x1F, 123abc, 1__0: what the server reads otherwise
			}
			if !sizeOfType(sql, t.Start) {
				mark(t, 'n') // float(24) and int[3] are types, not values
			}
		}
	}
	h.Write(sql[start:])
	return true
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
