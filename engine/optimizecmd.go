package engine

import (
	"context"
	"errors"

	"github.com/nlproxy/nlproxy/engine/optimize"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// OptimizeRequest is an `optimize: <SQL>` command from a client session.
type OptimizeRequest struct {
	Database string
	SQL      string          // the user's statement, unsealed
	Exec     sealed.Executor // the asker's own session
	TxStatus pg.TxStatus
}

// Optimize answers the optimize command, as Translate answers an ask: the
// user's SQL must pass the guard itself, sealed with names qualified as the
// asking session resolves them (see guard.Names); o then looks for a faster
// equivalent within the engine's ask timeout. Every failure is a *pg.Error
// for the client.
func (e *Engine) Optimize(ctx context.Context, o *optimize.Optimizer, req OptimizeRequest) (optimize.Outcome, error) {
	e.once.Do(e.applyDefaults)
	if req.TxStatus == pg.TxFailed {
		return optimize.Outcome{}, pg.ErrorFor(pg.ErrFailedTransaction)
	}
	opts := e.Guard
	opts.AllowExplain = false
	if e.Catalogs != nil {
		if snap, err := e.Catalogs.Get(ctx, req.Database); err == nil && snap.Functions != nil {
			opts.Catalog = snap.Functions
		}
		names, err := e.SessionNames(ctx, req.Database, req.Exec)
		if err != nil {
			return optimize.Outcome{}, e.optimizeError(ctx, err)
		}
		opts.Names = names
	}
	stmt, err := guard.Seal(req.SQL, opts)
	if err != nil {
		var re *guard.RejectError
		if errors.As(err, &re) {
			return optimize.Outcome{}, &pg.Error{Severity: "ERROR", Code: re.Code,
				Message: "nlproxy: optimize: the query is refused: " + re.Reason,
				Hint:    "optimize: takes one read-only SELECT (or WITH ... SELECT)."}
		}
		return optimize.Outcome{}, e.optimizeError(ctx, err)
	}
	ctx, cancel := context.WithTimeout(ctx, e.AskTimeout)
	defer cancel()
	out, err := o.Run(ctx, optimize.Request{Exec: req.Exec, Statement: stmt, Guard: opts})
	if err != nil {
		return optimize.Outcome{}, e.optimizeError(ctx, err)
	}
	return out, nil
}

// optimizeError maps what can end an optimization to what the client sees:
// the engine's one mapping, after the optimizer's own refusal.
func (e *Engine) optimizeError(ctx context.Context, err error) error {
	if errors.Is(err, optimize.ErrNotSelect) {
		return &pg.Error{Severity: "ERROR", Code: pg.CodeFeatureNotSupported, Message: "nlproxy: optimize: takes one read-only SELECT"}
	}
	var se *pg.Error
	if errors.As(err, &se) {
		return pg.ErrorFor(err) // the user's own query failed on the server
	}
	return pg.ErrorFor(e.Classify(ctx, err))
}
