package proxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// executor runs the engine's trial runs on the session's upstream
// connection. It is only usable while the session's client goroutine is
// inside Translate: the session is then synced and tracked, and the client
// goroutine's stream is paused, so the executor owns the upstream writer.
type executor struct{ s *session }

// Trial implements Executor: stmt runs in sealed.TrialScope for the
// session's transaction state, as one protocol batch, rows captured.
func (e *executor) Trial(ctx context.Context, stmt sealed.Statement, lim pg.Limits) (*pg.Rows, error) {
	s := e.s
	if stmt.IsZero() {
		return nil, errors.New("proxy: empty statement")
	}
	s.execMu.Lock()
	defer s.execMu.Unlock()
	ok, tx := s.sh.trialAllowed()
	if !ok || !s.sig.tracked.Load() {
		return nil, ErrExecutorClosed
	}
	scope, err := sealed.TrialScope(stmt, pg.TxStatus(tx), lim.Timeout)
	if err != nil {
		return nil, err
	}
	k := newSink(lim)
	s.injectAll(scope.Enter, k)
	s.injectStatement(stmt, actCapture, k, lim.MaxRows)
	s.injectAll(scope.Exit, k)
	s.sync(actDrop, k)
	if err := e.wait(ctx, k); err != nil {
		return nil, err
	}
	if k.status != byte(scope.Start) {
		// The run failed before its Exit and left the session in our
		// transaction or savepoint: undo it before the client goes on.
		r := newSink(pg.Limits{})
		s.injectAll(scope.Recover, r)
		s.sync(actDrop, r)
		if err := e.wait(context.WithoutCancel(ctx), r); err != nil {
			return nil, err
		}
		if r.status != byte(scope.Start) {
			s.log.Error("could not restore the session after a trial run; closing it",
				zap.String("status", string(r.status)), zap.Any("error", r.err))
			_ = s.fatal(pg.CodeConnectionFailure, "nlproxy: the session could not be restored after a trial run")
			s.close()
			return nil, ErrExecutorClosed
		}
	}
	switch {
	case k.err != nil:
		return nil, k.err
	case k.tooLarge:
		return nil, pg.ErrResultTooLarge
	}
	rows := k.rows
	return &rows, nil
}

// wait flushes the batch and waits for its ReadyForQuery. When ctx ends
// first, the running statement is cancelled upstream and the wait goes on,
// so the session stays in step.
func (e *executor) wait(ctx context.Context, k *sink) error {
	s := e.s
	if err := s.cl.uw.Flush(); err != nil {
		return fmt.Errorf("proxy: upstream write: %w", err)
	}
	done := ctx.Done()
	for {
		select {
		case <-k.done:
			return nil
		case <-done:
			done = nil
			go func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				_ = s.cancelUpstream(cctx)
			}()
		case <-s.ctx.Done():
			return ErrExecutorClosed
		}
	}
}
