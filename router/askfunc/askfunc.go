// Package askfunc reads and rewrites the table-function form of an ask
// with pg_query. The relay links no SQL parser (it builds without cgo): it
// finds the form's cheap hint itself and asks the translator, through
// proxy.AskFuncParser, to parse; router.Translator does so with this package.
package askfunc

import (
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// The table-function form: an ask written as valid SQL, so that SQL editors,
// ORMs and BI tools that parse or wrap statements keep it intact.
//
//	SELECT * FROM nlproxy.ask('how many orders?')
//	SELECT * FROM nlproxy.ask('top customers', profile => 'max') t WHERE t.total > 10
//	SELECT * FROM nlproxy.ask_sql('revenue by month')
//	SELECT * FROM nlproxy.optimize('SELECT ... FROM orders ...')
//
// The call may be any FROM item of the statement (inside subqueries and
// joins too); the answer takes its place as a subquery and the whole
// statement is then checked and sealed as one (see Embed).

// askSchema is the schema the functions are written in. It need not exist
// upstream: the proxy answers the call itself.
const askSchema = "nlproxy"

// isFunction says whether name is one of the nlproxy.* functions the proxy
// answers.
func isFunction(name string) bool {
	switch name {
	case "ask", "ask_sql", "optimize":
		return true
	}
	return false
}

// askCall is the nlproxy.* call found in a statement.
type askCall struct {
	rf   *pg_query.Node // the RangeFunction node holding the call
	name string         // ask, ask_sql or optimize
}

// Call is the ask a statement holds in the table-function form.
type Call struct {
	// Function is ask, ask_sql or optimize; "" when the statement misuses
	// the functions before naming one of them (Err says how).
	Function string
	Question string
	// Profile is the profile argument, lower-cased; "" when none.
	Profile string
	// Err, when set, is why the ask fails: the functions are misused.
	Err *pg.Error
}

// Find parses a statement that may hold the table-function form and
// returns the ask it holds. ok is false when the statement does not parse,
// or names no nlproxy.* function (Postgres answers it as it would). Misuse
// of the functions is a Call whose Err says what is wrong.
func Find(sql string) (c Call, ok bool) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return Call{}, false
	}
	call, args, perr := locateAskCall(tree)
	if perr == nil && call == nil {
		return Call{}, false
	}
	if call != nil {
		c.Function = call.name
	}
	if perr == nil && len(tree.Stmts) != 1 {
		perr = askFuncError(pg.CodeFeatureNotSupported, "nlproxy.%s() must be in a statement of its own, not one of %d", call.name, len(tree.Stmts))
	}
	if perr == nil {
		c.Question, c.Profile, perr = askArguments(call.name, args)
	}
	c.Err = perr
	return c, true
}

func askFuncError(code, format string, a ...any) *pg.Error {
	return &pg.Error{Severity: "ERROR", Code: code, Message: "nlproxy: " + fmt.Sprintf(format, a...),
		Hint: "Write the ask as a table in FROM with a string constant: SELECT * FROM nlproxy.ask('how many orders are open?'); see docs/asking.md."}
}

