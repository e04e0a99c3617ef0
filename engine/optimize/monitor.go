package optimize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// The error monitor. A proposal is equivalent to the original when, on the
// session's current data and as the asking role:
//   - it seals under the same guard options (one read-only SELECT);
//   - it reads no relation the original does not read;
//   - the server plans it (EXPLAIN);
//   - its columns have the same names and type OIDs, in the same order;
//   - its whole result has the same multiset fingerprint — row count and two
//     sums of 64-bit hashes of each row's text, computed by the server over
//     every row, so no bound on rows applies;
//   - under a top-level ORDER BY, its first CompareRows rows are the same
//     rows in the same order;
//   - its fingerprint does not change between runs (checked again at every
//     measured run).
// What this cannot show: equivalence on other data (a rewrite that differs
// only when a column holds NULLs, or for rows not there today, passes), and
// the order of rows beyond CompareRows or among ties of the sort key.

// wrapperFunctions are what the monitor's own wrapper queries call, all
// immutable or aggregates, allowed whether or not a function catalog is
// configured.
func wrapperFunctions() []string {
	return []string{"pg_catalog.count", "pg_catalog.sum", "pg_catalog.hashtextextended"}
}

// reference is what every proposal's result must match.
type reference struct {
	fp      string
	columns []string
	types   []uint32
	ordered bool
	head    [][]*string // leading rows, when ordered
}

func (s *search) guardOptions(extra ...string) guard.Options {
	opts := s.req.Guard
	opts.AllowExplain = false
	if len(extra) > 0 {
		opts.AllowFunctions = append(append([]string(nil), opts.AllowFunctions...), extra...)
	}
	return opts
}

func (s *search) limits(rows int) pg.Limits {
	return pg.Limits{Timeout: s.o.timeout(), MaxRows: rows, MaxBytes: 16 << 20}
}

// explain returns the planner's total cost of st and its plan, summarized.
func (s *search) explain(ctx context.Context, st sealed.Statement) (float64, string, error) {
	ex, err := guard.Explain(st)
	if err != nil {
		return 0, "", err
	}
	rows, err := s.req.Exec.Trial(ctx, ex, s.limits(1))
	if err != nil {
		return 0, "", err
	}
	if len(rows.Values) != 1 || len(rows.Values[0]) != 1 || rows.Values[0][0] == nil {
		return 0, "", errors.New("optimize: EXPLAIN returned no plan")
	}
	return parsePlan(*rows.Values[0][0])
}

// reference runs the original for its result's shape, fingerprint and,
// under ORDER BY, leading rows.
func (s *search) reference(ctx context.Context, st sealed.Statement) (reference, error) {
	ref := reference{ordered: topLevelOrdered(st)}
	cols, types, head, err := s.shape(ctx, st, ref.ordered)
	if err != nil {
		return ref, err
	}
	ref.columns, ref.types, ref.head = cols, types, head
	ref.fp, err = s.fingerprint(ctx, st)
	return ref, err
}

// shape returns st's columns and, when ordered, its leading rows. Unordered,
// it runs st under LIMIT 0: nothing is computed but the row description.
func (s *search) shape(ctx context.Context, st sealed.Statement, ordered bool) ([]string, []uint32, [][]*string, error) {
	run := st
	rows := s.o.compareRows()
	if !ordered {
		w, err := guard.Seal("SELECT * FROM ("+st.SQL()+") AS q LIMIT 0", s.guardOptions())
		if err != nil {
			return nil, nil, nil, err
		}
		run, rows = w, 1
	}
	r, err := s.req.Exec.Trial(ctx, run, s.limits(rows))
	if err != nil {
		return nil, nil, nil, err
	}
	if !ordered {
		return r.Columns, r.Types, nil, nil
	}
	return r.Columns, r.Types, r.Values, nil
}

// fingerprint is the multiset fingerprint of st's whole result, computed
// by the server: every row is produced in full (ROW(q.*) reads every
// column) but only one row comes back.
func (s *search) fingerprint(ctx context.Context, st sealed.Statement) (string, error) {
	w, err := guard.Seal("SELECT pg_catalog.count(*), pg_catalog.sum(pg_catalog.hashtextextended(ROW(q.*)::text, 0)), "+
		"pg_catalog.sum(pg_catalog.hashtextextended(ROW(q.*)::text, 7)) FROM ("+st.SQL()+") AS q", s.guardOptions(wrapperFunctions()...))
	if err != nil {
		return "", err
	}
	r, err := s.req.Exec.Trial(ctx, w, s.limits(1))
	if err != nil {
		return "", err
	}
	if len(r.Values) != 1 || len(r.Values[0]) != 3 {
		return "", errors.New("optimize: fingerprint query returned no row")
	}
	parts := make([]string, 3)
	for i, v := range r.Values[0] {
		if v != nil {
			parts[i] = *v
		}
	}
	return strings.Join(parts, "/"), nil
}

