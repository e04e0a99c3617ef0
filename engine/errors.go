package engine

import (
	"errors"
	"fmt"
)

// SQLSTATEs the engine answers with. Class 08 is avoided on purpose: pools
// (HikariCP, pgx) treat it as "connection broken" and would drop a healthy session.
const (
	CodeFeatureNotSupported = "0A000"
	CodeInFailedTransaction = "25P02"
	CodeInsufficientPriv    = "42501"
	CodeUndefinedObject     = "42704" // configured model not present in Ollama
	CodeQueryCanceled       = "57014"
	CodeSystemError         = "58000" // model server unreachable or failing
	CodeInternalError       = "XX000"
	CodeNoUsableSQL         = "XX000"
)

// Error is what Translate returns: a SQLSTATE, a one-line message and a hint
// for the person at the client, wrapping the cause for logs and errors.Is.
type Error struct {
	Code    string
	Message string
	Hint    string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %v", e.Message, e.Err)
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// ErrFailedTransaction: the client's transaction is aborted; nothing can run
// until it ends, so neither can a trial run.
var ErrFailedTransaction = &Error{
	Code:    CodeInFailedTransaction,
	Message: "current transaction is aborted, commands ignored until end of transaction block",
	Hint:    "ROLLBACK the transaction, then ask again.",
}

// ErrNoUsableSQL: every candidate failed the guard or its trial run.
var ErrNoUsableSQL = errors.New("no usable SQL")
