// Package workload learns from the SQL that passes through the proxy: each
// statement is normalised with pg_query (literals become $n, comments are
// dropped, the fingerprint names its shape) and reduced to what schema
// linking and few-shot prompts can use — the relations it reads, the join
// predicates between them, and the columns it filters, groups and orders by.
// A Profile keeps that per database, bounded, and persists it next to the
// catalog's snapshots. No literal value of a statement is ever kept, nor
// a name it makes up (an alias is free text: see neutralize).
package workload

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Shape is what one statement teaches: its normalised text and fingerprint,
// and the schema facts it uses. Names are as Postgres folds them (unquoted
// identifiers lower-cased, quoted ones as written).
type Shape struct {
	// Fingerprint is pg_query's fingerprint of the statement, hex: equal for
	// statements that differ only in literals, whitespace and comments.
	Fingerprint string
	// Text is the statement deparsed from its normalised tree: every
	// literal replaced by $n, comments gone, the names it makes up
	// (aliases, CTE, output and window names) neutral ones (t1, c1, w1,
	// win1; see NeutralName), canonical spacing.
	Text string
	// Relations are the relations the statement names outside its CTEs
	// (FROM, JOIN, subqueries), schema as written ("" when unqualified).
	Relations []Rel
	// Joins are the equality predicates a.x = b.y between columns of two
	// different relations (ON, USING, WHERE), aliases resolved, each in
	// canonical order (Left before Right), sorted, without duplicates.
	Joins []Join
	// Filtered are the columns compared in WHERE, HAVING and ON conditions
	// other than the join predicates; Grouped the GROUP BY columns; Ordered
	// the ORDER BY columns. A column whose relation cannot be told (an
	// unqualified name among several relations, a subquery's output) is
	// left out.
	Filtered, Grouped, Ordered []Col
}

// Rel is a relation: its schema as written ("" when unqualified) and name.
type Rel struct{ Schema, Name string }

// Col is a column of a relation.
type Col struct {
	Rel  Rel
	Name string
}

// Join is an equality predicate between columns of two relations, Left
// ordered before Right.
type Join struct{ Left, Right Col }

func (r Rel) String() string {
	if r.Schema == "" {
		return r.Name
	}
	return r.Schema + "." + r.Name
}

func (c Col) String() string { return c.Rel.String() + "." + c.Name }

func (j Join) String() string { return j.Left.String() + " = " + j.Right.String() }

func cmpRel(a, b Rel) int {
	return cmp.Or(cmp.Compare(a.Schema, b.Schema), cmp.Compare(a.Name, b.Name))
}

func cmpCol(a, b Col) int { return cmp.Or(cmpRel(a.Rel, b.Rel), cmp.Compare(a.Name, b.Name)) }

func cmpJoin(a, b Join) int { return cmp.Or(cmpCol(a.Left, b.Left), cmpCol(a.Right, b.Right)) }

// Errors from Analyze; each is wrapped with the detail.
var (
	// ErrParse: the statement is not valid SQL to pg_query.
	ErrParse = errors.New("workload: cannot parse")
	// ErrNotQuery: the statement is not a single SELECT (utility and
	// data-changing statements are not learnt from: some keep literals
	// that normalisation does not reach, and none is a read to imitate).
	ErrNotQuery = errors.New("workload: not a single SELECT")
	// ErrLiteral: a literal survived normalisation; the statement is
	// refused rather than stored.
	ErrLiteral = errors.New("workload: literal left after normalisation")
)

// MaxLen bounds the statements Analyze accepts, in bytes.
const MaxLen = 64 << 10

