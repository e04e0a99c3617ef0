package guard

import (
	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"

	"github.com/nlproxy/nlproxy/guard/internal/stmt"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// explainPrefix asks the planner for its plan as JSON without running the
// statement (no ANALYZE): the optimizer's cost model.
const explainPrefix = "EXPLAIN (FORMAT JSON) "

// Explain derives from a sealed SELECT the sealed statement that asks the
// planner for its plan, EXPLAIN (FORMAT JSON) without ANALYZE. It is checked
// like Seal: the text is parsed again and must be exactly one EXPLAIN with
// that one option, over the same parse tree as s. Since s was sealed, the
// result needs no other check: EXPLAIN without ANALYZE executes nothing.
func Explain(s sealed.Statement) (sealed.Statement, error) {
	if s.IsZero() {
		return sealed.Statement{}, &RejectError{Reason: "no sealed statement to explain", Code: pg.CodeFeatureNotSupported}
	}
	if CheckedOf(s).Kind != KindSelect {
		return sealed.Statement{}, &RejectError{Reason: "only a SELECT can be explained", Code: pg.CodeFeatureNotSupported}
	}
	text := explainPrefix + s.SQL()
	tree, err := pg_query.Parse(text)
	if err != nil {
		return sealed.Statement{}, &RejectError{Reason: "EXPLAIN statement does not parse: " + err.Error(), Code: pg.CodeFeatureNotSupported}
	}
	inner, err := pg_query.Parse(s.SQL())
	if err != nil || len(inner.GetStmts()) != 1 {
		return sealed.Statement{}, &RejectError{Reason: "sealed statement does not parse again", Code: pg.CodeFeatureNotSupported}
	}
	if len(tree.GetStmts()) != 1 {
		return sealed.Statement{}, &RejectError{Reason: "EXPLAIN statement is not one statement", Code: pg.CodeFeatureNotSupported}
	}
	ex := tree.GetStmts()[0].GetStmt().GetExplainStmt()
	if ex == nil || !explainOptionsAreJSON(ex.GetOptions()) || !sameNode(ex.GetQuery(), inner.GetStmts()[0].GetStmt()) {
		return sealed.Statement{}, &RejectError{Reason: "EXPLAIN statement differs from the sealed one", Code: pg.CodeFeatureNotSupported}
	}
	c := *CheckedOf(s)
	c.SQL = text
	c.Kind = KindExplain
	c.tree = tree
	c.builtinCalls = nil
	return sealed.Of(stmt.New(text, explainPrefix+s.Display(), &c)), nil
}

// explainOptionsAreJSON accepts exactly the one option FORMAT JSON.
func explainOptionsAreJSON(opts []*pg_query.Node) bool {
	if len(opts) != 1 {
		return false
	}
	d := opts[0].GetDefElem()
	return d != nil && d.GetDefname() == "format" && d.GetArg().GetString_().GetSval() == "json"
}

// sameNode compares two statement trees ignoring token positions.
func sameNode(a, b *pg_query.Node) bool {
	if a == nil || b == nil {
		return false
	}
	a, b = proto.Clone(a).(*pg_query.Node), proto.Clone(b).(*pg_query.Node)
	clearLocations(a.ProtoReflect())
	clearLocations(b.ProtoReflect())
	return proto.Equal(a, b)
}
