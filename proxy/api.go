package proxy

import (
	"context"
	"fmt"
	"time"
)

// Translator turns a natural-language question into SQL. The engine implements it.
type Translator interface {
	Translate(ctx context.Context, req TranslateRequest) (Translation, error)
}

// TranslateRequest is what the proxy knows about the asking session.
type TranslateRequest struct {
	Marker   Marker
	Database string   // client startup database
	User     string   // client startup user
	TxStatus byte     // 'I', 'T' or 'E' from the last ReadyForQuery
	Exec     Executor // runs SQL on this client's own upstream session
}

// Translation is the engine's answer.
type Translation struct {
	// SQL runs in place of the marker text.
	SQL string
	// Notice, when set, is sent as a NoticeResponse (severity NOTICE) before the rows.
	Notice string
	// Rows, when non-nil, is returned instead of running SQL (used for ask-sql).
	Rows *StaticResult
	// ReadOnly and StatementTimeout bound a generated simple Query sent while
	// the session is idle: it runs in one implicit transaction preceded by
	// SET LOCAL transaction_read_only / statement_timeout, whose command tags
	// the client never sees. A Parse, or a Query inside the client's own
	// transaction, runs as is (the engine has already trial-run it read-only).
	ReadOnly         bool
	StatementTimeout time.Duration
}

// StaticResult is a small text-typed result the proxy returns as if a query
// produced it. The proxy turns it into a SELECT of literals run upstream, so
// ordering, transaction status and Describe all behave like any other query;
// the command tag is therefore "SELECT n" and Tag is informational.
type StaticResult struct {
	Columns []string
	Rows    [][]string
	Tag     string
}

// Executor runs statements on the client's upstream connection while the
// client waits between statements (upstream idle). It restores nothing: the
// caller wraps trial runs in BEGIN READ ONLY/ROLLBACK or SAVEPOINT.
type Executor interface {
	// Query sends sql as a simple Query and returns at most maxRows rows of
	// the last result set (maxRows <= 0 means no rows kept). Server errors are *PgError.
	Query(ctx context.Context, sql string, maxRows int) (*QueryResult, error)
}

// QueryResult is a bounded, text-format result. A nil value is SQL NULL.
type QueryResult struct {
	Columns   []string
	Rows      [][]*string
	Truncated bool
	Tag       string
}

// PgError is an ErrorResponse from Postgres, or one the proxy sends.
type PgError struct {
	Severity, Code, Message, Detail, Hint string
	// Position is the 1-based character position of the error in the SQL, 0 if none
	// (set on errors from Postgres; not sent for errors the proxy makes).
	Position int
}

func (e *PgError) Error() string {
	sev := e.Severity
	if sev == "" {
		sev = "ERROR"
	}
	return fmt.Sprintf("%s: %s (SQLSTATE %s)", sev, e.Message, e.Code)
}
