// Package engine turns a natural-language question into one read-only SQL
// statement for a PostgreSQL database: retrieval from the catalog, schema
// selection, generation with a local model, guard, bounded trial runs on the
// asking client's own session, fixing and literal correction.
//
// Only the `fast` profile exists so far: keywords → retrieval → schema →
// one candidate → guard → trial run → fixer (≤ 3 rounds).
package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/engine/guard"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/prompts"
)

// Catalogs gives the engine the catalog snapshot of a database
// (catalog.Manager implements it).
type Catalogs interface {
	Get(ctx context.Context, database string) (*catalog.Snapshot, error)
}

// Engine translates questions. Configure it by its fields; the zero values of
// the optional ones are sensible defaults. Safe for concurrent use.
type Engine struct {
	LLM      llm.Client
	Catalogs Catalogs
	Cache    *Cache // nil: no caching
	Logger   *zap.Logger

	AskTimeout      time.Duration // whole translation; default 2m
	TrialTimeout    time.Duration // statement_timeout of a trial run; default 5s
	TrialRows       int           // rows a trial run reads; default 50
	TrialMaxBytes   int           // row data a trial run may return; default 1 MiB
	MaxFixRounds    int           // default 3
	NumCtx          int           // context window asked of the model; default 8192
	SchemaMaxTokens int           // schema budget in the prompt; default NumCtx/2
	// Guard holds the operator's function allow/deny lists; the function
	// catalog comes from each database's snapshot.
	Guard guard.Options
	// AllSchema shows the model every table, not only those the asking role
	// may SELECT (saves one catalog query per role and schema version).
	AllSchema bool

	once    sync.Once
	visible visibility
	lex     lexicons
}

// Request is one question.
type Request struct {
	Question string
	Database string
	// User is the client's startup user, for logs. Whose privileges apply is
	// asked of the session itself (current_user, which SET ROLE changes).
	User     string
	TxStatus TxStatus // the client's session status when it asked
	Exec     Executor // the client's own upstream session
}

// Result is the settled statement and how it was reached.
type Result struct {
	// Statement is what runs; Statement.Display() is the SQL as written.
	Statement guard.Statement
	// Role is the role the ask was answered for (current_user).
	Role   string
	Trace  *Trace
	Cached bool
}

// SQL is the settled SQL as written (for people and logs).
func (r *Result) SQL() string { return r.Statement.Display() }

// applyDefaults fills unset fields once, before the first translation.
func (e *Engine) applyDefaults() {
	c := e
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.AskTimeout <= 0 {
		c.AskTimeout = 2 * time.Minute
	}
	if c.TrialTimeout <= 0 {
		c.TrialTimeout = 5 * time.Second
	}
	if c.TrialRows <= 0 {
		c.TrialRows = 50
	}
	if c.TrialMaxBytes <= 0 {
		c.TrialMaxBytes = 1 << 20
	}
	if c.MaxFixRounds <= 0 {
		c.MaxFixRounds = 3
	}
	if c.NumCtx <= 0 {
		c.NumCtx = llm.DefaultNumCtx
	}
	if c.SchemaMaxTokens <= 0 {
		c.SchemaMaxTokens = c.NumCtx / 2
	}
}

// ask is the state of one translation as it moves through the stages.
type ask struct {
	req      Request
	snap     *catalog.Snapshot
	sess     *session        // the asking session as it is now
	schema0  *catalog.Schema // the part of snap.Schema the asking role may read
	trace    *Trace
	keywords []string
	values   []valueindex.Match
	descs    []descindex.Hit
	schema   string
}

// Translate runs the pipeline for one question.
func (e *Engine) Translate(ctx context.Context, req Request) (*Result, error) {
	e.once.Do(e.applyDefaults)
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, e.AskTimeout)
	defer cancel()

	a := &ask{req: req, trace: &Trace{}}
	res, err := e.translate(ctx, a)
	a.trace.Total = time.Since(start)
	if err != nil {
		err = e.classify(ctx, err)
		e.Logger.Info("ask failed", zap.String("database", req.Database), zap.String("user", req.User),
			zap.String("role", a.role()), zap.String("question", req.Question), zap.Object("trace", a.trace), zap.Error(err))
		return nil, err
	}
	res.Trace = a.trace
	res.Role = a.role()
	e.Logger.Info("ask answered", zap.String("database", req.Database), zap.String("user", req.User),
		zap.String("role", a.role()), zap.String("question", req.Question),
		zap.String("sql", res.SQL()), zap.Object("trace", a.trace))
	return res, nil
}

