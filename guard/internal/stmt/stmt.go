// Package stmt defines the sealed statement type. It is internal to guard/
// for one reason: Go lets only packages under guard/ import it, so only the
// guard (which checks and seals) can call New, while everyone else names the
// type through guard/sealed (an alias) and can read it but never make a
// non-zero one. That keeps the invariant "only guard.Seal produces a runnable
// Statement" although the type lives in a cgo-free leaf the relay imports.
package stmt

// Statement is SQL the guard accepted, in the one form nlproxy ever sends
// upstream (see guard.Seal). Its zero value holds nothing.
type Statement struct {
	sealed  string
	display string
	// checked is the guard's *guard.Checked; held as any because this
	// package may not import the (cgo) guard.
	checked any
	// probe marks guard.SessionProbe, the one statement run unpinned.
	probe bool
}

// New is the guard's constructor; checked must be non-nil.
func New(sealed, display string, checked any) Statement {
	return Statement{sealed: sealed, display: display, checked: checked}
}

// AsProbe returns s marked as the session probe.
func AsProbe(s Statement) Statement {
	s.probe = true
	return s
}

// IsProbe reports whether s is the session probe.
func IsProbe(s Statement) bool { return s.probe }

// Checked is the guard's description of s (a *guard.Checked), nil for the
// zero Statement.
func Checked(s Statement) any { return s.checked }

// SQL is the sealed text: what the server executes. It is ASCII only (other
// characters as \u escapes), its string constants are either plain without
// backslashes or E” strings, and built-in functions are qualified with
// pg_catalog. So it lexes to the same single statement whatever the session's
// client_encoding, standard_conforming_strings, backslash_quote or
// search_path.
func (s Statement) SQL() string { return s.sealed }

// Display is the statement as written (by the model, after literal
// correction), for people: the NOTICE and ask-sql show it.
func (s Statement) Display() string { return s.display }

// IsZero reports whether s was not made by the guard.
func (s Statement) IsZero() bool { return s.checked == nil }