// locateAskCall finds the one nlproxy.* call of a parsed statement and its
// arguments; a call anywhere but as a FROM item, a second call, or an
// unknown nlproxy.* function is an error.
func locateAskCall(tree *pg_query.ParseResult) (*askCall, []*pg_query.Node, *pg.Error) {
	var (
		found    *askCall
		args     []*pg_query.Node
		inFrom   = map[*pg_query.FuncCall]bool{}
		problem  *pg.Error
		allCalls []*pg_query.FuncCall
	)
	walkNodes(tree.ProtoReflect(), func(n *pg_query.Node) {
		switch v := n.Node.(type) {
		case *pg_query.Node_FuncCall:
			if askSchemaCall(v.FuncCall) {
				allCalls = append(allCalls, v.FuncCall)
			}
		case *pg_query.Node_RangeFunction:
			rf := v.RangeFunction
			for _, item := range rf.GetFunctions() {
				fc := item.GetList().GetItems()
				if len(fc) == 0 || fc[0].GetFuncCall() == nil || !askSchemaCall(fc[0].GetFuncCall()) {
					continue
				}
				call := fc[0].GetFuncCall()
				inFrom[call] = true
				name := funcName(call)
				switch {
				case problem != nil:
				case !isFunction(name):
					problem = &pg.Error{Severity: "ERROR", Code: pg.CodeUndefinedFunction, Message: "nlproxy: there is no function nlproxy." + name + "()",
						Hint: "The proxy answers nlproxy.ask(), nlproxy.ask_sql() and nlproxy.optimize(); see docs/asking.md."}
				case found != nil:
					problem = askFuncError(pg.CodeFeatureNotSupported, "one nlproxy.* call per statement is allowed")
				case rf.GetIsRowsfrom() || len(rf.GetFunctions()) > 1 || rf.GetOrdinality() || len(rf.GetColdeflist()) > 0 || len(fc) > 1 && fc[1] != nil && len(fc[1].GetList().GetItems()) > 0:
					problem = askFuncError(pg.CodeFeatureNotSupported, "nlproxy.%s() cannot be used with ROWS FROM, WITH ORDINALITY or a column definition list", name)
				default:
					found, args = &askCall{rf: n, name: name}, call.GetArgs()
				}
			}
		}
	})
	if problem != nil {
		return found, nil, problem
	}
	for _, c := range allCalls {
		if !inFrom[c] {
			return found, nil, askFuncError(pg.CodeFeatureNotSupported, "nlproxy.%s() can only be used as a table in FROM", funcName(c))
		}
	}
	return found, args, nil
}

func askSchemaCall(fc *pg_query.FuncCall) bool {
	n := fc.GetFuncname()
	return len(n) == 2 && n[0].GetString_().GetSval() == askSchema
}

func funcName(fc *pg_query.FuncCall) string {
	n := fc.GetFuncname()
	return n[len(n)-1].GetString_().GetSval()
}

// askArguments reads (question text [, profile text]) or, for optimize,
// (sql text): string constants, the profile positional or named
// (profile => 'max').
func askArguments(name string, args []*pg_query.Node) (question, profile string, perr *pg.Error) {
	what, most := "question", 2
	if name == "optimize" {
		what, most = "SQL to optimize", 1
	}
	if len(args) == 0 || len(args) > most || args[0].GetNamedArgExpr() != nil {
		return "", "", askFuncError(pg.CodeUndefinedFunction, "nlproxy.%s() takes the %s as its first argument%s", name, what,
			map[bool]string{true: "", false: " and an optional profile"}[most == 1])
	}
	text := func(a *pg_query.Node, label string) (string, *pg.Error) {
		c := a.GetAConst()
		if c == nil || c.GetSval() == nil {
			return "", askFuncError(pg.CodeInvalidParameterValue, "the %s of nlproxy.%s() must be a string constant", label, name)
		}
		return c.GetSval().GetSval(), nil
	}
	if question, perr = text(args[0], what); perr != nil {
		return "", "", perr
	}
	if len(args) == 2 {
		a := args[1]
		if na := a.GetNamedArgExpr(); na != nil {
			if na.GetName() != "profile" {
				return "", "", askFuncError(pg.CodeUndefinedFunction, "nlproxy.%s() has no argument named %q", name, na.GetName())
			}
			a = na.GetArg()
		}
		if profile, perr = text(a, "profile"); perr != nil {
			return "", "", perr
		}
	}
	return strings.TrimSpace(question), strings.ToLower(strings.TrimSpace(profile)), nil
}

// walkNodes calls visit on every Node of a parse tree, parents first.
func walkNodes(m protoreflect.Message, visit func(*pg_query.Node)) {
	if n, ok := m.Interface().(*pg_query.Node); ok {
		visit(n)
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil || fd.IsMap() {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walkNodes(l.Get(i).Message(), visit)
			}
		} else {
			walkNodes(v.Message(), visit)
		}
		return true
	})
}