func (e *Engine) translate(ctx context.Context, a *ask) (*Result, error) {
	if strings.TrimSpace(a.req.Question) == "" {
		return nil, &Error{Code: "42601", Message: "nlproxy: the question is empty", Hint: "Write the question after the marker, e.g. /* ask: how many orders are open? */"}
	}
	if a.req.TxStatus == TxFailed {
		return nil, ErrFailedTransaction
	}
	st := a.trace.begin("catalog")
	snap, err := e.Catalogs.Get(ctx, a.req.Database)
	a.trace.end(st)
	if err != nil {
		return nil, &Error{Code: CodeSystemError, Message: "nlproxy: the catalog of database " + a.req.Database + " is not available", Err: err,
			Hint: "Check that nlproxy's catalog role can connect and read the schema; see the proxy log."}
	}
	a.snap = snap
	if err := e.inspectSession(ctx, a); err != nil {
		return nil, err
	}

	key := CacheKey{Question: a.req.Question, Database: a.req.Database, Fingerprint: snap.Schema.Fingerprint, Role: a.sess.role, Session: a.sess.key()}
	if sql, ok := e.Cache.Get(key); ok {
		// A cached translation is checked and sealed again: the guard's
		// verdict depends on today's functions and views, not the day it
		// was cached.
		if stmt, err := guard.Seal(sql, e.guardOptions(a)); err == nil {
			a.trace.CacheHit = true
			return &Result{Statement: stmt, Cached: true}, nil
		}
	}

	a.schema0 = snap.Schema
	if !e.AllSchema {
		if err := e.restrictToRole(ctx, a); err != nil {
			return nil, err
		}
	} else {
		a.schema0 = withoutSecuredExamples(snap.Schema, a.sess.secured)
	}
	if err := e.extractKeywords(ctx, a); err != nil {
		return nil, err
	}
	e.retrieve(ctx, a)
	e.selectSchema(a)

	sql, err := e.generate(ctx, a)
	if err != nil {
		return nil, err
	}
	stmt, err := e.settle(ctx, a, sql)
	if err != nil {
		return nil, err
	}
	e.Cache.Put(key, stmt.Display())
	return &Result{Statement: stmt}, nil
}

// role is the role the ask runs as, once known.
func (a *ask) role() string {
	if a.sess == nil {
		return ""
	}
	return a.sess.role
}

// guardOptions are the engine's guard options with this database's
// function catalog.
func (e *Engine) guardOptions(a *ask) guard.Options {
	opts := e.Guard
	if a.snap != nil && a.snap.Functions != nil {
		opts.Catalog = a.snap.Functions
	}
	return opts
}

// maxInternalBytes bounds the results of the engine's own queries
// (privileges, session); they are small but scale with the schema.
const maxInternalBytes = 64 << 20

// internalQuery runs one of the engine's own catalog queries on the asking
// session, through the same guard and executor as generated SQL.
func (e *Engine) internalQuery(ctx context.Context, a *ask, sql string, maxRows int) (*Rows, error) {
	stmt, err := guard.Seal(sql, e.guardOptions(a))
	if err != nil {
		return nil, fmt.Errorf("engine: internal query refused: %w", err)
	}
	return a.req.Exec.Trial(ctx, stmt, Limits{Timeout: e.TrialTimeout, MaxRows: maxRows, MaxBytes: maxInternalBytes})
}

