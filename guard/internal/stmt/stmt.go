// Package stmt defines what a sealed statement holds. It is internal to
// guard/ for one reason: Go lets only packages under guard/ import it, so
// only the guard (which checks and seals) can call New. Everyone else holds
// a Body only inside guard/sealed's Statement, which can read it but never
// make a non-zero one: the only Body outside guard/ is one the guard made.
// That keeps the invariant "only guard.Seal produces a runnable Statement"
// although the Statement type lives in a cgo-free leaf the relay imports.
package stmt

// Body is SQL the guard accepted, in the one form nlproxy ever sends
// upstream (see guard.Seal). Its zero value holds nothing.
type Body struct {
	sealed  string
	display string
	// checked is the guard's *guard.Checked; held as any because this
	// package may not import the (cgo) guard.
	checked any
	// probe marks guard.SessionProbe, the one statement run unpinned.
	probe bool
}

// New is the guard's constructor; checked must be non-nil.
func New(sealed, display string, checked any) Body {
	return Body{sealed: sealed, display: display, checked: checked}
}

// AsProbe returns b marked as the session probe.
func AsProbe(b Body) Body {
	b.probe = true
	return b
}

// IsProbe reports whether b is the session probe.
func IsProbe(b Body) bool { return b.probe }

// Checked is the guard's description of b (a *guard.Checked), nil for the
// zero Body.
func Checked(b Body) any { return b.checked }

// SQL is the sealed text (see sealed.Statement.SQL).
func (b Body) SQL() string { return b.sealed }

// Display is the statement as written (see sealed.Statement.Display).
func (b Body) Display() string { return b.display }

// IsZero reports whether b was not made by the guard.
func (b Body) IsZero() bool { return b.checked == nil }
