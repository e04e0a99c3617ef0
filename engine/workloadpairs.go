package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/prompts"
)

// Online synthetic examples grounded in the workload (CHASE-SQL makes its
// examples up from the schema; here the model starts from a query the
// database runs): in profiles with WorkloadExamples, the workload queries
// offered for a question are turned, once each, into question→SQL pairs
// kept with the remembered pairs. The model writes the query again with
// values and the question it answers; the SQL must pass the guard, read
// only the workload query's tables, name no column the asker may not read,
// and run on the asking session with rows before it is kept. A pair that
// carries values and reads a table with row-level security is kept for
// the asker alone: it may hold a value of a row RLS hides from others.

// Stored values offered for a workload query's parameters: at most this
// many filtered columns, this many values each.
const (
	workloadValueColumns = 3
	workloadValuesEach   = 3
)

// maxTried bounds the workload queries remembered as tried; beyond it the
// memory starts again (a query is then tried once more).
const maxTried = 10_000

// tried is a bounded set of keys, safe for concurrent use.
type tried struct {
	mu sync.Mutex
	m  map[string]struct{}
}

// claim marks key and reports whether it was not marked before.
func (t *tried) claim(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.m[key]; ok {
		return false
	}
	if t.m == nil || len(t.m) >= maxTried {
		t.m = map[string]struct{}{}
	}
	t.m[key] = struct{}{}
	return true
}

// release unmarks key: it was not really tried.
func (t *tried) release(key string) {
	t.mu.Lock()
	delete(t.m, key)
	t.mu.Unlock()
}

// synthesizeWorkloadPairs turns the workload queries offered to this ask,
// best first, into remembered pairs: at most e.WorkloadExamples model
// calls, each query once per process. Nothing it meets ends the ask.
func (e *Engine) synthesizeWorkloadPairs(ctx context.Context, a *ask) {
	if !a.profile.WorkloadExamples || e.WorkloadExamples < 0 || a.learned == nil || len(a.queries) == 0 {
		return
	}
	if a.sess != nil && len(a.sess.secured) > 0 {
		return // rows shaped by row-level security give values others may not see
	}
	st := a.trace.begin("workload examples")
	defer a.trace.end(st)
	m := e.model(a, st, llm.RoleGenerator)
	calls, kept := 0, 0
	var notes []string
	for _, sql := range a.queries {
		i := slices.IndexFunc(a.learned.queries, func(q learnedQuery) bool { return q.sql == sql })
		if i < 0 || calls >= e.WorkloadExamples {
			continue
		}
		q := a.learned.queries[i]
		key := a.req.Database + "\x00" + q.fingerprint
		if !e.synthesized.claim(key) {
			continue
		}
		calls++
		p, refused, err := e.synthesizePair(ctx, a, m, q)
		switch {
		case err != nil:
			// The budget, the model server or the session failed, not the
			// query: a later ask may try it.
			e.synthesized.release(key)
			notes = append(notes, "not tried: "+err.Error())
			e.Logger.Debug("workload example not made", zap.String("database", a.req.Database), zap.Error(err))
		case refused != "":
			notes = append(notes, "refused: "+refused)
		default:
			if err := e.Pairs.AddPair(ctx, a.req.Database, p); err != nil {
				e.Logger.Warn("remembering a workload pair failed", zap.String("database", a.req.Database), zap.Error(err))
				notes = append(notes, "not kept: "+err.Error())
				continue
			}
			kept++
		}
		if ctx.Err() != nil {
			break
		}
	}
	st.Note = fmt.Sprintf("%d tried, %d kept", calls, kept)
	if len(notes) > 0 {
		st.Note += "; " + strings.Join(notes, "; ")
	}
}

