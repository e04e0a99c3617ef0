package proxy

import (
	"bytes"
	"strings"

	"github.com/nlproxy/nlproxy/internal/sqlscan"
)

// A prepared ask lives only in the proxy's table (session.stmts): nothing
// of it exists upstream between the client's messages. The SQL statements
// that name prepared statements (DEALLOCATE, EXECUTE, PREPARE) therefore
// cannot be left to the server when they name an ask; the proxy reads them
// while asks are in play and answers as Postgres would.

type lifecycleKind uint8

const (
	lcNone lifecycleKind = iota
	lcDeallocate
	lcDeallocateAll // DEALLOCATE ALL, DISCARD ALL: the server drops them all
	lcExecute
	lcPrepare
)

// lifecycleStmt is one SQL statement about a prepared statement.
type lifecycleStmt struct {
	kind lifecycleKind
	name string // as Postgres resolves the identifier (unquoted: folded)
}

// parseLifecycle recognises DEALLOCATE [PREPARE] name|ALL, DISCARD ALL,
// EXECUTE name [(…)] and PREPARE name …. DEALLOCATE and EXECUTE count only
// as the whole text (a Query of several statements is left to the server);
// PREPARE fails on an ask's name whatever follows it, as on Postgres.
func parseLifecycle(sql string, opts sqlscan.Options) lifecycleStmt {
	l := newLexer(sql, opts)
	switch strings.ToLower(l.word()) {
	case "deallocate":
		return l.deallocate()
	case "discard":
		if w := l.word(); strings.EqualFold(w, "all") && l.end() {
			return lifecycleStmt{kind: lcDeallocateAll}
		}
	case "execute":
		return l.execute()
	case "prepare":
		if w := l.word(); w != "" {
			return lifecycleStmt{kind: lcPrepare, name: l.ident(w)}
		}
	}
	return lifecycleStmt{}
}

// deallocate reads the rest of a whole DEALLOCATE [PREPARE] name|ALL.
func (l *lexer) deallocate() lifecycleStmt {
	w := l.word()
	if strings.EqualFold(w, "prepare") {
		w = l.word()
	}
	switch {
	case w == "" || !l.end():
		return lifecycleStmt{}
	case strings.EqualFold(w, "all") && !l.quoted:
		return lifecycleStmt{kind: lcDeallocateAll}
	}
	return lifecycleStmt{kind: lcDeallocate, name: l.ident(w)}
}

// execute reads the rest of a whole EXECUTE name [(…)].
func (l *lexer) execute() lifecycleStmt {
	w := l.word()
	if w == "" {
		return lifecycleStmt{}
	}
	st := lifecycleStmt{kind: lcExecute, name: l.ident(w)}
	// Postgres evaluates no arguments for a statement without
	// parameters (an ask has none): they are skipped, not checked.
	if l.peek() == '(' && !l.skipParens() {
		return lifecycleStmt{}
	}
	if !l.end() {
		return lifecycleStmt{}
	}
	return st
}

// lexer reads the few tokens parseLifecycle, splitTxPrefix and
// deallocateAround need from the one SQL scanner (internal/sqlscan),
// skipping whitespace and comments as Postgres does. The relay reads every
// Query with it while asks are in play, so it must be cgo-free: pg_query's
// scanner cannot serve. It reads the client's bytes in the session's
// client_encoding and standard_conforming_strings, as the server last
// reported them (shared.scanOptions).
type lexer struct {
	src    string
	sc     sqlscan.Scanner
	tok    sqlscan.Token // the next token that is not whitespace or a comment
	quoted bool          // the last word was a quoted identifier
}

func newLexer(sql string, opts sqlscan.Options) lexer {
	l := lexer{src: sql, sc: *sqlscan.NewScanner(sql, opts)}
	l.next()
	return l
}

// next moves to the next token that is not whitespace or a comment.
func (l *lexer) next() {
	for l.tok = l.sc.Next(); l.tok.Kind.Trivia(); l.tok = l.sc.Next() {
	}
}

// word returns the next identifier or keyword ("" when there is none); a
// quoted identifier comes back with its quotes undone.
func (l *lexer) word() string {
	l.quoted = false
	text := l.src[l.tok.Start:l.tok.End]
	switch {
	case l.tok.Kind == sqlscan.Ident:
	case l.tok.Kind == sqlscan.QuotedIdent && !l.tok.Unterminated && text[0] == '"':
		text, l.quoted = strings.ReplaceAll(text[1:len(text)-1], `""`, `"`), true
	default:
		return "" // U&"…", unterminated: the server's to read
	}
	l.next()
	return text
}

// ident resolves the word just read as Postgres does: an unquoted
// identifier is folded to lower case (ASCII letters only, as in UTF8).
func (l *lexer) ident(w string) string {
	if l.quoted {
		return w
	}
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, w)
}

