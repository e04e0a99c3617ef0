package proxy

import (
	"bytes"
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
// statement is then checked and sealed as one (see Marker.Embed).

// askSchema is the schema the functions are written in. It need not exist
// upstream: the proxy answers the call itself.
const askSchema = "nlproxy"

var askFunctions = map[string]MarkerKind{
	"ask":      MarkerAsk,
	"ask_sql":  MarkerAskSQL,
	"optimize": MarkerOptimize,
}

// mayHoldAskFunc is the hot-path pre-check on a whole statement: false
// means it certainly names no nlproxy.* function. It looks for the rare
// byte 'x' (of "nlproxy") with bytes.IndexByte, which is vectorized, and
// compares the word around each hit case-insensitively.
func mayHoldAskFunc(b []byte) bool {
	return foldedWordAt(b, 'x') || foldedWordAt(b, 'X')
}

func foldedWordAt(b []byte, x byte) bool {
	const word, at = askSchema, 5 // word[at] == 'x'
	for off := 0; ; {
		i := bytes.IndexByte(b[off:], x)
		if i < 0 {
			return false
		}
		i += off
		if i >= at && i-at+len(word) <= len(b) && bytes.EqualFold(b[i-at:i-at+len(word)], []byte(word)) {
			return true
		}
		off = i + 1
	}
}

// askCall is the nlproxy.* call found in a statement.
type askCall struct {
	rf   *pg_query.Node // the RangeFunction node holding the call
	name string         // ask, ask_sql or optimize
}

// findAskFunc parses a statement that mayHoldAskFunc and returns the ask
// it holds. A statement that does not parse, or names no nlproxy.*
// function, is MarkerNone (Postgres answers it as it would). Misuse of the
// functions is a Marker whose ask fails with a clear error.
func findAskFunc(sql string) Marker {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return Marker{}
	}
	call, args, perr := locateAskCall(tree)
	if perr == nil && call == nil {
		return Marker{}
	}
	m := Marker{Kind: MarkerAsk, Statement: sql}
	if call != nil {
		m.Kind = askFunctions[call.name]
	}
	if perr == nil && len(tree.Stmts) != 1 {
		perr = askFuncError(pg.CodeFeatureNotSupported, "nlproxy.%s() must be in a statement of its own, not one of %d", call.name, len(tree.Stmts))
	}
	if perr == nil {
		m.Question, m.Profile, perr = askArguments(call.name, args)
	}
	m.invalid = perr
	return m
}

func askFuncError(code, format string, a ...any) *PgError {
	return &PgError{Severity: "ERROR", Code: code, Message: "nlproxy: " + fmt.Sprintf(format, a...),
		Hint: "Write the ask as a table in FROM with a string constant: SELECT * FROM nlproxy.ask('how many orders are open?'); see docs/asking.md."}
}

// locateAskCall finds the one nlproxy.* call of a parsed statement and its
// arguments; a call anywhere but as a FROM item, a second call, or an
// unknown nlproxy.* function is an error.
func locateAskCall(tree *pg_query.ParseResult) (*askCall, []*pg_query.Node, *PgError) {
	var (
		found    *askCall
		args     []*pg_query.Node
		inFrom   = map[*pg_query.FuncCall]bool{}
		problem  *PgError
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
				case askFunctions[name] == MarkerNone:
					problem = &PgError{Severity: "ERROR", Code: pg.CodeUndefinedFunction, Message: "nlproxy: there is no function nlproxy." + name + "()",
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
func askArguments(name string, args []*pg_query.Node) (question, profile string, perr *PgError) {
	what, most := "question", 2
	if name == "optimize" {
		what, most = "SQL to optimize", 1
	}
	if len(args) == 0 || len(args) > most || args[0].GetNamedArgExpr() != nil {
		return "", "", askFuncError(pg.CodeUndefinedFunction, "nlproxy.%s() takes the %s as its first argument%s", name, what,
			map[bool]string{true: "", false: " and an optional profile"}[most == 1])
	}
	text := func(a *pg_query.Node, label string) (string, *PgError) {
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

// Embed returns m.Statement with its nlproxy.* call replaced by sub (one
// SELECT) as a subquery under the call's alias (the function's name when
// the statement gives none, as Postgres names a function's rows). The
// result is to be checked and sealed as a whole.
func (m Marker) Embed(sub string) (string, error) {
	subTree, err := pg_query.Parse(sub)
	if err != nil {
		return "", fmt.Errorf("proxy: embedded statement does not parse: %w", err)
	}
	if len(subTree.Stmts) != 1 || subTree.Stmts[0].GetStmt().GetSelectStmt() == nil {
		return "", fmt.Errorf("proxy: embedded statement is not one SELECT")
	}
	return m.embed(subTree.Stmts[0].GetStmt(), nil)
}

// EmbedRows is Embed for rows the proxy makes (ask_sql, optimize): they
// take the call's place as a VALUES list of text constants, built as a
// parse tree so no value is ever read as SQL.
func (m Marker) EmbedRows(r *StaticResult) (string, error) {
	if r == nil || len(r.Columns) == 0 {
		return "", fmt.Errorf("proxy: no columns to embed")
	}
	var lists []*pg_query.Node
	for _, row := range r.Rows {
		items := make([]*pg_query.Node, len(r.Columns))
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
		for _, col := range r.Columns {
			sel.TargetList = append(sel.TargetList, pg_query.MakeResTargetNodeWithNameAndVal(col, textConst(nil), -1))
		}
		sel.WhereClause = &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{Val: &pg_query.A_Const_Boolval{Boolval: &pg_query.Boolean{Boolval: false}}}}}
	}
	return m.embed(&pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}, r.Columns)
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

func (m Marker) embed(sub *pg_query.Node, cols []string) (string, error) {
	if m.Statement == "" {
		return "", fmt.Errorf("proxy: the marker is not the table-function form")
	}
	tree, err := pg_query.Parse(m.Statement)
	if err != nil {
		return "", fmt.Errorf("proxy: statement does not parse: %w", err)
	}
	call, _, perr := locateAskCall(tree)
	if perr != nil {
		return "", perr
	}
	if call == nil {
		return "", fmt.Errorf("proxy: statement holds no nlproxy.* call")
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
