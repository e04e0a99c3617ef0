// Package askall answers one question from several databases behind the
// proxy (the "Relational Database Augmented LLM" design): a context switch
// (does the question need data at all?), the database selection memory (top
// K databases by their summaries), a retrieval plan by the model (one goal
// per step and database, most relevant first, stopping when it has what it
// needs), each goal through the normal single-database engine on that
// database, exact arithmetic over the results, a return-type decision
// (rows, when one step's SQL is the answer) and a prose answer otherwise.
//
// Every statement runs with the asking user's own privileges: on the
// asker's own database through the asker's session, on the others through an
// operator-configured authenticator connection that takes on the asker's
// role inside each read-only transaction (sealed.TrialScopeAs, via
// engine.ConnExecutor). A database without an authenticator, unreachable, or
// where the role does not exist or may not be taken on is skipped and said so.
package askall

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/embedding"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/conversation"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/prompts"
)

// Connector opens an authenticator connection to database. It returns an
// error wrapping ErrNoAuthenticator when none is configured for it.
type Connector func(ctx context.Context, database string) (*pgconn.PgConn, error)

// ErrNoAuthenticator: the operator configured no authenticator role for
// the database, so nlproxy cannot run anything there for the asker.
var ErrNoAuthenticator = errors.New("ask(all): no authenticator configured for the database")

// Defaults of TopK and MaxSteps, exported so that nlproxy's option table
// (cmd/nlproxy/options.go) refers to them.
const (
	DefaultTopK     = 3
	DefaultMaxSteps = 4
)

// Asker answers questions across databases. Configure it by its fields;
// zero values of the optional ones are sensible defaults. Safe for
// concurrent use.
type Asker struct {
	Engine   *engine.Engine  // the single-database pipeline each goal goes through
	LLM      llm.Client      // context switch, plan, return type, answer
	Catalogs engine.Catalogs // snapshots of every database, built by the catalog role
	// Databases are the databases a question may be answered from, in the
	// operator's order. The asker's own database is always included.
	Databases []string
	Connect   Connector          // nil: only the asker's own database
	Embedder  embedding.Embedder // optional: blends embeddings into selection
	Glossary  []descindex.Doc    // business terms, for questions that need no data
	Logger    *zap.Logger        // its lines are redacted by Engine.Redact

	AskTimeout time.Duration // the whole question, every step included; default 5m
	TopK       int           // candidate databases from the selection memory; default 3
	MaxSteps   int           // steps a plan may have; default 4
	RunTimeout time.Duration // statement_timeout of each step's run; default 1m
	MaxRows    int           // rows kept per step; default 1000
	MaxBytes   int           // row data kept per step; default 4 MiB
	NumCtx     int           // context window asked of the model; default llm.DefaultNumCtx
	// SchemaTokens bounds each candidate's table list in the plan prompt;
	// default NumCtx / (2*TopK).
	SchemaTokens int

	once sync.Once
	mu   sync.Mutex
	mem  *Memory
	key  string
}

func (a *Asker) defaults() {
	if a.Logger == nil {
		a.Logger = zap.NewNop()
	}
	if a.AskTimeout <= 0 {
		a.AskTimeout = 5 * time.Minute
	}
	if a.TopK <= 0 {
		a.TopK = DefaultTopK
	}
	if a.MaxSteps <= 0 {
		a.MaxSteps = DefaultMaxSteps
	}
	if a.RunTimeout <= 0 {
		a.RunTimeout = time.Minute
	}
	if a.MaxRows <= 0 {
		a.MaxRows = 1000
	}
	if a.MaxBytes <= 0 {
		a.MaxBytes = 4 << 20
	}
	if a.NumCtx <= 0 {
		a.NumCtx = llm.DefaultNumCtx
	}
	if a.SchemaTokens <= 0 {
		a.SchemaTokens = a.NumCtx / (2 * a.TopK)
	}
}

