package guard

import (
	"fmt"
	"strings"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nlproxy/nlproxy/guard/internal/stmt"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/sqlscan"
)

// CheckedOf is the guard's description of s; nil for the zero Statement.
func CheckedOf(s sealed.Statement) *Checked {
	c, _ := stmt.Checked(s.Body()).(*Checked)
	return c
}

// Seal checks sql like Check and returns it sealed (see Statement.SQL). The
// sealed text is parsed again and must give the same parse tree as the
// checked one (with functions qualified); anything else is refused.
func Seal(sql string, opts Options) (sealed.Statement, error) {
	c, err := Check(sql, opts)
	if err != nil {
		return sealed.Statement{}, err
	}
	for _, fc := range c.builtinCalls {
		name := fc.GetFuncname()
		fc.Funcname = append([]*pg_query.Node{pg_query.MakeStrNode("pg_catalog")}, name...)
	}
	if err := qualifyNames(c, &opts); err != nil {
		return sealed.Statement{}, err
	}
	text, err := pg_query.Deparse(c.tree)
	if err != nil {
		return sealed.Statement{}, &RejectError{Reason: "cannot normalize the statement: " + err.Error(), Code: pg.CodeFeatureNotSupported}
	}
	text, err = asciiSQL(text)
	if err != nil {
		return sealed.Statement{}, err
	}
	again, err := pg_query.Parse(text)
	if err != nil {
		return sealed.Statement{}, &RejectError{Reason: "normalized statement does not parse: " + err.Error(), Code: pg.CodeFeatureNotSupported}
	}
	if !sameTree(c.tree, again) {
		return sealed.Statement{}, &RejectError{Reason: "normalized statement differs from the checked one", Code: pg.CodeFeatureNotSupported}
	}
	return sealed.Of(stmt.New(text, sql, c)), nil
}

// sameTree compares parse trees ignoring token positions.
func sameTree(a, b *pg_query.ParseResult) bool {
	a, b = proto.Clone(a).(*pg_query.ParseResult), proto.Clone(b).(*pg_query.ParseResult)
	clearLocations(a.ProtoReflect())
	clearLocations(b.ProtoReflect())
	return proto.Equal(a, b)
}

func clearLocations(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch fd.Name() {
		case "location", "stmt_location", "stmt_len":
			m.Clear(fd)
			return true
		}
		if fd.Message() == nil || fd.IsMap() {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				clearLocations(l.Get(i).Message())
			}
		} else {
			clearLocations(v.Message())
		}
		return true
	})
}

// asciiSQL rewrites deparsed SQL so that every byte is ASCII and no string
// constant depends on standard_conforming_strings: constants are re-encoded
// as plain '…' (no backslash, ASCII) or E'…' (backslashes doubled, other
// characters as \uXXXX), quoted identifiers holding other characters as
// U&"…". Comments cannot occur in deparsed text.
func asciiSQL(sql string) (string, error) {
	res, err := pg_query.Scan(sql)
	if err != nil {
		return "", &RejectError{Reason: "cannot scan the normalized statement: " + err.Error(), Code: pg.CodeFeatureNotSupported}
	}
	var b strings.Builder
	b.Grow(len(sql) + 16)
	at := 0
	for _, tok := range res.GetTokens() {
		start, end := int(tok.GetStart()), int(tok.GetEnd())
		if start < at || end > len(sql) || start > end {
			return "", &RejectError{Reason: "unexpected token extent in the normalized statement", Code: pg.CodeFeatureNotSupported}
		}
		b.WriteString(sql[at:start])
		text := sql[start:end]
		switch tok.GetToken() {
		case pg_query.Token_SCONST:
			v, err := decodeDeparsedString(text)
			if err != nil {
				return "", err
			}
			b.WriteString(encodeString(v))
		case pg_query.Token_IDENT:
			if isASCII(text) {
				b.WriteString(text)
				break
			}
			if len(text) < 2 || text[0] != '"' || text[len(text)-1] != '"' {
				return "", &RejectError{Reason: "unquoted non-ASCII identifier in the normalized statement", Code: pg.CodeFeatureNotSupported}
			}
			b.WriteString(encodeIdent(strings.ReplaceAll(text[1:len(text)-1], `""`, `"`)))
		default:
			if !isASCII(text) {
				return "", &RejectError{Reason: "non-ASCII text outside strings and identifiers", Code: pg.CodeFeatureNotSupported}
			}
			b.WriteString(text)
		}
		at = end
	}
	b.WriteString(sql[at:])
	out := b.String()
	if !isASCII(out) || strings.IndexByte(out, 0) >= 0 {
		return "", &RejectError{Reason: "normalized statement is not plain ASCII", Code: pg.CodeFeatureNotSupported}
	}
	return out, nil
}

// decodeDeparsedString returns the value of a string constant as the
// deparser writes them ('…' or E'…').
func decodeDeparsedString(tok string) (string, error) {
	v, err := sqlscan.Decode(tok, sqlscan.Options{})
	if err != nil {
		return "", &RejectError{Reason: "unexpected string constant form in the normalized statement", Code: pg.CodeFeatureNotSupported}
	}
	if !utf8.ValidString(v) {
		return "", &RejectError{Reason: "string constant is not valid UTF-8", Code: pg.CodeCharacterNotInRepertoire}
	}
	return v, nil
}

// encodeString writes v as a constant that lexes the same under any
// standard_conforming_strings and backslash_quote, in ASCII.
func encodeString(v string) string {
	if isASCII(v) && !strings.Contains(v, `\`) {
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	}
	var b strings.Builder
	b.WriteString("E'")
	for _, r := range v {
		switch {
		case r == '\'':
			b.WriteString("''")
		case r == '\\':
			b.WriteString(`\\`)
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case r <= 0xFFFF:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			fmt.Fprintf(&b, `\U%08X`, r)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// encodeIdent writes a quoted identifier in ASCII with Unicode escapes.
func encodeIdent(name string) string {
	var b strings.Builder
	b.WriteString(`U&"`)
	for _, r := range name {
		switch {
		case r == '"':
			b.WriteString(`""`)
		case r == '\\':
			b.WriteString(`\\`)
		case r < utf8.RuneSelf:
			b.WriteRune(r)
		case r <= 0xFFFF:
			fmt.Fprintf(&b, `\%04X`, r)
		default:
			fmt.Fprintf(&b, `\+%06X`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
