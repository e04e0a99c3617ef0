package sqlscan

import (
	"math/rand"
	"strings"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// pgQueryKind maps a token of pg_query's scanner (PostgreSQL's own, which
// reads with standard_conforming_strings on and UTF-8) to the kind this
// scanner must report for the same bytes; ok is false for tokens whose
// extent is not compared: operators, numbers, and U&” and U&"" (for
// which pg_query reports no usable extent).
func pgQueryKind(tok *pg_query.ScanToken) (Kind, bool) {
	switch tok.GetToken() {
	case pg_query.Token_SCONST, pg_query.Token_BCONST, pg_query.Token_XCONST:
		return String, true
	case pg_query.Token_IDENT:
		return Ident, true
	case pg_query.Token_SQL_COMMENT:
		return LineComment, true
	case pg_query.Token_C_COMMENT:
		return BlockComment, true
	case pg_query.Token_PARAM:
		return Param, true
	}
	if tok.GetKeywordKind() != pg_query.KeywordKind_NO_KEYWORD {
		return Ident, true
	}
	return 0, false
}

// sameKind: pg_query calls dollar quotes SCONST and quoted identifiers
// IDENT.
func sameKind(ours, theirs Kind) bool {
	switch {
	case ours == theirs:
		return true
	case theirs == String:
		return ours == DollarString
	case theirs == Ident:
		return ours == QuotedIdent
	}
	return false
}

// checkPgQuery is the differential property: where pg_query's scanner
// accepts the text, every string, dollar quote, comment, identifier,
// keyword and parameter it reports is a token here with the same extent,
// and every string, dollar quote, comment and quoted identifier here is
// one of its tokens.
func checkPgQuery(t *testing.T, src string) {
	if strings.IndexByte(src, 0) >= 0 {
		return // pg_query reads a C string (and the protocol cannot carry NUL)
	}
	res, err := pg_query.Scan(src)
	if err != nil {
		return // the server's syntax error: nothing to agree on
	}
	ours := map[[2]int]Kind{}
	for tok := range Tokens(src, Options{}) {
		ours[[2]int{tok.Start, tok.End}] = tok.Kind
		if tok.Kind == String && commentInside(res, tok) {
			// pg_query's scanner, made to report comments, ends a
			// constant at a "--" comment before its continuation; the
			// server does not (TestAgainstServer checks it).
			return
		}
	}
	theirs := map[[2]int]bool{}
	for _, tok := range res.GetTokens() {
		span := [2]int{int(tok.GetStart()), int(tok.GetEnd())}
		theirs[span] = true
		want, ok := pgQueryKind(tok)
		if !ok {
			continue
		}
		if got, found := ours[span]; !found || !sameKind(got, want) {
			t.Fatalf("%q: pg_query reads %v %q at %v; here %v (found %v)\nours: %s", src, tok.GetToken(), src[span[0]:span[1]], span, got, found, show(src, Options{}))
		}
	}
	for span, k := range ours {
		switch k {
		case String, DollarString, LineComment, BlockComment, QuotedIdent:
			if strings.HasPrefix(strings.ToUpper(src[span[0]:span[1]]), "U&") {
				continue
			}
			if !theirs[span] {
				t.Fatalf("%q: here %v %q at %v, not a pg_query token\nours: %s", src, k, src[span[0]:span[1]], span, show(src, Options{}))
			}
		}
	}
}

func commentInside(res *pg_query.ScanResult, tok Token) bool {
	for _, pt := range res.GetTokens() {
		if pt.GetToken() == pg_query.Token_SQL_COMMENT && int(pt.GetStart()) > tok.Start && int(pt.GetEnd()) < tok.End {
			return true
		}
	}
	return false
}

// pgQuerySeeds are texts where scanners tend to disagree.
var pgQuerySeeds = []string{
	"SELECT 'it''s', E'a\\'b', e'\\\\', b'01', X'1F', n'z', 'a'\n  'b'",
	"SELECT 1 /* a /* b */ c */ -- d\n, 2 /**/ /*/ x */ /* ** / */ /*/**/*/ /***/ 3",
	"SELECT $$a$$, $t$ $$ ' \" $t$, $a$b$a$, a$b$, c$$, $1, $_$x$_$",
	`SELECT "a""b", "é", é, _x1$, "SELECT"`,
	"SELECT 1.5e-3, .5, 0x1F, 1_000, 2 + -- c\n3, 4 +/* c */5, t.c, x::text",
	"SELECT 'a' 'b'", // no newline: two constants (a syntax error for the parser, not the scanner)
	"SELECT 'a'\r'b', 'c'\f\n'd', 'e'\n\n'f'",
	"SELECT $1::int, $12",
	"SELECT 'x' uescape '!'",
	"SELECT E'\\u00e9\\U0001F600\\x41\\101'",
	"/* only a comment */",
	"SELECT a FROM t WHERE b = 'x' AND c IN ('y', 'z') --",
	"SELECT 'p' -- c\n 'q'",
}

func TestScanMatchesPgQuery(t *testing.T) {
	for _, src := range pgQuerySeeds {
		checkPgQuery(t, src)
	}
}

// TestScanMatchesPgQueryGenerated checks the property on texts made of
// fragments that open and close quotes and comments in every order; it
// is deterministic, so a failure names its text.
func TestScanMatchesPgQueryGenerated(t *testing.T) {
	frags := []string{"'", "''", "E'", "e'", "\\", "\\'", `"`, `""`, "$", "$$", "$a$", "$1", "a$", "b'", "x'",
		"--", "/*", "*/", "\n", " ", "\t", "\r", "a", "é", "1", ".", ";", "-", "/", "*", "U&", "u&'", "(", ")"}
	rng := rand.New(rand.NewSource(31))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for range n {
		var b strings.Builder
		for range 1 + rng.Intn(12) {
			b.WriteString(frags[rng.Intn(len(frags))])
		}
		checkPgQuery(t, b.String())
	}
}

// FuzzScanPgQuery is the differential fuzz target against pg_query's
// scanner.
func FuzzScanPgQuery(f *testing.F) {
	for _, s := range pgQuerySeeds {
		f.Add(s)
	}
	f.Fuzz(checkPgQuery)
}
