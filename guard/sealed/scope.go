// Package sealed is the cgo-free half of the guard: the sealed Statement
// and the scopes every run of one on a client's session goes through. The
// relay (proxy) and the engine both import it; only the guard (package
// guard, which parses with pg_query) can make a non-zero Statement (see
// guard/internal/stmt for how Go enforces that). Of the project it imports
// internal/pg only (and the Statement type's own package).
package sealed

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nlproxy/nlproxy/guard/internal/stmt"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// Statement is SQL the guard accepted, sealed: the one form nlproxy ever
// sends upstream. Only guard.Seal (and what the guard derives from a sealed
// statement) makes a non-zero one: what it holds is a stmt.Body, which only
// packages under guard/ can make. The zero value holds nothing.
type Statement struct{ body stmt.Body }

// Of is how the guard hands out the Body it made. Nothing outside guard/
// has a Body but one taken from a Statement (Body), so Of makes no new
// statement for anyone else.
func Of(b stmt.Body) Statement { return Statement{body: b} }

// Body is what s holds, for the guard.
func (s Statement) Body() stmt.Body { return s.body }

// SQL is the sealed text: what the server executes. It is ASCII only (other
// characters as \u escapes), its string constants are either plain without
// backslashes or E” strings, and built-in functions are qualified with
// pg_catalog. So it lexes to the same single statement whatever the session's
// client_encoding, standard_conforming_strings, backslash_quote or
// search_path.
func (s Statement) SQL() string { return s.body.SQL() }

// Display is the statement as written (by the model, after literal
// correction), for people: the NOTICE and ask-sql show it.
func (s Statement) Display() string { return s.body.Display() }

// IsZero reports whether s was not made by the guard.
func (s Statement) IsZero() bool { return s.body.IsZero() }

// PinnedSearchPath is the search_path inside every Scope. Functions and
// operators are never looked up in pg_temp, so an unqualified call or
// operator can only mean pg_catalog's; pg_temp is named last so that it is
// not searched first for relations and types (it would be, left out). Seal
// qualifies every relation and type, so pg_temp is never reached at all.
const PinnedSearchPath = "pg_catalog, pg_temp"

// Scope is what surrounds every run of a sealed Statement on a client's
// session: statements that make the run read-only and time-bounded, and
// that end that state again without touching the client's own transaction.
// The proxy (and engine.ConnExecutor for tools) send a Statement only inside
// a Scope from TrialScope or RunScope; this file is the one place that says
// how.
//
// Every scope pins name resolution (search_path = PinnedSearchPath) until it
// ends, so that what runs inside resolves functions, operators and types as
// Seal qualified them, never through the session's schemas or pg_temp.
//
// Every statement here is fixed ASCII text (the only variables are a number
// and, in TrialScopeAs, a role name quoted as an ASCII E-string literal), so it
// lexes the same under any session setting.
type Scope struct {
	// Enter runs before the statement.
	Enter []string
	// Exit runs after it, in the same protocol batch.
	Exit []string
	// Recover runs in a batch of its own when the run failed and the session
	// is left in a transaction state other than the one it started in.
	Recover []string
	// Start is the transaction state the scope was made for.
	Start pg.TxStatus
}

const savepoint = "nlproxy_guard"

// readOnlyLocal makes the current transaction (or subtransaction) read-only
// and time-bounded until it ends, with name resolution pinned (see
// PinnedSearchPath); set_config is used rather than SET LOCAL because it does
// not warn outside a transaction block.
func readOnlyLocal(timeout time.Duration, k kind) string {
	return fmt.Sprintf("SELECT pg_catalog.set_config('transaction_read_only', 'on', true), pg_catalog.set_config('statement_timeout', '%d', true)", timeoutMillis(timeout)) + k.settings()
}

func timeoutLocal(timeout time.Duration, k kind) string {
	return fmt.Sprintf("SELECT pg_catalog.set_config('statement_timeout', '%d', true)", timeoutMillis(timeout)) + k.settings()
}

// kind says what else a scope sets until the (sub)transaction ends.
type kind struct {
	// pin pins search_path; only the session probe runs unpinned.
	pin bool
	// trial turns JIT compilation off: a trial run (and the engine's own
	// catalog queries, whose recursive estimates look expensive) would
	// spend its time bound compiling rather than running.
	trial bool
}

func (k kind) settings() string {
	s := ""
	if k.pin {
		s += ", pg_catalog.set_config('search_path', '" + PinnedSearchPath + "', true)"
	}
	if k.trial {
		s += ", pg_catalog.set_config('jit', 'off', true)"
	}
	return s
}

