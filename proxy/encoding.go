package proxy

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgproto3"
	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/japanese"
	"golang.org/x/text/encoding/korean"
	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/traditionalchinese"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// Text the proxy reads (a marker's question) or writes (notices, its own
// errors, rows it makes) is in the session's client_encoding; the engine
// works in UTF-8. The SQL the proxy sends upstream is sealed ASCII and needs
// no conversion (see sealed.Statement).

// clientEncodings maps PostgreSQL client encoding names to Go encodings.
var clientEncodings = map[string]encoding.Encoding{
	"SJIS": japanese.ShiftJIS, "EUC_JP": japanese.EUCJP,
	"GBK": simplifiedchinese.GBK, "GB18030": simplifiedchinese.GB18030, "EUC_CN": simplifiedchinese.GBK,
	"BIG5": traditionalchinese.Big5, "EUC_KR": korean.EUCKR, "UHC": korean.EUCKR,
	"LATIN1": charmap.ISO8859_1, "LATIN2": charmap.ISO8859_2, "LATIN3": charmap.ISO8859_3,
	"LATIN4": charmap.ISO8859_4, "LATIN5": charmap.ISO8859_9, "LATIN6": charmap.ISO8859_10,
	"LATIN7": charmap.ISO8859_13, "LATIN8": charmap.ISO8859_14, "LATIN9": charmap.ISO8859_15,
	"LATIN10": charmap.ISO8859_16, "ISO_8859_5": charmap.ISO8859_5, "ISO_8859_6": charmap.ISO8859_6,
	"ISO_8859_7": charmap.ISO8859_7, "ISO_8859_8": charmap.ISO8859_8,
	"WIN1250": charmap.Windows1250, "WIN1251": charmap.Windows1251, "WIN1252": charmap.Windows1252,
	"WIN1253": charmap.Windows1253, "WIN1254": charmap.Windows1254, "WIN1255": charmap.Windows1255,
	"WIN1256": charmap.Windows1256, "WIN1257": charmap.Windows1257, "WIN1258": charmap.Windows1258,
	"WIN866": charmap.CodePage866, "WIN874": charmap.Windows874, "KOI8R": charmap.KOI8R, "KOI8U": charmap.KOI8U,
}

// errUnreadable: the text is not valid in the session's client_encoding,
// or the proxy cannot convert that encoding.
var errUnreadable = errors.New("proxy: text not readable in the client encoding")

func (s *session) encoding() string {
	return strings.ToUpper(s.sh.encoding())
}

// isUTF8Client: UTF-8 (the default) or SQL_ASCII, where bytes pass as is.
func isUTF8Client(enc string) bool {
	return enc == "" || enc == "UTF8" || enc == "UNICODE" || enc == "SQL_ASCII"
}

// fromClient decodes text sent by the client into UTF-8.
func (s *session) fromClient(b []byte) (string, error) {
	enc := s.encoding()
	if isUTF8Client(enc) {
		if !utf8.Valid(b) {
			return "", fmt.Errorf("%w: invalid UTF-8", errUnreadable)
		}
		return string(b), nil
	}
	e, ok := clientEncodings[enc]
	if !ok {
		return "", fmt.Errorf("%w: %s is not supported", errUnreadable, enc)
	}
	out, err := e.NewDecoder().Bytes(b)
	if err != nil || !utf8.Valid(out) {
		return "", fmt.Errorf("%w: %s: %v", errUnreadable, enc, err)
	}
	return string(out), nil
}

// toClient encodes UTF-8 text for the client; characters its encoding
// lacks become '?'.
func (s *session) toClient(text string) string {
	enc := s.encoding()
	if isUTF8Client(enc) {
		return text
	}
	e, ok := clientEncodings[enc]
	if !ok {
		return asciiOnly(text)
	}
	out, err := encoding.ReplaceUnsupported(e.NewEncoder()).String(text)
	if err != nil {
		return asciiOnly(text)
	}
	return out
}

func asciiOnly(text string) string {
	return strings.Map(func(r rune) rune {
		if r < utf8.RuneSelf {
			return r
		}
		return '?'
	}, text)
}

// clientText converts an error the proxy makes for the client.
func (s *session) clientText(e *pg.Error) *pg.Error {
	c := *e
	c.Message, c.Detail, c.Hint = s.toClient(c.Message), s.toClient(c.Detail), s.toClient(c.Hint)
	return &c
}

// rowDescription describes a proxy-made result: text columns, in the
// result formats a Bind asked for (text's binary form is its text).
func (s *session) rowDescription(r *StaticResult, formats []int16) []byte {
	rd := &pgproto3.RowDescription{Fields: make([]pgproto3.FieldDescription, len(r.Columns))}
	for i, c := range r.Columns {
		f := int16(0)
		switch {
		case len(formats) == 1:
			f = formats[0]
		case i < len(formats):
			f = formats[i]
		}
		rd.Fields[i] = pgproto3.FieldDescription{Name: []byte(s.toClient(c)), DataTypeOID: 25, DataTypeSize: -1, TypeModifier: -1, Format: f}
	}
	return mustEncode(rd)
}

// dataRows encodes rows[from:to] of a proxy-made result.
func (s *session) dataRows(r *StaticResult, from, to int) []byte {
	var out []byte
	for _, row := range r.Rows[from:to] {
		dr := &pgproto3.DataRow{Values: make([][]byte, len(r.Columns))}
		for j := range r.Columns {
			if j < len(row) && row[j] != nil {
				dr.Values[j] = []byte(s.toClient(*row[j]))
			}
		}
		out = append(out, mustEncode(dr)...)
	}
	return out
}

// emulatedRows is the reply to an Execute of a proxy-made result's portal:
// up to maxRows rows (0: all) and PortalSuspended while rows remain.
func (s *session) emulatedRows(p *askPortal, maxRows int) []byte {
	total := len(p.stmt.rows.Rows)
	end := total
	if maxRows > 0 && p.pos+maxRows < total {
		end = p.pos + maxRows
	}
	out := s.dataRows(p.stmt.rows, p.pos, end)
	n := end - p.pos
	p.pos = end
	if end < total {
		return append(out, mustEncode(&pgproto3.PortalSuspended{})...)
	}
	return append(out, mustEncode(&pgproto3.CommandComplete{CommandTag: fmt.Appendf(nil, "SELECT %d", n)})...)
}
