package sealed

import (
	"context"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// Executor runs sealed statements on the asking client's own upstream
// session, so the client's role, privileges, row-level security and
// transaction apply. The proxy implements it (the session an ask came on);
// engine.ConnExecutor serves tools and tests. The engine, its optimizer and
// the proxy all name this one interface.
type Executor interface {
	// Trial runs stmt inside TrialScope for the session's current
	// transaction state — read-only, under lim.Timeout, rolled back — and
	// returns at most lim.MaxRows rows. A result holding more than
	// lim.MaxBytes bytes of row data fails with pg.ErrResultTooLarge;
	// server errors are *pg.Error. The session is left as it was.
	Trial(ctx context.Context, stmt Statement, lim pg.Limits) (*pg.Rows, error)
}
