package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
)

// Workload is what the engine uses of the statements a database already
// runs (learned by the proxy with --learn-workload; cmd/nlproxy adapts the
// workload store to it). The engine resolves the names and decides what
// the asking role may see.
type Workload interface {
	// Learned is what the workload of a database taught so far; nil when
	// nothing.
	Learned(ctx context.Context, database string) (*Learned, error)
}

// Learned is one database's workload, as names written in its statements:
// a relation may be unqualified.
type Learned struct {
	Queries []LearnedQuery
	Joins   []LearnedJoin
	Columns []LearnedColumn
}

// Relation names a relation as a statement wrote it (Schema "" when
// unqualified).
type Relation struct{ Schema, Name string }

// ColumnRef is a column of a relation.
type ColumnRef struct {
	Relation Relation
	Column   string
}

// LearnedQuery is one normalised statement: every literal a parameter
// ($1), so it holds no value anybody wrote.
type LearnedQuery struct {
	// Fingerprint identifies the statement's shape (pg_query's); "" when
	// unknown (the SQL then stands for it).
	Fingerprint string
	SQL         string
	Relations   []Relation  // the relations it reads
	Filtered    []ColumnRef // the columns it filters by
	Count       int         // how many times it ran
}

// LearnedJoin is a join predicate (Left = Right) and how many statements
// used it.
type LearnedJoin struct {
	Left, Right ColumnRef
	Count       int
}

// LearnedColumn is a column statements filter, group or order by, and how
// often.
type LearnedColumn struct {
	Column ColumnRef
	Uses   int
}

// learned is a Learned resolved against one ask's schema (the part the
// asking role may read): only what touches nothing else is kept.
type learned struct {
	joins   []learnedLink  // by use, most used first
	columns map[string]int // "schema.table.column" → uses
	queries []learnedQuery // by use, most used first
}

type learnedLink struct {
	a, b       int // lexicon table indexes
	colA, colB string
	count      int
}

type learnedQuery struct {
	fingerprint string
	sql         string
	tables      []int
	filtered    []string // "schema.table.column" the asker may read
	count       int
}

// loadLearned reads the database's workload, when the engine has one, and
// keeps what the asking role may see: a join or column only when the role
// may read its columns, a query only when it may read every relation it
// reads and the query names no column of them the role may not read.
func (e *Engine) loadLearned(ctx context.Context, a *ask) {
	if e.Workload == nil {
		return
	}
	st := a.trace.begin("workload")
	defer a.trace.end(st)
	w, err := e.Workload.Learned(ctx, a.req.Database)
	if err != nil {
		e.Logger.Warn("learned workload unavailable", zap.String("database", a.req.Database), zap.Error(err))
		st.Note = "unavailable"
		return
	}
	if w == nil {
		return
	}
	a.learned = resolveLearned(w, a.snap.Schema, a.schema0, e.lex.get(a.schema0))
	st.Note = fmt.Sprintf("%d joins, %d columns, %d queries usable", len(a.learned.joins), len(a.learned.columns), len(a.learned.queries))
}

// resolveLearned resolves w's names on full (the database's catalog: an
// unqualified name is the one table of that name in any schema; ambiguous
// names are skipped) and keeps what visible, the asker's part of it, holds.
func resolveLearned(w *Learned, full, visible *catalog.Schema, lx *lexicon) *learned {
	l := &learned{columns: map[string]int{}}
	// table resolves a relation to its index in lx, -1 when unknown,
	// ambiguous or not readable; each name once (a profile holds
	// thousands of statements over few relations).
	memo := map[Relation]int{}
	table := func(r Relation) int {
		if i, ok := memo[r]; ok {
			return i
		}
		i := resolveRelation(r, full, lx)
		memo[r] = i
		return i
	}
	readable := func(i int, col string) bool {
		return visible.Tables[i].Column(col) != nil
	}
	type linkKey struct {
		a, b       int
		colA, colB string
	}
	seen := map[linkKey]int{}
	for _, j := range w.Joins {
		a, b := table(j.Left.Relation), table(j.Right.Relation)
		if a < 0 || b < 0 || a == b || !readable(a, j.Left.Column) || !readable(b, j.Right.Column) {
			continue
		}
		lk := learnedLink{a: a, b: b, colA: j.Left.Column, colB: j.Right.Column, count: j.Count}
		if lx.tables[b].key+"."+lk.colB < lx.tables[a].key+"."+lk.colA {
			lk = learnedLink{a: b, b: a, colA: lk.colB, colB: lk.colA, count: lk.count}
		}
		k := linkKey{lk.a, lk.b, lk.colA, lk.colB}
		if p, ok := seen[k]; ok {
			l.joins[p].count += lk.count
			continue
		}
		seen[k] = len(l.joins)
		l.joins = append(l.joins, lk)
	}
	slices.SortStableFunc(l.joins, func(x, y learnedLink) int { return y.count - x.count })
	for _, c := range w.Columns {
		if i := table(c.Column.Relation); i >= 0 && readable(i, c.Column.Column) {
			l.columns[lx.tables[i].key+"."+c.Column.Column] += c.Uses
		}
	}
	for _, q := range w.Queries {
		if strings.TrimSpace(q.SQL) == "" || len(q.Relations) == 0 {
			continue
		}
		var ts []int
		ok := true
		for _, r := range q.Relations {
			i := table(r)
			if i < 0 {
				ok = false
				break
			}
			if !slices.Contains(ts, i) {
				ts = append(ts, i)
			}
		}
		if !ok || namesHiddenColumn(q.SQL, full, visible, lx, ts) {
			continue
		}
		lq := learnedQuery{fingerprint: q.Fingerprint, sql: q.SQL, tables: ts, count: q.Count}
		if lq.fingerprint == "" {
			lq.fingerprint = q.SQL
		}
		for _, c := range q.Filtered {
			if i := table(c.Relation); i >= 0 && readable(i, c.Column) {
				lq.filtered = append(lq.filtered, lx.tables[i].key+"."+c.Column)
			}
		}
		l.queries = append(l.queries, lq)
	}
	slices.SortStableFunc(l.queries, func(x, y learnedQuery) int { return y.count - x.count })
	return l
}

