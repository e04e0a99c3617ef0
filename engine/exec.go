package engine

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Executor runs SQL on the asking client's own upstream session, so the
// client's role, privileges and transaction apply. The proxy implements it.
type Executor interface {
	// Query runs sql with the simple protocol and returns at most maxRows rows.
	// Server errors are returned as *ServerError.
	Query(ctx context.Context, sql string, maxRows int) (*Rows, error)
}

// Rows is a bounded, text-format result.
type Rows struct {
	Columns   []string
	Values    [][]*string // nil = SQL NULL
	Truncated bool
	Tag       string
}

// ServerError is an ErrorResponse from Postgres.
type ServerError struct {
	Code, Message, Detail, Hint string
	Position                    int // 1-based character position in the SQL, 0 if none
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("%s (SQLSTATE %s)", e.Message, e.Code)
}

// TxStatus is the session's transaction status from its last ReadyForQuery.
type TxStatus byte

const (
	TxIdle   TxStatus = 'I'
	TxInTx   TxStatus = 'T'
	TxFailed TxStatus = 'E'
)

const trialSavepoint = "nlproxy_trial"

// trialRun runs sql read-only and bounded on the client's session, leaving the
// session exactly as it found it: BEGIN READ ONLY … ROLLBACK when idle,
// SAVEPOINT … ROLLBACK TO inside the client's transaction, refused when the
// client's transaction has failed. statement_timeout is always SET LOCAL.
func trialRun(ctx context.Context, ex Executor, tx TxStatus, sql string, timeout time.Duration, maxRows int) (*Rows, error) {
	var begin, undo string
	timeoutSQL := fmt.Sprintf("SET LOCAL statement_timeout = %d", max(timeout.Milliseconds(), 1))
	switch tx {
	case TxIdle:
		begin = "BEGIN READ ONLY; " + timeoutSQL
		undo = "ROLLBACK"
	case TxInTx:
		begin = "SAVEPOINT " + trialSavepoint + "; SET LOCAL transaction_read_only = on; " + timeoutSQL
		undo = "ROLLBACK TO SAVEPOINT " + trialSavepoint + "; RELEASE SAVEPOINT " + trialSavepoint
	case TxFailed:
		return nil, ErrFailedTransaction
	default:
		return nil, fmt.Errorf("engine: unknown transaction status %q", byte(tx))
	}
	if _, err := ex.Query(ctx, begin, 0); err != nil {
		// The begin may have half-applied (savepoint made, SET failed): undo regardless.
		undoTrial(ctx, ex, undo)
		return nil, fmt.Errorf("engine: start trial run: %w", err)
	}
	rows, err := ex.Query(ctx, boundedSQL(sql, maxRows), maxRows)
	if uerr := undoTrial(ctx, ex, undo); uerr != nil && err == nil {
		err = fmt.Errorf("engine: end trial run: %w", uerr)
	}
	return rows, err
}

// undoTrial must run even when the ask was cancelled, or the client's session
// would be left inside our transaction.
func undoTrial(ctx context.Context, ex Executor, undo string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err := ex.Query(ctx, undo, 0)
	return err
}

// boundedSQL caps the rows a trial computes; the planner pushes the LIMIT down.
func boundedSQL(sql string, maxRows int) string {
	sql = strings.TrimRight(strings.TrimSpace(sql), "; \t\n")
	if maxRows <= 0 {
		return sql
	}
	return fmt.Sprintf("SELECT * FROM (\n%s\n) AS nlproxy_trial LIMIT %d", sql, maxRows)
}