// Analyze normalises one statement and reads its shape. Only a single
// SELECT (with its WITH, set operations and subqueries) is analysed.
func Analyze(sql string) (Shape, error) {
	if len(sql) > MaxLen {
		return Shape{}, fmt.Errorf("%w: %d bytes, over %d", ErrNotQuery, len(sql), MaxLen)
	}
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return Shape{}, fmt.Errorf("%w: %v", ErrParse, err)
	}
	if len(tree.GetStmts()) != 1 || tree.GetStmts()[0].GetStmt().GetSelectStmt() == nil {
		return Shape{}, ErrNotQuery
	}
	norm, err := pg_query.Normalize(sql)
	if err != nil {
		return Shape{}, fmt.Errorf("%w: normalise: %v", ErrParse, err)
	}
	ntree, err := pg_query.Parse(norm)
	if err != nil {
		return Shape{}, fmt.Errorf("%w: normalised text: %v", ErrParse, err)
	}
	if err := noLiterals(ntree.ProtoReflect()); err != nil {
		return Shape{}, err
	}
	fp, err := pg_query.Fingerprint(sql)
	if err != nil {
		return Shape{}, fmt.Errorf("%w: fingerprint: %v", ErrParse, err)
	}
	a := &analysis{}
	a.selectStmt(ntree.GetStmts()[0].GetStmt().GetSelectStmt(), nil)
	// Deparsing the normalised tree drops comments, which Normalize keeps
	// and which may hold anything; the names the statement made up are
	// neutral ones first.
	neutralize(ntree)
	text, err := pg_query.Deparse(ntree)
	if err != nil {
		return Shape{}, fmt.Errorf("%w: deparse: %v", ErrParse, err)
	}
	return Shape{
		Fingerprint: fp,
		Text:        text,
		Relations:   sortedKeys(a.rels, cmpRel),
		Joins:       sortedKeys(a.joins, cmpJoin),
		Filtered:    sortedKeys(a.filtered, cmpCol),
		Grouped:     sortedKeys(a.grouped, cmpCol),
		Ordered:     sortedKeys(a.ordered, cmpCol),
	}, nil
}

func sortedKeys[K comparable](m map[K]bool, f func(a, b K) int) []K {
	if len(m) == 0 {
		return nil
	}
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, f)
	return out
}

// noLiterals refuses a normalised tree that still holds a constant, save
// those that are syntax rather than data: ORDER BY / GROUP BY positions and
// type modifiers (varchar(10)). NULL is kept: it is not a value anyone
// could leak.
func noLiterals(m protoreflect.Message) error {
	switch n := m.Interface().(type) {
	case *pg_query.A_Const:
		if n.GetIsnull() {
			return nil
		}
		return fmt.Errorf("%w at offset %d", ErrLiteral, n.GetLocation())
	case *pg_query.TypeName:
		// typmods are sizes and precisions; anything else in a type name
		// is an identifier.
		return nil
	case *pg_query.SortBy:
		if isPosition(n.GetNode()) {
			return nil
		}
	case *pg_query.SelectStmt:
		for _, g := range n.GetGroupClause() {
			if !isPosition(g) {
				if err := noLiterals(g.ProtoReflect()); err != nil {
					return err
				}
			}
		}
		return rangeFields(m, "group_clause", noLiterals)
	}
	return rangeFields(m, "", noLiterals)
}

// isPosition reports whether n is an output-column position (ORDER BY 2).
func isPosition(n *pg_query.Node) bool {
	c := n.GetAConst()
	return c != nil && c.GetIval() != nil
}

// rangeFields calls f on every message below m, except field skip.
func rangeFields(m protoreflect.Message, skip protoreflect.Name, f func(protoreflect.Message) error) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil || fd.IsMap() || fd.Name() == skip {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = f(l.Get(i).Message())
			}
		} else {
			err = f(v.Message())
		}
		return err == nil
	})
	return err
}

// analysis gathers one statement's facts.
type analysis struct {
	rels                       map[Rel]bool
	joins                      map[Join]bool
	filtered, grouped, ordered map[Col]bool
}

func add[K comparable](m *map[K]bool, k K) {
	if *m == nil {
		*m = map[K]bool{}
	}
	(*m)[k] = true
}

// scope is one SELECT's FROM list: what each name that may qualify a column
// stands for. A nil *Rel is a subquery, function or CTE: its columns are
// not a relation's.
type scope struct {
	parent *scope
	ctes   map[string]bool
	names  map[string]*Rel
	// items counts the FROM items; an unqualified column belongs to the
	// only relation when there is exactly one and it is a relation.
	items []*Rel
	// outputs are the SELECT list's aliases, which ORDER BY may name.
	outputs map[string]bool
}

func (s *scope) isCTE(name string) bool {
	for ; s != nil; s = s.parent {
		if s.ctes[name] {
			return true
		}
	}
	return false
}

func (s *scope) register(name string, r *Rel) {
	if s.names == nil {
		s.names = map[string]*Rel{}
	}
	s.names[name] = r
	s.items = append(s.items, r)
}