// Request is one question across databases.
type Request struct {
	Question string
	// Database is the asker's own database, served by Exec.
	Database string
	User     string // startup user, for logs
	TxStatus pg.TxStatus
	Exec     sealed.Executor // the asker's own session
	// PlanOnly settles each step's SQL but runs nothing for the answer
	// (ask-sql(all):).
	PlanOnly bool
	// History is the asking session's conversation (nil: none kept): a
	// follow-up is read against it, and the answered question is added.
	History *conversation.History

	// model is the asker's model client with this question's time shared
	// out among its calls (set by Ask).
	model llm.Client
}

// Kind says what an Answer holds.
type Kind int

const (
	// KindText is a prose answer (or an abstention) in Answer.Text.
	KindText Kind = iota
	// KindRows is one step's rows, which answer the question as they are.
	KindRows
	// KindPlan is the plan with each step's SQL (PlanOnly).
	KindPlan
)

// Step is one goal of the plan and what became of it.
type Step struct {
	Database string
	Goal     string
	SQL      string   // settled SQL as written, when one was found
	Rows     *pg.Rows // its result (nil in PlanOnly or on failure)
	Err      error    // why the step has no result

	modelSQL string // SQL as the model may see it (engine.Engine.ModelSQL)
}

// Skip is a database that could not be asked, and why.
type Skip struct {
	Database string
	Reason   string
}

// Answer is the outcome of a question across databases.
type Answer struct {
	Kind     Kind
	Text     string   // KindText
	Rows     *pg.Rows // KindRows
	Role     string   // whose privileges applied (the session's current_user)
	Steps    []Step
	Skipped  []Skip
	Combine  string
	Computed []string // exact figures computed from the steps' results
	// Standalone is the question as understood when it was a follow-up of
	// the session's earlier asks ("" when it stood alone).
	Standalone string
}

// Notices are the lines the client is told alongside the answer: each
// database asked and its SQL, each skipped database and why, each failed
// step, each computed figure.
func (ans *Answer) Notices() []string {
	var out []string
	if ans.Standalone != "" {
		out = append(out, "nlproxy: understood as: "+ans.Standalone)
	}
	for _, s := range ans.Skipped {
		out = append(out, fmt.Sprintf("nlproxy: database %s skipped: %s", s.Database, s.Reason))
	}
	for i, st := range ans.Steps {
		switch {
		case st.Err != nil && st.SQL != "":
			out = append(out, fmt.Sprintf("nlproxy: step %d, database %s: %s\nfailed: %s", i+1, st.Database, st.SQL, ErrText(st.Err)))
		case st.Err != nil:
			out = append(out, fmt.Sprintf("nlproxy: step %d, database %s: no SQL: %s", i+1, st.Database, ErrText(st.Err)))
		default:
			out = append(out, fmt.Sprintf("nlproxy: step %d, database %s: %s", i+1, st.Database, st.SQL))
		}
	}
	for _, c := range ans.Computed {
		out = append(out, "nlproxy: computed: "+c)
	}
	if ans.Kind == KindRows && ans.Rows != nil && ans.Rows.Truncated {
		out = append(out, fmt.Sprintf("nlproxy: only the first %d rows are shown", len(ans.Rows.Values)))
	}
	return out
}

// ErrText is what a person is told about a step's failure: the server's or
// the engine's message with its SQLSTATE; causes stay in the log.
func ErrText(err error) string {
	var ee *pg.Error
	if errors.As(err, &ee) {
		code := fmt.Sprintf("(SQLSTATE %s)", ee.Code)
		if strings.HasSuffix(ee.Message, code) {
			return ee.Message // the server's own error, quoted, already says it
		}
		return ee.Message + " " + code
	}
	return "internal error"
}

// target is a candidate database ready to be asked: an executor that runs
// as the asker there, and the tables the asker may read.
type target struct {
	database string
	snap     *catalog.Snapshot
	exec     sealed.Executor
	tx       pg.TxStatus
	tables   map[string]bool // "schema.table" readable by the asker
	conn     *pgconn.PgConn  // authenticator connection to close; nil for the asker's own
}

