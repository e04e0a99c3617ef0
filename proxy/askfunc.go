package proxy

import (
	"bytes"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// The table-function form: an ask written as valid SQL, so that SQL editors,
// ORMs and BI tools that parse or wrap statements keep it intact.
//
//	SELECT * FROM nlproxy.ask('how many orders?')
//	SELECT * FROM nlproxy.ask('top customers', profile => 'max') t WHERE t.total > 10
//	SELECT * FROM nlproxy.ask_sql('revenue by month')
//	SELECT * FROM nlproxy.optimize('SELECT ... FROM orders ...')
//
// The relay parses no SQL (it builds without cgo): it looks for the word
// nlproxy (mayHoldAskFunc) and, when it is there, asks the translator to
// parse the statement (AskFuncParser). The translator answers with the whole
// statement, the call replaced by its answer, checked and sealed as one.

// askSchema is the schema the functions are written in. It need not exist
// upstream: the proxy answers the call itself.
const askSchema = "nlproxy"

// AskFunc is the ask a statement holds in the table-function form.
type AskFunc struct {
	// Function is ask, ask_sql or optimize; "" when the statement misuses
	// the functions before naming one of them (Err says how).
	Function string
	Question string
	// Profile is the profile argument, lower-cased; "" when none.
	Profile string
	// Err, when set, is why the ask fails: the functions are misused.
	Err *pg.Error
}

// AskFuncParser reads the table-function form (Server.AskFuncs;
// router.Translator is one, with pg_query).
type AskFuncParser interface {
	// ParseAskFunc returns the ask sql holds; ok is false when sql does not
	// parse or names no nlproxy.* function.
	ParseAskFunc(sql string) (f AskFunc, ok bool)
}

// mayHoldAskFunc is the hot-path pre-check on a whole statement: false
// means it certainly names no nlproxy.* function. It looks for the rare
// byte 'x' (of "nlproxy") with bytes.IndexByte, which is vectorized, and
// compares the word around each hit case-insensitively.
func mayHoldAskFunc(b []byte) bool {
	return foldedWordAt(b, 'x') || foldedWordAt(b, 'X')
}

func foldedWordAt(b []byte, x byte) bool {
	const word, at = askSchema, 5 // word[at] == 'x'
	for off := 0; ; {
		i := bytes.IndexByte(b[off:], x)
		if i < 0 {
			return false
		}
		i += off
		if i >= at && i-at+len(word) <= len(b) && bytes.EqualFold(b[i-at:i-at+len(word)], []byte(word)) {
			return true
		}
		off = i + 1
	}
}
