package proxy

import (
	"bytes"
	"strings"
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
func parseLifecycle(sql string) lifecycleStmt {
	l := lexer{s: sql}
	switch strings.ToLower(l.word()) {
	case "deallocate":
		w := l.word()
		if strings.EqualFold(w, "prepare") {
			w = l.word()
		}
		if w == "" || !l.end() {
			return lifecycleStmt{}
		}
		if strings.EqualFold(w, "all") && !l.quoted {
			return lifecycleStmt{kind: lcDeallocateAll}
		}
		return lifecycleStmt{kind: lcDeallocate, name: l.ident(w)}
	case "discard":
		if w := l.word(); strings.EqualFold(w, "all") && l.end() {
			return lifecycleStmt{kind: lcDeallocateAll}
		}
	case "execute":
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
	case "prepare":
		if w := l.word(); w != "" {
			return lifecycleStmt{kind: lcPrepare, name: l.ident(w)}
		}
	}
	return lifecycleStmt{}
}

// lexer reads the few tokens parseLifecycle, splitTxPrefix and
// deallocateAround need, skipping whitespace and comments as Postgres's
// scanner does. It is the proxy's one SQL tokenizer, kept apart from the
// others on purpose: the marker scanner (marker.go) only recognises a
// marker at the head of a statement and never reads identifiers, while
// these statements need quoted and case-folded identifiers, nested
// comments and parenthesised arguments; pg_query's scanner would bring cgo
// into the relay, which reads every Query with this lexer while asks are in
// play. Whitespace is marker.go's isSpace, so both agree on where a
// statement starts.
type lexer struct {
	s      string
	quoted bool // the last word was a quoted identifier
}

func (l *lexer) skip() {
	for {
		l.s = l.s[skipSpace(l.s, 0):]
		switch {
		case strings.HasPrefix(l.s, "--"):
			i := strings.IndexAny(l.s, "\r\n")
			if i < 0 {
				l.s = ""
				return
			}
			l.s = l.s[i:]
		case strings.HasPrefix(l.s, "/*"):
			depth, i := 0, 0
		comment:
			for i < len(l.s) {
				switch {
				case strings.HasPrefix(l.s[i:], "/*"):
					depth++
					i += 2
				case strings.HasPrefix(l.s[i:], "*/"):
					depth--
					i += 2
				default:
					i++
				}
				if depth == 0 {
					break comment
				}
			}
			l.s = l.s[i:]
		default:
			return
		}
	}
}

// word returns the next identifier or keyword ("" when there is none); a
// quoted identifier comes back with its quotes undone.
func (l *lexer) word() string {
	l.skip()
	l.quoted = false
	if strings.HasPrefix(l.s, `"`) {
		var b strings.Builder
		for i := 1; i < len(l.s); i++ {
			if l.s[i] != '"' {
				b.WriteByte(l.s[i])
				continue
			}
			if i+1 < len(l.s) && l.s[i+1] == '"' {
				b.WriteByte('"')
				i++
				continue
			}
			l.s = l.s[i+1:]
			l.quoted = true
			return b.String()
		}
		return "" // unterminated: the server's syntax error
	}
	i := 0
	for i < len(l.s) && identByte(l.s[i], i == 0) {
		i++
	}
	w := l.s[:i]
	l.s = l.s[i:]
	return w
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

// skipParens skips a parenthesised list, quoted text included; false when
// it cannot tell where the list ends (dollar quoting, no closing paren).
func (l *lexer) skipParens() bool {
	depth := 0
	for i := 0; i < len(l.s); i++ {
		switch c := l.s[i]; c {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				l.s = l.s[i+1:]
				return true
			}
		case '\'', '"':
			j := strings.IndexByte(l.s[i+1:], c)
			if j < 0 {
				return false
			}
			i += j + 1 // a doubled quote is two quoted runs back to back
		case '$', '-', '/':
			return false // dollar quotes, comments: left to the server
		}
	}
	return false
}

func (l *lexer) peek() byte {
	l.skip()
	if l.s == "" {
		return 0
	}
	return l.s[0]
}

// end reports whether only an optional semicolon, whitespace and comments
// are left.
func (l *lexer) end() bool {
	if l.peek() == ';' {
		l.s = l.s[1:]
	}
	return l.peek() == 0
}

func identByte(c byte, first bool) bool {
	switch {
	case c == '_' || c >= 0x80 || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z'):
		return true
	case !first && (('0' <= c && c <= '9') || c == '$'):
		return true
	}
	return false
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
func splitTxPrefix(sql string) (prefix, rest string) {
	l := lexer{s: sql}
	end := 0
	for l.txControl() && l.peek() == ';' {
		l.s = l.s[1:]
		end = len(sql) - len(l.s)
	}
	return sql[:end], sql[end:]
}

// txControlOnly reports whether sql holds nothing but transaction-control
// statements (or nothing at all).
func txControlOnly(sql string) bool {
	l := lexer{s: sql}
	for l.peek() != 0 {
		if !l.txControl() {
			return false
		}
		if l.peek() == ';' {
			l.s = l.s[1:]
		} else if l.peek() != 0 {
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
func deallocateAround(sql string) (prefix, name, suffix string, ok bool) {
	prefix, rest := splitTxPrefix(sql)
	l := lexer{s: rest}
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
	if l.peek() == ';' {
		l.s = l.s[1:]
	}
	if !txControlOnly(l.s) {
		return "", "", "", false
	}
	return prefix, name, l.s, true
}
