package router

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/optimize"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/proxy"
)

// optimizeColumns are the columns of an `optimize:` report: one row for the
// original, one per proposal, one for the result.
var optimizeColumns = []string{"step", "policy", "verdict", "cost", "ms", "sql", "note"}

// optimize answers `optimize: <SQL>` through the engine's one entry point
// (Engine.Optimize: sealing, session names, timeout); the report comes back
// as rows the proxy makes, with a NOTICE.
func (t Translator) optimize(ctx context.Context, req proxy.TranslateRequest) (proxy.Translation, error) {
	if t.Optimizer == nil || t.Engine == nil {
		return proxy.Translation{}, &pg.Error{Severity: "ERROR", Code: pg.CodeFeatureNotSupported,
			Message: "nlproxy: optimize: is not enabled on this proxy", Hint: "Configure a generator model for nlproxy."}
	}
	out, err := t.Engine.Optimize(ctx, t.Optimizer, engine.OptimizeRequest{
		Database: req.Database, SQL: req.Marker.Question, Exec: req.Exec, TxStatus: pg.TxStatus(req.TxStatus)})
	if err != nil {
		return proxy.Translation{}, err
	}
	show := func(s sealed.Statement) string {
		if utf8Client(req.ClientEncoding) {
			return s.Display()
		}
		return s.SQL()
	}
	return proxy.Translation{Rows: optimizeReport(out, show), Notice: optimizeNotice(out)}, nil
}

func optimizeReport(out optimize.Outcome, show func(sealed.Statement) string) *proxy.StaticResult {
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