// Ask answers req. Errors are *pg.Error (a SQLSTATE for the client) or
// *NoTargetError.
func (a *Asker) Ask(ctx context.Context, req Request) (*Answer, error) {
	a.once.Do(a.defaults)
	ctx, cancel := context.WithTimeout(ctx, a.AskTimeout)
	defer cancel()
	req.model = a.Engine.TimeShared(a.LLM, a.AskTimeout)
	ans, err := a.ask(ctx, req)
	if err != nil {
		var nt *NoTargetError
		if !errors.As(err, &nt) {
			err = a.Engine.Classify(ctx, err)
		}
		a.Logger.Info("question across databases failed", zap.String("user", req.User), zap.String("question", a.Engine.Redact.Question(req.Question)),
			zap.String("sqlstate", engine.ErrCode(err)), zap.String("error", a.Engine.Redact.Text(err.Error())))
		return nil, err
	}
	notices := ans.Notices() // they quote each step's SQL
	for i, n := range notices {
		notices[i] = a.Engine.Redact.Text(n)
	}
	a.Logger.Info("question across databases answered", zap.String("user", req.User), zap.String("role", ans.Role),
		zap.String("question", a.Engine.Redact.Question(req.Question)), zap.Strings("notices", notices))
	req.History.Add(ans.turn(req.Question))
	return ans, nil
}

// turn is the answered question as the session's conversation keeps it:
// the question as asked and as understood, each step's SQL as the model may
// see it (headed by its database), and the shape of the rows answered with
// (one step's), never the rows. The prompt shows SQL on one line, so each
// step's is headed "(database name)".
func (ans *Answer) turn(question string) conversation.Turn {
	t := conversation.Turn{Question: question, Standalone: ans.Standalone, Rows: -1}
	var sql []string
	for _, st := range ans.Steps {
		if st.modelSQL != "" {
			sql = append(sql, "(database "+st.Database+") "+st.modelSQL)
		}
	}
	t.SQL = strings.Join(sql, "; ")
	rows := ans.Rows
	if rows == nil && len(ans.Steps) == 1 {
		rows = ans.Steps[0].Rows
	}
	if rows != nil {
		t.Columns, t.Rows, t.More = rows.Columns, len(rows.Values), rows.Truncated
	}
	return t
}

// understand reads a follow-up against the session's conversation: one
// small model call, skipped when the question clearly stands alone or
// nothing was asked before; the rest of the question is answered from
// the standalone question.
func (a *Asker) understand(ctx context.Context, req *Request, ans *Answer) error {
	turns := req.History.Turns()
	if len(turns) == 0 || engine.StandsAlone(req.Question) {
		return nil
	}
	q, _, err := engine.Understand(ctx, chatModel{a: a, model: req.model, step: "followup"}, req.Question, turns)
	if err != nil || q == "" {
		return err
	}
	ans.Standalone, req.Question = q, q
	return nil
}

// chatModel is an engine.JSONModel over the asker's own model client.
type chatModel struct {
	a     *Asker
	model llm.Client
	step  string
}

func (m chatModel) JSON(ctx context.Context, p prompts.Prompt, _ float64, out any) error {
	_, err := llm.ChatJSON(ctx, m.model, m.a.chat(llm.RoleSmall, m.step, p), out)
	return err
}