// resolveRelation is r's index in lx: a qualified name as written, an
// unqualified one as the one table of that name in any schema of full; -1
// when there is none, more than one, or the asker may not read it (not in
// lx).
func resolveRelation(r Relation, full *catalog.Schema, lx *lexicon) int {
	key := r.Schema + "." + r.Name
	if r.Schema == "" {
		key = ""
		for i := range full.Tables {
			if t := &full.Tables[i]; t.Name == r.Name {
				if key != "" {
					return -1 // ambiguous
				}
				key = t.Schema + "." + t.Name
			}
		}
	}
	if i, ok := lx.index[key]; ok {
		return i
	}
	return -1
}

// namesHiddenColumn reports whether sql names, anywhere, a column of one of
// its tables that the asker may not read: the normalised text holds no
// literal, so its words are keywords, functions, aliases and names, and a
// word spelling a hidden column is taken for one (an alias of that spelling
// hides the query too: better unseen than revealing).
func namesHiddenColumn(sql string, full, visible *catalog.Schema, lx *lexicon, tables []int) bool {
	words := map[string]bool{}
	for _, w := range strings.FieldsFunc(sql, func(r rune) bool {
		return !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '$')
	}) {
		words[strings.ToLower(w)] = true
	}
	for _, i := range tables {
		ft := full.Table(lx.tables[i].key)
		if ft == nil {
			return true
		}
		for _, c := range ft.Columns {
			if words[strings.ToLower(c.Name)] && visible.Tables[i].Column(c.Name) == nil {
				return true
			}
		}
	}
	return false
}

// withLearnedJoins is lx with the learned joins added to its adjacency,
// ahead of the joins inferred from names (the bridge between two tables
// goes to the first of equal scores).
func (lx *lexicon) withLearnedJoins(l *learned) *lexicon {
	if l == nil || len(l.joins) == 0 {
		return lx
	}
	c := *lx
	c.adj = make([][]int, len(lx.adj))
	for _, j := range l.joins {
		if !slices.Contains(c.adj[j.a], j.b) {
			c.adj[j.a] = append(c.adj[j.a], j.b)
			c.adj[j.b] = append(c.adj[j.b], j.a)
		}
	}
	for i, ns := range lx.adj {
		for _, n := range ns {
			if !slices.Contains(c.adj[i], n) {
				c.adj[i] = append(c.adj[i], n)
			}
		}
	}
	return &c
}

// maxUsedColumns is how many of a wide table's columns the workload filters
// or groups by are kept in detail for it.
const maxUsedColumns = 3

// usedColumns are the columns to keep in detail because the workload uses
// them: each wide table's maxUsedColumns most used, and the columns of
// learned joins ("schema.table.column" → true).
func (l *learned) usedColumns(lx *lexicon) map[string]bool {
	out := map[string]bool{}
	if l == nil {
		return out
	}
	perTable := map[string][]string{}
	for _, k := range slices.Sorted(maps.Keys(l.columns)) {
		t := k[:strings.LastIndexByte(k, '.')]
		perTable[t] = append(perTable[t], k)
	}
	for _, ks := range perTable {
		slices.SortStableFunc(ks, func(x, y string) int { return l.columns[y] - l.columns[x] })
		for _, k := range ks[:min(maxUsedColumns, len(ks))] {
			out[k] = true
		}
	}
	for _, j := range l.joins {
		out[lx.tables[j.a].key+"."+j.colA] = true
		out[lx.tables[j.b].key+"."+j.colB] = true
	}
	return out
}

// JoinLink is a join path offered to the model: Left = Right, each
// "schema.table.column"; Uses is how many workload statements used it (0:
// inferred from same-named columns).
type JoinLink struct {
	Left, Right string
	Uses        int
}

// maxJoinLines bounds the join paths listed under the schema.
const maxJoinLines = 12

