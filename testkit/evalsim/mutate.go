package evalsim

import (
	"fmt"
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nlproxy/nlproxy/eval/dataset"
)

// Kinds of wrong variant, the mistakes models make on these questions.
const (
	KindColumn    = "wrong-column"      // another column of the same type and table
	KindDrop      = "dropped-predicate" // one WHERE condition left out
	KindOperator  = "altered-predicate" // a comparison turned (= → <>, < → <=, …)
	KindAggregate = "wrong-aggregate"   // sum ↔ avg, min ↔ max, count(x) → count(DISTINCT x)
	KindDistinct  = "missing-distinct"  // DISTINCT dropped
	KindJoinKey   = "wrong-join-key"    // a join condition on another column of the same type
	KindLiteral   = "literal-case"      // a string literal in the wrong case
	KindNumber    = "literal-number"    // a number off by one
	KindLimit     = "off-by-one-limit"  // LIMIT n+1
)

// AllKinds lists every kind of wrong variant.
var AllKinds = []string{KindColumn, KindDrop, KindOperator, KindAggregate, KindDistinct, KindJoinKey, KindLiteral, KindNumber, KindLimit}

// schemaInfo is what mutations need to know of a database: each table's
// columns and their types.
type schemaInfo map[string][]dataset.ColumnMeta

func (s schemaInfo) columnType(table, col string) (string, bool) {
	for _, c := range s[strings.ToLower(table)] {
		if strings.EqualFold(c.Name, col) {
			return c.Type, true
		}
	}
	return "", false
}

// sameType lists the table's other columns of col's type.
func (s schemaInfo) sameType(table, col string) []string {
	typ, ok := s.columnType(table, col)
	if !ok {
		return nil
	}
	var out []string
	for _, c := range s[strings.ToLower(table)] {
		if c.Type == typ && !strings.EqualFold(c.Name, col) {
			out = append(out, c.Name)
		}
	}
	return out
}

// walk calls fn on every message in the tree, parents first; fn returning
// false skips the message's children.
func walk(m protoreflect.Message, fn func(protoreflect.Message) bool) {
	if !fn(m) {
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walk(l.Get(i).Message(), fn)
			}
		case fd.Kind() == protoreflect.MessageKind:
			walk(v.Message(), fn)
		}
		return true
	})
}

// tablesOf maps every name a table is referred by (alias or name) to the
// table's name.
func tablesOf(tree *pg_query.ParseResult) map[string]string {
	out := map[string]string{}
	walk(tree.ProtoReflect(), func(m protoreflect.Message) bool {
		if rv, ok := m.Interface().(*pg_query.RangeVar); ok {
			name := strings.ToLower(rv.Relname)
			out[name] = name
			if rv.Alias != nil {
				out[strings.ToLower(rv.Alias.Aliasname)] = name
			}
		}
		return true
	})
	return out
}

// columnTable resolves a column reference to its table and column.
func columnTable(cr *pg_query.ColumnRef, tables map[string]string, schema schemaInfo) (table, col string, ok bool) {
	var names []string
	for _, f := range cr.Fields {
		s := f.GetString_()
		if s == nil {
			return "", "", false // a star
		}
		names = append(names, s.Sval)
	}
	switch len(names) {
	case 1:
		col = names[0]
		var found []string
		for _, t := range tables {
			if _, ok := schema.columnType(t, col); ok && !slices.Contains(found, t) {
				found = append(found, t)
			}
		}
		if len(found) != 1 {
			return "", "", false
		}
		return found[0], col, true
	case 2:
		t, ok := tables[strings.ToLower(names[0])]
		if !ok {
			return "", "", false
		}
		if _, ok := schema.columnType(t, names[1]); !ok {
			return "", "", false
		}
		return t, names[1], true
	}
	return "", "", false
}

// site is one place a mutation can apply, found on a fresh parse.
type site struct {
	kind  string
	apply func() // changes the tree it was found in
}