func (a *Asker) ask(ctx context.Context, req Request) (*Answer, error) {
	if strings.TrimSpace(req.Question) == "" {
		return nil, &pg.Error{Code: pg.CodeSyntaxError, Message: "nlproxy: the question is empty", Hint: "Write the question after the marker, e.g. /* ask(all): how many orders are open? */"}
	}
	if req.TxStatus == pg.TxFailed {
		return nil, pg.ErrFailedTransaction
	}
	ans := &Answer{}
	if err := a.understand(ctx, &req, ans); err != nil {
		return nil, err
	}
	role, login, err := a.sessionRoles(ctx, req)
	if err != nil {
		return nil, err
	}
	ans.Role = role

	if !req.PlanOnly {
		done, err := a.contextSwitch(ctx, req, ans)
		if err != nil || done {
			return ans, err
		}
	}

	snaps := a.snapshots(ctx, req, ans)
	if len(snaps) == 0 {
		return nil, &pg.Error{Code: pg.CodeSystemError, Message: "nlproxy: no database's catalog is available", Hint: "See the proxy log for the catalog role's errors."}
	}
	mem := a.memory(snaps)
	cands := mem.Top(ctx, req.Question, a.TopK)

	var targets []*target
	defer func() {
		for _, t := range targets {
			if t.conn != nil {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_ = t.conn.Close(cctx)
				cancel()
			}
		}
	}()
	for _, c := range cands {
		t, reason := a.open(ctx, req, role, login, snaps[c.Database])
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if t == nil {
			ans.Skipped = append(ans.Skipped, Skip{Database: c.Database, Reason: reason})
			continue
		}
		targets = append(targets, t)
	}
	if len(targets) == 0 {
		return ans, &NoTargetError{Skipped: ans.Skipped}
	}

	plan, err := a.plan(ctx, req, targets)
	if err != nil {
		return nil, err
	}
	ans.Combine = plan.Combine
	byName := map[string]*target{}
	for _, t := range targets {
		byName[t.database] = t
	}
	for _, ps := range plan.Steps {
		st := Step{Database: ps.Database, Goal: ps.Goal}
		a.runStep(ctx, req, byName[ps.Database], &st)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		ans.Steps = append(ans.Steps, st)
	}
	if req.PlanOnly {
		ans.Kind = KindPlan
		return ans, nil
	}
	ans.Computed = combine(plan.Combine, ans.Steps)

	if len(ans.Steps) == 1 && ans.Steps[0].Err == nil && len(ans.Computed) == 0 {
		if a.returnsRows(ctx, req, &ans.Steps[0]) {
			ans.Kind, ans.Rows = KindRows, ans.Steps[0].Rows
			return ans, nil
		}
	}
	return ans, a.answer(ctx, req, ans)
}

// Top is the selection memory's candidates for question, without asking
// anything (for measurements and tools).
func (a *Asker) Top(ctx context.Context, question string) []Candidate {
	a.once.Do(a.defaults)
	snaps := a.snapshots(ctx, Request{}, &Answer{})
	if len(snaps) == 0 {
		return nil
	}
	return a.memory(snaps).Top(ctx, question, a.TopK)
}

// NoTargetError: none of the candidate databases could be asked.
type NoTargetError struct{ Skipped []Skip }

func (e *NoTargetError) Error() string {
	parts := make([]string, 0, len(e.Skipped))
	for _, s := range e.Skipped {
		parts = append(parts, s.Database+": "+s.Reason)
	}
	return "nlproxy: no database could be asked for this question (" + strings.Join(parts, "; ") + ")"
}

// sessionRolesSQL asks the asker's own session whose privileges apply now
// (current_user follows SET ROLE) and which role logged in (session_user).
// Both are read as type name, whose text form the driver returns: a cast
// would resolve its target type through the session's search_path, where a
// pg_temp.text with a cast from name could change the answer.
const sessionRolesSQL = "SELECT current_user, session_user"

func (a *Asker) sessionRoles(ctx context.Context, req Request) (role, login string, err error) {
	stmt, err := guard.Seal(sessionRolesSQL, a.Engine.Guard)
	if err != nil {
		return "", "", fmt.Errorf("ask(all): seal the session query: %w", err)
	}
	rows, err := req.Exec.Trial(ctx, stmt, pg.Limits{Timeout: 5 * time.Second, MaxRows: 1, MaxBytes: 1 << 16})
	if err != nil {
		return "", "", fmt.Errorf("ask(all): ask the session for its role: %w", err)
	}
	if len(rows.Values) != 1 || len(rows.Values[0]) != 2 || rows.Values[0][0] == nil || rows.Values[0][1] == nil ||
		len(rows.Types) != 2 || rows.Types[0] != nameOID || rows.Types[1] != nameOID {
		return "", "", errors.New("ask(all): the session did not say its role")
	}
	return *rows.Values[0][0], *rows.Values[0][1], nil
}

