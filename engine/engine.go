// Package engine turns a natural-language question into one read-only SQL
// statement for a PostgreSQL database: retrieval from the catalog, schema
// selection, generation with a local model, guard, bounded trial runs on the
// asking client's own session, fixing and literal correction.
//
// A profile (profile.go) decides what fills each stage: fast writes one
// candidate and fixes it; balanced adds candidates and a unit-test selector;
// max adds synthetic examples, decomposition, a pairwise selector and guided
// cost descent. Every candidate passes the guard and a trial run.
package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/catalog/semantic"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/conversation"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/redact"
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

	AskTimeout      time.Duration // whole translation in the fast profile (balanced 2×, max 4×); default 2m
	TrialTimeout    time.Duration // statement_timeout of a trial run; default 5s
	TrialRows       int           // rows a trial run reads; default 50
	TrialMaxBytes   int           // row data a trial run may return; default 1 MiB
	NumCtx          int           // context window asked of the model; default 8192
	SchemaMaxTokens int           // schema budget in the prompt; default NumCtx/2
	// Redact is what the engine's log lines withhold of an ask (the
	// operator's --audit-redact); they are bounded whatever it says.
	Redact redact.Policy
	// Guard holds the operator's function allow/deny lists; the function
	// catalog comes from each database's snapshot.
	Guard guard.Options
	// AllSchema shows the model every table, not only those the asking role
	// may SELECT (saves one catalog query per role and schema version).
	AllSchema bool
	// NoLiteralCorrection leaves string literals as the model wrote them
	// (by default a literal no row matches becomes the closest stored value).
	NoLiteralCorrection bool
	// ModelData is what of the data may reach the model (schema, values,
	// rows); "" is DefaultModelData.
	ModelData ModelData

	// Profiles are the profiles asks may name (nil: the built-in ones,
	// Profiles()). DefaultProfile applies when neither the ask nor
	// DatabaseProfiles (database → profile) names one; "" means fast.
	Profiles         map[string]*Profile
	DefaultProfile   string
	DatabaseProfiles map[string]string
	// SemanticJoins are the semantic layer's join paths ("schema.table.
	// column" pairs, catalog/semantic), listed ahead of the workload's and
	// the inferred ones wherever both tables exist.
	SemanticJoins []semantic.Join
	// Verified are the operator's verified queries (nil: none): a close
	// match answers the ask with its SQL, a near miss is a strong example.
	Verified VerifiedQueries
	// Pairs remembers question→SQL pairs per database for few-shot examples
	// (nil: in this process only).
	Pairs memory.PairStore
	// Workload is what the statements each database runs taught (nil: no
	// learning): join paths, column use and example queries.
	Workload Workload
	// WorkloadExamples bounds the model calls an ask of a profile with
	// WorkloadExamples (balanced, max) spends turning workload queries
	// into remembered pairs; default DefaultWorkloadExamples, negative
	// none.
	WorkloadExamples int
	// OutputCaps overrides the output cap (tokens) a step's prompt declares
	// (prompts.OutputCap), by step name ("candidate", "fixer", ...).
	OutputCaps map[string]int
	// Parallel bounds the model calls one ask makes at once (generators and
	// fixes); default 2. Ollama serves them in parallel up to its
	// OLLAMA_NUM_PARALLEL.
	Parallel int

	once     sync.Once
	visible  visibility
	internal sealedQueries
	profiles map[string]*Profile
	lex      lexicons
	// synthesized holds the workload queries (database, fingerprint)
	// already turned into pairs or tried: once each, not once per ask.
	synthesized  tried
	verifiedUses verifiedUses
	speeds       speeds
}

// Request is one question.
type Request struct {
	Question string
	Database string
	// User is the client's startup user, for logs. Whose privileges apply is
	// asked of the session itself (current_user, which SET ROLE changes).
	User     string
	TxStatus pg.TxStatus     // the client's session status when it asked
	Exec     sealed.Executor // the client's own upstream session
	// Profile names the profile (fast, balanced, max); "" for the
	// database's or the engine's default.
	Profile string
	// History is the asking session's recent asks (nil: none kept). A
	// follow-up is read against it, and the answered ask is added to it.
	History *conversation.History
	// Progress, when set, is told each stage as it begins ("generating
	// candidate 2/3"), from the ask's goroutines.
	Progress func(stage string)
	// ShowAttempt names how this client sees a failed ask's attempt and
	// readings ("ask-sql:" on the wire, the ask_sql tool over MCP), for
	// the hints; "" when it is already looking at them, or has no way.
	ShowAttempt string
}

