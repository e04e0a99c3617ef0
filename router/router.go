// Package router is the one package that knows both the proxy and the engine
// (besides cmd/nlproxy, which wires them): it implements
// proxy.Translator with an *engine.Engine (the proxy's session executor is
// the engine's Executor) and turns engine errors into ErrorResponses.
package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/internal/askreport"
	"strconv"
	"strings"
	"time"

	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/askall"
	"github.com/nlproxy/nlproxy/engine/optimize"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/proxy"
)

// DefaultStatementTimeout bounds a generated query's run when the
// configuration gives none: a run is never unbounded.
const DefaultStatementTimeout = time.Minute

// DefaultMaxQuestionBytes bounds a question when the configuration gives no
// bound: a question is never unbounded. Both defaults are also nlproxy's
// (its option table, cmd/nlproxy/options.go, refers to them).
const DefaultMaxQuestionBytes = 16 << 10

// Translator is a proxy.Translator backed by an engine.
type Translator struct {
	// MaxQuestionBytes bounds the text of a question, every form
	// (default DefaultMaxQuestionBytes); a longer one fails with 54000
	// before the model, the engine or its log sees it.
	MaxQuestionBytes int
	Engine           *engine.Engine
	// Multi answers questions across databases (ask(all):); nil: they
	// fail with 0A000.
	Multi *askall.Asker
	// StatementTimeout bounds each run of the generated query (default
	// DefaultStatementTimeout).
	StatementTimeout time.Duration
	// Optimizer answers `optimize:`; nil refuses it (0A000). Its guard
	// options are replaced per database by the engine's, with that
	// database's function catalog.
	Optimizer *optimize.Optimizer
	// NoProgress sends no progress NOTICEs while an ask runs.
	NoProgress bool
	// ProgressAfter is how long an ask runs before its stage boundaries
	// are sent as NOTICEs (default DefaultProgressAfter).
	ProgressAfter time.Duration
}

// DefaultProgressAfter: an ask quicker than this sends no progress NOTICE.
const DefaultProgressAfter = 2 * time.Second

// progress turns the engine's stage boundaries into NOTICEs once the ask
// has run ProgressAfter ("nlproxy: generating candidate 2/3 (9 s)"); nil
// when the client is not to get them.
func (t Translator) progress(req proxy.TranslateRequest, start time.Time) func(string) {
	if t.NoProgress || req.Progress == nil {
		return nil
	}
	after := t.ProgressAfter
	if after <= 0 {
		after = DefaultProgressAfter
	}
	return func(stage string) {
		if el := time.Since(start); el >= after {
			req.Progress(fmt.Sprintf("nlproxy: %s (%d s)", stage, int(el.Seconds())))
		}
	}
}

var (
	_ proxy.Translator      = Translator{}
	_ proxy.QuestionLimiter = Translator{}
)

// askSQLColumns are the columns of an `ask-sql:` answer. confidence is
// empty (NULL) when it could not be judged; trace is a JSON array of the
// stages (stage, ms, llm_calls, prompt_tokens, completion_tokens, note);
// literals is a JSON array of the literals literal correction changed
// (table, column, from, to, kind), NULL when none.
// understood_as is the standalone question a follow-up was read as, NULL
// when the question stood alone.
// verified names the verified query that answered, NULL when the SQL was
// generated.
// error is why the ask failed ("SQLSTATE: message", then DETAIL and HINT
// lines when there are any), NULL when it answered: a failed ask-sql still
// returns its row, with the last attempt in sql ("" when there was none),
// so a success and a failure have the same columns (prepared statements
// and drivers describe it once).
var askSQLColumns = []string{"sql", "llm_calls", "prompt_tokens", "completion_tokens", "ms", "cached", "profile", "confidence", "trace", "literals", "understood_as", "verified", "error"}

// ProfileNew is the marker's word that starts the session's conversation
// again: `ask(new): …` forgets the earlier asks before answering.
const ProfileNew = "new"

// Translate implements proxy.Translator.
func (t Translator) Translate(ctx context.Context, req proxy.TranslateRequest) (proxy.Translation, error) {
	if err := t.checkSize(req.Marker.Question); err != nil {
		return proxy.Translation{}, err
	}
	if req.Marker.Statement != "" {
		return t.embedded(ctx, req)
	}
	if req.Marker.Kind == proxy.MarkerOptimize {
		return t.optimize(ctx, req)
	}
	if req.Marker.Profile == ProfileAll {
		return t.translateAll(ctx, req)
	}
	tr, _, err := t.translateOne(ctx, req)
	return tr, err
}

