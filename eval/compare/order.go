package compare

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// OrderKeys finds the result columns the outermost ORDER BY of sql sorts on:
// a column reference is matched with the result's column names, a position
// (ORDER BY 2) with that column, any other expression with the select-list
// item that spells it the same. ok is false when some key cannot be placed
// (sorting by a column not in the result): then ties are unknown and every
// row keeps its place.
func OrderKeys(sql string, columns []string) (keys []int, ok bool) {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) == 0 {
		return nil, false
	}
	sel := tree.Stmts[len(tree.Stmts)-1].Stmt.GetSelectStmt()
	if sel == nil || len(sel.SortClause) == 0 {
		return nil, false
	}
	for _, n := range sel.SortClause {
		sb := n.GetSortBy()
		if sb == nil {
			return nil, false
		}
		k := orderKey(sb.Node, sel.TargetList, columns)
		if k < 0 {
			return nil, false
		}
		keys = append(keys, k)
	}
	return keys, true
}

func orderKey(n *pg_query.Node, targets []*pg_query.Node, columns []string) int {
	if c := n.GetAConst(); c != nil && c.GetIval() != nil {
		if i := int(c.GetIval().Ival) - 1; i >= 0 && i < len(columns) {
			return i
		}
		return -1
	}
	if cr := n.GetColumnRef(); cr != nil && len(cr.Fields) > 0 {
		name := cr.Fields[len(cr.Fields)-1].GetString_().GetSval()
		// An output name (alias) first, as Postgres resolves ORDER BY.
		if len(cr.Fields) == 1 {
			for i, c := range columns {
				if strings.EqualFold(c, name) {
					return i
				}
			}
		}
	}
	// The same expression in the select list.
	want := stripLocations(n)
	for i, t := range targets {
		rt := t.GetResTarget()
		if rt == nil || i >= len(columns) {
			continue
		}
		if proto.Equal(want, stripLocations(rt.Val)) {
			return i
		}
	}
	// A qualified column (ORDER BY t.name) whose column is in the result.
	if cr := n.GetColumnRef(); cr != nil && len(cr.Fields) > 1 {
		name := cr.Fields[len(cr.Fields)-1].GetString_().GetSval()
		for i, c := range columns {
			if strings.EqualFold(c, name) {
				return i
			}
		}
	}
	return -1
}

// stripLocations returns a copy of n with every location field zeroed, so
// equal expressions written in different places compare equal.
func stripLocations(n *pg_query.Node) proto.Message {
	if n == nil {
		return nil
	}
	c := proto.Clone(n)
	zeroLocations(c.ProtoReflect())
	return c
}

func zeroLocations(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Name() == "location" && fd.Kind() == protoreflect.Int32Kind:
			m.Clear(fd)
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				zeroLocations(l.Get(i).Message())
			}
		case fd.IsMap():
		case fd.Kind() == protoreflect.MessageKind:
			zeroLocations(v.Message())
		}
		return true
	})
}