// contextSwitch decides whether the question needs data. When it does not,
// the answer comes from the glossary, or nlproxy abstains; done is true then.
func (a *Asker) contextSwitch(ctx context.Context, req Request, ans *Answer) (done bool, err error) {
	var gloss []prompts.Description
	if len(a.Glossary) > 0 {
		for _, h := range descindex.New(a.Glossary, descindex.Options{}).Search(ctx, req.Question, 5) {
			text := h.Text
			if h.SQLHint != "" {
				text += " (SQL: " + h.SQLHint + ")"
			}
			gloss = append(gloss, prompts.Description{Name: h.Term, Text: text})
		}
	}
	p, err := prompts.ContextSwitch(prompts.ContextSwitchParams{Question: req.Question, Glossary: gloss})
	if err != nil {
		return false, err
	}
	var out prompts.ContextSwitchResult
	_, err = llm.ChatJSON(ctx, req.model, a.chat(llm.RoleSmall, "context-switch", p), &out)
	switch {
	case errors.Is(err, llm.ErrBadOutput):
		return false, nil // unusable answer: look in the databases
	case err != nil:
		return false, err
	case out.NeedsData:
		return false, nil
	}
	ans.Kind = KindText
	if answer := strings.TrimSpace(out.Answer); answer != "" && len(gloss) > 0 {
		ans.Text = answer
	} else {
		ans.Text = "This question needs no data from the databases, and the glossary does not define it; nlproxy does not answer it from the model's own knowledge."
	}
	return true, nil
}

// snapshots gets the catalog of every database a question may use; a
// database whose catalog is unavailable is skipped.
func (a *Asker) snapshots(ctx context.Context, req Request, ans *Answer) map[string]*catalog.Snapshot {
	names := slices.Clone(a.Databases)
	if req.Database != "" && !slices.Contains(names, req.Database) {
		names = append(names, req.Database)
	}
	out := map[string]*catalog.Snapshot{}
	for _, n := range names {
		s, err := a.Catalogs.Get(ctx, n)
		if err != nil {
			a.Logger.Warn("catalog unavailable for a question across databases", zap.String("database", n), zap.Error(err))
			ans.Skipped = append(ans.Skipped, Skip{Database: n, Reason: "its catalog is not available"})
			continue
		}
		out[n] = s
	}
	return out
}

// memory returns the selection memory for snaps, rebuilt when a database's
// snapshot changed.
func (a *Asker) memory(snaps map[string]*catalog.Snapshot) *Memory {
	list := make([]*catalog.Snapshot, 0, len(snaps))
	for _, n := range a.order(snaps) {
		list = append(list, snaps[n])
	}
	k := memoryKey(list)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mem == nil || a.key != k {
		a.mem, a.key = NewMemory(list, a.Embedder), k
	}
	return a.mem
}