// translateOne answers one question of one database; it also returns how
// the asking session resolved names when the engine probed it (nil when
// it did not answer).
func (t Translator) translateOne(ctx context.Context, req proxy.TranslateRequest) (proxy.Translation, guard.Names, error) {
	profile := req.Marker.Profile
	if profile == ProfileNew {
		// ask(new): the conversation starts again with this question.
		req.Conversation.Reset()
		profile = ""
	}
	start := time.Now()
	// ask-sql: shows the attempt itself; the other forms point to it. (Over
	// MCP the engine's hints name no form: a failed ask_sql shows none.)
	showAttempt := "ask-sql:"
	if req.Marker.Kind == proxy.MarkerAskSQL {
		showAttempt = ""
	}
	res, err := t.Engine.Translate(ctx, engine.Request{
		Question:    req.Marker.Question,
		Database:    req.Database,
		User:        req.User,
		TxStatus:    pg.TxStatus(req.TxStatus),
		Exec:        req.Exec,
		Profile:     profile,
		History:     req.Conversation,
		Progress:    t.progress(req, start),
		ShowAttempt: showAttempt,
	})
	if err != nil {
		// What the failed ask did (stages, model calls, candidates) still
		// reaches the audit log, the metrics and the admin page.
		var f *engine.Failed
		if errors.As(err, &f) {
			pe := pg.ErrorFor(err)
			if req.Marker.Kind == proxy.MarkerAskSQL && showsAttempt(ctx, req, pe) {
				// The user asked to see how the ask went: the row, with
				// the attempt, the trace and why it failed, not an ERROR.
				return proxy.Translation{Rows: &proxy.StaticResult{Columns: askSQLColumns, Rows: [][]*string{failedRow(f, pe, start)}},
					Report: failedReport(f), Failure: pe}, nil, nil
			}
			return proxy.Translation{Report: failedReport(f)}, nil, pe
		}
		return proxy.Translation{}, nil, pg.ErrorFor(err)
	}
	// People see the SQL as written; in a client encoding other than UTF-8
	// they see the sealed text, which is ASCII and so exact there too.
	shown := res.Statement.Display()
	if !utf8Client(req.ClientEncoding) {
		shown = res.Statement.SQL()
	}
	if req.Marker.Kind == proxy.MarkerAskSQL {
		calls, prompt, completion := res.Trace.LLMCalls()
		row := []*string{
			&shown, str(strconv.Itoa(calls)), str(strconv.Itoa(prompt)), str(strconv.Itoa(completion)),
			str(strconv.FormatInt(time.Since(start).Milliseconds(), 10)), str(strconv.FormatBool(res.Cached)),
			str(res.Profile), nil, str(traceJSON(res.Trace)), nil, nil, nil, nil,
		}
		if res.Verified != "" {
			row[11] = str(res.Verified)
		}
		if res.Standalone != "" {
			row[10] = str(res.Standalone)
		}
		if rw := res.Rewrites(); len(rw) > 0 {
			b, err := json.Marshal(rw)
			if err == nil {
				row[9] = str(string(b))
			}
		}
		if res.Confidence >= 0 {
			row[7] = str(engine.FormatConfidence(res.Confidence))
		}
		return proxy.Translation{Rows: &proxy.StaticResult{Columns: askSQLColumns, Rows: [][]*string{row}}, Report: report(res)}, res.Names, nil
	}
	return proxy.Translation{Statement: res.Statement, Timeout: t.runTimeout(), Notice: notice(res, shown), Report: report(res)}, res.Names, nil
}

// showsAttempt says whether a failed ask-sql: answers with its row. Not
// when the failure is the session's or the client's rather than the ask's:
// the client cancelled or went away, the transaction is aborted (Postgres
// refuses every statement there), or there was no question to work on.
func showsAttempt(ctx context.Context, req proxy.TranslateRequest, pe *pg.Error) bool {
	return ctx.Err() == nil && pe.Code != pg.CodeInFailedTransaction && strings.TrimSpace(req.Marker.Question) != ""
}