// progress reports a stage boundary of the ask.
func (a *ask) progress(format string, args ...any) {
	if a.req.Progress != nil {
		a.req.Progress(fmt.Sprintf(format, args...))
	}
}

// Result is the settled statement and how it was reached.
type Result struct {
	// Statement is what runs; Statement.Display() is the SQL as written.
	Statement sealed.Statement
	// Role is the role the ask was answered for (current_user).
	Role    string
	Profile string
	Trace   *Trace
	Cached  bool
	// Candidates are every candidate the generators made, in generator
	// order; Chosen indexes the one that runs (-1 for a cached answer).
	Candidates []*Candidate
	Chosen     int
	// Confidence in [0, 1]: agreement among the candidates and the
	// selector's verdict; -1 when it could not be judged (one candidate).
	Confidence float64
	// Alternatives are other readings the candidates gave, worth showing
	// when the confidence is low (one per other result cluster).
	Alternatives []*Candidate
	// Optimized says what the optimizer did ("" when it did not run).
	Optimized string
	// Standalone is the question as the engine understood it when it was
	// a follow-up of the session's earlier asks ("" when it stood alone).
	Standalone string
	// Verified names the verified query that answered the ask ("" when the
	// SQL was generated).
	Verified string
	// Names resolves names as the asking session did when this ask probed
	// it, for sealing SQL around the answer (the table-function form)
	// without probing the session a second time.
	Names guard.Names

	cachedRewrites []memory.LiteralRewrite
}

// Rewrites are the literals literal correction changed in the answer.
func (r *Result) Rewrites() []memory.LiteralRewrite {
	if r.Cached {
		return r.cachedRewrites
	}
	if r.Chosen < 0 || r.Chosen >= len(r.Candidates) {
		return nil
	}
	return r.Candidates[r.Chosen].Rewrites
}

// SQL is the settled SQL as written (for people and logs).
func (r *Result) SQL() string { return r.Statement.Display() }

// Defaults of the optional fields, exported so that nlproxy's option table
// (cmd/nlproxy/options.go) refers to them: each value is written once.
const (
	DefaultAskTimeout    = 2 * time.Minute
	DefaultTrialTimeout  = 5 * time.Second
	DefaultTrialMaxBytes = 1 << 20
	DefaultParallel      = 2
	// DefaultWorkloadExamples: one workload query made a pair per ask.
	DefaultWorkloadExamples = 1
)