// timed is one measured run: the fingerprint query, which produces every
// row of st in full on the server.
func (s *search) timed(ctx context.Context, st sealed.Statement) (time.Duration, string, error) {
	start := time.Now()
	fp, err := s.fingerprint(ctx, st)
	return time.Since(start), fp, err
}

// check runs the error monitor on a proposal; it sets Verdict for a
// rejection and Cost (with the sealed statement) for a valid plan, whose
// verdict the descent decides. Only context errors end the optimization.
func (s *search) check(ctx context.Context, step *Step) error {
	reject := func(v Verdict, reason string) error {
		step.Verdict, step.Reason = v, reason
		return nil
	}
	st, err := guard.Seal(step.SQL, s.guardOptions())
	if err != nil {
		var re *guard.RejectError
		if errors.As(err, &re) && re.Code == pg.CodeSyntaxError {
			return reject(VerdictSyntax, re.Reason)
		}
		return reject(VerdictGuard, "the guard refused it: "+errText(err))
	}
	if st.SQL() == s.req.Statement.SQL() {
		return reject(VerdictDuplicate, "it is the original query")
	}
	if i, ok := s.seen[st.SQL()]; ok {
		return reject(VerdictDuplicate, fmt.Sprintf("same as step %d.%d", s.out.Steps[i].Run, s.out.Steps[i].N))
	}
	s.seen[st.SQL()] = len(s.out.Steps)
	if t, err := s.newTable(ctx, st); err != nil {
		return err
	} else if t != "" {
		return reject(VerdictTables, "it reads "+t+", which the original does not")
	}
	cost, _, err := s.explain(ctx, st)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return reject(VerdictPlan, "the server cannot plan it: "+errText(err))
	}
	step.Cost = cost
	cols, types, head, err := s.shape(ctx, st, s.ref.ordered)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return reject(VerdictRunError, "it failed when run: "+errText(err))
	}
	if why := sameShape(s.ref.columns, s.ref.types, cols, types); why != "" {
		return reject(VerdictShape, why)
	}
	fp, err := s.fingerprint(ctx, st)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return reject(VerdictRunError, "it failed when run: "+errText(err))
	}
	if fp != s.ref.fp {
		return reject(VerdictResult, resultDiff(s.ref.fp, fp))
	}
	if s.ref.ordered {
		if i := firstDiff(s.ref.head, head); i >= 0 {
			return reject(VerdictOrder, fmt.Sprintf("same rows, but row %d comes in another order", i+1))
		}
	}
	step.stmt = st
	return nil
}

func sameShape(wantCols []string, wantTypes []uint32, cols []string, types []uint32) string {
	if len(cols) != len(wantCols) {
		return fmt.Sprintf("it returns %d columns, the original %d", len(cols), len(wantCols))
	}
	for i := range cols {
		if cols[i] != wantCols[i] {
			return fmt.Sprintf("column %d is named %q, the original's %q", i+1, cols[i], wantCols[i])
		}
		if i < len(types) && i < len(wantTypes) && types[i] != wantTypes[i] {
			return fmt.Sprintf("column %q has type OID %d, the original's %d", cols[i], types[i], wantTypes[i])
		}
	}
	return ""
}

func resultDiff(want, got string) string {
	wc, _, _ := strings.Cut(want, "/")
	gc, _, _ := strings.Cut(got, "/")
	if wc != gc {
		return fmt.Sprintf("it returns %s rows, the original %s", gc, wc)
	}
	return "it returns other rows than the original (same count, " + wc + ")"
}

// firstDiff is the index of the first differing row, -1 when equal.
func firstDiff(a, b [][]*string) int {
	for i := 0; i < len(a) || i < len(b); i++ {
		if i >= len(a) || i >= len(b) || !sameRow(a[i], b[i]) {
			return i
		}
	}
	return -1
}

func sameRow(a, b []*string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if (a[i] == nil) != (b[i] == nil) || (a[i] != nil && *a[i] != *b[i]) {
			return false
		}
	}
	return true
}

// topLevelOrdered reports whether the statement's outermost SELECT has an
// ORDER BY, so the order of its rows is part of its result.
func topLevelOrdered(st sealed.Statement) bool {
	tree, err := pg_query.Parse(st.SQL())
	if err != nil || len(tree.GetStmts()) != 1 {
		return true // unknown: compare order, the stricter check
	}
	return len(tree.GetStmts()[0].GetStmt().GetSelectStmt().GetSortClause()) > 0
}

// tableSet is the set of relations a statement reads, schema-qualified as
// written ("orders", "public.orders").
func tableSet(st sealed.Statement) map[string]bool {
	out := map[string]bool{}
	for _, t := range guard.CheckedOf(st).Tables {
		out[strings.ToLower(t.String())] = true
	}
	return out
}