// Embed returns stmt with its nlproxy.* call replaced by sub (one
// SELECT) as a subquery under the call's alias (the function's name when
// the statement gives none, as Postgres names a function's rows). The
// result is to be checked and sealed as a whole.
func Embed(stmt, sub string) (string, error) {
	subTree, err := pg_query.Parse(sub)
	if err != nil {
		return "", fmt.Errorf("askfunc: embedded statement does not parse: %w", err)
	}
	if len(subTree.Stmts) != 1 || subTree.Stmts[0].GetStmt().GetSelectStmt() == nil {
		return "", fmt.Errorf("askfunc: embedded statement is not one SELECT")
	}
	return embed(stmt, subTree.Stmts[0].GetStmt(), nil)
}

// EmbedRows is Embed for rows the proxy makes (ask_sql, optimize): columns
// and rows (nil: NULL) of text; they
// take the call's place as a VALUES list of text constants, built as a
// parse tree so no value is ever read as SQL.
func EmbedRows(stmt string, columns []string, rows [][]*string) (string, error) {
	if len(columns) == 0 {
		return "", fmt.Errorf("askfunc: no columns to embed")
	}
	var lists []*pg_query.Node
	for _, row := range rows {
		items := make([]*pg_query.Node, len(columns))
		for j := range items {
			var v *string
			if j < len(row) {
				v = row[j]
			}
			items[j] = textConst(v)
		}
		lists = append(lists, pg_query.MakeListNode(items))
	}
	sel := &pg_query.SelectStmt{ValuesLists: lists, Op: pg_query.SetOperation_SETOP_NONE, LimitOption: pg_query.LimitOption_LIMIT_OPTION_DEFAULT}
	if len(lists) == 0 {
		// No rows: the columns, typed, and a false WHERE.
		for _, col := range columns {
			sel.TargetList = append(sel.TargetList, pg_query.MakeResTargetNodeWithNameAndVal(col, textConst(nil), -1))
		}
		sel.WhereClause = &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{Val: &pg_query.A_Const_Boolval{Boolval: &pg_query.Boolean{Boolval: false}}}}}
	}
	return embed(stmt, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}, columns)
}

// textConst is v (nil: NULL) as a constant typed text, so that a column of
// NULLs is text too.
func textConst(v *string) *pg_query.Node {
	c := &pg_query.A_Const{Isnull: true}
	if v != nil {
		c = &pg_query.A_Const{Val: &pg_query.A_Const_Sval{Sval: &pg_query.String{Sval: *v}}}
	}
	return &pg_query.Node{Node: &pg_query.Node_TypeCast{TypeCast: &pg_query.TypeCast{
		Arg:      &pg_query.Node{Node: &pg_query.Node_AConst{AConst: c}},
		TypeName: &pg_query.TypeName{Names: []*pg_query.Node{pg_query.MakeStrNode("pg_catalog"), pg_query.MakeStrNode("text")}, Typemod: -1},
		Location: -1,
	}}}
}

func embed(stmt string, sub *pg_query.Node, cols []string) (string, error) {
	if stmt == "" {
		return "", fmt.Errorf("askfunc: the marker is not the table-function form")
	}
	tree, err := pg_query.Parse(stmt)
	if err != nil {
		return "", fmt.Errorf("askfunc: statement does not parse: %w", err)
	}
	call, _, perr := locateAskCall(tree)
	if perr != nil {
		return "", perr
	}
	if call == nil {
		return "", fmt.Errorf("askfunc: statement holds no nlproxy.* call")
	}
	rf := call.rf.GetRangeFunction()
	alias := rf.GetAlias()
	if alias == nil {
		alias = &pg_query.Alias{Aliasname: call.name}
	}
	if len(alias.GetColnames()) == 0 && len(cols) > 0 {
		for _, c := range cols {
			alias.Colnames = append(alias.Colnames, pg_query.MakeStrNode(c))
		}
	}
	call.rf.Node = &pg_query.Node_RangeSubselect{RangeSubselect: &pg_query.RangeSubselect{
		Lateral: rf.GetLateral(), Subquery: sub, Alias: alias,
	}}
	return pg_query.Deparse(tree)
}
