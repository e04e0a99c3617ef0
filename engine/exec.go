package engine

import (
	"github.com/nlproxy/nlproxy/internal/pg"
)

// ErrResultTooLarge: a trial run's rows exceeded Limits.MaxBytes.
var ErrResultTooLarge = pg.ErrResultTooLarge

// The shared vocabulary's types.
type (
	Limits   = pg.Limits
	Rows     = pg.Rows
	TxStatus = pg.TxStatus
)

// Transaction states.
const (
	TxIdle   = pg.TxIdle
	TxInTx   = pg.TxInTx
	TxFailed = pg.TxFailed
)
