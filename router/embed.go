package router

import (
	"context"
	"errors"
	"time"

	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/router/askfunc"
)

// AskFuncs is a proxy.AskFuncParser: the relay parses no SQL, so the
// table-function form is read here, with pg_query (router/askfunc).
type AskFuncs struct{}

// ParseAskFunc implements proxy.AskFuncParser.
func (AskFuncs) ParseAskFunc(sql string) (proxy.AskFunc, bool) {
	c, ok := askfunc.Find(sql)
	return proxy.AskFunc(c), ok
}

// ParseAskFunc makes a Translator a proxy.AskFuncParser too, so that a
// Server given only a Translator reads the form it answers.
func (Translator) ParseAskFunc(sql string) (proxy.AskFunc, bool) { return AskFuncs{}.ParseAskFunc(sql) }

// embedded answers the table-function form (SELECT … FROM nlproxy.ask('…')
// …): the question is answered as its marker would be, the answer takes the
// call's place as a subquery, and the whole statement is checked and
// sealed by the guard as one. It then runs like any ask's statement, in the
// read-only run scope.
func (t Translator) embedded(ctx context.Context, req proxy.TranslateRequest) (proxy.Translation, error) {
	opts := t.guardOptions(ctx, req.Database)
	// The statement around the call is judged before any model work: with
	// an empty placeholder in the call's place, the guard's verdict on the
	// rest is already the final one.
	probe, err := askfunc.EmbedRows(req.Marker.Statement, []string{"_"}, nil)
	if err != nil {
		return proxy.Translation{}, embedError(err)
	}
	if _, err := guard.Check(probe, opts); err != nil {
		return proxy.Translation{}, embedError(err)
	}

	inner := req
	inner.Marker.Statement = ""
	var tr proxy.Translation
	var names guard.Names
	if inner.Marker.Kind == proxy.MarkerOptimize || inner.Marker.Profile == ProfileAll {
		tr, err = t.Translate(ctx, inner)
	} else {
		tr, names, err = t.translateOne(ctx, inner)
	}
	if err != nil {
		return tr, err
	}
	var text string
	if tr.Rows != nil {
		text, err = askfunc.EmbedRows(req.Marker.Statement, tr.Rows.Columns, tr.Rows.Rows)
	} else {
		text, err = askfunc.Embed(req.Marker.Statement, tr.Statement.SQL())
	}
	if err != nil {
		return proxy.Translation{Report: tr.Report}, embedError(err)
	}
	// The SQL around the call is sealed with its names qualified as the
	// asking session resolves them, like generated SQL: as the engine's
	// probe of this ask read them, or, when the ask did not probe the
	// session (ask(all), optimize), read now.
	if names == nil && t.Engine != nil && t.Engine.Catalogs != nil {
		names, err = t.Engine.SessionNames(ctx, req.Database, req.Exec)
		if err != nil {
			return proxy.Translation{Report: tr.Report}, pg.ErrorFor(t.Engine.Classify(ctx, err))
		}
	}
	if names != nil {
		opts.Names = names
	}
	stmt, err := guard.Seal(text, opts)
	if err != nil {
		return proxy.Translation{Report: tr.Report}, embedError(err)
	}
	if tr.Timeout <= 0 {
		tr.Timeout = t.runTimeout()
	}
	tr.Statement, tr.Rows = stmt, nil
	return tr, nil
}

// embedError says why the statement around an nlproxy.* call is refused.
func embedError(err error) error {
	var pe *proxy.PgError
	if errors.As(err, &pe) {
		return pe
	}
	var re *guard.RejectError
	if errors.As(err, &re) {
		return &proxy.PgError{Severity: "ERROR", Code: re.Code, Message: "nlproxy: the statement around nlproxy.ask() is refused: " + re.Reason,
			Hint: "An nlproxy.ask() call runs inside one read-only SELECT; the SQL around it is checked like generated SQL (see docs/asking.md)."}
	}
	return &proxy.PgError{Severity: "ERROR", Code: pg.CodeInternalError, Message: "nlproxy: the answer cannot be put in place of nlproxy.ask(): " + err.Error()}
}

// guardOptions are the engine's guard options with the database's function
// catalog: with it the guard accepts non-volatile built-ins; without it,
// only the short reviewed list.
func (t Translator) guardOptions(ctx context.Context, database string) guard.Options {
	if t.Engine == nil {
		return guard.Options{}
	}
	opts := t.Engine.Guard
	if t.Engine.Catalogs != nil {
		if snap, err := t.Engine.Catalogs.Get(ctx, database); err == nil && snap.Functions != nil {
			opts.Catalog = snap.Functions
		}
	}
	return opts
}

func (t Translator) runTimeout() time.Duration {
	if t.StatementTimeout > 0 {
		return t.StatementTimeout
	}
	return DefaultStatementTimeout
}
