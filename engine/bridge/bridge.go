// Package bridge connects the engine to the proxy: it implements
// proxy.Translator with an *engine.Engine, runs the engine's trial queries on
// the asking session through proxy.Executor, and turns engine errors into
// ErrorResponses with SQLSTATEs.
package bridge

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/proxy"
)

// Translator is a proxy.Translator backed by an engine.
type Translator struct {
	Engine *engine.Engine
	// StatementTimeout bounds the generated query's own run (0: none). Outside
	// a client transaction it also runs with transaction_read_only = on.
	StatementTimeout time.Duration
}

var _ proxy.Translator = Translator{}

// AskSQLColumns are the columns of an `ask-sql:` answer.
var askSQLColumns = []string{"sql", "llm_calls", "prompt_tokens", "completion_tokens", "ms", "cached"}

// Translate implements proxy.Translator.
func (t Translator) Translate(ctx context.Context, req proxy.TranslateRequest) (proxy.Translation, error) {
	start := time.Now()
	res, err := t.Engine.Translate(ctx, engine.Request{
		Question: req.Marker.Question,
		Database: req.Database,
		Role:     req.User,
		TxStatus: engine.TxStatus(req.TxStatus),
		Exec:     executor{req.Exec},
	})
	if err != nil {
		return proxy.Translation{}, toPgError(err)
	}
	if req.Marker.Kind == proxy.MarkerAskSQL {
		calls, prompt, completion := res.Trace.LLMCalls()
		return proxy.Translation{Rows: &proxy.StaticResult{
			Columns: askSQLColumns,
			Rows: [][]string{{
				res.SQL, strconv.Itoa(calls), strconv.Itoa(prompt), strconv.Itoa(completion),
				strconv.FormatInt(time.Since(start).Milliseconds(), 10), strconv.FormatBool(res.Cached),
			}},
		}}, nil
	}
	return proxy.Translation{SQL: res.SQL, Notice: "nlproxy: " + res.SQL, ReadOnly: true, StatementTimeout: t.StatementTimeout}, nil
}

func toPgError(err error) error {
	var ee *engine.Error
	if errors.As(err, &ee) {
		return &proxy.PgError{Severity: "ERROR", Code: ee.Code, Message: ee.Message, Hint: ee.Hint, Detail: detailOf(ee)}
	}
	return &proxy.PgError{Severity: "ERROR", Code: engine.CodeInternalError, Message: "nlproxy: " + err.Error()}
}

// detailOf shows the underlying cause, which the message summarizes.
func detailOf(e *engine.Error) string {
	if e.Err == nil {
		return ""
	}
	return e.Err.Error()
}

// executor adapts proxy.Executor to engine.Executor.
type executor struct{ px proxy.Executor }

func (e executor) Query(ctx context.Context, sql string, maxRows int) (*engine.Rows, error) {
	r, err := e.px.Query(ctx, sql, maxRows)
	if err != nil {
		var pe *proxy.PgError
		if errors.As(err, &pe) {
			return nil, &engine.ServerError{Code: pe.Code, Message: pe.Message, Detail: pe.Detail, Hint: pe.Hint, Position: pe.Position}
		}
		return nil, err
	}
	return &engine.Rows{Columns: r.Columns, Values: r.Rows, Truncated: r.Truncated, Tag: r.Tag}, nil
}
