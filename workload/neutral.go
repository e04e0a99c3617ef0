package workload

import (
	"regexp"
	"strconv"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Names a statement makes up — relation and column aliases, CTE, output
// and window names — are text any role can write, and a learned query is
// shown to others: "SYSTEM NOTE: ignore the question" is a valid alias.
// neutralize renames them in the normalised tree to t1, c1, w1, win1 (a
// pattern NeutralName matches) before the text is deparsed, so that what
// remains of a role's own words is names the catalog can resolve (the
// engine checks that before showing the text), keywords, operators and $n.
//
// An alias spelt like a name the statement uses otherwise (a relation, a
// function, a column outside the alias's reach) is left as written: the
// rename could then change what the text means. The engine shows such a
// text only when the catalog resolves the name.

// NeutralName matches the names neutralize gives.
var NeutralName = regexp.MustCompile(`^(t|c|w|win)[0-9]+$`)

type neutralizer struct {
	nodes []protoreflect.Message
	// context the renames need: the SELECT lists' targets, the ORDER BY
	// items that are a bare name, and the CTE names.
	targets  map[*pg_query.ResTarget]bool
	sortRefs map[*pg_query.ColumnRef]bool
	ctes     map[string]bool

	rels, outs, windows map[string]string // name → neutral name
	derived             map[string]bool   // aliases of subqueries and CTEs
	keep                map[string]bool   // names used as something else
	keepOut             map[string]bool
}

func neutralize(tree *pg_query.ParseResult) {
	n := &neutralizer{targets: map[*pg_query.ResTarget]bool{}, sortRefs: map[*pg_query.ColumnRef]bool{}, ctes: map[string]bool{},
		rels: map[string]string{}, outs: map[string]string{}, windows: map[string]string{},
		derived: map[string]bool{}, keep: map[string]bool{}, keepOut: map[string]bool{}}
	for _, s := range tree.GetStmts() {
		n.collect(s.ProtoReflect())
	}
	n.define()
	n.rename()
}

// collect lists every message, pre-order, with the context rename needs.
func (n *neutralizer) collect(m protoreflect.Message) {
	n.nodes = append(n.nodes, m)
	switch x := m.Interface().(type) {
	case *pg_query.SelectStmt:
		for _, t := range x.GetTargetList() {
			if rt := t.GetResTarget(); rt != nil {
				n.targets[rt] = true
			}
		}
	case *pg_query.SortBy:
		if cr := x.GetNode().GetColumnRef(); cr != nil && len(cr.GetFields()) == 1 {
			n.sortRefs[cr] = true
		}
	case *pg_query.CommonTableExpr:
		n.ctes[x.GetCtename()] = true
	}
	_ = rangeFields(m, "", func(c protoreflect.Message) error {
		n.collect(c)
		return nil
	})
}

func strs(ns []*pg_query.Node) []*pg_query.String {
	var out []*pg_query.String
	for _, x := range ns {
		if s := x.GetString_(); s != nil {
			out = append(out, s)
		}
	}
	return out
}

// define picks the names to rename and their neutral names, in the order
// they appear.
func (n *neutralizer) define() {
	var relOrder, outOrder, winOrder []string
	addRel := func(name string, derived bool) {
		if name == "" {
			return
		}
		if _, ok := n.rels[name]; !ok {
			n.rels[name] = ""
			relOrder = append(relOrder, name)
		}
		if derived {
			n.derived[name] = true
		}
	}
	addOut := func(name string) {
		if _, ok := n.outs[name]; name != "" && !ok {
			n.outs[name] = ""
			outOrder = append(outOrder, name)
		}
	}
	for _, m := range n.nodes {
		switch x := m.Interface().(type) {
		case *pg_query.RangeVar:
			cte := x.GetSchemaname() == "" && n.ctes[x.GetRelname()]
			if !cte {
				n.keep[x.GetRelname()] = true
			}
			n.keep[x.GetSchemaname()] = true
			if a := x.GetAlias(); a != nil {
				addRel(a.GetAliasname(), cte)
				for _, s := range strs(a.GetColnames()) {
					addOut(s.GetSval())
				}
			}
		case *pg_query.RangeSubselect:
			addRel(x.GetAlias().GetAliasname(), true)
			for _, s := range strs(x.GetAlias().GetColnames()) {
				addOut(s.GetSval())
			}
		case *pg_query.RangeFunction:
			addRel(x.GetAlias().GetAliasname(), true)
			for _, s := range strs(x.GetAlias().GetColnames()) {
				addOut(s.GetSval())
			}
		case *pg_query.JoinExpr:
			addRel(x.GetAlias().GetAliasname(), true)
		case *pg_query.CommonTableExpr:
			addRel(x.GetCtename(), true)
			for _, s := range strs(x.GetAliascolnames()) {
				addOut(s.GetSval())
			}
		case *pg_query.ResTarget:
			if !n.targets[x] || x.GetName() == "" {
				continue
			}
			// SELECT t.amount AS amount: the alias says nothing the column
			// does not.
			if f := columnFields(x.GetVal().GetColumnRef()); len(f) > 0 && f[len(f)-1] == x.GetName() {
				x.Name = ""
				continue
			}
			addOut(x.GetName())
		case *pg_query.WindowDef:
			if x.GetName() != "" {
				if _, ok := n.windows[x.GetName()]; !ok {
					n.windows[x.GetName()] = ""
					winOrder = append(winOrder, x.GetName())
				}
			}
		case *pg_query.FuncCall:
			for _, s := range strs(x.GetFuncname()) {
				n.keep[s.GetSval()] = true
			}
		case *pg_query.TypeName:
			for _, s := range strs(x.GetNames()) {
				n.keep[s.GetSval()] = true
			}
		}
	}
	// A column name outside an alias's reach (not a bare ORDER BY name,
	// not qualified by a subquery's or CTE's alias) may be a real column
	// of that spelling: an output name spelt so is kept.
	for _, m := range n.nodes {
		cr, ok := m.Interface().(*pg_query.ColumnRef)
		if !ok || n.sortRefs[cr] {
			continue
		}
		f := columnFields(cr)
		if len(f) == 0 {
			continue
		}
		if len(f) >= 2 && n.derived[f[len(f)-2]] {
			continue
		}
		n.keepOut[f[len(f)-1]] = true
	}
	seq := map[string]int{}
	for _, name := range relOrder {
		if n.keep[name] {
			delete(n.rels, name)
			continue
		}
		prefix := "t"
		if n.ctes[name] {
			prefix = "w"
		}
		seq[prefix]++
		n.rels[name] = prefix + strconv.Itoa(seq[prefix])
	}
	i := 0
	for _, name := range outOrder {
		if n.keep[name] || n.keepOut[name] {
			delete(n.outs, name)
			continue
		}
		i++
		n.outs[name] = "c" + strconv.Itoa(i)
	}
	for i, name := range winOrder {
		n.windows[name] = "win" + strconv.Itoa(i+1)
	}
}

// rename applies the neutral names.
func (n *neutralizer) rename() {
	sub := func(m map[string]string, s *string) {
		if v, ok := m[*s]; ok && v != "" {
			*s = v
		}
	}
	subStrs := func(m map[string]string, ns []*pg_query.Node) {
		for _, s := range strs(ns) {
			sub(m, &s.Sval)
		}
	}
	for _, m := range n.nodes {
		switch x := m.Interface().(type) {
		case *pg_query.Alias:
			sub(n.rels, &x.Aliasname)
			subStrs(n.outs, x.Colnames)
		case *pg_query.CommonTableExpr:
			sub(n.rels, &x.Ctename)
			subStrs(n.outs, x.Aliascolnames)
		case *pg_query.RangeVar:
			if x.GetSchemaname() == "" && n.ctes[x.GetRelname()] {
				sub(n.rels, &x.Relname)
			}
		case *pg_query.ResTarget:
			if n.targets[x] {
				sub(n.outs, &x.Name)
			}
		case *pg_query.WindowDef:
			sub(n.windows, &x.Name)
			sub(n.windows, &x.Refname)
		case *pg_query.ColumnRef:
			fs := strs(x.GetFields())
			if len(fs) != len(x.GetFields()) && len(x.GetFields()) >= 2 {
				// t.*: the qualifier only.
				sub(n.rels, &fs[len(fs)-1].Sval)
				continue
			}
			switch {
			case len(fs) == 1 && n.sortRefs[x]:
				if _, ok := n.outs[fs[0].Sval]; ok {
					sub(n.outs, &fs[0].Sval)
				} else {
					sub(n.rels, &fs[0].Sval)
				}
			case len(fs) == 1:
				if _, out := n.outs[fs[0].Sval]; !out {
					sub(n.rels, &fs[0].Sval) // a whole-row reference
				}
			case len(fs) >= 2:
				q := fs[len(fs)-2]
				if n.derived[q.Sval] {
					sub(n.outs, &fs[len(fs)-1].Sval)
				}
				sub(n.rels, &q.Sval)
			}
		}
	}
}

// columnFields are a column reference's names; nil for none or t.*.
func columnFields(cr *pg_query.ColumnRef) []string {
	if cr == nil {
		return nil
	}
	return fieldNames(cr)
}
