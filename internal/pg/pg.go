// Package pg is the vocabulary the proxy and the engine share: SQLSTATE
// codes (all of them: no other package writes one), the one error a server
// (or nlproxy, speaking as one) reports and the one mapping of any error to
// it (ErrorFor), transaction status, and small text-format result sets. It
// imports nothing of the project, so both sides can depend on it.
package pg

import (
	"errors"
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

// SQLSTATE codes: every code the project answers with or looks for is
// named here and nowhere else (TestNoSQLSTATELiterals keeps it so). Class
// 08 is kept for real connection failures: pools (HikariCP, pgx) drop a
// session on it, so the engine never answers with it.
const (
	CodeSuccessfulCompletion       = "00000"
	CodeConnectionFailure          = "08006"
	CodeConnectionRefused          = "08001" // sqlclient_unable_to_establish_sqlconnection
	CodeProtocolViolation          = "08P01"
	CodeFeatureNotSupported        = "0A000"
	CodeCardinalityViolation       = "21000"
	CodeInvalidDatetimeFormat      = "22007"
	CodeDatetimeFieldOverflow      = "22008"
	CodeDivisionByZero             = "22012"
	CodeCharacterNotInRepertoire   = "22021"
	CodeInvalidParameterValue      = "22023"
	CodeInvalidTextRepresentation  = "22P02"
	CodeReadOnlyTransaction        = "25006"
	CodeInFailedTransaction        = "25P02"
	CodeIdleInTransactionTimeout   = "25P03"
	CodeInvalidAuthorization       = "28000"
	CodeInvalidPassword            = "28P01"
	CodeInvalidCatalogName         = "3D000"
	CodeInsufficientPrivilege      = "42501"
	CodeSyntaxError                = "42601"
	CodeAmbiguousColumn            = "42702"
	CodeUndefinedColumn            = "42703"
	CodeUndefinedObject            = "42704"
	CodeGroupingError              = "42803"
	CodeDatatypeMismatch           = "42804"
	CodeWrongObjectType            = "42809"
	CodeUndefinedFunction          = "42883"
	CodeUndefinedTable             = "42P01"
	CodeDuplicateDatabase          = "42P04"
	CodeDuplicatePreparedStatement = "42P05"
	CodeLockNotAvailable           = "55P03"
	CodeInsufficientResources      = "53000"
	CodeTooManyConnections         = "53300"
	CodeConfigurationLimitExceeded = "53400"
	CodeProgramLimitExceeded       = "54000"
	CodeQueryCanceled              = "57014"
	CodeAdminShutdown              = "57P01"
	CodeCannotConnectNow           = "57P03"
	CodeIdleSessionTimeout         = "57P05"
	CodeSystemError                = "58000"
	CodeInternalError              = "XX000"

	// nlproxy's own codes are class 42 (the statement's fault, not the
	// server's) with an implementation-defined subclass (letters I–Z are
	// reserved for implementations), so tools do not take them for a bug
	// (XX000).

	// CodeNoUsableSQL: no attempt passed the guard and its trial run.
	CodeNoUsableSQL = "42N01"
	// CodeAbstained: the engine would rather not answer — the model said
	// the data cannot answer the question, or the readings disagree too much.
	CodeAbstained = "42N02"
)

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
