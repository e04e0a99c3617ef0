package sqlscan

import "strings"

// Encoding is how the text's bytes form characters, as far as finding
// token ends needs. In UTF-8 and every encoding PostgreSQL allows on the
// server, each byte of a multibyte character has its high bit set, so no
// such byte can be read as a quote or a backslash: byte by byte is right.
// The client-only encodings are different: the later bytes of a character
// may be ASCII (0x5C, '\', in SJIS 表 or BIG5 功), so the scanner steps
// over whole characters. PostgreSQL itself converts them to the server's
// encoding before it scans; the relay sees the client's bytes.
type Encoding uint8

const (
	// ServerSafe is UTF-8, SQL_ASCII and every other server encoding.
	ServerSafe Encoding = iota
	// SJIS is Shift JIS (and SHIFT_JIS_2004).
	SJIS
	// BIG5 is Big5.
	BIG5
	// GBK is GBK (and WIN936).
	GBK
	// UHC is Unified Hangul Code (WIN949).
	UHC
	// GB18030 is GB18030, with its four-byte characters.
	GB18030
	// JOHAB is Johab.
	JOHAB
)

// EncodingOf returns the Encoding of a client_encoding name as PostgreSQL
// reports it (case is ignored; an alias the server accepts but never
// reports in a ParameterStatus counts as ServerSafe).
func EncodingOf(name string) Encoding {
	switch strings.ToUpper(name) {
	case "SJIS", "SHIFT_JIS_2004", "SHIFT_JIS", "MSKANJI", "WIN932":
		return SJIS
	case "BIG5", "WIN950":
		return BIG5
	case "GBK", "WIN936", "CP936":
		return GBK
	case "UHC", "WIN949":
		return UHC
	case "GB18030":
		return GB18030
	case "JOHAB":
		return JOHAB
	}
	return ServerSafe
}

// charLen is the length of the character at src[i] (at least 1, at most
// what is left), as PostgreSQL's pg_encoding_mblen counts it. Small enough
// to inline: the scanner calls it for every byte.
func (e Encoding) charLen(src string, i int) int {
	if e == ServerSafe || src[i] < 0x80 {
		return 1
	}
	return e.multibyteLen(src, i)
}

func (e Encoding) multibyteLen(src string, i int) int {
	c, n := src[i], 2
	switch {
	case e == SJIS && 0xa1 <= c && c <= 0xdf: // half-width katakana
		n = 1
	case e == GB18030 && i+1 < len(src) && '0' <= src[i+1] && src[i+1] <= '9':
		n = 4
	case e == JOHAB && c == 0x8f: // as pg_euc_mblen: SS3
		n = 3
	}
	return min(n, len(src)-i)
}