// timeoutMillis is never 0: statement_timeout = 0 would mean no bound.
func timeoutMillis(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// TrialScope is for runs of stmt whose effects are always discarded (the
// engine's trial runs): a READ ONLY transaction rolled back when the session
// was idle, a read-only savepoint rolled back inside the client's
// transaction. Name resolution is pinned, except for SessionProbe, which
// reads the session's own search_path.
func TrialScope(st Statement, tx pg.TxStatus, timeout time.Duration) (Scope, error) {
	k := kind{pin: !stmt.IsProbe(st.body), trial: true}
	switch tx {
	case pg.TxIdle:
		return Scope{
			Enter:   []string{"BEGIN READ ONLY", timeoutLocal(timeout, k)},
			Exit:    []string{"ROLLBACK"},
			Recover: []string{"ROLLBACK"},
			Start:   tx,
		}, nil
	case pg.TxInTx:
		return blockScope(tx, timeout, k), nil
	case pg.TxFailed:
		return Scope{}, pg.ErrFailedTransaction
	}
	return Scope{}, fmt.Errorf("guard: unknown transaction status %q", byte(tx))
}

// RunScope is for runs whose rows go to the client: the settled query,
// and every Execute of a prepared ask statement. Idle, the implicit
// transaction of the protocol batch is made read-only and bounded (it ends
// at the batch's Sync, with everything the batch holds); inside the client's
// transaction a read-only savepoint is entered and rolled back after the
// run, so the client's transaction continues as it was.
func RunScope(tx pg.TxStatus, timeout time.Duration) (Scope, error) {
	switch tx {
	case pg.TxIdle:
		return Scope{Enter: []string{readOnlyLocal(timeout, kind{pin: true})}, Start: tx}, nil
	case pg.TxInTx:
		return blockScope(tx, timeout, kind{pin: true}), nil
	case pg.TxFailed:
		return Scope{}, pg.ErrFailedTransaction
	}
	return Scope{}, fmt.Errorf("guard: unknown transaction status %q", byte(tx))
}

func blockScope(tx pg.TxStatus, timeout time.Duration, k kind) Scope {
	undo := []string{"ROLLBACK TO SAVEPOINT " + savepoint, "RELEASE SAVEPOINT " + savepoint}
	return Scope{
		Enter:   []string{"SAVEPOINT " + savepoint, readOnlyLocal(timeout, k)},
		Exit:    undo,
		Recover: undo,
		Start:   tx,
	}
}

// TrialScopeAs is TrialScope on a connection of an authenticator role
// (another database's, for questions across databases): after BEGIN READ
// ONLY the transaction takes on role with the equivalent of SET LOCAL ROLE,
// so everything in it runs with role's privileges and row-level security,
// and ROLLBACK gives the authenticator back its own identity. The session
// must be idle: an authenticator connection belongs to nlproxy, not to a
// client's transaction.
//
// The role name is the one variable text here; it is written as an
// E-string literal, ASCII only (other characters as \u escapes), which lexes the same
// under any session setting. "none" would reset the role to the
// authenticator itself, so it is refused.
func TrialScopeAs(st Statement, tx pg.TxStatus, timeout time.Duration, role string) (Scope, error) {
	if tx != pg.TxIdle {
		if tx == pg.TxFailed {
			return Scope{}, pg.ErrFailedTransaction
		}
		return Scope{}, fmt.Errorf("guard: a run as another role needs an idle session, not %q", byte(tx))
	}
	lit, err := roleLiteral(role)
	if err != nil {
		return Scope{}, err
	}
	return Scope{
		Enter:   []string{"BEGIN READ ONLY", timeoutLocal(timeout, kind{pin: !stmt.IsProbe(st.body), trial: true}), "SELECT pg_catalog.set_config('role', " + lit + ", true)"},
		Exit:    []string{"ROLLBACK"},
		Recover: []string{"ROLLBACK"},
		Start:   tx,
	}, nil
}

// ErrBadRole: a role name TrialScopeAs cannot take on.
var ErrBadRole = errors.New("guard: not a role name to run as")

// roleLiteral quotes a role name as an E-string constant in ASCII.
func roleLiteral(role string) (string, error) {
	if role == "" || strings.EqualFold(role, "none") || !utf8.ValidString(role) || strings.ContainsRune(role, 0) {
		return "", fmt.Errorf("%w: %q", ErrBadRole, role)
	}
	var b strings.Builder
	b.WriteString("E'")
	for _, r := range role {
		switch {
		case r == '\'' || r == '\\':
			b.WriteRune('\\')
			b.WriteRune(r)
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			fmt.Fprintf(&b, `\U%08X`, r)
		}
	}
	b.WriteString("'")
	return b.String(), nil
}
