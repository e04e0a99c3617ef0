package router

import (
	"context"
	"errors"
	"strconv"

	"github.com/nlproxy/nlproxy/engine/askall"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/proxy"
)

// ProfileAll is the marker profile of a question across databases:
// /* ask(all): … */, -- ask-sql(all): …
const ProfileAll = "all"

// askAllPlanColumns are the columns of an `ask-sql(all):` answer;
// understood_as is the standalone question a follow-up was read as (the
// same on every row), NULL when the question stood alone.
var askAllPlanColumns = []string{"step", "database", "goal", "sql", "error", "understood_as"}

// translateAll answers a question across databases. The answer is rows the
// proxy sends itself (a step's rows, or one `answer` text column); every
// statement behind it already ran, through the guard, with the asker's
// privileges on each database. Notices name each database and its SQL.
func (t Translator) translateAll(ctx context.Context, req proxy.TranslateRequest) (proxy.Translation, error) {
	if t.Multi == nil {
		return proxy.Translation{}, &pg.Error{Severity: "ERROR", Code: pg.CodeFeatureNotSupported,
			Message: "nlproxy: questions across databases (ask(all):) are not configured",
			Hint:    "Ask without (all), or configure the engine's ask_all settings."}
	}
	ans, err := t.Multi.Ask(ctx, askall.Request{
		Question: req.Marker.Question,
		Database: req.Database,
		User:     req.User,
		TxStatus: pg.TxStatus(req.TxStatus),
		Exec:     req.Exec,
		PlanOnly: req.Marker.Kind == proxy.MarkerAskSQL,
		History:  req.Conversation,
	})
	if err != nil {
		var nt *askall.NoTargetError
		if errors.As(err, &nt) {
			return proxy.Translation{}, &pg.Error{Severity: "ERROR", Code: pg.CodeInsufficientPrivilege, Message: nt.Error(),
				Hint: "Each database says why it was skipped. The operator grants access with an authenticator role per upstream and CONNECT on the database to your login role; see docs/guard.md, \"What ask(all) checks before it takes on a role\"."}
		}
		return proxy.Translation{}, pg.ErrorFor(err)
	}
	tr := proxy.Translation{Notices: ans.Notices()}
	switch ans.Kind {
	case askall.KindPlan:
		res := &proxy.StaticResult{Columns: askAllPlanColumns}
		var understood *string
		if ans.Standalone != "" {
			understood = str(ans.Standalone)
		}
		for i, st := range ans.Steps {
			row := []*string{str(strconv.Itoa(i + 1)), str(st.Database), str(st.Goal), nil, nil, understood}
			if st.SQL != "" {
				row[3] = str(st.SQL)
			}
			if st.Err != nil {
				row[4] = str(askall.ErrText(st.Err))
			}
			res.Rows = append(res.Rows, row)
		}
		for _, sk := range ans.Skipped {
			res.Rows = append(res.Rows, []*string{nil, str(sk.Database), nil, nil, str("skipped: " + sk.Reason), understood})
		}
		tr.Rows = res
	case askall.KindRows:
		// The step's rows as they came, NULLs included.
		tr.Rows = &proxy.StaticResult{Columns: ans.Rows.Columns, Rows: ans.Rows.Values}
	default:
		tr.Rows = &proxy.StaticResult{Columns: []string{"answer"}, Rows: [][]*string{{str(ans.Text)}}}
	}
	return tr, nil
}