// extractKeywords asks the small model for keywords and entities; when its
// answer is unusable the lexical fallback keeps the ask going.
func (e *Engine) extractKeywords(ctx context.Context, a *ask) error {
	st := a.trace.begin("keywords")
	defer a.trace.end(st)
	p, err := prompts.Keywords(prompts.KeywordsParams{Question: a.req.Question})
	if err != nil {
		return err
	}
	var out prompts.KeywordsResult
	resp, err := llm.ChatJSON(ctx, e.LLM, e.chat(llm.RoleSmall, "keywords", p, 0), &out)
	st.LLMCalls += max(resp.Attempts, 1)
	st.PromptTokens += resp.PromptTokens
	st.CompletionTokens += resp.CompletionTokens
	switch {
	case errors.Is(err, llm.ErrBadOutput):
		a.keywords = lexicalKeywords(a.req.Question)
		st.Note = "model answer unusable; lexical keywords"
		return nil
	case err != nil:
		return err
	}
	seen := map[string]bool{}
	for _, k := range append(out.Entities, out.Keywords...) {
		k = strings.TrimSpace(k)
		if k != "" && !seen[strings.ToLower(k)] {
			seen[strings.ToLower(k)] = true
			a.keywords = append(a.keywords, k)
		}
	}
	if len(a.keywords) == 0 {
		a.keywords = lexicalKeywords(a.req.Question)
		st.Note = "model found no keywords; lexical keywords"
		return nil
	}
	st.Note = strings.Join(a.keywords, ", ")
	return nil
}

// retrieve looks the keywords up in the value index and the question in the
// description/glossary index.
func (e *Engine) retrieve(ctx context.Context, a *ask) {
	st := a.trace.begin("retrieval")
	defer a.trace.end(st)
	if a.snap.Values != nil {
		a.values = visibleValues(a.schema0, a.sess.secured, a.snap.Values.Lookup(ctx, a.keywords, valueindex.LookupOptions{}))
	}
	if a.snap.Descriptions != nil {
		a.descs = visibleDescriptions(a.schema0, a.snap.Descriptions.Search(ctx, a.req.Question+" "+strings.Join(a.keywords, " "), 8))
	}
	st.Note = fmt.Sprintf("%d values, %d descriptions", len(a.values), len(a.descs))
}

// generate asks the generator for one candidate.
func (e *Engine) generate(ctx context.Context, a *ask) (string, error) {
	st := a.trace.begin("generate")
	defer a.trace.end(st)
	p, err := prompts.Candidate(prompts.CandidateParams{
		Question:     a.req.Question,
		Schema:       a.schema,
		Values:       promptValues(a.values),
		Descriptions: promptDescriptions(a.descs),
	})
	if err != nil {
		return "", err
	}
	sql, resp, err := llm.ChatSQL(ctx, e.LLM, e.chat(llm.RoleGenerator, "generate", p, 0))
	st.LLMCalls += max(resp.Attempts, 1)
	st.PromptTokens += resp.PromptTokens
	st.CompletionTokens += resp.CompletionTokens
	if err != nil {
		return "", err
	}
	st.Note = sql
	return sql, nil
}

// problem is why a candidate cannot be the answer yet.
type problem struct {
	guardReason string
	execErr     *ServerError
	empty       bool
	nullColumns []string
	sample      *prompts.Sample
}

func (p problem) String() string {
	switch {
	case p.guardReason != "":
		return "rejected by the guard: " + p.guardReason
	case p.execErr != nil:
		return "failed: " + p.execErr.Error()
	case p.empty:
		return "returned no rows"
	default:
		return "mostly NULL in " + strings.Join(p.nullColumns, ", ")
	}
}

