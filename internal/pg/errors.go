package pg

import (
	"context"
	"errors"
	"fmt"
)

// Error is the one server error of the project (like pgconn's PgError): an
// ErrorResponse a server reported, or one nlproxy makes for a client,
// speaking as a server.
//
// Postgres sets Severity on every ErrorResponse; nlproxy's engine leaves it
// empty on the errors it makes (they are sent as ERROR), which is how
// Reported tells a server's report from an answer made for the client.
type Error struct {
	Severity, Code, Message, Detail, Hint string
	// Position is the 1-based character position of the error in the SQL,
	// 0 if none (set on errors from Postgres).
	Position int
	// Err is the cause, for the log and errors.Is; never sent to a client:
	// it can name the upstream, the catalog role or the model server.
	Err error
}

func (e *Error) Error() string {
	sev := e.Severity
	if sev == "" {
		sev = "ERROR"
	}
	s := fmt.Sprintf("%s: %s (SQLSTATE %s)", sev, e.Message, e.Code)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// SQLState is the error's SQLSTATE code.
func (e *Error) SQLState() string { return e.Code }

// Unwrap exposes the cause.
func (e *Error) Unwrap() error { return e.Err }

// Reported says a server reported the error (see Error).
func (e *Error) Reported() bool { return e.Severity != "" }

// ErrFailedTransaction: the session's transaction is aborted; nothing can
// run until it ends, so neither can a trial run nor an answer.
var ErrFailedTransaction = errors.New("the session's transaction is aborted")

// Code is the SQLSTATE err carries, "" when it carries none: logs keep it
// when the message is redacted.
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Condition is the error a client is sent for a condition err carries that
// is not itself an *Error (an aborted transaction, a cancelled request),
// with err as its cause; nil when err carries none. ErrorFor and the
// engine's classification share it, so each text is written once.
func Condition(err error) *Error {
	switch {
	case errors.Is(err, ErrFailedTransaction):
		return &Error{Code: CodeInFailedTransaction,
			Message: "current transaction is aborted, commands ignored until end of transaction block",
			Hint:    "ROLLBACK the transaction, then ask again.", Err: err}
	case errors.Is(err, context.Canceled):
		return &Error{Code: CodeQueryCanceled, Message: "canceling statement due to user request", Err: err}
	}
	return nil
}

// ErrorFor is the one mapping from any error to what a client is sent for
// a statement (severity ERROR, the statement's end, not the session's): the
// first *Error in err's chain (the engine's answer, or the server's own
// error, as it said it), else a Condition, else an internal error. Only
// the engine knows more (model-server failures and its time limits): it
// turns those into an *Error before they get here. The cause is dropped:
// it stays in the log.
func ErrorFor(err error) *Error {
	var pe *Error
	if errors.As(err, &pe) {
		e := *pe
		e.Severity, e.Err = "ERROR", nil
		if e.Code == "" {
			e.Code = CodeInternalError
		}
		return &e
	}
	if e := Condition(err); e != nil {
		e.Severity, e.Err = "ERROR", nil
		return e
	}
	return &Error{Severity: "ERROR", Code: CodeInternalError, Message: "nlproxy: internal error while answering the question"}
}
