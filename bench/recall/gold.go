package main

import (
	"fmt"
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nlproxy/nlproxy/eval/compare"
	"github.com/nlproxy/nlproxy/guard"
)

// goldTableSets lists, for each accepted alternative of a gold "query"
// field (compare.Alternatives: ';'-separated statements, `{}` column sets
// expanded), the relations it reads; alternatives that differ only in
// their columns read the same tables and are listed once.
func goldTableSets(query string) ([][]string, error) {
	alts := compare.Alternatives(query)
	if len(alts) == 0 {
		return nil, fmt.Errorf("no statement in %q", query)
	}
	var out [][]string
	for _, alt := range alts {
		ts, err := goldTables(alt)
		if err != nil {
			return nil, fmt.Errorf("gold %q: %w", alt, err)
		}
		if !slices.ContainsFunc(out, func(o []string) bool { return slices.Equal(o, ts) }) {
			out = append(out, ts)
		}
	}
	return out, nil
}

// goldTables lists the relations one statement reads (lower-case names as
// the parser folds them), without the names its CTEs define.
func goldTables(sql string) ([]string, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return nil, err
	}
	var rels, ctes []string
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		switch n := m.Interface().(type) {
		case *pg_query.RangeVar:
			rels = append(rels, n.Relname)
		case *pg_query.CommonTableExpr:
			ctes = append(ctes, n.Ctename)
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd.Message() == nil || fd.IsMap() {
				return true
			}
			if fd.IsList() {
				l := v.List()
				for i := 0; i < l.Len(); i++ {
					walk(l.Get(i).Message())
				}
				return true
			}
			walk(v.Message())
			return true
		})
	}
	walk(tree.ProtoReflect())
	var out []string
	for _, r := range rels {
		if !slices.Contains(ctes, r) && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out, nil
}

// goldLiteral is a string constant the gold SQL compares a column with.
type goldLiteral struct {
	Column string
	Value  string // LIKE patterns without their % and _ wildcards at the ends
	Like   bool
}

// goldLiterals lists the string literals compared with columns in sql.
func goldLiterals(sql string) ([]goldLiteral, error) {
	lits, err := guard.Literals(sql)
	if err != nil {
		return nil, err
	}
	var out []goldLiteral
	for _, l := range lits {
		g := goldLiteral{Column: l.Column, Value: l.Value}
		if strings.Contains(l.Op, "LIKE") {
			g.Like = true
			g.Value = strings.Trim(l.Value, "%_")
			if strings.ContainsAny(g.Value, "%_") {
				continue // an inner wildcard is no stored value
			}
		}
		if strings.TrimSpace(g.Value) != "" {
			out = append(out, g)
		}
	}
	return out, nil
}
