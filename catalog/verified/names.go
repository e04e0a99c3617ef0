package verified

import (
	"fmt"
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nlproxy/nlproxy/catalog"
)

// Names checks the relations and columns a drafted statement names against
// the catalog: what the catalog role saw (Schema) and, when Visible is set,
// what the role the suggestion would be for may read. It resolves names by
// the catalog's own data only; it runs nothing.
type Names struct {
	Schema *catalog.Schema
	// Visible is the part of Schema a role may read; nil leaves privileges
	// unchecked. Called once per role.
	Visible func(role string) (*catalog.Schema, error)
	// SearchPath resolves unqualified relations (default: public).
	SearchPath []string

	visible map[string]visibleOf
}

type visibleOf struct {
	s   *catalog.Schema
	err error
}

// Check says why sql cannot be suggested for role ("" for a workload
// query: any role that may read it), or "" when every name resolves: a
// relation or column that no longer exists, or one role may not read.
func (n *Names) Check(role, sql string) string {
	if n == nil || n.Schema == nil {
		return ""
	}
	r, err := namesOf(sql)
	if err != nil {
		return "it does not parse: " + err.Error()
	}
	path := n.SearchPath
	if len(path) == 0 {
		path = []string{"public"}
	}
	var vis *catalog.Schema
	if role != "" && n.Visible != nil {
		if n.visible == nil {
			n.visible = map[string]visibleOf{}
		}
		v, ok := n.visible[role]
		if !ok {
			v.s, v.err = n.Visible(role)
			n.visible[role] = v
		}
		if v.err != nil {
			return fmt.Sprintf("what role %s may read is unknown (%v)", role, v.err)
		}
		vis = v.s
	}
	// Each relation it reads, by its name and alias.
	tables := map[string][]*catalog.Table{} // alias or name → tables
	var all []*catalog.Table
	for _, rv := range r.rels {
		if rv.schema == "" && r.ctes[rv.name] {
			continue
		}
		name := rv.name
		if rv.schema != "" {
			name = rv.schema + "." + rv.name
		}
		t := n.Schema.TableOnPath(name, path)
		// Unqualified, it must be on the path (TableOnPath falls back to
		// any schema).
		if t == nil || (rv.schema != "" && t.Schema != rv.schema) || (rv.schema == "" && !slices.Contains(path, t.Schema)) {
			return fmt.Sprintf("relation %s does not exist", name)
		}
		if vis != nil && vis.Table(t.Schema+"."+t.Name) == nil {
			return fmt.Sprintf("role %s may not read %s.%s", role, t.Schema, t.Name)
		}
		all = append(all, t)
		for _, k := range []string{rv.alias, rv.name, t.Schema + "." + t.Name} {
			if k != "" && !slices.Contains(tables[k], t) {
				tables[k] = append(tables[k], t)
			}
		}
	}
	has := func(ts []*catalog.Table, col string) (exists, readable bool) {
		for _, t := range ts {
			if t.Column(col) == nil {
				continue
			}
			exists = true
			if vis == nil {
				return true, true
			}
			if vt := vis.Table(t.Schema + "." + t.Name); vt != nil && vt.Column(col) != nil {
				return true, true
			}
		}
		return exists, false
	}
	for _, c := range r.cols {
		var ts []*catalog.Table
		switch len(c) {
		case 1:
			// A bare name may be an output name, or a column of a
			// subquery, a function or a CTE, whose columns are not the
			// catalog's: only a statement reading tables alone is judged.
			if r.outputs[c[0]] || r.opaque {
				continue
			}
			ts = all
		default:
			q := strings.Join(c[:len(c)-1], ".")
			if r.derived[q] || (len(c) == 2 && r.ctes[q]) {
				continue
			}
			var ok bool
			if ts, ok = tables[q]; !ok {
				continue // a composite value's field, not a relation's column
			}
		}
		col := c[len(c)-1]
		exists, readable := has(ts, col)
		switch {
		case !exists:
			return fmt.Sprintf("column %s does not exist", strings.Join(c, "."))
		case !readable:
			return fmt.Sprintf("role %s may not read column %s", role, strings.Join(c, "."))
		}
	}
	return ""
}

// stmtNames are the names a statement uses.
type stmtNames struct {
	rels    []relName
	cols    [][]string      // column references, as written
	outputs map[string]bool // output column names (ORDER BY may use them)
	ctes    map[string]bool
	derived map[string]bool // aliases of subqueries and functions in FROM
	opaque  bool            // it reads a subquery, a function or a CTE
}

type relName struct{ schema, name, alias string }

// namesOf parses sql (a normalised statement: $n for each literal) and
// collects its names.
func namesOf(sql string) (*stmtNames, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return nil, err
	}
	out := &stmtNames{outputs: map[string]bool{}, ctes: map[string]bool{}, derived: map[string]bool{}}
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		switch v := m.Interface().(type) {
		case *pg_query.RangeVar:
			rv := relName{schema: v.GetSchemaname(), name: v.GetRelname()}
			if v.GetAlias() != nil {
				rv.alias = v.GetAlias().GetAliasname()
			}
			out.rels = append(out.rels, rv)
		case *pg_query.ColumnRef:
			var parts []string
			for _, f := range v.GetFields() {
				if s := f.GetString_(); s != nil {
					parts = append(parts, s.GetSval())
				} else {
					parts = nil // a star
					break
				}
			}
			if len(parts) > 0 {
				out.cols = append(out.cols, parts)
			}
		case *pg_query.ResTarget:
			if v.GetName() != "" {
				out.outputs[v.GetName()] = true
			}
		case *pg_query.CommonTableExpr:
			out.ctes[v.GetCtename()] = true
			out.opaque = true
		case *pg_query.RangeSubselect:
			out.opaque = true
			if v.GetAlias() != nil {
				out.derived[v.GetAlias().GetAliasname()] = true
			}
		case *pg_query.RangeFunction:
			out.opaque = true
			if v.GetAlias() != nil {
				out.derived[v.GetAlias().GetAliasname()] = true
			}
		}
		m.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := 0; i < val.List().Len(); i++ {
					walk(val.List().Get(i).Message())
				}
			case fd.Message() != nil && !fd.IsMap():
				walk(val.Message())
			}
			return true
		})
	}
	walk(proto.Message(tree).ProtoReflect())
	return out, nil
}