// synthesizePair asks the model to write q with values and the question it
// answers. refused says why the answer is not kept (the query is not tried
// again); err is a failure of something else (the query may be tried
// again).
func (e *Engine) synthesizePair(ctx context.Context, a *ask, m Model, q learnedQuery) (p Pair, refused string, err error) {
	pr, err := prompts.WorkloadExample(prompts.WorkloadExampleParams{Schema: a.schema, Query: q.sql, Values: workloadValues(a, q)})
	if err != nil {
		return Pair{}, "", err
	}
	var out prompts.WorkloadExampleResult
	if err := m.JSON(ctx, pr, 0, &out); err != nil {
		if errors.Is(err, llm.ErrBadOutput) || errors.Is(err, llm.ErrUnanswerable) {
			return Pair{}, "unusable answer", nil
		}
		return Pair{}, "", err
	}
	question, sql := strings.TrimSpace(out.Question), strings.TrimSpace(out.SQL)
	if question == "" || sql == "" {
		return Pair{}, "no question or no SQL", nil
	}
	stmt, err := guard.Seal(sql, e.guardOptions(a))
	if err != nil {
		var rej *guard.RejectError
		if errors.As(err, &rej) {
			return Pair{}, "guard: " + rej.Reason, nil
		}
		return Pair{}, "", err
	}
	// Grounded: the pair reads what the workload query reads and names no
	// column of it the asker may not read (the rule it is shown by).
	lx := e.lex.get(a.schema0)
	var path []string
	if a.sess != nil {
		path = a.sess.searchPath
	}
	var tables []int
	for _, r := range guard.CheckedOf(stmt).Tables {
		name := r.Name
		if r.Schema != "" {
			name = r.Schema + "." + r.Name
		}
		t := a.schema0.TableOnPath(name, path)
		if t == nil {
			return Pair{}, "reads " + name + ", which the asker may not read", nil
		}
		i := lx.index[t.Schema+"."+t.Name]
		if !slices.Contains(q.tables, i) {
			return Pair{}, "reads " + name + ", which the workload query does not", nil
		}
		tables = append(tables, i)
	}
	if len(tables) == 0 {
		return Pair{}, "reads no table", nil
	}
	if namesHiddenColumn(stmt.Display(), a.snap.Schema, a.schema0, lx, tables) {
		return Pair{}, "names a column the asker may not read", nil
	}
	rows, err := a.exec.Trial(ctx, stmt, Limits{Timeout: e.TrialTimeout, MaxRows: e.TrialRows, MaxBytes: e.TrialMaxBytes})
	if err != nil {
		var se *pg.Error
		if errors.As(err, &se) && ctx.Err() == nil {
			return Pair{}, "trial: " + se.Error(), nil
		}
		if errors.Is(err, ErrResultTooLarge) {
			return Pair{}, "trial: result too large", nil
		}
		return Pair{}, "", err
	}
	if len(rows.Values) == 0 {
		return Pair{}, "trial: no rows", nil // an example that finds nothing teaches the wrong values
	}
	p = Pair{Question: question, SQL: stmt.Display(), Source: PairWorkload, At: time.Now()}
	// The asker sees every row here (askers whom row-level security
	// restricts make no pairs), but others may not: values read from a
	// table with row-level security stay the asker's.
	if carriesValues(p.SQL) && readsRowSecured(a, tables, lx) {
		p.Role = a.sess.role
	}
	return p, "", nil
}

// readsRowSecured reports whether one of tables has row-level security
// enabled (or is a view over one), whoever it applies to; unknown when the
// catalog does not say, and then it does.
func readsRowSecured(a *ask, tables []int, lx *lexicon) bool {
	if a.snap.Functions == nil {
		return true
	}
	for _, i := range tables {
		if slices.Contains(a.snap.Functions.RowSecurity, lx.tables[i].key) {
			return true
		}
	}
	return false
}

// carriesValues reports whether sql holds a constant (a string, a number,
// a bit string): a value that may come from the data. LIMIT 10 counts too:
// telling it from data is not worth the risk. Unscannable SQL counts.
func carriesValues(sql string) bool {
	res, err := pg_query.Scan(sql)
	if err != nil {
		return true
	}
	for _, tk := range res.GetTokens() {
		switch tk.GetToken() {
		case pg_query.Token_SCONST, pg_query.Token_USCONST, pg_query.Token_ICONST, pg_query.Token_FCONST,
			pg_query.Token_BCONST, pg_query.Token_XCONST:
			return true
		}
	}
	return false
}

// workloadValues are stored values (the catalog's value index) of the
// columns q filters by, for its parameters; the asker may read them, and
// tables under row-level security never reach here.
func workloadValues(a *ask, q learnedQuery) []prompts.ValueMatch {
	ix := a.snap.Values
	if ix == nil || len(q.filtered) == 0 {
		return nil
	}
	var out []prompts.ValueMatch
	cols := ix.Columns()
	for _, key := range q.filtered[:min(len(q.filtered), workloadValueColumns)] {
		for c, cs := range cols {
			if cs.Schema+"."+cs.Table+"."+cs.Column != key {
				continue
			}
			for i := 0; i < min(cs.Values, workloadValuesEach); i++ {
				out = append(out, prompts.ValueMatch{Table: cs.Table, Column: cs.Column, Value: ix.Value(c, i)})
			}
		}
	}
	return out
}