// newTable names a table st reads that the original does not ("" when
// none). Names are compared as written first; one that differs only in how
// it is written ("public.orders" for "orders") is resolved, with the
// original's, through the session's search_path. Only context errors are
// returned; a failed resolution counts the table as new.
func (s *search) newTable(ctx context.Context, st sealed.Statement) (string, error) {
	var unknown []guard.TableRef
	for _, t := range guard.CheckedOf(st).Tables {
		if !s.tables[strings.ToLower(t.String())] {
			unknown = append(unknown, t)
		}
	}
	if len(unknown) == 0 {
		return "", nil
	}
	if s.tableOIDs == nil {
		oids, err := s.resolveTables(ctx, guard.CheckedOf(s.req.Statement).Tables)
		if err != nil {
			return unknown[0].String(), ctx.Err()
		}
		s.tableOIDs = map[string]bool{}
		for _, o := range oids {
			if o != "" {
				s.tableOIDs[o] = true
			}
		}
	}
	oids, err := s.resolveTables(ctx, unknown)
	if err != nil {
		return unknown[0].String(), ctx.Err()
	}
	for i, o := range oids {
		if o == "" || !s.tableOIDs[o] {
			return unknown[i].String(), nil
		}
	}
	return "", nil
}

// resolveTables returns each table's OID as the session resolves its name
// ("" when it resolves to none), in order.
func (s *search) resolveTables(ctx context.Context, tables []guard.TableRef) ([]string, error) {
	names := make([]string, len(tables))
	for i, t := range tables {
		name := quoteIdent(t.Name)
		if t.Schema != "" {
			name = quoteIdent(t.Schema) + "." + name
		}
		names[i] = "'" + strings.ReplaceAll(name, "'", "''") + "'"
	}
	sql := `SELECT pg_catalog.to_regclass(u.n)::pg_catalog.oid::pg_catalog.text
FROM pg_catalog.unnest(ARRAY[` + strings.Join(names, ", ") + `]::text[]) WITH ORDINALITY AS u(n, i)
ORDER BY u.i`
	st, err := guard.Seal(sql, s.guardOptions(describeFunctions()...))
	if err != nil {
		return nil, err
	}
	rows, err := s.req.Exec.Trial(ctx, st, s.limits(len(tables)+1))
	if err != nil {
		return nil, err
	}
	if len(rows.Values) != len(tables) {
		return nil, fmt.Errorf("optimize: %d rows resolving %d tables", len(rows.Values), len(tables))
	}
	out := make([]string, len(tables))
	for i, r := range rows.Values {
		if len(r) == 1 && r[0] != nil {
			out[i] = *r[0]
		}
	}
	return out, nil
}

// explainJSON is the part of EXPLAIN (FORMAT JSON) output the optimizer uses.
type explainJSON []struct {
	Plan planNode `json:"Plan"`
}

type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	Alias     string     `json:"Alias"`
	Index     string     `json:"Index Name"`
	TotalCost float64    `json:"Total Cost"`
	Rows      float64    `json:"Plan Rows"`
	Filter    string     `json:"Filter"`
	IndexCond string     `json:"Index Cond"`
	HashCond  string     `json:"Hash Cond"`
	JoinType  string     `json:"Join Type"`
	SubPlan   string     `json:"Subplan Name"`
	Plans     []planNode `json:"Plans"`
}

// maxPlanLines bounds the plan shown to the model.
const maxPlanLines = 40

// parsePlan returns the total cost and a compact text rendering.
func parsePlan(text string) (float64, string, error) {
	var ex explainJSON
	if err := json.Unmarshal([]byte(text), &ex); err != nil || len(ex) == 0 {
		return 0, "", fmt.Errorf("optimize: cannot read the EXPLAIN output: %v", err)
	}
	var b strings.Builder
	lines := 0
	var walk func(n planNode, depth int)
	walk = func(n planNode, depth int) {
		if lines >= maxPlanLines {
			return
		}
		lines++
		b.WriteString(strings.Repeat("  ", depth))
		if n.SubPlan != "" {
			b.WriteString(n.SubPlan + ": ")
		}
		if n.JoinType != "" && strings.Contains(n.NodeType, "Join") || n.NodeType == "Nested Loop" && n.JoinType != "" {
			b.WriteString(n.JoinType + " ")
		}
		b.WriteString(n.NodeType)
		if n.Relation != "" {
			b.WriteString(" on " + n.Relation)
			if n.Alias != "" && n.Alias != n.Relation {
				b.WriteString(" " + n.Alias)
			}
		}
		if n.Index != "" {
			b.WriteString(" using " + n.Index)
		}
		fmt.Fprintf(&b, " (cost %.2f, rows %.0f)", n.TotalCost, n.Rows)
		for _, c := range []struct{ k, v string }{{"Index Cond", n.IndexCond}, {"Hash Cond", n.HashCond}, {"Filter", n.Filter}} {
			if c.v != "" {
				b.WriteString(" " + c.k + ": " + c.v)
			}
		}
		b.WriteString("\n")
		for _, c := range n.Plans {
			walk(c, depth+1)
		}
	}
	walk(ex[0].Plan, 0)
	return ex[0].Plan.TotalCost, strings.TrimRight(b.String(), "\n"), nil
}