// sites lists every mutation of the kinds asked for in tree.
func sites(tree *pg_query.ParseResult, schema schemaInfo, kinds []string) []site {
	want := func(k string) bool { return slices.Contains(kinds, k) }
	tables := tablesOf(tree)
	var out []site
	add := func(kind string, fn func()) {
		if want(kind) {
			out = append(out, site{kind: kind, apply: fn})
		}
	}
	limits := map[*pg_query.Node]bool{}
	walk(tree.ProtoReflect(), func(m protoreflect.Message) bool {
		switch n := m.Interface().(type) {
		case *pg_query.SelectStmt:
			if len(n.DistinctClause) > 0 {
				add(KindDistinct, func() { n.DistinctClause = nil })
			}
			if n.LimitCount != nil {
				limits[n.LimitCount] = true
				if c := n.LimitCount.GetAConst(); c != nil && c.GetIval() != nil {
					add(KindLimit, func() { c.GetIval().Ival++ })
				}
			}
			if w := n.WhereClause; w != nil {
				if be := w.GetBoolExpr(); be != nil && be.Boolop == pg_query.BoolExprType_AND_EXPR && len(be.Args) > 1 {
					for i := range be.Args {
						add(KindDrop, func() { be.Args = slices.Delete(be.Args, i, i+1) })
					}
				} else {
					add(KindDrop, func() { n.WhereClause = nil })
				}
			}
			for _, t := range n.TargetList {
				rt := t.GetResTarget()
				if rt == nil {
					continue
				}
				if cr := rt.Val.GetColumnRef(); cr != nil {
					if tbl, col, ok := columnTable(cr, tables, schema); ok {
						for _, other := range schema.sameType(tbl, col) {
							add(KindColumn, func() {
								cr.Fields[len(cr.Fields)-1] = pg_query.MakeStrNode(other)
								if rt.Name == "" {
									rt.Name = col // the output keeps its name: only the values are wrong
								}
							})
							break
						}
					}
				}
			}
		case *pg_query.JoinExpr:
			if q := n.Quals.GetAExpr(); q != nil && opName(q) == "=" {
				if cr := q.Rexpr.GetColumnRef(); cr != nil {
					if tbl, col, ok := columnTable(cr, tables, schema); ok {
						if others := schema.sameType(tbl, col); len(others) > 0 {
							add(KindJoinKey, func() { cr.Fields[len(cr.Fields)-1] = pg_query.MakeStrNode(others[0]) })
						}
					}
				}
			}
		case *pg_query.FuncCall:
			name := strings.ToLower(funcName(n))
			swap := map[string]string{"sum": "avg", "avg": "sum", "min": "max", "max": "min"}[name]
			switch {
			case swap != "":
				add(KindAggregate, func() { n.Funcname = []*pg_query.Node{pg_query.MakeStrNode(swap)} })
			case name == "count" && !n.AggStar && !n.AggDistinct:
				add(KindAggregate, func() { n.AggDistinct = true })
			case name == "count" && n.AggDistinct:
				add(KindDistinct, func() { n.AggDistinct = false })
			}
		case *pg_query.A_Expr:
			if n.Kind == pg_query.A_Expr_Kind_AEXPR_OP {
				if to, ok := map[string]string{"=": "<>", "<>": "=", "<": "<=", "<=": "<", ">": ">=", ">=": ">"}[opName(n)]; ok {
					add(KindOperator, func() { n.Name = []*pg_query.Node{pg_query.MakeStrNode(to)} })
				}
			}
		case *pg_query.A_Const:
			if s := n.GetSval(); s != nil && s.Sval != "" {
				up := strings.ToUpper(s.Sval)
				if up == s.Sval {
					up = strings.ToLower(s.Sval)
				}
				if up != s.Sval {
					add(KindLiteral, func() { s.Sval = up })
				}
			}
		case *pg_query.Node:
			if limits[n] {
				return false // the LIMIT's number is KindLimit's
			}
			if c := n.GetAConst(); c != nil && c.GetIval() != nil && c.GetIval().Ival > 1 {
				add(KindNumber, func() { c.GetIval().Ival++ })
				return false
			}
		}
		return true
	})
	return out
}

func opName(e *pg_query.A_Expr) string {
	if len(e.Name) == 0 {
		return ""
	}
	return e.Name[len(e.Name)-1].GetString_().GetSval()
}

func funcName(f *pg_query.FuncCall) string {
	if len(f.Funcname) == 0 {
		return ""
	}
	return f.Funcname[len(f.Funcname)-1].GetString_().GetSval()
}

// mutations returns every variant of sql the kinds allow, each with its kind.
func mutations(sql string, schema schemaInfo, kinds []string) ([]variant, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return nil, err
	}
	n := len(sites(tree, schema, kinds))
	var out []variant
	seen := map[string]bool{}
	for i := range n {
		t := proto.Clone(tree).(*pg_query.ParseResult)
		ss := sites(t, schema, kinds)
		if i >= len(ss) {
			break
		}
		ss[i].apply()
		s, err := pg_query.Deparse(t)
		if err != nil || seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, variant{sql: s, kind: ss[i].kind})
	}
	return out, nil
}

type variant struct {
	sql  string
	kind string
}