// applyDefaults fills unset fields once, before the first translation.
func (e *Engine) applyDefaults() {
	c := e
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.AskTimeout <= 0 {
		c.AskTimeout = DefaultAskTimeout
	}
	if c.TrialTimeout <= 0 {
		c.TrialTimeout = DefaultTrialTimeout
	}
	if c.TrialRows <= 0 {
		c.TrialRows = 50
	}
	if c.TrialMaxBytes <= 0 {
		c.TrialMaxBytes = DefaultTrialMaxBytes
	}
	if c.NumCtx <= 0 {
		c.NumCtx = llm.DefaultNumCtx
	}
	if c.SchemaMaxTokens <= 0 {
		c.SchemaMaxTokens = c.NumCtx / 2
	}
	if c.Parallel <= 0 {
		c.Parallel = DefaultParallel
	}
	if c.WorkloadExamples == 0 {
		c.WorkloadExamples = DefaultWorkloadExamples
	}
	if c.Pairs == nil {
		c.Pairs = &MemoryPairs{}
	}
	c.profiles = c.Profiles
	if c.profiles == nil {
		c.profiles = Profiles()
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
	// What the database's workload taught that the asker may see, the join
	// paths listed under the schema and the workload queries offered.
	learned *learned
	joins   []JoinLink
	queries []string

	profile *Profile
	client  llm.Client // the engine's model client, counted against budget
	budget  *budget
	exec    sealed.Executor // req.Exec, one statement at a time
	in      GenInput        // prompt material, fixed once the schema is selected
	view    modelView
	// asked and standalone: the question as asked and as understood, when
	// followUp rewrote it (a.req.Question is then the standalone one).
	asked, standalone string
	// verifiedExample is a verified query the ask nearly matched, shown to
	// the model first.
	verifiedExample *prompts.Example
	cands           []*Candidate
}

// Translate runs the pipeline for one question.
func (e *Engine) Translate(ctx context.Context, req Request) (*Result, error) {
	e.once.Do(e.applyDefaults)
	start := time.Now()
	a := &ask{req: req, trace: &Trace{}, view: modelView{e.ModelData}}
	prof, err := e.profileFor(req)
	if err != nil {
		return nil, err
	}
	a.profile = prof
	a.budget = &budget{maxCalls: prof.MaxLLMCalls, maxTokens: prof.MaxTokens}
	a.client = budgetClient{Client: e.LLM, b: a.budget, speeds: &e.speeds}
	a.exec = &serialExecutor{inner: req.Exec}
	timeout := e.AskTimeout * time.Duration(max(prof.WallTimes, 1))
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	res, err := e.translate(ctx, a)
	a.trace.Total = time.Since(start)
	a.budget.mu.Lock()
	a.trace.Ends = a.budget.ends
	a.budget.mu.Unlock()
	if err != nil {
		err = e.classify(ctx, err)
		e.Logger.Info("ask failed", zap.String("database", req.Database), zap.String("user", req.User),
			zap.String("role", a.role()), zap.String("profile", prof.Name), zap.String("question", e.Redact.Question(req.Question)),
			zap.Object("trace", logTrace{a.trace, e.Redact}), zap.String("sqlstate", ErrCode(err)), zap.String("error", e.Redact.Text(err.Error())))
		return nil, &Failed{Err: err, Trace: a.trace, Role: a.role(), Profile: prof.Name, Candidates: a.cands}
	}
	res.Trace = a.trace
	res.Role = a.role()
	res.Profile = prof.Name
	res.Standalone = a.standalone
	if a.sess != nil {
		res.Names = a.sess.names
	}
	e.remember(a, res)
	e.Logger.Info("ask answered", zap.String("database", req.Database), zap.String("user", req.User),
		zap.String("role", a.role()), zap.String("profile", prof.Name), zap.String("question", e.Redact.Question(req.Question)),
		zap.String("sql", e.Redact.SQL(res.SQL())), zap.Float64("confidence", res.Confidence), zap.Object("trace", logTrace{a.trace, e.Redact}))
	return res, nil
}

func (e *Engine) translate(ctx context.Context, a *ask) (*Result, error) {
	if strings.TrimSpace(a.req.Question) == "" {
		return nil, &pg.Error{Code: pg.CodeSyntaxError, Message: "nlproxy: the question is empty", Hint: "Write the question after the marker, e.g. /* ask: how many orders are open? */"}
	}
	if a.req.TxStatus == pg.TxFailed {
		return nil, pg.ErrFailedTransaction
	}
	st := a.trace.begin("catalog")
	snap, err := e.Catalogs.Get(ctx, a.req.Database)
	a.trace.end(st)
	if err != nil {
		return nil, &pg.Error{Code: pg.CodeSystemError, Message: "nlproxy: the catalog of database " + a.req.Database + " is not available", Err: err,
			Hint: "Check that nlproxy's catalog role can connect and read the schema; see the proxy log."}
	}
	a.snap = snap
	if err := e.inspectSession(ctx, a); err != nil {
		return nil, err
	}
	if err := e.followUp(ctx, a); err != nil {
		return nil, err
	}

	if e.Verified != nil {
		// Verified queries come before the cache: an entry added since an
		// answer was cached answers from then on.
		a.schema0 = snap.Schema
		if !e.AllSchema {
			if err := e.restrictToRole(ctx, a); err != nil {
				return nil, err
			}
		} else {
			a.schema0 = withoutSecuredExamples(snap.Schema, a.sess.secured)
		}
		if res, ok := e.tryVerified(ctx, a); ok {
			return res, nil
		}
	}

	key := CacheKey{Question: a.req.Question, Database: a.req.Database, Fingerprint: snap.Schema.Fingerprint,
		Role: a.sess.role, Session: a.sess.key(), Profile: a.profile.Name}
	cache := e.Cache
	if a.asked != "" {
		cache = nil // a follow-up's reading is this session's own
	}
	if t, ok := cache.Get(key); ok {
		// A cached translation is checked and sealed again: the guard's
		// verdict depends on today's functions and views, not the day it
		// was cached.
		if stmt, err := guard.Seal(t.SQL, e.guardOptions(a)); err == nil {
			a.trace.CacheHit = true
			e.rememberAccepted(ctx, a, stmt)
			return &Result{Statement: stmt, Cached: true, Chosen: -1, Confidence: t.Confidence, cachedRewrites: t.Rewrites}, nil
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
	if len(a.schema0.Tables) == 0 {
		return nil, noTables(a, len(snap.Schema.Tables))
	}
	e.loadLearned(ctx, a)
	e.addSemanticJoins(a)
	a.progress("finding the question's terms")
	if err := e.extractKeywords(ctx, a); err != nil {
		return nil, err
	}
	e.retrieve(ctx, a)
	e.selectSchema(a)
	if a.profile.ModelSchemaSelection {
		a.progress("selecting tables")
		if err := e.selectSchemaWithModel(ctx, a); err != nil {
			return nil, err
		}
	}
	e.synthesizeWorkloadPairs(ctx, a)
	a.in = GenInput{
		Question:     a.req.Question,
		Schema:       a.schema,
		Values:       a.view.values(promptValues(a.values)),
		Descriptions: promptDescriptions(a.descs),
		Examples:     a.view.examples(e.withVerified(a, e.examples(ctx, a))),
		Queries:      a.queries,
		Guard:        e.guardOptions(a),
		view:         a.view,
	}

	res, err := e.candidates(ctx, a)
	if err != nil {
		return nil, err
	}
	if a.profile.Optimizer != nil {
		e.optimize(ctx, a, res)
	}
	cache.Put(key, memory.CacheEntry{SQL: res.Statement.Display(), Confidence: res.Confidence, Rewrites: res.Rewrites()})
	return res, nil
}

// noTables says why an ask has no table to work with: the asking role may
// read none of the database's tables, or the catalog saw none.
func noTables(a *ask, all int) error {
	if all > 0 {
		return &pg.Error{Code: pg.CodeInsufficientPrivilege,
			Message: fmt.Sprintf("nlproxy: role %s may read none of the %d tables of database %s", a.role(), all, a.req.Database),
			Hint:    "Questions are answered from the tables and columns your role may SELECT; ask their owner for SELECT (GRANT SELECT ON … TO your role)."}
	}
	return &pg.Error{Code: pg.CodeUndefinedTable,
		Message: "nlproxy: database " + a.req.Database + " has no tables the catalog can see",
		Hint:    "Create the tables first, or check that nlproxy's catalog role may read them (README, \"The catalog\")."}
}

// examples are the remembered pairs most like the question.
func (e *Engine) examples(ctx context.Context, a *ask) []prompts.Example {
	pairs, err := e.Pairs.Pairs(ctx, a.req.Database)
	if err != nil {
		e.Logger.Warn("remembered pairs unavailable", zap.String("database", a.req.Database), zap.Error(err))
		return nil
	}
	usable := func(p memory.Pair) bool { return e.pairUsable(a, p) }
	sp, ok := e.Pairs.(memory.SimilarPairStore)
	if !ok {
		return similarPairs(a.req.Question, pairs, maxExamples, usable)
	}
	// Nearest in meaning first; pairs that share words fill what is left.
	// Candidates beyond maxExamples leave room for those the asker may not
	// see.
	near, err := sp.SimilarPairs(ctx, a.req.Database, a.req.Question, 4*maxExamples)
	if err != nil && !errors.Is(err, memory.ErrNoEmbedder) {
		e.Logger.Debug("pairs ranked by words only", zap.String("database", a.req.Database), zap.Error(err))
	}
	var out []prompts.Example
	seen := map[string]bool{}
	add := func(q, sql string) {
		if k := NormalizeQuestion(q) + "\x00" + sql; len(out) < maxExamples && !seen[k] {
			seen[k] = true
			out = append(out, prompts.Example{Question: q, SQL: sql})
		}
	}
	for _, p := range near {
		if usable(p) {
			add(p.Question, p.SQL)
		}
	}
	for _, ex := range similarPairs(a.req.Question, pairs, maxExamples, usable) {
		add(ex.Question, ex.SQL)
	}
	return out
}

// pairUsable: a pair is shown to the role that asked it (operator pairs to
// everyone), and only when every table it reads is one the asker may read,
// so an example never reveals a table the asker cannot see; a shared pair
// that carries values is not shown to a role that row-level security
// restricts on a table it reads. A pair written
// from the workload is shown to every role, so it is held to the workload
// queries' rule: its text names no column of its tables the asker may not
// read either.
func (e *Engine) pairUsable(a *ask, p memory.Pair) bool {
	if p.Role != "" && (a.sess == nil || p.Role != a.sess.role) {
		return false
	}
	checked, err := guard.Check(p.SQL, e.guardOptions(a))
	if err != nil {
		return false
	}
	var path []string
	if a.sess != nil {
		path = a.sess.searchPath
	}
	var tables []*catalog.Table
	for _, r := range checked.Tables {
		name := r.Name
		if r.Schema != "" {
			name = r.Schema + "." + r.Name
		}
		t := a.schema0.TableOnPath(name, path)
		if t == nil {
			return false
		}
		tables = append(tables, t)
	}
	// A shared pair's values may come from rows row-level security hides
	// from this asker: such a pair is shown only to roles that see every
	// row of the tables it reads (its maker keeps it to itself when it
	// knows; see synthesizePair).
	if p.Role == "" && a.sess != nil && len(a.sess.secured) > 0 && carriesValues(p.SQL) {
		for _, t := range tables {
			if a.sess.secured[t.Schema+"."+t.Name] {
				return false
			}
		}
	}
	if p.Source != memory.PairWorkload {
		return true
	}
	lx := e.lex.get(a.schema0)
	idx := make([]int, 0, len(tables))
	for _, t := range tables {
		idx = append(idx, lx.index[t.Schema+"."+t.Name])
	}
	return len(idx) > 0 && !namesHiddenColumn(p.SQL, a.snap.Schema, a.schema0, lx, idx)
}

// rememberAccepted keeps a pair when a user re-runs a question unchanged and
// gets the same SQL back (a cache hit): the answer was worth asking again.
func (e *Engine) rememberAccepted(ctx context.Context, a *ask, stmt sealed.Statement) {
	if a.sess != nil && len(a.sess.secured) > 0 {
		return // SQL shaped by row-level security is not shared as an example
	}
	err := e.Pairs.AddPair(ctx, a.req.Database, memory.Pair{Question: a.req.Question, SQL: stmt.Display(), Source: memory.PairAccepted, Role: a.sess.role, At: time.Now()})
	if err != nil {
		e.Logger.Warn("remembering a pair failed", zap.String("database", a.req.Database), zap.Error(err))
	}
}

// AddPair remembers an operator's question→SQL pair for a database. The SQL
// must pass the guard with that database's function catalog: examples teach
// the model, so they must be what nlproxy would run.
func (e *Engine) AddPair(ctx context.Context, database, question, sql string) error {
	e.once.Do(e.applyDefaults)
	if strings.TrimSpace(question) == "" {
		return errors.New("engine: pair has no question")
	}
	snap, err := e.Catalogs.Get(ctx, database)
	if err != nil {
		return fmt.Errorf("engine: pair for %q: catalog of %s: %w", question, database, err)
	}
	stmt, err := guard.Seal(sql, e.guardOptions(&ask{snap: snap}))
	if err != nil {
		return fmt.Errorf("engine: pair for %q: %w", question, err)
	}
	return e.Pairs.AddPair(ctx, database, memory.Pair{Question: question, SQL: stmt.Display(), Source: memory.PairOperator, At: time.Now()})
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
	if a.sess != nil && a.sess.names != nil {
		opts.Names = a.sess.names
	}
	return opts
}

// maxInternalBytes bounds the results of the engine's own queries
// (privileges, session); they are small but scale with the schema.
const maxInternalBytes = 64 << 20

// internalQuery runs one of the engine's own catalog queries on the asking
// session, through the same guard and executor as generated SQL.
func (e *Engine) internalQuery(ctx context.Context, a *ask, sql string, maxRows int) (*pg.Rows, error) {
	stmt, err := e.internal.seal(sql)
	if err != nil {
		return nil, fmt.Errorf("engine: internal query refused: %w", err)
	}
	return a.req.Exec.Trial(ctx, stmt, pg.Limits{Timeout: e.TrialTimeout, MaxRows: maxRows, MaxBytes: maxInternalBytes})
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
	err = e.model(a, st, llm.RoleSmall).JSON(ctx, p, 0, &out)
	switch {
	case errors.Is(err, llm.ErrBadOutput) || errors.Is(err, ErrBudget):
		a.keywords = lexicalKeywords(a.req.Question)
		st.Note = "model answer unusable; lexical keywords"
		return nil
	case err != nil:
		return err
	}
	seen := map[string]bool{}
	all := append(out.Entities, out.Keywords...)
	for _, k := range inQuestion(a.req.Question, all) {
		k = strings.TrimSpace(k)
		if k != "" && !seen[strings.ToLower(k)] {
			seen[strings.ToLower(k)] = true
			a.keywords = append(a.keywords, k)
		}
	}
	if len(a.keywords) == 0 {
		a.keywords = lexicalKeywords(a.req.Question)
		st.Note = "model found no keywords; lexical keywords"
		if len(all) > 0 {
			st.Note = "model's terms not in the question; lexical keywords"
		}
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

// Problem is why a candidate cannot be the answer yet, for the fixer.
type Problem struct {
	GuardReason string
	GuardCode   string // the guard's SQLSTATE for GuardReason
	ExecErr     *pg.Error
	Empty       bool
	NullColumns []string
	Sample      *prompts.Sample
}

func (p Problem) String() string {
	switch {
	case p.GuardReason != "":
		return "rejected by the guard: " + p.GuardReason
	case p.ExecErr != nil:
		return "failed: " + p.ExecErr.Error()
	case p.Empty:
		return "returned no rows"
	default:
		return "mostly NULL in " + strings.Join(p.NullColumns, ", ")
	}
}

// hard: the candidate cannot run at all (as opposed to a doubtful result).
func (p Problem) hard() bool { return p.GuardReason != "" || p.ExecErr != nil }

// settle checks a candidate and repairs it until it passes the guard and runs
// cleanly, at most rounds fixes. An empty or NULL-heavy result gets one fix;
// if the fix is no better, the first clean SQL stands (empty can be right).
// It returns a hard error only for failures that end the ask (the session,
// the model server, the limits); a candidate that stays broken is returned
// with Usable false.
func (e *Engine) settle(ctx context.Context, a *ask, c *Candidate, fixer Fixer, rounds int) error {
	var fallback *Candidate // ran without error, but with an empty/NULL-heavy result
	softFixed := false
	sql := c.SQL
	var rewrites []memory.LiteralRewrite // those in sql
	// SQL already checked: a fix that returns one of them would make the
	// next round's request equal an earlier one, so it is not sent.
	tried := map[string]bool{}
	for round := 0; ; round++ {
		var rw []memory.LiteralRewrite
		if !a.view.data.Values() {
			// The model rewrote the SQL as it wrote it (modelView.sql):
			// the correction is made again on what it returned.
			rewrites = nil
		}
		sql, rw = e.correctLiterals(ctx, a, sql)
		tried[strings.TrimSpace(sql)] = true
		rewrites = append(rewrites, rw...)
		stmt, rows, prob, err := e.check(ctx, a, sql)
		if err != nil {
			return err
		}
		if prob == nil {
			c.SQL, c.Statement, c.Rows, c.Usable, c.Problem, c.Rewrites = sql, stmt, rows, true, "", rewrites
			return nil
		}
		c.Trace = append(c.Trace, prob.String())
		if !prob.hard() {
			if fallback == nil {
				fallback = &Candidate{SQL: sql, Statement: stmt, Rows: rows, Usable: true, Problem: prob.String(), Fixes: c.Fixes, Rewrites: slices.Clone(rewrites)}
			}
			if softFixed {
				break
			}
			softFixed = true
		}
		c.SQL, c.Problem, c.Code = sql, prob.String(), prob.GuardCode
		if prob.ExecErr != nil {
			c.Code = prob.ExecErr.Code
		}
		if round >= rounds || fixer == nil {
			break
		}
		a.progress("fixing the %s candidate, round %d", c.Generator, round+1)
		st := a.trace.begin("fix")
		st.Note = c.Generator + ": " + prob.String()
		fixed, err := fixer.Fix(ctx, &a.in, e.model(a, st, llm.RoleGenerator), a.view.sql(sql, rewrites), *prob)
		a.trace.end(st)
		if err != nil {
			if errors.Is(err, llm.ErrBadOutput) || errors.Is(err, ErrBudget) || errors.Is(err, llm.ErrUnanswerable) {
				break
			}
			return err
		}
		c.Fixes++
		if tried[strings.TrimSpace(fixed)] {
			c.Trace = append(c.Trace, "the fix repeated an earlier attempt; no further round")
			break
		}
		sql = fixed // written from the corrected SQL: the rewrites stand
	}
	if fallback != nil {
		c.SQL, c.Statement, c.Rows, c.Usable, c.Problem, c.Rewrites = fallback.SQL, fallback.Statement, fallback.Rows, true, fallback.Problem, fallback.Rewrites
	}
	return nil
}

// check seals sql (the guard) and trial-runs it; a nil problem means usable.
func (e *Engine) check(ctx context.Context, a *ask, sql string) (sealed.Statement, *pg.Rows, *Problem, error) {
	st := a.trace.begin("check")
	defer a.trace.end(st)
	stmt, err := guard.Seal(sql, e.guardOptions(a))
	if err != nil {
		var rej *guard.RejectError
		if errors.As(err, &rej) {
			st.Note = "guard: " + rej.Reason
			return sealed.Statement{}, nil, &Problem{GuardReason: rej.Reason, GuardCode: rej.Code}, nil
		}
		return sealed.Statement{}, nil, nil, err
	}
	rows, err := a.exec.Trial(ctx, stmt, pg.Limits{Timeout: e.TrialTimeout, MaxRows: e.TrialRows, MaxBytes: e.TrialMaxBytes})
	if err != nil {
		var se *pg.Error
		if errors.As(err, &se) && ctx.Err() == nil {
			st.Note = "trial: " + se.Error()
			return stmt, nil, &Problem{ExecErr: se}, nil
		}
		if errors.Is(err, pg.ErrResultTooLarge) {
			return sealed.Statement{}, nil, nil, &pg.Error{Code: pg.CodeProgramLimitExceeded,
				Message: fmt.Sprintf("nlproxy: the generated query's rows exceed %d bytes in the trial run", e.TrialMaxBytes),
				Hint:    "Ask for fewer or smaller columns, or raise the trial byte limit.", Err: err}
		}
		return sealed.Statement{}, nil, nil, err
	}
	if len(rows.Values) == 0 {
		st.Note = "trial: no rows"
		return stmt, rows, &Problem{Empty: true}, nil
	}
	if nulls := nullHeavyColumns(rows); len(nulls) > 0 {
		st.Note = "trial: mostly NULL " + strings.Join(nulls, ",")
		return stmt, rows, &Problem{NullColumns: nulls, Sample: a.view.sample(rows, 5)}, nil
	}
	st.Note = fmt.Sprintf("trial: %d rows", len(rows.Values))
	return stmt, rows, nil, nil
}

func (e *Engine) chat(role llm.Role, step string, p prompts.Prompt, temperature float64) llm.ChatRequest {
	return llm.ChatRequest{
		Role:        role,
		System:      p.System,
		Messages:    []llm.Message{{Role: llm.SpeakerUser, Content: p.User}},
		Temperature: temperature,
		JSONSchema:  p.JSONSchema,
		NumCtx:      e.NumCtx,
		MaxTokens:   e.outputCap(p),
		Step:        step,
	}
}

// outputCap is the step's declared output cap, or the operator's override.
func (e *Engine) outputCap(p prompts.Prompt) int {
	if n, ok := e.OutputCaps[p.Step]; ok && n > 0 {
		return n
	}
	return p.MaxTokens
}

// nullHeavyColumns are columns NULL in at least 80% of a result of 3+ rows,
// the CHESS/CHASE signal of a wrong join or column.
func nullHeavyColumns(rows *pg.Rows) []string {
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

// SampleOf is the first n rows of a result as prompts show them (NULL as
// "NULL").
func SampleOf(rows *pg.Rows, n int) *prompts.Sample {
	if rows == nil {
		return nil
	}
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
		text := h.Text
		if h.SQLHint != "" && !strings.Contains(text, h.SQLHint) {
			// A glossary term's SQL is the team's definition: the model
			// should write it, not reinvent it.
			text += " (SQL: " + h.SQLHint + ")"
		}
		out = append(out, prompts.Description{Name: name, Text: text})
	}
	return out
}

// classify turns any failure into a *pg.Error with a SQLSTATE and a hint:
// internal/pg's mapping (pg.Condition) plus what only the engine knows, the
// model server's failures and its own time limits.
func (e *Engine) classify(ctx context.Context, err error) error {
	// An error the engine made for the client passes; one a server reported
	// to the engine's own queries is classified like any other failure (its
	// text can say what the engine ran, not what was asked).
	var pe *pg.Error
	if errors.As(err, &pe) && !pe.Reported() {
		return err
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
		// The ask's time ran out, and what broke next is its consequence: a
		// query cut off mid-way closes the connection it ran on, so the
		// session probe or a trial's restore fails with "conn closed".
		err = errors.Join(context.DeadlineExceeded, err)
	}
	if ce := pg.Condition(err); ce != nil {
		return ce
	}
	var le *llm.Error
	hint := ""
	if errors.As(err, &le) {
		hint = le.Hint
	}
	switch {
	case errors.Is(err, llm.ErrTimeout) && ctx.Err() == nil:
		// One model call ran past its own limit while the ask had time left.
		msg := "nlproxy: a model call timed out"
		if le != nil && le.Limit > 0 {
			msg += fmt.Sprintf(" after %s", le.Limit)
		}
		if le != nil && le.Step != "" {
			msg += " (step " + le.Step + ")"
		}
		return &pg.Error{Code: pg.CodeQueryCanceled, Message: msg,
			Hint: "One model call is limited by --llm-call-timeout (NLPROXY_LLM_CALL_TIMEOUT): raise it, or use a smaller/faster model.", Err: err}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, llm.ErrTimeout):
		return &pg.Error{Code: pg.CodeQueryCanceled, Message: fmt.Sprintf("nlproxy: natural-language query timed out after %s", e.AskTimeout),
			Hint: "The model is slow or overloaded; try a smaller/faster model, the fast profile, or raise the ask timeout (--ask-timeout, NLPROXY_ASK_TIMEOUT; nlproxy demo takes both).", Err: err}
	case errors.Is(err, llm.ErrModelMissing):
		return &pg.Error{Code: pg.CodeUndefinedObject, Message: "nlproxy: the configured model is not installed in Ollama", Hint: hint, Err: err}
	case errors.Is(err, llm.ErrUnreachable):
		return &pg.Error{Code: pg.CodeSystemError, Message: "nlproxy: cannot reach the Ollama server", Hint: hint, Err: err}
	case errors.Is(err, llm.ErrBadOutput):
		return &pg.Error{Code: pg.CodeNoUsableSQL, Message: "nlproxy: the model did not produce usable SQL",
			Hint: "Rephrase the question or use a stronger generator model.", Err: err}
	case errors.Is(err, llm.ErrServer) || errors.Is(err, llm.ErrNoModel):
		return &pg.Error{Code: pg.CodeSystemError, Message: "nlproxy: the model server failed", Hint: hint, Err: err}
	}
	return &pg.Error{Code: pg.CodeInternalError, Message: "nlproxy: internal error while translating the question", Err: err}
}
