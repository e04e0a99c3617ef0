package engine

import "context"

// Classify maps a failure of work done for a question — the engine's own,
// or a caller's around it such as engine/askall's — to a *pg.Error with a
// SQLSTATE and a hint, the one mapping Translate uses.
func (e *Engine) Classify(ctx context.Context, err error) error {
	e.once.Do(e.applyDefaults)
	return e.classify(ctx, err)
}
