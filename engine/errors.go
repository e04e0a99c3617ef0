package engine

import (
	"errors"
	"fmt"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// SQLSTATEs the engine answers with. Class 08 is avoided on purpose: pools
// (HikariCP, pgx) treat it as "connection broken" and would drop a healthy session.
const (
	CodeFeatureNotSupported  = pg.CodeFeatureNotSupported
	CodeInFailedTransaction  = pg.CodeInFailedTransaction
	CodeInsufficientPriv     = pg.CodeInsufficientPrivilege
	CodeUndefinedObject      = pg.CodeUndefinedObject // configured model not present in Ollama
	CodeUndefinedTable       = pg.CodeUndefinedTable
	CodeProgramLimitExceeded = pg.CodeProgramLimitExceeded
	CodeQueryCanceled        = pg.CodeQueryCanceled
	CodeSystemError          = pg.CodeSystemError // model server unreachable or failing
	CodeInternalError        = pg.CodeInternalError
	// CodeNoUsableSQL: no attempt passed the guard and its trial run. Class
	// 42 (the statement's fault, not the server's) with an
	// implementation-defined subclass (N: letters I–Z are reserved for
	// implementations), so tools do not mistake it for a bug (XX000).
	CodeNoUsableSQL = "42N01"
)

// Error is what Translate returns: a SQLSTATE, a one-line message and a hint
// for the person at the client, wrapping the cause for logs and errors.Is.
type Error struct {
	Code    string
	Message string
	// Detail is shown to the client (DETAIL); only what the asker may see.
	Detail string
	Hint   string
	Err    error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %v", e.Message, e.Err)
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

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

// ErrFailedTransaction: the client's transaction is aborted; nothing can run
// until it ends, so neither can a trial run.
var ErrFailedTransaction = &Error{
	Code:    CodeInFailedTransaction,
	Message: "current transaction is aborted, commands ignored until end of transaction block",
	Hint:    "ROLLBACK the transaction, then ask again.",
}

// ErrNoUsableSQL: every candidate failed the guard or its trial run.
var ErrNoUsableSQL = errors.New("no usable SQL")

// ErrCode is the SQLSTATE an error carries (the engine's or the server's),
// "" when it carries none: logs keep it when the message is redacted.
func ErrCode(err error) string {
	var ee *Error
	if errors.As(err, &ee) {
		return ee.Code
	}
	var se *pg.Error
	if errors.As(err, &se) {
		return se.Code
	}
	return ""
}
