// Package pg is the vocabulary the proxy and the engine share: SQLSTATE
// codes, the error a server (or the proxy, speaking as one) reports,
// transaction status, and small text-format result sets. It imports
// nothing of the project, so both sides can depend on it.
package pg

import (
	"errors"
	"fmt"
	"time"
)

// TxStatus is a session's transaction status as ReadyForQuery reports it.
type TxStatus byte

// Transaction states.
const (
	TxIdle   TxStatus = 'I' // not in a transaction block
	TxInTx   TxStatus = 'T' // in a transaction block
	TxFailed TxStatus = 'E' // in a failed transaction block
)

// SQLSTATE codes the project answers with. Class 08 is kept for real
// connection failures: pools (HikariCP, pgx) drop a session on it.
const (
	CodeSuccessfulCompletion       = "00000"
	CodeConnectionFailure          = "08006"
	CodeConnectionRefused          = "08001" // sqlclient_unable_to_establish_sqlconnection
	CodeProtocolViolation          = "08P01"
	CodeFeatureNotSupported        = "0A000"
	CodeCharacterNotInRepertoire   = "22021"
	CodeInvalidTextRepresentation  = "22P02"
	CodeReadOnlyTransaction        = "25006"
	CodeInFailedTransaction        = "25P02"
	CodeInvalidAuthorization       = "28000"
	CodeInvalidCatalogName         = "3D000"
	CodeInvalidParameterValue      = "22023"
	CodeSyntaxError                = "42601"
	CodeInsufficientPrivilege      = "42501"
	CodeUndefinedObject            = "42704"
	CodeUndefinedFunction          = "42883"
	CodeUndefinedTable             = "42P01"
	CodeDuplicatePreparedStatement = "42P05"
	CodeInsufficientResources      = "53000"
	CodeTooManyConnections         = "53300"
	CodeConfigurationLimitExceeded = "53400"
	CodeProgramLimitExceeded       = "54000"
	CodeQueryCanceled              = "57014"
	CodeAdminShutdown              = "57P01"
	CodeCannotConnectNow           = "57P03"
	CodeIdleSessionTimeout         = "57P05"
	CodeIdleInTransactionTimeout   = "25P03"
	CodeSystemError                = "58000"
	CodeInternalError              = "XX000"
)

// Error is an ErrorResponse: from Postgres, or one the proxy sends.
type Error struct {
	Severity, Code, Message, Detail, Hint string
	// Position is the 1-based character position of the error in the SQL,
	// 0 if none (set on errors from Postgres).
	Position int
}

func (e *Error) Error() string {
	sev := e.Severity
	if sev == "" {
		sev = "ERROR"
	}
	return fmt.Sprintf("%s: %s (SQLSTATE %s)", sev, e.Message, e.Code)
}

// Rows is a bounded, text-format result. A nil value is SQL NULL.
type Rows struct {
	Columns []string
	// Types are the columns' type OIDs, as the RowDescription gives them.
	Types  []uint32
	Values [][]*string
	// Truncated says more rows existed than were kept.
	Truncated bool
	// Tag is the command tag ("SELECT 3").
	Tag string
}

// Limits bound one trial run of a statement.
type Limits struct {
	Timeout  time.Duration // statement_timeout; never unbounded
	MaxRows  int           // rows kept
	MaxBytes int           // row data kept; more fails with ErrResultTooLarge
}

// ErrResultTooLarge: a trial run's rows exceeded Limits.MaxBytes. The
// executor stops keeping them, so memory stays bounded.
var ErrResultTooLarge = errors.New("trial run result exceeds the byte limit")