// failedRow is a failed ask-sql:'s row: the columns of a success, the last
// SQL the candidates reached as sql, no confidence, and the error.
func failedRow(f *engine.Failed, pe *pg.Error, start time.Time) []*string {
	attempt := ""
	for _, c := range f.Candidates {
		if c.SQL != "" {
			attempt = c.SQL
		}
	}
	calls, prompt, completion := 0, 0, 0
	if f.Trace != nil {
		calls, prompt, completion = f.Trace.LLMCalls()
	}
	return []*string{
		&attempt, str(strconv.Itoa(calls)), str(strconv.Itoa(prompt)), str(strconv.Itoa(completion)),
		str(strconv.FormatInt(time.Since(start).Milliseconds(), 10)), str("false"),
		str(f.Profile), nil, str(traceJSON(f.Trace)), nil, nil, nil, str(errorText(pe)),
	}
}

// errorText is the error column: "SQLSTATE: message", then the detail and
// the hint on lines of their own as psql shows them.
func errorText(pe *pg.Error) string {
	s := pe.Code + ": " + pe.Message
	if pe.Detail != "" {
		s += "\nDETAIL: " + pe.Detail
	}
	if pe.Hint != "" {
		s += "\nHINT: " + pe.Hint
	}
	return s
}

// MaxQuestion implements proxy.QuestionLimiter: the proxy refuses a marker
// statement far over the bound without reading it whole.
func (t Translator) MaxQuestion() int {
	if t.MaxQuestionBytes <= 0 {
		return DefaultMaxQuestionBytes
	}
	return t.MaxQuestionBytes
}

// checkSize refuses a question over the limit: every form (ask, ask-sql,
// ask(all), optimize) enters the engine here.
func (t Translator) checkSize(q string) error {
	limit := t.MaxQuestion()
	if len(q) <= limit {
		return nil
	}
	return &pg.Error{Severity: "ERROR", Code: pg.CodeProgramLimitExceeded,
		Message: fmt.Sprintf("nlproxy: the question is %d bytes, more than the limit of %d", len(q), limit),
		Hint:    "Ask a shorter question; an operator can raise --max-question-bytes (NLPROXY_MAX_QUESTION_BYTES)."}
}

// report is the engine's account of an answered ask for the proxy's audit
// log, metrics and admin page.
func report(res *engine.Result) *askreport.Report { return res.Report() }

// failedReport is the same account of an ask that failed.
func failedReport(f *engine.Failed) *askreport.Report { return f.Report() }

func str(s string) *string { return &s }

// notice is what the client sees beside the rows: the SQL, and when the
// engine had several readings, its confidence and the others.
func notice(res *engine.Result, shown string) string {
	n := "nlproxy: " + shown
	if res.Verified != "" {
		n = "nlproxy: verified: " + res.Verified + "\n" + shown
	}
	if res.Standalone != "" {
		n = "nlproxy: understood as: " + res.Standalone + "\n" + strings.TrimPrefix(n, "nlproxy: ")
	}
	if res.Confidence >= 0 {
		n += "\n(profile " + res.Profile + ", confidence " + engine.FormatConfidence(res.Confidence) + ")"
	}
	for i, rw := range res.Rewrites() {
		if i == 0 {
			n += "\nLiterals changed to values the data stores (no row matched them as written):"
		}
		n += "\n- " + rw.String()
	}
	for i, alt := range res.Alternatives {
		if i == 0 {
			n += "\nOther readings the engine considered (ask-sql: shows each):"
		}
		n += "\n- " + strings.Join(strings.Fields(alt.Statement.Display()), " ")
	}
	return n
}

// stageJSON is one stage of the trace as ask-sql shows it.
type stageJSON struct {
	Stage            string `json:"stage"`
	MS               int64  `json:"ms"`
	LLMCalls         int    `json:"llm_calls"`
	PromptTokens     int    `json:"prompt_tokens"`
	CompletionTokens int    `json:"completion_tokens"`
	Note             string `json:"note,omitempty"`
}

func traceJSON(t *engine.Trace) string {
	out := []stageJSON{}
	if t != nil {
		for _, s := range t.Snapshot() {
			out = append(out, stageJSON{Stage: s.Name, MS: s.Duration.Milliseconds(), LLMCalls: s.LLMCalls,
				PromptTokens: s.PromptTokens, CompletionTokens: s.CompletionTokens, Note: s.Note})
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "[]"
	}
	return string(b)
}

func utf8Client(enc string) bool {
	return enc == "" || enc == "UTF8" || enc == "UNICODE" || enc == "SQL_ASCII"
}
