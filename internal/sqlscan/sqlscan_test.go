package sqlscan

import (
	"fmt"
	"strings"
	"testing"
)

// show renders the tokens of src as kind:text, trivia included.
func show(src string, o Options) string {
	var out []string
	for t := range Tokens(src, o) {
		s := fmt.Sprintf("%v:%s", t.Kind, src[t.Start:t.End])
		if t.Unterminated {
			s += "!"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func (k Kind) String() string {
	return [...]string{"eof", "sp", "line", "block", "str", "dollar", "id", "qid", "param", "num", "op"}[k]
}

func TestTokens(t *testing.T) {
	off := Options{NonStandardStrings: true}
	for _, tc := range []struct {
		src  string
		o    Options
		want string
	}{
		{"SELECT 'it''s'", Options{}, "id:SELECT sp:  str:'it''s'"},
		{`'a\' y'`, Options{}, `str:'a\' sp:  id:y str:'!`},
		{`'a\' y'`, off, `str:'a\' y'`},
		{`E'a\'b' e'\\'`, Options{}, `str:E'a\'b' sp:  str:e'\\'`},
		{`U&'d\0061t' U&"x""y"`, Options{}, `str:U&'d\0061t' sp:  qid:U&"x""y"`},
		{`U&'\' y'`, off, `str:U&'\' sp:  id:y str:'!`},
		{"b'01' X'1f' n'z'", Options{}, "str:b'01' sp:  str:X'1f' sp:  id:n str:'z'"},
		{"b'0''1'", Options{}, "str:b'0' str:'1'"},
		{"'a'\n  'b' 'c'", Options{}, "str:'a'\n  'b' sp:  str:'c'"},
		{"'a' -- c\n'b'", Options{}, "str:'a' -- c\n'b'"},
		{"'a'\n-- c\n'b'", Options{}, "str:'a'\n-- c\n'b'"},
		{"'a' 'b'", Options{}, "str:'a' sp:  str:'b'"},
		{"'a'\n-- c", Options{}, "str:'a' sp:\n line:-- c"},
		{`"a""b" "" "x`, Options{}, `qid:"a""b" sp:  qid:"" sp:  qid:"x!`},
		{"/* a /* b */ c */x/* d", Options{}, "block:/* a /* b */ c */ id:x block:/* d!"},
		{"a--b\nc", Options{}, "id:a line:--b sp:\n id:c"},
		{"1/**/2", Options{}, "num:1 block:/**/ num:2"},
		{"$$a$b$$ $x$ $$ $x$ $x$y", Options{}, "dollar:$$a$b$$ sp:  dollar:$x$ $$ $x$ sp:  dollar:$x$y!"},
		{"a$b$ c$$", Options{}, "id:a$b$ sp:  id:c$$"},
		{"$1 $12+$ $a", Options{}, "param:$1 sp:  param:$12 op:+ op:$ sp:  op:$ id:a"},
		{"$_1$x$_1$", Options{}, "dollar:$_1$x$_1$"},
		{"1.5e-3 .5 1..2 0x1F", Options{}, "num:1.5e-3 sp:  num:.5 sp:  num:1 op:. num:.2 sp:  num:0x1F"},
		{"t.c é", Options{}, "id:t op:. id:c sp:  id:é"},
		{"'\x00'", Options{}, "str:'\x00'"},
	} {
		if got := show(tc.src, tc.o); got != tc.want {
			t.Errorf("%q (%+v):\n got %s\nwant %s", tc.src, tc.o, got, tc.want)
		}
	}
}

// TestClientEncodings: in the client-only encodings a character's second
// byte may be 0x5C; it is not a backslash. The texts are SJIS, BIG5, GBK
// and GB18030 bytes of 表, 功, 乗 and a four-byte character.
func TestClientEncodings(t *testing.T) {
	for _, tc := range []struct {
		enc     Encoding
		src     string
		want    string // the tokens
		utf8Too string // the same bytes read as UTF-8
	}{
		{SJIS, "E'\x95\x5c' x", "str:E'\x95\x5c' sp:  id:x", "str:E'\x95\x5c' x!"},
		{SJIS, "'\x95\x5c' y'", "str:'\x95\x5c' sp:  id:y str:'!", ""},
		{SJIS, "E'\xb1\\' x'", "str:E'\xb1\\' x'", ""}, // half-width katakana: one byte
		{BIG5, "E'\xa5\x5c' x", "str:E'\xa5\x5c' sp:  id:x", ""},
		{GBK, "E'\x81\x5c'", "str:E'\x81\x5c'", ""},
		{GB18030, "E'\x81\x30\x81\x5c\\'x'", "str:E'\x81\x30\x81\x5c\\'x'", ""},
		{SJIS, "a\x95\x5c b", "id:a\x95\x5c sp:  id:b", ""},
		{SJIS, "$\x95\x5c$x$\x95\x5c$", "dollar:$\x95\x5c$x$\x95\x5c$", ""},
		{SJIS, "E'\\\x95\x5c' y", "str:E'\\\x95\x5c' sp:  id:y", ""},
		{SJIS, "E'\x95", "str:E'\x95!", ""},
	} {
		o := Options{Encoding: tc.enc, NonStandardStrings: true}
		if got := show(tc.src, o); got != tc.want {
			t.Errorf("%q in %d:\n got %s\nwant %s", tc.src, tc.enc, got, tc.want)
		}
		if tc.utf8Too != "" {
			if got := show(tc.src, Options{}); got != tc.utf8Too {
				t.Errorf("%q as UTF-8: got %s, want %s", tc.src, got, tc.utf8Too)
			}
		}
	}
	for name, want := range map[string]Encoding{"sjis": SJIS, "SHIFT_JIS_2004": SJIS, "BIG5": BIG5, "GBK": GBK, "GB18030": GB18030, "UHC": UHC, "JOHAB": JOHAB, "UTF8": ServerSafe, "EUC_JP": ServerSafe, "LATIN1": ServerSafe} {
		if got := EncodingOf(name); got != want {
			t.Errorf("EncodingOf(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestDecode(t *testing.T) {
	off := Options{NonStandardStrings: true}
	for _, tc := range []struct {
		tok  string
		o    Options
		want string
		err  bool
	}{
		{"'it''s'", Options{}, "it's", false},
		{`'a\b'`, Options{}, `a\b`, false},
		{`'a\b'`, off, "a\b", false},
		{`E'\b\f\n\r\t\\\'\"\q'`, Options{}, "\b\f\n\r\t\\'\"q", false},
		{`E'\101\x41\x4g\u00e9\U0001F600'`, Options{}, "AA\x04gé😀", false},
		{`E'\uD83D\uDE00'`, Options{}, "😀", false},
		{`E'\uD83D'`, Options{}, "", true},
		{`E'\u12'`, Options{}, "", true},
		{`E'\0'`, Options{}, "", true},
		{`E'\xff'`, Options{}, "\xff", false}, // bytes: the caller checks the encoding
		{`U&'d\0061t\\\+01F600'''`, Options{}, `dat\😀'`, false},
		{`U&'\D83D\DE00'`, Options{}, "😀", false},
		{`U&'\00'`, Options{}, "", true},
		{"'a'\n 'b' -- c\n'c'", Options{}, "abc", false},
		{"E'\\n'\n'\\n'", Options{}, "\n\n", false}, // the continuation is E'' too,
		{"$t$a'b$$c$t$", Options{}, "a'b$$c", false},
		{"$$$$", Options{}, "", false},
		{"'unterminated", Options{}, "", true},
		{"'a' x", Options{}, "", true},
		{"b'01'", Options{}, "", true},
		{`"ident"`, Options{}, "", true},
		{"E'\x95\x5c'", Options{Encoding: SJIS}, "\x95\x5c", false},
		{"E'\\\x95\x5c'", Options{Encoding: SJIS}, "\x95\x5c", false},
	} {
		got, err := Decode(tc.tok, tc.o)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("Decode(%q, %+v) = %q, %v; want %q, error %v", tc.tok, tc.o, got, err, tc.want, tc.err)
		}
	}
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		src  string
		o    Options
		want []string
	}{
		{"SELECT 1; SELECT 2", Options{}, []string{"SELECT 1", " SELECT 2"}},
		{"SELECT ';'; -- x;\n /* ; */ ;", Options{}, []string{"SELECT ';'"}},
		{`SELECT 'a\'; SELECT 1 --'`, Options{}, []string{`SELECT 'a\'`, ` SELECT 1 --'`}},
		{`SELECT 'a\'; SELECT 1 --'`, Options{NonStandardStrings: true}, []string{`SELECT 'a\'; SELECT 1 --'`}},
		{"SELECT $$;$$, \";\"; ;; SELECT a$b$;", Options{}, []string{`SELECT $$;$$, ";"`, " SELECT a$b$"}},
		{"", Options{}, nil},
	} {
		if got := Split(tc.src, tc.o); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
			t.Errorf("Split(%q) = %q, want %q", tc.src, got, tc.want)
		}
	}
}

func TestTokenAt(t *testing.T) {
	src := "SELECT x FROM t WHERE a = E'\\'' AND b = $q$'$q$"
	for _, tc := range []struct {
		at   int
		want string
	}{{strings.Index(src, "E'"), `E'\''`}, {strings.Index(src, "$q"), "$q$'$q$"}, {7, "x"}} {
		tok := TokenAt(src, tc.at, Options{})
		if got := src[tok.Start:tok.End]; got != tc.want {
			t.Errorf("TokenAt(%d) = %q, want %q", tc.at, got, tc.want)
		}
	}
}

// FuzzTokens: tokens tile the text, whatever it is, under any options.
func FuzzTokens(f *testing.F) {
	for _, s := range []string{"SELECT 'a'", "E'\\", "$a$", "/*/*", "U&'", "'a'\n'b", "\x95\x5c'"} {
		f.Add(s, false, uint8(0))
	}
	f.Fuzz(func(t *testing.T, src string, off bool, enc uint8) {
		o := Options{NonStandardStrings: off, Encoding: Encoding(enc % 7)}
		at := 0
		for tok := range Tokens(src, o) {
			if tok.Start != at || tok.End <= tok.Start || tok.End > len(src) {
				t.Fatalf("%q: token %+v after %d", src, tok, at)
			}
			at = tok.End
		}
		if at != len(src) {
			t.Fatalf("%q: tokens end at %d", src, at)
		}
	})
}