// resolve finds the relation a column reference's fields name, innermost
// scope first.
func (s *scope) resolve(fields []string) (Col, bool) {
	switch len(fields) {
	case 0:
		return Col{}, false
	case 1:
		if len(s.items) == 1 && s.items[0] != nil {
			return Col{Rel: *s.items[0], Name: fields[0]}, true
		}
		return Col{}, false
	}
	col := fields[len(fields)-1]
	qual := fields[len(fields)-2]
	schema := ""
	if len(fields) >= 3 {
		schema = fields[len(fields)-3]
	}
	for sc := s; sc != nil; sc = sc.parent {
		r, ok := sc.names[qual]
		if !ok {
			continue
		}
		if r == nil || schema != "" && r.Schema != "" && r.Schema != schema {
			return Col{}, false
		}
		rel := *r
		if rel.Schema == "" {
			rel.Schema = schema
		}
		return Col{Rel: rel, Name: col}, true
	}
	return Col{}, false
}

// selectStmt analyses a SELECT (or set operation) in the outer scope.
func (a *analysis) selectStmt(sel *pg_query.SelectStmt, outer *scope) {
	if sel == nil {
		return
	}
	s := &scope{parent: outer}
	if wc := sel.GetWithClause(); wc != nil {
		s.ctes = map[string]bool{}
		for _, c := range wc.GetCtes() {
			s.ctes[c.GetCommonTableExpr().GetCtename()] = true
		}
		for _, c := range wc.GetCtes() {
			a.subtree(c.GetCommonTableExpr().GetCtequery(), s)
		}
	}
	if sel.GetOp() != pg_query.SetOperation_SET_OPERATION_UNDEFINED && sel.GetOp() != pg_query.SetOperation_SETOP_NONE {
		a.selectStmt(sel.GetLarg(), s)
		a.selectStmt(sel.GetRarg(), s)
		// ORDER BY of a set operation names its output columns.
		for _, n := range sel.GetSortClause() {
			a.expr(n, s, nil)
		}
		return
	}
	for _, v := range sel.GetValuesLists() {
		a.expr(v, s, nil)
	}
	for _, f := range sel.GetFromClause() {
		a.fromItem(f, s)
	}
	for _, t := range sel.GetTargetList() {
		rt := t.GetResTarget()
		if rt.GetName() != "" {
			if s.outputs == nil {
				s.outputs = map[string]bool{}
			}
			s.outputs[rt.GetName()] = true
		}
		a.expr(rt.GetVal(), s, nil)
	}
	a.cond(sel.GetWhereClause(), s)
	for _, g := range sel.GetGroupClause() {
		a.expr(g, s, &a.grouped)
	}
	a.cond(sel.GetHavingClause(), s)
	for _, o := range sel.GetSortClause() {
		sb := o.GetSortBy()
		if cr := sb.GetNode().GetColumnRef(); cr != nil {
			if f := fieldNames(cr); len(f) == 1 && s.outputs[f[0]] {
				continue // an output alias, not a column of a relation
			}
		}
		a.expr(sb.GetNode(), s, &a.ordered)
	}
	a.expr(sel.GetLimitCount(), s, nil)
	a.expr(sel.GetLimitOffset(), s, nil)
}

// fromItem registers one FROM item in s and analyses what it holds.
func (a *analysis) fromItem(n *pg_query.Node, s *scope) {
	switch {
	case n.GetRangeVar() != nil:
		rv := n.GetRangeVar()
		name := rv.GetRelname()
		if alias := rv.GetAlias().GetAliasname(); alias != "" {
			name = alias
		}
		if rv.GetSchemaname() == "" && s.isCTE(rv.GetRelname()) {
			s.register(name, nil)
			return
		}
		r := Rel{Schema: rv.GetSchemaname(), Name: rv.GetRelname()}
		add(&a.rels, r)
		s.register(name, &r)
	case n.GetJoinExpr() != nil:
		j := n.GetJoinExpr()
		before := len(s.items)
		a.fromItem(j.GetLarg(), s)
		mid := len(s.items)
		a.fromItem(j.GetRarg(), s)
		a.cond(j.GetQuals(), s)
		// USING (c): a join on c when each side is a single relation.
		if mid-before == 1 && len(s.items)-mid == 1 && s.items[before] != nil && s.items[mid] != nil {
			for _, u := range j.GetUsingClause() {
				a.join(Col{*s.items[before], u.GetString_().GetSval()}, Col{*s.items[mid], u.GetString_().GetSval()})
			}
		}
		if alias := j.GetAlias().GetAliasname(); alias != "" {
			s.register(alias, nil)
		}
	case n.GetRangeSubselect() != nil:
		rs := n.GetRangeSubselect()
		// A subquery in FROM sees the CTEs of its SELECT but not its
		// sibling FROM items, unless LATERAL.
		inner := &scope{parent: s.parent, ctes: s.ctes}
		if rs.GetLateral() {
			inner = s
		}
		a.subtree(rs.GetSubquery(), inner)
		s.register(rs.GetAlias().GetAliasname(), nil)
	case n.GetRangeTableSample() != nil:
		a.fromItem(n.GetRangeTableSample().GetRelation(), s)
	case n.GetRangeFunction() != nil:
		rf := n.GetRangeFunction()
		a.expr(n, s, nil)
		s.register(rf.GetAlias().GetAliasname(), nil)
	default:
		a.expr(n, s, nil)
		s.register("", nil)
	}
}

