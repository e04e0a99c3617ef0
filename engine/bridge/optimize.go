package bridge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/guard"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/engine/optimize"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/proxy"
)

// optimizeColumns are the columns of an `optimize:` report: one row for the
// original, one per proposal, one for the result.
var optimizeColumns = []string{"step", "policy", "verdict", "cost", "ms", "sql", "note"}

// optimize answers `optimize: <SQL>`: the user's SQL must pass the guard
// itself; the report comes back as rows the proxy makes, with a NOTICE.
func (t Translator) optimize(ctx context.Context, req proxy.TranslateRequest) (proxy.Translation, error) {
	if t.Optimizer == nil {
		return proxy.Translation{}, &proxy.PgError{Severity: "ERROR", Code: pg.CodeFeatureNotSupported,
			Message: "nlproxy: optimize: is not enabled on this proxy", Hint: "Configure a generator model for nlproxy."}
	}
	if req.TxStatus == byte(pg.TxFailed) {
		return proxy.Translation{}, toPgError(engine.ErrFailedTransaction)
	}
	opts := t.Engine.Guard
	if t.Engine.Catalogs != nil {
		// With the database's function catalog the guard accepts its
		// non-volatile built-ins; without it, only the short reviewed list.
		if snap, err := t.Engine.Catalogs.Get(ctx, req.Database); err == nil && snap.Functions != nil {
			opts.Catalog = snap.Functions
		}
	}
	opts.AllowExplain = false
	stmt, err := guard.Seal(req.Marker.Question, opts)
	if err != nil {
		var re *guard.RejectError
		if errors.As(err, &re) {
			return proxy.Translation{}, &proxy.PgError{Severity: "ERROR", Code: re.Code,
				Message: "nlproxy: optimize: the query is refused: " + re.Reason,
				Hint:    "optimize: takes one read-only SELECT (or WITH ... SELECT)."}
		}
		return proxy.Translation{}, optimizeError(err)
	}
	timeout := t.Engine.AskTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := t.Optimizer.Run(ctx, optimize.Request{Exec: req.Exec, Statement: stmt, Guard: opts})
	if err != nil {
		return proxy.Translation{}, optimizeError(err)
	}
	show := func(s guard.Statement) string {
		if utf8Client(req.ClientEncoding) {
			return s.Display()
		}
		return s.SQL()
	}
	return proxy.Translation{Rows: optimizeReport(out, show), Notice: optimizeNotice(out)}, nil
}

func optimizeReport(out optimize.Outcome, show func(guard.Statement) string) *proxy.StaticResult {
	rows := [][]string{{"original", "", "original", costText(out.OriginalCost), msText(out.OriginalTime), show(out.Original), ""}}
	for _, s := range out.Steps {
		cost := ""
		if s.Cost > 0 {
			cost = costText(s.Cost)
		}
		rows = append(rows, []string{fmt.Sprintf("%d.%d", s.Run, s.N), s.Policy, string(s.Verdict), cost, msText(s.Time), s.SQL, s.Reason})
	}
	verdict := "kept original"
	if out.Improved {
		verdict = "optimized"
	}
	rows = append(rows, []string{"result", "", verdict, costText(out.ResultCost), msText(out.ResultTime), show(out.Result), out.Reason})
	// Empty fields (no policy, not planned, not measured, no note) are NULL.
	vals := make([][]*string, len(rows))
	for i, r := range rows {
		vals[i] = make([]*string, len(r))
		for j := range r {
			if r[j] != "" {
				vals[i][j] = &r[j]
			}
		}
	}
	return &proxy.StaticResult{Columns: optimizeColumns, Rows: vals}
}

// optimizeNotice is the one-line summary sent as a NOTICE.
func optimizeNotice(out optimize.Outcome) string { return "nlproxy optimize: " + out.Summary() }

func costText(c float64) string { return strconv.FormatFloat(c, 'f', 2, 64) }

func msText(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

// optimizeError maps what can end an optimization to what the client sees.
func optimizeError(err error) error {
	var le *llm.Error
	hint := ""
	if errors.As(err, &le) {
		hint = le.Hint
	}
	switch {
	case errors.Is(err, optimize.ErrNotSelect):
		return &proxy.PgError{Severity: "ERROR", Code: pg.CodeFeatureNotSupported, Message: "nlproxy: optimize: takes one read-only SELECT"}
	case errors.Is(err, guard.ErrFailedTransaction):
		return toPgError(engine.ErrFailedTransaction)
	case errors.Is(err, context.Canceled):
		return &proxy.PgError{Severity: "ERROR", Code: pg.CodeQueryCanceled, Message: "canceling statement due to user request"}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, llm.ErrTimeout):
		return &proxy.PgError{Severity: "ERROR", Code: pg.CodeQueryCanceled, Message: "nlproxy: optimize: timed out", Hint: hint}
	case errors.Is(err, llm.ErrModelMissing):
		return &proxy.PgError{Severity: "ERROR", Code: pg.CodeUndefinedObject, Message: "nlproxy: the configured model is not installed in Ollama", Hint: hint}
	case errors.Is(err, llm.ErrUnreachable):
		return &proxy.PgError{Severity: "ERROR", Code: pg.CodeSystemError, Message: "nlproxy: cannot reach the Ollama server", Hint: hint}
	case errors.Is(err, llm.ErrServer) || errors.Is(err, llm.ErrNoModel) || errors.Is(err, llm.ErrBadOutput):
		return &proxy.PgError{Severity: "ERROR", Code: pg.CodeSystemError, Message: "nlproxy: the model server failed", Hint: hint}
	}
	return toPgError(err)
}
