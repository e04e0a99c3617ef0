package engine

import (
	"context"
	"errors"
	"slices"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/askreport"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// What clients other than the wire (MCP agents) ask of the engine besides
// questions: their own SQL sealed exactly as a model's answer is, and the
// part of the catalog their role may read. Both work through the client's
// own session (exec), like Translate.

// SealSQL checks and seals sql, written by the client rather than the
// model, as a generated answer is sealed: one read-only statement, the
// database's function catalog and the operator's allow and deny lists, the
// bounds, names resolved as the asking session resolves them and unsafe
// relations and types refused. Only the session probe runs. A refusal is a
// *pg.Error whose message says why, with the guard's SQLSTATE.
func (e *Engine) SealSQL(ctx context.Context, database string, exec sealed.Executor, sql string) (sealed.Statement, error) {
	e.once.Do(e.applyDefaults)
	a, err := e.sessionAsk(ctx, database, exec)
	if err != nil {
		return sealed.Statement{}, err
	}
	st, err := guard.Seal(sql, e.guardOptions(a))
	if err != nil {
		return sealed.Statement{}, Refusal(err)
	}
	return st, nil
}

// Refusal is a guard refusal as a client is told it: the guard's SQLSTATE
// and reason, and what an author of SQL can do about it; other errors pass.
func Refusal(err error) error {
	var re *guard.RejectError
	if !errors.As(err, &re) {
		return err
	}
	return &pg.Error{Code: re.Code, Message: "nlproxy: refused: " + re.Reason, Position: re.Position,
		Hint: "nlproxy runs one read-only SELECT (or VALUES/TABLE) per call, with built-in non-volatile functions only, inside a bounded read-only scope; see docs/mcp.md."}
}

// SessionView is the catalog as one session's role may read it.
type SessionView struct {
	Role       string
	SearchPath []string
	// Schema holds the tables and columns the role may SELECT (every
	// column when the engine shows all, AllSchema), with the stored
	// examples of row-secured tables removed.
	Schema *catalog.Schema
	// Secured are the "schema.table" whose rows row-level security filters
	// for the role.
	Secured []string

	e *Engine
	a *ask
}

// SessionSchema reads, through exec, who the session is and which part of
// database's catalog its role may read: what an agent lists and describes.
func (e *Engine) SessionSchema(ctx context.Context, database string, exec sealed.Executor) (*SessionView, error) {
	e.once.Do(e.applyDefaults)
	a, err := e.sessionAsk(ctx, database, exec)
	if err != nil {
		return nil, err
	}
	a.schema0 = a.snap.Schema
	if !e.AllSchema {
		if err := e.restrictToRole(ctx, a); err != nil {
			return nil, e.classify(ctx, err)
		}
	} else {
		a.schema0 = withoutSecuredExamples(a.snap.Schema, a.sess.secured)
	}
	v := &SessionView{Role: a.sess.role, SearchPath: a.sess.searchPath, Schema: a.schema0, e: e, a: a}
	for k := range a.sess.secured {
		v.Secured = append(v.Secured, k)
	}
	slices.Sort(v.Secured)
	return v, nil
}

// JoinPaths are the join paths among tables (indexes into Schema.Tables)
// that the workload taught or same-named key columns suggest, as the model
// is offered them; declared foreign keys are in the tables themselves.
// Only what the role may read is considered.
func (v *SessionView) JoinPaths(ctx context.Context, tables []int) []JoinLink {
	v.e.loadLearned(ctx, v.a)
	return v.e.lex.get(v.a.schema0).joinLinks(v.a.schema0, v.a.learned, tables, tables)
}

// sessionAsk is the state of an ask up to the session's inspection: the
// database's snapshot and the session's facts.
func (e *Engine) sessionAsk(ctx context.Context, database string, exec sealed.Executor) (*ask, error) {
	snap, err := e.Catalogs.Get(ctx, database)
	if err != nil {
		return nil, &pg.Error{Code: pg.CodeSystemError, Message: "nlproxy: the catalog of database " + database + " is not available", Err: err,
			Hint: "Check that nlproxy's catalog role can connect and read the schema; see the proxy log."}
	}
	a := &ask{req: Request{Database: database, Exec: exec}, snap: snap, trace: &Trace{}}
	if err := e.inspectSession(ctx, a); err != nil {
		return nil, e.classify(ctx, err)
	}
	return a, nil
}

// Report is the engine's account of an answered ask, for audit logs,
// metrics and the admin page.
func (r *Result) Report() *askreport.Report {
	rep := &askreport.Report{Role: r.Role, SQL: r.SQL(), Profile: r.Profile, Cached: r.Cached, Confidence: r.Confidence}
	addCandidates(rep, r.Candidates, r.Chosen)
	addTrace(rep, r.Trace)
	return rep
}

// Report is the same account of an ask that failed: no SQL, no confidence.
func (f *Failed) Report() *askreport.Report {
	rep := &askreport.Report{Role: f.Role, Profile: f.Profile, Confidence: -1}
	addCandidates(rep, f.Candidates, -1)
	addTrace(rep, f.Trace)
	return rep
}

func addCandidates(r *askreport.Report, cands []*Candidate, chosen int) {
	for i, c := range cands {
		r.Candidates = append(r.Candidates, askreport.Candidate{Generator: c.Generator, SQL: c.SQL, Fixes: c.Fixes,
			Usable: c.Usable, Cluster: c.Cluster, Problem: c.Problem, Chosen: i == chosen})
	}
}

func addTrace(r *askreport.Report, tr *Trace) {
	if tr == nil {
		return
	}
	r.LLMCalls, r.PromptTokens, r.CompletionTokens = tr.LLMCalls()
	r.ClientEnded = tr.Ends.Complete + tr.Ends.Repetition
	for _, st := range tr.Snapshot() {
		r.Stages = append(r.Stages, askreport.Stage{Name: st.Name, Duration: st.Duration, LLMCalls: st.LLMCalls,
			PromptTokens: st.PromptTokens, CompletionTokens: st.CompletionTokens, Note: st.Note})
	}
}
