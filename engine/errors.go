package engine

import (
	"errors"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// What Translate returns on failure is a *pg.Error (internal/pg's one
// server error): a SQLSTATE, a one-line message and a hint for the person
// at the client, wrapping the cause for logs and errors.Is. Its codes are
// internal/pg's; class 08 is avoided on purpose: pools (HikariCP, pgx)
// treat it as "connection broken" and would drop a healthy session.

// Failed wraps the error of an ask that got past choosing its profile with
// what the ask did until it failed, for audit logs, metrics and the admin
// page: its trace (stages, model calls, tokens), role, profile and the
// candidates made. errors.Is/As see through it to Err.
type Failed struct {
	Err        error
	Trace      *Trace
	Role       string
	Profile    string
	Candidates []*Candidate
}

func (f *Failed) Error() string { return f.Err.Error() }
func (f *Failed) Unwrap() error { return f.Err }

// ErrNoUsableSQL: every candidate failed the guard or its trial run.
var ErrNoUsableSQL = errors.New("no usable SQL")

// ErrCode is the SQLSTATE an error carries (the engine's or the server's),
// "" when it carries none: logs keep it when the message is redacted.
func ErrCode(err error) string { return pg.Code(err) }