// skipParens skips a parenthesised list; false when it cannot tell where
// the list ends (no closing paren, an unterminated token).
func (l *lexer) skipParens() bool {
	for depth := 0; l.tok.Kind != sqlscan.EOF; l.next() {
		text := l.src[l.tok.Start:l.tok.End]
		switch {
		case l.tok.Unterminated:
			return false
		case l.tok.Kind != sqlscan.Op:
		case text == "(":
			depth++
		case text == ")":
			if depth--; depth == 0 {
				l.next()
				return true
			}
		}
	}
	return false
}

// peek returns the first byte of the next token, 0 at the end.
func (l *lexer) peek() byte {
	if l.tok.Kind == sqlscan.EOF {
		return 0
	}
	return l.src[l.tok.Start]
}

// semicolon reads a ';' if one is next, and returns the offset after it.
func (l *lexer) semicolon() (end int, ok bool) {
	if l.tok.Kind != sqlscan.Op || l.peek() != ';' {
		return 0, false
	}
	end = l.tok.End
	l.next()
	return end, true
}

// end reports whether only an optional semicolon, whitespace and comments
// are left.
func (l *lexer) end() bool {
	l.semicolon()
	return l.tok.Kind == sqlscan.EOF
}

// Drivers that keep a client transaction safe from a failing statement
// send it after statements of their own in one Query (psqlodbc:
// "RELEASE _EXEC_SVP_x;SAVEPOINT _EXEC_SVP_x;<statement>", and "BEGIN;…"
// for the first one). An ask there is found after those statements.

// maybeTxPrefix reports whether a Query may start with transaction control
// followed by more statements. b is its first bytes, whole when they are all
// of it: then a lone BEGIN or SAVEPOINT keeps to the relay's fast path.
func maybeTxPrefix(b []byte, whole bool) bool {
	// Bytes, not a string: this runs for every relayed Query.
	s := bytes.TrimLeft(b[:min(len(b), 24)], " \t\n\r\f\v")
	for _, w := range [...]string{"begin", "start", "savepoint", "release"} {
		if len(s) >= len(w) && bytes.EqualFold(s[:len(w)], []byte(w)) {
			if !whole {
				return true
			}
			i := bytes.IndexByte(b, ';')
			return i >= 0 && len(bytes.TrimRight(b[i+1:], " \t\n\r\f\v\x00")) > 0
		}
	}
	return false
}

// splitTxPrefix splits sql into leading transaction-control statements
// (BEGIN, START TRANSACTION, SAVEPOINT name, RELEASE [SAVEPOINT] name), each
// ended by ';', and what follows them; prefix is "" when there are none.
func splitTxPrefix(sql string, opts sqlscan.Options) (prefix, rest string) {
	l := newLexer(sql, opts)
	end := 0
	for l.txControl() {
		e, ok := l.semicolon()
		if !ok {
			break
		}
		end = e
	}
	return sql[:end], sql[end:]
}

// txControlOnly reports whether what l has left is nothing but
// transaction-control statements (or nothing at all).
func (l *lexer) txControlOnly() bool {
	for l.tok.Kind != sqlscan.EOF {
		if !l.txControl() {
			return false
		}
		if _, ok := l.semicolon(); !ok && l.tok.Kind != sqlscan.EOF {
			return false
		}
	}
	return true
}

// txControl reads one transaction-control statement, up to its end.
func (l *lexer) txControl() bool {
	switch strings.ToLower(l.word()) {
	case "begin":
		w := strings.ToLower(l.word())
		return w == "" || w == "transaction" || w == "work"
	case "start":
		return strings.EqualFold(l.word(), "transaction")
	case "savepoint":
		return l.word() != ""
	case "release":
		w := l.word()
		if strings.EqualFold(w, "savepoint") && !l.quoted {
			w = l.word()
		}
		return w != ""
	}
	return false
}

// deallocateAround reads "[tx control;]… DEALLOCATE [PREPARE] name [; tx
// control]…", as psqlodbc sends it in a transaction ("SAVEPOINT
// _per_query_svp_;DEALLOCATE "_PLAN0x…";RELEASE _per_query_svp_"); ok is
// false for any other text.
func deallocateAround(sql string, opts sqlscan.Options) (prefix, name, suffix string, ok bool) {
	prefix, rest := splitTxPrefix(sql, opts)
	l := newLexer(rest, opts)
	if !strings.EqualFold(l.word(), "deallocate") {
		return "", "", "", false
	}
	w := l.word()
	if strings.EqualFold(w, "prepare") && !l.quoted {
		w = l.word()
	}
	if w == "" || (strings.EqualFold(w, "all") && !l.quoted) {
		return "", "", "", false
	}
	name = l.ident(w)
	end, semi := l.semicolon()
	if !semi && l.tok.Kind != sqlscan.EOF {
		return "", "", "", false // more of the statement: the server's to read
	}
	if !semi {
		end = len(rest)
	}
	if !l.txControlOnly() {
		return "", "", "", false
	}
	return prefix, name, rest[end:], true
}
