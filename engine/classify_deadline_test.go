package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// TestClassifyAfterDeadline: once the ask's time has run out, whatever
// failed next (the session probe or a trial's restore on the connection
// the cut-off query closed) is reported as the timeout, 57014; before it,
// the same failure is not.
func TestClassifyAfterDeadline(t *testing.T) {
	e := &Engine{AskTimeout: 300 * time.Millisecond}
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	broken := fmt.Errorf("engine: restore the session after a trial run: %w", errors.New("conn closed"))
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		err      error
		timedOut bool
	}{
		{"conn closed after the deadline", expired, broken, true},
		{"conn closed within time", context.Background(), broken, false},
		{"deadline itself", expired, context.DeadlineExceeded, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pe *pg.Error
			got := e.classify(tc.ctx, tc.err)
			if !errors.As(got, &pe) {
				t.Fatalf("classify = %v, not a *pg.Error", got)
			}
			if (pe.Code == pg.CodeQueryCanceled) != tc.timedOut {
				t.Fatalf("classify = %s %v, want timed out = %v", pe.Code, got, tc.timedOut)
			}
		})
	}
}
