package engine

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"

	pg_query "github.com/pganalyze/pg_query_go/v5"
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
// ($1), so it holds no value anybody wrote, and every name it made up
// (aliases) a neutral one (t1, c1, w1, win1).
type LearnedQuery struct {
	// Fingerprint identifies the statement's shape (pg_query's); "" when
	// unknown (the SQL then stands for it).
	Fingerprint string
	SQL         string
	Relations   []Relation    // the relations it reads
	Filtered    []ColumnRef   // the columns it filters by
	Joins       []LearnedJoin // its join predicates (Count unused)
	Count       int           // how many times it ran
	Use
}

// Use is how many distinct roles and sessions taught something: learned
// things rank by roles, then sessions, then Count, so that one role's
// flood does not outrank what several roles use.
type Use struct{ Roles, Sessions int }

// LearnedJoin is a join predicate (Left = Right) and how many statements
// used it.
type LearnedJoin struct {
	Left, Right ColumnRef
	Count       int
	Use
}

// LearnedColumn is a column statements filter, group or order by, and how
// often.
type LearnedColumn struct {
	Column ColumnRef
	Uses   int
	Use
}

// weigh orders two learned things heavier first: by Use, then count.
func weigh(x Use, xn int, y Use, yn int) int {
	return cmp.Or(cmp.Compare(y.Roles, x.Roles), cmp.Compare(y.Sessions, x.Sessions), cmp.Compare(yn, xn))
}

// learned is a Learned resolved against one ask's schema (the part the
// asking role may read): only what touches nothing else is kept.
type learned struct {
	joins   []learnedLink  // by use, most used first
	columns map[string]int // "schema.table.column" → uses
	colUse  map[string]Use // "schema.table.column" → roles and sessions
	queries []learnedQuery // by use, most used first
}

type learnedLink struct {
	a, b       int // lexicon table indexes
	colA, colB string
	count      int
	use        Use
}

type learnedQuery struct {
	fingerprint string
	sql         string
	tables      []int
	filtered    []string // "schema.table.column" the asker may read
	count       int
	use         Use
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
	a.learned = resolveLearned(w, a.snap.Schema, a.schema0, e.lex.get(a.schema0), a.snap.Functions)
	st.Note = fmt.Sprintf("%d joins, %d columns, %d queries usable", len(a.learned.joins), len(a.learned.columns), len(a.learned.queries))
}

// resolveLearned resolves w's names on full (the database's catalog: an
// unqualified name is the one table of that name in any schema; ambiguous
// names are skipped) and keeps what visible, the asker's part of it, holds.
// What the workload teaches is any role's say, so it is held to the
// catalog: a join whose columns' types differ, or that equates a key with
// another column than a declared foreign key between its tables does, is
// refused, and so is every query holding one; a query's text is shown only
// when each name in it is one of the asker's part of the catalog, a
// built-in (fns: the built-in functions), a neutral alias or a keyword.
func resolveLearned(w *Learned, full, visible *catalog.Schema, lx *lexicon, fns *catalog.Functions) *learned {
	l := &learned{columns: map[string]int{}, colUse: map[string]Use{}}
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
	// sound: the join's ends resolve, may be read and agree with the
	// catalog.
	sound := func(j LearnedJoin) (a, b int, ok bool) {
		a, b = table(j.Left.Relation), table(j.Right.Relation)
		if a < 0 || b < 0 || a == b || !readable(a, j.Left.Column) || !readable(b, j.Right.Column) {
			return a, b, false
		}
		return a, b, !joinContradicts(full, full.Table(lx.tables[a].key), j.Left.Column, full.Table(lx.tables[b].key), j.Right.Column)
	}
	type linkKey struct {
		a, b       int
		colA, colB string
	}
	seen := map[linkKey]int{}
	for _, j := range w.Joins {
		a, b, ok := sound(j)
		if !ok {
			continue
		}
		lk := learnedLink{a: a, b: b, colA: j.Left.Column, colB: j.Right.Column, count: j.Count, use: j.Use}
		if lx.tables[b].key+"."+lk.colB < lx.tables[a].key+"."+lk.colA {
			lk = learnedLink{a: b, b: a, colA: lk.colB, colB: lk.colA, count: lk.count, use: lk.use}
		}
		k := linkKey{lk.a, lk.b, lk.colA, lk.colB}
		if p, ok := seen[k]; ok {
			l.joins[p].count += lk.count
			l.joins[p].use.Roles = max(l.joins[p].use.Roles, lk.use.Roles)
			l.joins[p].use.Sessions = max(l.joins[p].use.Sessions, lk.use.Sessions)
			continue
		}
		seen[k] = len(l.joins)
		l.joins = append(l.joins, lk)
	}
	slices.SortStableFunc(l.joins, func(x, y learnedLink) int { return weigh(x.use, x.count, y.use, y.count) })
	for _, c := range w.Columns {
		if i := table(c.Column.Relation); i >= 0 && readable(i, c.Column.Column) {
			k := lx.tables[i].key + "." + c.Column.Column
			l.columns[k] += c.Uses
			u := l.colUse[k]
			l.colUse[k] = Use{Roles: max(u.Roles, c.Roles), Sessions: max(u.Sessions, c.Sessions)}
		}
	}
	names := catalogNames(visible, fns)
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
		for _, j := range q.Joins {
			if _, _, sj := sound(j); !sj {
				ok = false
			}
		}
		if !ok || !onlyCatalogNames(q.SQL, names) || namesHiddenColumn(q.SQL, full, visible, lx, ts) {
			continue
		}
		lq := learnedQuery{fingerprint: q.Fingerprint, sql: q.SQL, tables: ts, count: q.Count, use: q.Use}
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
	slices.SortStableFunc(l.queries, func(x, y learnedQuery) int { return weigh(x.use, x.count, y.use, y.count) })
	return l
}