func (a *analysis) join(l, r Col) {
	if l.Rel == r.Rel {
		return
	}
	if cmpCol(r, l) < 0 {
		l, r = r, l
	}
	add(&a.joins, Join{Left: l, Right: r})
}

// cond analyses a condition: equalities between columns of two relations
// are joins, every other resolved column is filtered.
func (a *analysis) cond(n *pg_query.Node, s *scope) {
	if n == nil {
		return
	}
	if be := n.GetBoolExpr(); be != nil {
		for _, arg := range be.GetArgs() {
			a.cond(arg, s)
		}
		return
	}
	if e := n.GetAExpr(); e != nil && e.GetKind() == pg_query.A_Expr_Kind_AEXPR_OP && isEq(e.GetName()) {
		lc, rc := e.GetLexpr().GetColumnRef(), e.GetRexpr().GetColumnRef()
		if lc != nil && rc != nil {
			l, lok := s.resolve(fieldNames(lc))
			r, rok := s.resolve(fieldNames(rc))
			if lok && rok && l.Rel != r.Rel {
				a.join(l, r)
				return
			}
		}
	}
	a.expr(n, s, &a.filtered)
}

func isEq(name []*pg_query.Node) bool {
	return len(name) == 1 && name[0].GetString_().GetSval() == "="
}

// expr walks an expression: column references go to into (nil: not
// recorded), subqueries are analysed in scope s.
func (a *analysis) expr(n *pg_query.Node, s *scope, into *map[Col]bool) {
	if n == nil {
		return
	}
	a.walk(n.ProtoReflect(), s, into)
}

func (a *analysis) walk(m protoreflect.Message, s *scope, into *map[Col]bool) {
	switch n := m.Interface().(type) {
	case *pg_query.ColumnRef:
		if into != nil {
			if c, ok := s.resolve(fieldNames(n)); ok {
				add(into, c)
			}
		}
		return
	case *pg_query.SelectStmt:
		a.selectStmt(n, s)
		return
	case *pg_query.RangeVar:
		// A relation outside a FROM list of a SELECT (a data-changing
		// CTE's target): named, so visibility checks see it.
		if n.GetSchemaname() != "" || !s.isCTE(n.GetRelname()) {
			add(&a.rels, Rel{Schema: n.GetSchemaname(), Name: n.GetRelname()})
		}
		return
	}
	_ = rangeFields(m, "", func(c protoreflect.Message) error {
		a.walk(c, s, into)
		return nil
	})
}

// subtree analyses a statement node that may not be a SELECT (a CTE's
// INSERT … RETURNING): SELECTs get scopes, anything else is walked for
// the relations it names.
func (a *analysis) subtree(n *pg_query.Node, s *scope) {
	if n == nil {
		return
	}
	if sel := n.GetSelectStmt(); sel != nil {
		a.selectStmt(sel, s)
		return
	}
	a.walk(n.ProtoReflect(), &scope{parent: s}, nil)
}

func fieldNames(cr *pg_query.ColumnRef) []string {
	out := make([]string, 0, len(cr.GetFields()))
	for _, f := range cr.GetFields() {
		sv := f.GetString_()
		if sv == nil {
			return nil // t.* names no column
		}
		out = append(out, sv.GetSval())
	}
	return out
}