// Canonical is sql parsed and printed back: the same query written with
// other spacing or keyword case has the same canonical form.
func Canonical(sql string) string {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return strings.Join(strings.Fields(sql), " ")
	}
	s, err := pg_query.Deparse(tree)
	if err != nil {
		return strings.Join(strings.Fields(sql), " ")
	}
	return s
}

// reformats writes sql the way another person would: printed by the
// parser, inner joins swapped, tables aliased, keywords in lower case.
// Each is checked by the caller against the gold result.
func reformats(sql string) []string {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return []string{sql}
	}
	var out []string
	add := func(t *pg_query.ParseResult, lower bool) {
		s, err := pg_query.Deparse(t)
		if err != nil {
			return
		}
		if lower {
			s = lowerKeywords(s)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	add(tree, false)
	swapped := proto.Clone(tree).(*pg_query.ParseResult)
	swapJoins(swapped)
	add(swapped, true)
	if aliased := proto.Clone(tree).(*pg_query.ParseResult); aliasTables(aliased) {
		swapJoins(aliased)
		add(aliased, false)
	}
	return out
}

// swapJoins swaps the sides of inner joins with an ON condition.
func swapJoins(tree *pg_query.ParseResult) {
	walk(tree.ProtoReflect(), func(m protoreflect.Message) bool {
		if j, ok := m.Interface().(*pg_query.JoinExpr); ok && j.Jointype == pg_query.JoinType_JOIN_INNER && j.Quals != nil && len(j.UsingClause) == 0 && !j.IsNatural {
			j.Larg, j.Rarg = j.Rarg, j.Larg
		}
		return true
	})
}

// aliasTables gives every table of a query without subqueries a short
// alias and rewrites its qualified columns; false when the query is not
// that simple.
func aliasTables(tree *pg_query.ParseResult) bool {
	simple := true
	count := map[string]int{}
	walk(tree.ProtoReflect(), func(m protoreflect.Message) bool {
		switch n := m.Interface().(type) {
		case *pg_query.SubLink, *pg_query.RangeSubselect, *pg_query.WithClause:
			simple = false
		case *pg_query.RangeVar:
			if n.Alias != nil {
				simple = false
			}
			count[strings.ToLower(n.Relname)]++
		}
		return simple
	})
	if !simple || len(count) == 0 {
		return false
	}
	for _, c := range count {
		if c > 1 {
			return false
		}
	}
	alias := map[string]string{}
	i := 0
	walk(tree.ProtoReflect(), func(m protoreflect.Message) bool {
		if rv, ok := m.Interface().(*pg_query.RangeVar); ok {
			i++
			a := fmt.Sprintf("t%d", i)
			alias[strings.ToLower(rv.Relname)] = a
			rv.Alias = &pg_query.Alias{Aliasname: a}
		}
		return true
	})
	walk(tree.ProtoReflect(), func(m protoreflect.Message) bool {
		if cr, ok := m.Interface().(*pg_query.ColumnRef); ok && len(cr.Fields) == 2 {
			if s := cr.Fields[0].GetString_(); s != nil {
				if a, ok := alias[strings.ToLower(s.Sval)]; ok {
					cr.Fields[0] = pg_query.MakeStrNode(a)
				}
			}
		}
		return true
	})
	return true
}

var keywords = map[string]bool{"SELECT": true, "FROM": true, "WHERE": true, "JOIN": true, "ON": true, "AND": true, "OR": true,
	"GROUP": true, "BY": true, "ORDER": true, "HAVING": true, "LIMIT": true, "AS": true, "DESC": true, "ASC": true, "DISTINCT": true,
	"LEFT": true, "INNER": true, "IN": true, "NOT": true, "NULL": true, "IS": true, "NULLS": true, "LAST": true, "FIRST": true, "CASE": true,
	"WHEN": true, "THEN": true, "ELSE": true, "END": true, "LIKE": true, "ILIKE": true, "BETWEEN": true, "EXISTS": true, "CAST": true}

// lowerKeywords lower-cases SQL keywords outside quotes.
func lowerKeywords(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(s) {
				if s[j] == c {
					if j+1 < len(s) && s[j+1] == c {
						j += 2
						continue
					}
					break
				}
				j++
			}
			end := min(j+1, len(s))
			b.WriteString(s[i:end])
			i = end
		case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '_':
			j := i
			for j < len(s) && (s[j] >= 'A' && s[j] <= 'Z' || s[j] >= 'a' && s[j] <= 'z' || s[j] == '_' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			w := s[i:j]
			if keywords[w] {
				w = strings.ToLower(w)
			}
			b.WriteString(w)
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}