// settle checks a candidate and repairs it until it passes the guard and runs
// cleanly, at most MaxFixRounds fixes. An empty or NULL-heavy result gets one
// fix; if the fix is no better, the first clean SQL stands (empty can be right).
func (e *Engine) settle(ctx context.Context, a *ask, sql string) (guard.Statement, error) {
	var fallback guard.Statement // ran without error, but with an empty/NULL-heavy result
	softFixed := false
	var last problem
	for round := 0; ; round++ {
		sql = e.correctLiterals(ctx, a, sql)
		stmt, prob, err := e.check(ctx, a, sql)
		if err != nil {
			return guard.Statement{}, err
		}
		switch {
		case prob == nil:
			return stmt, nil
		case prob.guardReason == "" && prob.execErr == nil:
			if fallback.IsZero() {
				fallback = stmt
			}
			if softFixed {
				return fallback, nil
			}
			softFixed = true
		}
		last = *prob
		if round >= e.MaxFixRounds {
			break
		}
		fixed, err := e.fix(ctx, a, sql, *prob)
		if err != nil {
			if errors.Is(err, llm.ErrBadOutput) && !fallback.IsZero() {
				return fallback, nil
			}
			return guard.Statement{}, err
		}
		sql = fixed
	}
	if !fallback.IsZero() {
		return fallback, nil
	}
	code, hint := CodeNoUsableSQL, "Rephrase the question, name the tables or columns you mean, or use ask-sql: to see the attempt."
	if last.guardReason != "" {
		code = CodeInsufficientPriv
		hint = "nlproxy only runs read-only SELECT statements it can verify. " + hint
	}
	return guard.Statement{}, &Error{Code: code, Message: fmt.Sprintf("nlproxy: no usable SQL after %d fixes; the last attempt %s", e.MaxFixRounds, last),
		Hint: hint, Err: ErrNoUsableSQL}
}

// check seals sql (the guard) and trial-runs it; a nil problem means usable.
func (e *Engine) check(ctx context.Context, a *ask, sql string) (guard.Statement, *problem, error) {
	st := a.trace.begin("check")
	defer a.trace.end(st)
	stmt, err := guard.Seal(sql, e.guardOptions(a))
	if err != nil {
		var rej *guard.RejectError
		if errors.As(err, &rej) {
			st.Note = "guard: " + rej.Reason
			return guard.Statement{}, &problem{guardReason: rej.Reason}, nil
		}
		return guard.Statement{}, nil, err
	}
	rows, err := a.req.Exec.Trial(ctx, stmt, Limits{Timeout: e.TrialTimeout, MaxRows: e.TrialRows, MaxBytes: e.TrialMaxBytes})
	if err != nil {
		var se *ServerError
		if errors.As(err, &se) && ctx.Err() == nil {
			st.Note = "trial: " + se.Error()
			return stmt, &problem{execErr: se}, nil
		}
		if errors.Is(err, ErrResultTooLarge) {
			return guard.Statement{}, nil, &Error{Code: CodeProgramLimitExceeded,
				Message: fmt.Sprintf("nlproxy: the generated query's rows exceed %d bytes in the trial run", e.TrialMaxBytes),
				Hint:    "Ask for fewer or smaller columns, or raise the trial byte limit.", Err: err}
		}
		return guard.Statement{}, nil, err
	}
	if len(rows.Values) == 0 {
		st.Note = "trial: no rows"
		return stmt, &problem{empty: true}, nil
	}
	if nulls := nullHeavyColumns(rows); len(nulls) > 0 {
		st.Note = "trial: mostly NULL " + strings.Join(nulls, ",")
		return stmt, &problem{nullColumns: nulls, sample: sampleOf(rows, 5)}, nil
	}
	st.Note = fmt.Sprintf("trial: %d rows", len(rows.Values))
	return stmt, nil, nil
}

// fix asks the generator to repair sql given what went wrong.
func (e *Engine) fix(ctx context.Context, a *ask, sql string, prob problem) (string, error) {
	st := a.trace.begin("fix")
	defer a.trace.end(st)
	params := prompts.FixerParams{
		Question:     a.req.Question,
		Schema:       a.schema,
		Values:       promptValues(a.values),
		Descriptions: promptDescriptions(a.descs),
		SQL:          sql,
		GuardReason:  prob.guardReason,
		Empty:        prob.empty,
		NullColumns:  prob.nullColumns,
		Sample:       prob.sample,
	}
	if se := prob.execErr; se != nil {
		params.Error = &prompts.ExecError{Message: se.Message, SQLState: se.Code, Detail: se.Detail, Hint: se.Hint, Position: se.Position}
	}
	p, err := prompts.Fixer(params)
	if err != nil {
		return "", err
	}
	fixed, resp, err := llm.ChatSQL(ctx, e.LLM, e.chat(llm.RoleGenerator, "fix", p, 0))
	st.LLMCalls += max(resp.Attempts, 1)
	st.PromptTokens += resp.PromptTokens
	st.CompletionTokens += resp.CompletionTokens
	st.Note = prob.String()
	return fixed, err
}

