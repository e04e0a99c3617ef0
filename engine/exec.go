package engine

import (
	"context"

	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// Executor runs sealed statements on the asking client's own upstream
// session, so the client's role, privileges, row-level security and
// transaction apply. The proxy implements it; ConnExecutor serves tools and
// tests.
type Executor interface {
	// Trial runs stmt inside sealed.TrialScope for the session's current
	// transaction state — read-only, under lim.Timeout, rolled back — and
	// returns at most lim.MaxRows rows. A result holding more than
	// lim.MaxBytes bytes of row data fails with ErrResultTooLarge; server
	// errors are *pg.Error. The session is left as it was.
	Trial(ctx context.Context, stmt sealed.Statement, lim pg.Limits) (*pg.Rows, error)
}

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