// order is the configured order of the databases in snaps.
func (a *Asker) order(snaps map[string]*catalog.Snapshot) []string {
	var out []string
	for _, n := range a.Databases {
		if snaps[n] != nil && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for n := range snaps {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// readableSQL lists the relations the session's current role may read. It
// runs on the asker's own session too, so it resolves nothing through the
// session's search_path: names are read as type name (no cast to a text
// that pg_temp could shadow), operators are pinned to pg_catalog, and the
// guard's seal qualifies the functions.
const readableSQL = `SELECT n.nspname, c.relname
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,v,m,f}'::pg_catalog."char"[])
  AND NOT n.nspname OPERATOR(pg_catalog.=) ANY ('{pg_catalog,information_schema}'::pg_catalog.name[])
  AND n.nspname OPERATOR(pg_catalog.!~~) 'pg\_toast%'
  AND has_schema_privilege(n.oid, 'USAGE')
  AND (has_table_privilege(c.oid, 'SELECT') OR has_any_column_privilege(c.oid, 'SELECT'))`

// open makes a database ready to be asked for role, or says why it cannot
// be. Another database than the asker's own is asked only where login
// could start a session itself (perimeter).
func (a *Asker) open(ctx context.Context, req Request, role, login string, snap *catalog.Snapshot) (*target, string) {
	t := &target{database: snap.Database, snap: snap}
	if snap.Database == req.Database {
		t.exec, t.tx = req.Exec, req.TxStatus
	} else {
		if a.Connect == nil {
			return nil, "no authenticator is configured for it"
		}
		conn, err := a.Connect(ctx, snap.Database)
		if err != nil {
			if errors.Is(err, ErrNoAuthenticator) {
				return nil, "no authenticator is configured for it"
			}
			a.Logger.Warn("authenticator cannot connect", zap.String("database", snap.Database), zap.Error(err))
			return nil, "it cannot be reached (see the proxy log)"
		}
		t.conn = conn
		reason, err := perimeter(ctx, conn, login)
		if err != nil {
			a.Logger.Warn("perimeter check failed", zap.String("database", snap.Database), zap.String("login", login), zap.Error(err))
			return t.closeWith(ctx, "what Postgres checks before a session could not be checked (see the proxy log)")
		}
		if reason != "" {
			return t.closeWith(ctx, reason)
		}
		t.exec, t.tx = engine.ConnExecutor{Conn: conn, Role: role}, pg.TxIdle
	}
	opts := a.Engine.Guard
	opts.Catalog = snap.Functions
	stmt, err := guard.Seal(readableSQL, opts)
	if err != nil {
		return nil, "internal error: " + err.Error()
	}
	rows, err := t.exec.Trial(ctx, stmt, pg.Limits{Timeout: 10 * time.Second, MaxRows: 100_000, MaxBytes: 16 << 20})
	if err != nil {
		var se *pg.Error
		switch {
		case errors.As(err, &se) && se.Code == pg.CodeInvalidParameterValue:
			return t.closeWith(ctx, fmt.Sprintf("role %s does not exist there", role))
		case errors.As(err, &se) && se.Code == pg.CodeInsufficientPrivilege:
			return t.closeWith(ctx, fmt.Sprintf("the authenticator may not act as role %s there (GRANT %s TO the authenticator)", role, role))
		case errors.Is(err, sealed.ErrBadRole):
			return t.closeWith(ctx, fmt.Sprintf("nlproxy does not act as role %q", role))
		}
		a.Logger.Warn("cannot list readable tables", zap.String("database", snap.Database), zap.String("role", role), zap.Error(err))
		return t.closeWith(ctx, "its tables could not be listed ("+ErrText(err)+")")
	}
	t.tables = map[string]bool{}
	for _, r := range rows.Values {
		if len(r) == 2 && r[0] != nil && r[1] != nil {
			t.tables[*r[0]+"."+*r[1]] = true
		}
	}
	if len(t.tables) == 0 {
		return t.closeWith(ctx, fmt.Sprintf("role %s may read none of its tables", role))
	}
	return t, ""
}

func (t *target) closeWith(ctx context.Context, reason string) (*target, string) {
	if t.conn != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = t.conn.Close(cctx)
		cancel()
	}
	return nil, reason
}

// plan asks the model for the retrieval plan over the targets and keeps its
// valid steps. A plan with none falls back to the whole question on the
// best candidate.
func (a *Asker) plan(ctx context.Context, req Request, targets []*target) (prompts.PlanResult, error) {
	dbs := make([]prompts.PlanDatabase, 0, len(targets))
	for _, t := range targets {
		dbs = append(dbs, prompts.PlanDatabase{Name: t.database, Schema: planSchema(t, req.Question, a.SchemaTokens)})
	}
	p, err := prompts.Plan(prompts.PlanParams{Question: req.Question, Databases: dbs, MaxSteps: a.MaxSteps})
	if err != nil {
		return prompts.PlanResult{}, err
	}
	var out prompts.PlanResult
	_, err = llm.ChatJSON(ctx, req.model, a.chat(llm.RoleGenerator, "plan", p), &out)
	if err != nil && !errors.Is(err, llm.ErrBadOutput) {
		return prompts.PlanResult{}, err
	}
	known := map[string]bool{}
	for _, t := range targets {
		known[t.database] = true
	}
	var steps []prompts.PlanStep
	for _, s := range out.Steps {
		s.Goal = strings.TrimSpace(s.Goal)
		if known[s.Database] && s.Goal != "" && len(steps) < a.MaxSteps {
			steps = append(steps, s)
		}
	}
	if len(steps) == 0 {
		steps = []prompts.PlanStep{{Database: targets[0].database, Goal: req.Question}}
	}
	out.Steps = steps
	switch out.Combine {
	case CombineLarger, CombineSmaller, CombineDifference, CombineRatio, CombineSum:
	default:
		out.Combine = CombineNone
	}
	return out, nil
}

// planSchema is the compact list of the asker's readable tables of a
// database, "table(col, col) -- comment", most question-related first,
// within budget tokens.
func planSchema(t *target, question string, budget int) string {
	q := map[string]bool{}
	for _, w := range descindex.Tokenize(question) {
		q[w] = true
	}
	type line struct {
		text  string
		score int
	}
	var lines []line
	for _, tb := range t.snap.Schema.Tables {
		if !t.tables[tb.Schema+"."+tb.Name] {
			continue
		}
		name := tb.Name
		if tb.Schema != "public" {
			name = tb.Schema + "." + tb.Name
		}
		cols := make([]string, 0, len(tb.Columns))
		score := 0
		for _, c := range tb.Columns {
			cols = append(cols, c.Name)
			for _, w := range descindex.Tokenize(c.Name) {
				if q[w] {
					score++
				}
			}
		}
		for _, w := range descindex.Tokenize(tb.Name + " " + tb.Comment) {
			if q[w] {
				score += 2
			}
		}
		s := name + "(" + strings.Join(cols, ", ") + ")"
		if tb.Comment != "" {
			s += " -- " + strings.Join(strings.Fields(tb.Comment), " ")
		}
		lines = append(lines, line{s, score})
	}
	slices.SortStableFunc(lines, func(x, y line) int { return y.score - x.score })
	var b strings.Builder
	for i, l := range lines {
		if i > 0 && prompts.EstimateTokens(b.String()+l.text) > budget {
			fmt.Fprintf(&b, "(%d more tables)\n", len(lines)-i)
			break
		}
		b.WriteString(l.text + "\n")
	}
	return b.String()
}

// runStep settles the goal's SQL on its database through the engine (with
// the asker's privileges there) and, unless only the plan is wanted, runs it.
func (a *Asker) runStep(ctx context.Context, req Request, t *target, st *Step) {
	res, err := a.Engine.Translate(ctx, engine.Request{Question: st.Goal, Database: t.database, User: req.User, TxStatus: t.tx, Exec: t.exec})
	if err != nil {
		st.Err = err
		return
	}
	st.SQL = res.SQL()
	st.modelSQL = a.Engine.ModelSQL(res)
	if req.PlanOnly {
		return
	}
	rows, err := t.exec.Trial(ctx, res.Statement, pg.Limits{Timeout: a.RunTimeout, MaxRows: a.MaxRows, MaxBytes: a.MaxBytes})
	if err != nil {
		if errors.Is(err, pg.ErrResultTooLarge) {
			err = &pg.Error{Code: pg.CodeProgramLimitExceeded, Message: fmt.Sprintf("nlproxy: the step's rows exceed %d bytes", a.MaxBytes), Err: err}
		}
		st.Err = err
		return
	}
	st.Rows = rows
}

// returnsRows is the return-type decision: are the step's rows, as they
// are, the answer to the question?
func (a *Asker) returnsRows(ctx context.Context, req Request, st *Step) bool {
	p, err := prompts.ReturnType(prompts.ReturnTypeParams{Question: req.Question, Database: st.Database, SQL: st.modelSQL})
	if err != nil {
		return false
	}
	var out prompts.ReturnTypeResult
	if _, err := llm.ChatJSON(ctx, req.model, a.chat(llm.RoleSmall, "return-type", p), &out); err != nil {
		return false
	}
	return out.Answers
}

// answer composes the prose answer from the steps' results. The computed
// figures are appended by code, so the exact arithmetic is in the answer
// whatever the model wrote.
func (a *Asker) answer(ctx context.Context, req Request, ans *Answer) error {
	ans.Kind = KindText
	if !a.Engine.ModelData.Rows() {
		// Prose is written from rows, which may not reach the model: the
		// answer is the computed figures, the rows are in the notices.
		text := "The model may not see result rows (model data: " + string(a.Engine.ModelData) + "); each step's SQL is in the notices: run it for the rows."
		if len(ans.Computed) > 0 {
			text = "Computed: " + strings.Join(ans.Computed, "; ") + "."
		}
		ans.Text = text
		return nil
	}
	steps := make([]prompts.AnswerStep, 0, len(ans.Steps)+len(ans.Skipped))
	for i, st := range ans.Steps {
		s := prompts.AnswerStep{N: i + 1, Database: st.Database, Goal: st.Goal, SQL: st.modelSQL}
		if st.Err != nil {
			s.Problem = ErrText(st.Err)
		} else {
			s.Result = engine.SampleOf(st.Rows, 20) // the head of the rows for the answer prompt
		}
		steps = append(steps, s)
	}
	for _, sk := range ans.Skipped {
		steps = append(steps, prompts.AnswerStep{N: len(steps) + 1, Database: sk.Database, Goal: "(not asked)", Problem: "skipped: " + sk.Reason})
	}
	p, err := prompts.Answer(prompts.AnswerParams{Question: req.Question, Steps: steps, Computed: ans.Computed})
	if err != nil {
		return err
	}
	var out prompts.AnswerResult
	_, err = llm.ChatJSON(ctx, req.model, a.chat(llm.RoleGenerator, "answer", p), &out)
	if err != nil && !errors.Is(err, llm.ErrBadOutput) {
		return err
	}
	text := strings.TrimSpace(out.Answer)
	if text == "" {
		text = "The model gave no usable answer; the steps' results and SQL are in the notices."
	}
	if len(ans.Computed) > 0 {
		text += "\n\nComputed: " + strings.Join(ans.Computed, "; ") + "."
	}
	var failed []string
	for i, st := range ans.Steps {
		if st.Err != nil {
			failed = append(failed, fmt.Sprintf("step %d (%s): %s", i+1, st.Database, ErrText(st.Err)))
		}
	}
	if len(failed) > 0 {
		text += "\n\nPartial answer; not answered: " + strings.Join(failed, "; ") + "."
	}
	var skipped []string
	for _, sk := range ans.Skipped {
		skipped = append(skipped, sk.Database+" ("+sk.Reason+")")
	}
	if len(skipped) > 0 {
		text += "\n\nNot consulted: " + strings.Join(skipped, "; ") + "."
	}
	ans.Text = text
	return nil
}

func (a *Asker) chat(role llm.Role, step string, p prompts.Prompt) llm.ChatRequest {
	return llm.ChatRequest{
		Role:       role,
		System:     p.System,
		Messages:   []llm.Message{{Role: llm.SpeakerUser, Content: p.User}},
		JSONSchema: p.JSONSchema,
		MaxTokens:  p.MaxTokens,
		NumCtx:     a.NumCtx,
		Stop:       p.Stop,
		Step:       step,
	}
}