// joinLinks are the join paths between the detailed tables: first those
// between the tables relevant to the question (a subset of shown; the
// whole schema may be shown), then those between the others; in each, the
// ones the workload uses, most used first, ahead of those inferred from a
// same-named key column (a bare "id" is each table's own key and joins
// nothing) when no declared foreign key links the two tables (the schema
// shows those).
func (lx *lexicon) joinLinks(s *catalog.Schema, l *learned, shown, relevant []int) []JoinLink {
	in := map[int]bool{}
	for _, i := range shown {
		in[i] = true
	}
	rel := map[int]bool{}
	for _, i := range relevant {
		rel[i] = in[i]
	}
	var out []JoinLink
	have := map[string]bool{}
	add := func(a int, ca string, b int, cb string, uses int) {
		x, y := lx.tables[a].key+"."+ca, lx.tables[b].key+"."+cb
		if y < x {
			x, y = y, x
		}
		if len(out) < maxJoinLines && !have[x+"="+y] {
			have[x+"="+y] = true
			out = append(out, JoinLink{Left: x, Right: y, Uses: uses})
		}
	}
	for _, tier := range []map[int]bool{rel, in} {
		if l != nil {
			for _, j := range l.joins {
				if tier[j.a] && tier[j.b] {
					add(j.a, j.colA, j.b, j.colB, j.count)
				}
			}
		}
		for _, j := range lx.named {
			if tier[j.a] && tier[j.b] && !strings.EqualFold(j.col, "id") && !declaredLink(s, j.a, j.b) {
				add(j.a, j.col, j.b, j.col, 0)
			}
		}
	}
	return out
}

// declaredLink reports whether a declared foreign key links tables a and b.
func declaredLink(s *catalog.Schema, a, b int) bool {
	refs := func(x, y int) bool {
		ty := &s.Tables[y]
		return slices.ContainsFunc(s.Tables[x].ForeignKeys, func(fk catalog.ForeignKey) bool {
			return fk.RefSchema == ty.Schema && fk.RefTable == ty.Name
		})
	}
	return refs(a, b) || refs(b, a)
}

// renderJoins writes the join paths as comment lines under the schema,
// names spelt as the rendered schema spells them on searchPath.
func renderJoins(s *catalog.Schema, links []JoinLink, searchPath []string) string {
	if len(links) == 0 {
		return ""
	}
	if len(searchPath) == 0 {
		searchPath = []string{"public"}
	}
	name := func(ref string) string {
		i := strings.LastIndexByte(ref, '.')
		key, col := ref[:i], ref[i+1:]
		t := s.Table(key)
		tn := t.QualifiedName()
		if slices.Contains(searchPath, t.Schema) && s.TableOnPath(t.Name, searchPath) == t {
			tn = catalog.QuoteIdent(t.Name)
		}
		return tn + "." + catalog.QuoteIdent(col)
	}
	var b strings.Builder
	b.WriteString("-- Join paths:\n")
	for _, j := range links {
		note := "same column name"
		switch {
		case j.Uses == semanticJoin:
			note = "semantic model"
		case j.Uses == 1:
			note = "used by 1 query"
		case j.Uses > 1:
			note = fmt.Sprintf("used by %d queries", j.Uses)
		}
		fmt.Fprintf(&b, "--   %s = %s (%s)\n", name(j.Left), name(j.Right), note)
	}
	return b.String()
}

// Workload queries in the prompt: at most maxWorkloadQueries, together at
// most 1/workloadShare of the schema budget, none longer than
// maxWorkloadQueryTokens.
const (
	maxWorkloadQueries     = 3
	workloadShare          = 8
	maxWorkloadQueryTokens = 150
)

// workloadQueries are the learned queries to offer for this question:
// those reading only tables shown in detail, ranked by how high the tables
// they read rank for the question and how many question terms they name,
// then by use.
func (lx *lexicon) workloadQueries(l *learned, chosen []int, q map[string]bool, budget int) []string {
	if l == nil || len(l.queries) == 0 {
		return nil
	}
	pos := map[int]int{}
	for p, i := range chosen {
		pos[i] = p
	}
	type scored struct {
		sql   string
		score float64
		count int
	}
	var ss []scored
	for _, wq := range l.queries {
		score, ok := 0.0, true
		for _, t := range wq.tables {
			p, in := pos[t]
			if !in {
				ok = false
				break
			}
			score += 1 / float64(p+1)
		}
		if !ok || estimateTokens(wq.sql) > maxWorkloadQueryTokens {
			continue
		}
		for _, w := range descindex.Tokenize(wq.sql) {
			if q[w] {
				score += 0.5 * max(lx.idf[w], 0.1)
			}
		}
		ss = append(ss, scored{wq.sql, score, wq.count})
	}
	slices.SortStableFunc(ss, func(x, y scored) int {
		if c := -cmpFloat(x.score, y.score); c != 0 {
			return c
		}
		return y.count - x.count
	})
	var out []string
	used := 0
	for _, s := range ss {
		n := estimateTokens(s.sql)
		if len(out) == maxWorkloadQueries || used+n > budget/workloadShare {
			break
		}
		out = append(out, s.sql)
		used += n
	}
	return out
}
