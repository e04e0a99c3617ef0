package guard

import (
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// Names is how the asking session resolves names, read from that session at
// ask time (its search_path, the catalog's relations on it). Seal writes each
// relation, type and allowed user function qualified as the session would
// have found it, so the sealed statement means the same under the pinned
// search_path of every Scope, whatever the session's search_path and
// temporary objects are.
type Names interface {
	// Relation is the schema of the relation called name (as folded) that
	// the asker's search_path finds first; "" when none is known.
	Relation(name string) string
	// Type is the schema of the user-defined type called name that the
	// asker's search_path finds first; "" when none (pg_catalog's is meant).
	Type(name string) string
	// Function is the schema of the first user function called name on the
	// asker's search_path; "" when none.
	Function(name string) string
	// Unsafe says why values of the relation or type schema.name would make
	// the server run code the guard cannot judge (a cast, a domain check or
	// type I/O calling a user-defined or volatile function); "" when none.
	Unsafe(schema, name string) string
}

// SearchPath is a Names for callers that know only a fixed list of schemas
// (tools, tests): an unqualified relation is taken to be in the first one
// (or pg_catalog for pg_* names); types and functions are pg_catalog's;
// nothing is unsafe.
type SearchPath []string

// Relation implements Names.
func (p SearchPath) Relation(name string) string {
	if len(p) == 0 || strings.HasPrefix(name, "pg_") {
		return ""
	}
	return p[0]
}

// Type implements Names.
func (SearchPath) Type(string) string { return "" }

// Function implements Names.
func (SearchPath) Function(string) string { return "" }

// Unsafe implements Names.
func (SearchPath) Unsafe(string, string) string { return "" }

// isTempSchema reports whether schema is a session's temporary schema (or
// its TOAST twin): objects there belong to the session, which may have made
// them to stand in for others.
func isTempSchema(schema string) bool {
	s := strings.ToLower(schema)
	return strings.HasPrefix(s, "pg_temp") || strings.HasPrefix(s, "pg_toast_temp")
}

// cteRefs returns the RangeVars of tree that name a common table expression
// in scope where they stand, as Postgres scopes them: a CTE is visible in
// its statement's body and in later CTEs of the same WITH, and in itself
// and all of its siblings under WITH RECURSIVE. Every other unqualified
// RangeVar is a relation, and Seal qualifies it.
func cteRefs(m protoreflect.Message) map[*pg_query.RangeVar]bool {
	out := map[*pg_query.RangeVar]bool{}
	var walk func(m protoreflect.Message, scope []string)
	walkFields := func(m protoreflect.Message, scope []string, skip protoreflect.Name) {
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd.Message() == nil || fd.IsMap() || fd.Name() == skip {
				return true
			}
			if fd.IsList() {
				l := v.List()
				for i := 0; i < l.Len(); i++ {
					walk(l.Get(i).Message(), scope)
				}
			} else {
				walk(v.Message(), scope)
			}
			return true
		})
	}
	walk = func(m protoreflect.Message, scope []string) {
		switch n := m.Interface().(type) {
		case *pg_query.RangeVar:
			if n.GetSchemaname() == "" {
				for _, s := range scope {
					if s == n.GetRelname() {
						out[n] = true
						break
					}
				}
			}
			return
		case *pg_query.SelectStmt:
			wc := n.GetWithClause()
			if wc == nil {
				break
			}
			var names []string
			for _, c := range wc.GetCtes() {
				names = append(names, c.GetCommonTableExpr().GetCtename())
			}
			for i, c := range wc.GetCtes() {
				inner := append(scope[:len(scope):len(scope)], names[:i]...)
				if wc.GetRecursive() {
					inner = append(scope[:len(scope):len(scope)], names...)
				}
				if q := c.GetCommonTableExpr().GetCtequery(); q != nil {
					walk(q.ProtoReflect(), inner)
				}
			}
			walkFields(m, append(scope[:len(scope):len(scope)], names...), "with_clause")
			return
		}
		walkFields(m, scope, "")
	}
	walk(m, nil)
	return out
}

// qualifyNames writes the schema into every relation and type name of c's
// tree, and into calls of allowed user functions, from opts.Names (nil:
// pg_catalog), and refuses what resolution shows to be unsafe. It runs on
// the checked tree before Seal deparses it.
func qualifyNames(c *Checked, opts *Options) error {
	refs := cteRefs(c.tree.ProtoReflect())
	names := opts.Names
	var tables []tableAt
	var walk func(m protoreflect.Message) error
	walk = func(m protoreflect.Message) error {
		switch n := m.Interface().(type) {
		case *pg_query.RangeVar:
			if refs[n] {
				return nil
			}
			if n.GetSchemaname() == "" {
				schema := ""
				if names != nil {
					schema = names.Relation(n.GetRelname())
				}
				if schema == "" {
					schema = "pg_catalog"
				}
				n.Schemaname = schema
			}
			if err := unsafeName(names, n.GetSchemaname(), n.GetRelname(), "relation", int(n.GetLocation())); err != nil {
				return err
			}
			tables = append(tables, tableAt{TableRef{Schema: n.GetSchemaname(), Name: n.GetRelname(), Alias: n.GetAlias().GetAliasname()}, n.GetLocation()})
		case *pg_query.TypeName:
			parts := stringList(n.GetNames())
			if len(parts) == 1 {
				schema := ""
				if names != nil {
					schema = names.Type(parts[0])
				}
				if schema == "" {
					schema = "pg_catalog"
				}
				n.Names = append([]*pg_query.Node{pg_query.MakeStrNode(schema)}, n.Names...)
				parts = append([]string{schema}, parts...)
			}
			if len(parts) >= 2 {
				if err := unsafeName(names, parts[len(parts)-2], parts[len(parts)-1], "type", int(n.GetLocation())); err != nil {
					return err
				}
			}
		}
		return eachChild(m, walk)
	}
	if err := walk(c.tree.ProtoReflect()); err != nil {
		return err
	}
	// The sealed statement's tables are the relations it reads, qualified.
	c.Tables = (&walker{tables: tables, ctes: map[string]bool{}}).tableRefs()
	for _, fc := range c.userCalls {
		parts := stringList(fc.GetFuncname())
		schema := ""
		if names != nil {
			schema = names.Function(parts[0])
		}
		if schema == "" {
			continue // not the session's: the pinned search_path finds pg_catalog's or none
		}
		fc.Funcname = append([]*pg_query.Node{pg_query.MakeStrNode(schema)}, fc.Funcname...)
	}
	return nil
}

// unsafeName refuses temporary objects and what Names says is unsafe.
func unsafeName(names Names, schema, name, what string, loc int) error {
	if isTempSchema(schema) {
		return &RejectError{Reason: fmt.Sprintf("%s %s.%s is a temporary object of the session", what, schema, name), Code: pg.CodeInsufficientPrivilege, Position: loc + 1}
	}
	if names == nil {
		return nil
	}
	if why := names.Unsafe(schema, name); why != "" {
		return &RejectError{Reason: fmt.Sprintf("%s %s.%s is not allowed: %s", what, schema, name, why), Code: pg.CodeInsufficientPrivilege, Position: loc + 1}
	}
	return nil
}