// joinContradicts reports whether ta.ca = tb.cb disagrees with the
// catalog: a column it does not know, types of different kinds, or a key
// column equated with another column than the declared foreign keys
// between the two tables pair it with.
func joinContradicts(full *catalog.Schema, ta *catalog.Table, ca string, tb *catalog.Table, cb string) bool {
	if ta == nil || tb == nil {
		return true
	}
	x, y := ta.Column(ca), tb.Column(cb)
	if x == nil || y == nil || typeKind(x.Type) != typeKind(y.Type) {
		return true
	}
	// declared: the foreign keys between the tables, and whether one
	// pairs ca with cb.
	declared, pairs := false, false
	check := func(from *catalog.Table, fc string, to *catalog.Table, tc string) {
		for _, fk := range from.ForeignKeys {
			if fk.RefSchema != to.Schema || fk.RefTable != to.Name {
				continue
			}
			declared = true
			for k := range fk.Columns {
				if k < len(fk.RefColumns) && fk.Columns[k] == fc && fk.RefColumns[k] == tc {
					pairs = true
				}
			}
		}
	}
	check(ta, ca, tb, cb)
	check(tb, cb, ta, ca)
	if !declared || pairs {
		return false
	}
	return isKey(ta, ca) || isKey(tb, cb)
}

// isKey reports whether c alone is t's primary key or a unique key.
func isKey(t *catalog.Table, c string) bool {
	if len(t.PrimaryKey) == 1 && t.PrimaryKey[0] == c {
		return true
	}
	return slices.ContainsFunc(t.Uniques, func(u []string) bool { return len(u) == 1 && u[0] == c })
}

var typmod = regexp.MustCompile(`\([^)]*\)`)

// typeKind is the kind of a format_type spelling that a join may equate
// with itself: sizes and precisions dropped, integers with integers, text
// types with text types.
func typeKind(t string) string {
	t = strings.Join(strings.Fields(typmod.ReplaceAllString(t, "")), " ")
	switch t {
	case "smallint", "integer", "bigint":
		return "integer"
	case "text", "character varying", "character", "name", "\"char\"":
		return "text"
	case "real", "double precision":
		return "float"
	case "timestamp without time zone", "timestamp with time zone":
		return "timestamp"
	}
	return t
}

// catalogNames are the names a shown query may hold: the schemas,
// relations and columns of s (the asker's part of the catalog), and the
// built-in functions and types.
func catalogNames(s *catalog.Schema, fns *catalog.Functions) map[string]bool {
	out := map[string]bool{"pg_catalog": true}
	for _, t := range builtinTypeNames {
		out[t] = true
	}
	for i := range s.Tables {
		t := &s.Tables[i]
		out[t.Schema], out[t.Name] = true, true
		for _, c := range t.Columns {
			out[c.Name] = true
		}
	}
	if fns != nil {
		for f := range fns.Builtin {
			out[f] = true
		}
	}
	return out
}

// builtinTypeNames are core types a cast may name that are neither SQL
// keywords nor built-in function names.
var builtinTypeNames = []string{"uuid", "json", "jsonb", "bytea", "inet", "cidr", "macaddr", "tsvector", "tsquery",
	"int2", "int4", "int8", "float4", "float8", "bool", "timestamptz", "timetz", "regclass", "oid"}

// neutralName matches the names package workload gives made-up names.
var neutralName = regexp.MustCompile(`^(t|c|w|win)[0-9]+$`)

// onlyCatalogNames reports whether every token of sql is a keyword, an
// operator or punctuation, a parameter or number, a neutral alias or a
// name in names: text a role wrote that the catalog cannot resolve (a
// quoted alias, a string, a comment) never reaches another's prompt.
func onlyCatalogNames(sql string, names map[string]bool) bool {
	res, err := pg_query.Scan(sql)
	if err != nil {
		return false
	}
	for _, tk := range res.GetTokens() {
		text := sql[tk.GetStart():tk.GetEnd()]
		switch tk.GetToken() {
		case pg_query.Token_IDENT:
			name := text
			if strings.HasPrefix(name, `"`) {
				name = strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(name, `"`), `"`), `""`, `"`)
			} else {
				name = strings.ToLower(name)
			}
			if !names[name] && !neutralName.MatchString(name) {
				return false
			}
		case pg_query.Token_PARAM, pg_query.Token_ICONST, pg_query.Token_Op, pg_query.Token_TYPECAST,
			pg_query.Token_DOT_DOT, pg_query.Token_COLON_EQUALS, pg_query.Token_EQUALS_GREATER,
			pg_query.Token_LESS_EQUALS, pg_query.Token_GREATER_EQUALS, pg_query.Token_NOT_EQUALS:
		default:
			if tk.GetKeywordKind() == pg_query.KeywordKind_NO_KEYWORD && tk.GetToken() >= 256 {
				return false // strings, comments, Unicode identifiers
			}
		}
	}
	return true
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
		slices.SortStableFunc(ks, func(x, y string) int { return weigh(l.colUse[x], l.columns[x], l.colUse[y], l.columns[y]) })
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
		use   Use
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
		ss = append(ss, scored{wq.sql, score, wq.count, wq.use})
	}
	slices.SortStableFunc(ss, func(x, y scored) int {
		if c := -cmpFloat(x.score, y.score); c != 0 {
			return c
		}
		return weigh(x.use, x.count, y.use, y.count)
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