func (e *Engine) chat(role llm.Role, step string, p prompts.Prompt, temperature float64) llm.ChatRequest {
	return llm.ChatRequest{
		Role:        role,
		System:      p.System,
		Messages:    []llm.Message{{Role: llm.SpeakerUser, Content: p.User}},
		Temperature: temperature,
		JSONSchema:  p.JSONSchema,
		NumCtx:      e.NumCtx,
		Step:        step,
	}
}

// nullHeavyColumns are columns NULL in at least 80% of a result of 3+ rows,
// the CHESS/CHASE signal of a wrong join or column.
func nullHeavyColumns(rows *Rows) []string {
	if len(rows.Values) < 3 {
		return nil
	}
	var out []string
	for j, name := range rows.Columns {
		nulls := 0
		for _, r := range rows.Values {
			if r[j] == nil {
				nulls++
			}
		}
		if nulls*5 >= len(rows.Values)*4 {
			out = append(out, name)
		}
	}
	return out
}

func sampleOf(rows *Rows, n int) *prompts.Sample {
	s := &prompts.Sample{Columns: rows.Columns}
	for i, r := range rows.Values {
		if i == n {
			break
		}
		row := make([]string, len(r))
		for j, v := range r {
			if v == nil {
				row[j] = "NULL"
			} else {
				row[j] = *v
			}
		}
		s.Rows = append(s.Rows, row)
	}
	return s
}

func promptValues(ms []valueindex.Match) []prompts.ValueMatch {
	out := make([]prompts.ValueMatch, 0, len(ms))
	for _, m := range ms {
		out = append(out, prompts.ValueMatch{Table: m.Table, Column: m.Column, Value: m.Value})
	}
	return out
}

func promptDescriptions(hits []descindex.Hit) []prompts.Description {
	out := make([]prompts.Description, 0, len(hits))
	for _, h := range hits {
		name := h.Term
		if name == "" {
			name = strings.Trim(h.Table+"."+h.Column, ".")
		}
		out = append(out, prompts.Description{Name: name, Text: h.Text})
	}
	return out
}

// classify turns any failure into an *Error with a SQLSTATE and a hint.
func (e *Engine) classify(ctx context.Context, err error) error {
	var ee *Error
	if errors.As(err, &ee) {
		return err
	}
	var le *llm.Error
	hint := ""
	if errors.As(err, &le) {
		hint = le.Hint
	}
	switch {
	case errors.Is(err, guard.ErrFailedTransaction):
		return ErrFailedTransaction
	case errors.Is(err, context.Canceled):
		return &Error{Code: CodeQueryCanceled, Message: "canceling statement due to user request", Err: err}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, llm.ErrTimeout):
		return &Error{Code: CodeQueryCanceled, Message: fmt.Sprintf("nlproxy: natural-language query timed out after %s", e.AskTimeout),
			Hint: "The model is slow or overloaded; try a smaller/faster model or raise the ask timeout.", Err: err}
	case errors.Is(err, llm.ErrModelMissing):
		return &Error{Code: CodeUndefinedObject, Message: "nlproxy: the configured model is not installed in Ollama", Hint: hint, Err: err}
	case errors.Is(err, llm.ErrUnreachable):
		return &Error{Code: CodeSystemError, Message: "nlproxy: cannot reach the Ollama server", Hint: hint, Err: err}
	case errors.Is(err, llm.ErrBadOutput):
		return &Error{Code: CodeNoUsableSQL, Message: "nlproxy: the model did not produce usable SQL",
			Hint: "Rephrase the question or use a stronger generator model.", Err: err}
	case errors.Is(err, llm.ErrServer) || errors.Is(err, llm.ErrNoModel):
		return &Error{Code: CodeSystemError, Message: "nlproxy: the model server failed", Hint: hint, Err: err}
	}
	return &Error{Code: CodeInternalError, Message: "nlproxy: internal error while translating the question", Err: err}
}
