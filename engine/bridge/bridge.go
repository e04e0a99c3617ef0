// Package bridge connects the engine to the proxy: it implements
// proxy.Translator with an *engine.Engine (the proxy's session executor is
// the engine's Executor) and turns engine errors into ErrorResponses.
package bridge

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/proxy"
)

// DefaultStatementTimeout bounds a generated query's run when the
// configuration gives none: a run is never unbounded.
const DefaultStatementTimeout = time.Minute

// Translator is a proxy.Translator backed by an engine.
type Translator struct {
	Engine *engine.Engine
	// StatementTimeout bounds each run of the generated query (default
	// DefaultStatementTimeout).
	StatementTimeout time.Duration
}

var _ proxy.Translator = Translator{}

// askSQLColumns are the columns of an `ask-sql:` answer.
var askSQLColumns = []string{"sql", "llm_calls", "prompt_tokens", "completion_tokens", "ms", "cached"}

// Translate implements proxy.Translator.
func (t Translator) Translate(ctx context.Context, req proxy.TranslateRequest) (proxy.Translation, error) {
	start := time.Now()
	res, err := t.Engine.Translate(ctx, engine.Request{
		Question: req.Marker.Question,
		Database: req.Database,
		User:     req.User,
		TxStatus: engine.TxStatus(req.TxStatus),
		Exec:     req.Exec,
	})
	if err != nil {
		return proxy.Translation{}, toPgError(err)
	}
	// People see the SQL as written; in a client encoding other than UTF-8
	// they see the sealed text, which is ASCII and so exact there too.
	shown := res.Statement.Display()
	if !utf8Client(req.ClientEncoding) {
		shown = res.Statement.SQL()
	}
	rep := report(res)
	if req.Marker.Kind == proxy.MarkerAskSQL {
		calls, prompt, completion := res.Trace.LLMCalls()
		return proxy.Translation{Rows: &proxy.StaticResult{
			Columns: askSQLColumns,
			Rows: [][]string{{
				shown, strconv.Itoa(calls), strconv.Itoa(prompt), strconv.Itoa(completion),
				strconv.FormatInt(time.Since(start).Milliseconds(), 10), strconv.FormatBool(res.Cached),
			}},
		}, Report: rep}, nil
	}
	timeout := t.StatementTimeout
	if timeout <= 0 {
		timeout = DefaultStatementTimeout
	}
	return proxy.Translation{Statement: res.Statement, Timeout: timeout, Notice: "nlproxy: " + shown, Report: rep}, nil
}

// report is the engine's account of an answered ask for the proxy's audit
// log, metrics and admin page.
func report(res *engine.Result) *proxy.AskReport {
	r := &proxy.AskReport{Role: res.Role, SQL: res.SQL(), Cached: res.Cached}
	if res.Trace == nil {
		return r
	}
	r.LLMCalls, r.PromptTokens, r.CompletionTokens = res.Trace.LLMCalls()
	for _, st := range res.Trace.Stages {
		r.Stages = append(r.Stages, proxy.AskStage{Name: st.Name, Duration: st.Duration, LLMCalls: st.LLMCalls,
			PromptTokens: st.PromptTokens, CompletionTokens: st.CompletionTokens, Note: st.Note})
	}
	return r
}

func utf8Client(enc string) bool {
	return enc == "" || enc == "UTF8" || enc == "UNICODE" || enc == "SQL_ASCII"
}

// toPgError maps engine errors to what the client sees. Causes stay in the
// proxy's log: they can name the upstream, the catalog role or the model
// server, which clients must not see.
func toPgError(err error) error {
	var ee *engine.Error
	if errors.As(err, &ee) {
		return &proxy.PgError{Severity: "ERROR", Code: ee.Code, Message: ee.Message, Hint: ee.Hint}
	}
	var se *pg.Error
	if errors.As(err, &se) {
		return &proxy.PgError{Severity: "ERROR", Code: se.Code, Message: se.Message, Detail: se.Detail, Hint: se.Hint}
	}
	return &proxy.PgError{Severity: "ERROR", Code: engine.CodeInternalError, Message: "nlproxy: internal error while answering the question"}
}
