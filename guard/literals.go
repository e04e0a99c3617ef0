package guard

import (
	"sort"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/internal/sqlscan"
)

// Literal is a string constant compared with a column in a WHERE, JOIN ON or
// HAVING condition: col = 'x', col <> 'x', col IN ('a','b'), col LIKE 'x%'
// (and ILIKE / NOT forms), either side of the operator.
type Literal struct {
	// Qualifier is the column's table alias or name as written ("c",
	// "public.customers"), "" when unqualified.
	Qualifier string
	Column    string
	// Op is "=", "<>", "IN", "NOT IN", "LIKE", "NOT LIKE", "ILIKE" or "NOT ILIKE".
	Op string
	// Value is the literal's decoded value (quotes and escapes resolved).
	Value string
	// Location and Length delimit the literal token in the SQL, in bytes,
	// including quotes and any E/U& prefix.
	Location int
	Length   int
}

// Literals lists the string literals compared with columns in conditions,
// in order of appearance. Comparisons against expressions (lower(col) = 'x')
// are not reported.
func Literals(sql string) ([]Literal, error) {
	if len(sql) > DefaultMaxLen {
		return nil, &RejectError{Reason: "SQL too long", Code: pg.CodeProgramLimitExceeded}
	}
	tree, err := parse(sql)
	if err != nil {
		return nil, err
	}
	var out []Literal
	collectLiterals(tree.ProtoReflect(), false, sql, &out)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Location < out[j].Location })
	return out, nil
}

// condFields are the fields whose subtrees are conditions.
var condFields = map[protoreflect.Name]bool{"where_clause": true, "quals": true, "having_clause": true}

func collectLiterals(m protoreflect.Message, inCond bool, sql string, out *[]Literal) {
	if e, ok := m.Interface().(*pg_query.A_Expr); ok && inCond {
		*out = append(*out, exprLiterals(e, sql)...)
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil || fd.IsMap() {
			return true
		}
		cond := inCond || condFields[fd.Name()]
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				collectLiterals(l.Get(i).Message(), cond, sql, out)
			}
		} else {
			collectLiterals(v.Message(), cond, sql, out)
		}
		return true
	})
}

func exprLiterals(e *pg_query.A_Expr, sql string) []Literal {
	opName := strings.Join(stringList(e.GetName()), ".")
	var op string
	switch e.GetKind() {
	case pg_query.A_Expr_Kind_AEXPR_OP:
		if opName != "=" && opName != "<>" {
			return nil
		}
		op = opName
	case pg_query.A_Expr_Kind_AEXPR_IN:
		op = map[string]string{"=": "IN", "<>": "NOT IN"}[opName]
	case pg_query.A_Expr_Kind_AEXPR_LIKE:
		op = map[string]string{"~~": "LIKE", "!~~": "NOT LIKE"}[opName]
	case pg_query.A_Expr_Kind_AEXPR_ILIKE:
		op = map[string]string{"~~*": "ILIKE", "!~~*": "NOT ILIKE"}[opName]
	}
	if op == "" {
		return nil
	}
	colSide, litSide := e.GetLexpr(), e.GetRexpr()
	if columnOf(colSide) == nil {
		colSide, litSide = litSide, colSide
	}
	col := columnOf(colSide)
	if col == nil {
		return nil
	}
	fields := stringList(col.GetFields())
	if len(fields) == 0 || len(fields) != len(col.GetFields()) {
		return nil // col.* or similar
	}
	base := Literal{
		Qualifier: strings.Join(fields[:len(fields)-1], "."),
		Column:    fields[len(fields)-1],
		Op:        op,
	}
	var consts []*pg_query.Node
	if l := litSide.GetList(); l != nil {
		consts = l.GetItems()
	} else {
		consts = []*pg_query.Node{litSide}
	}
	var out []Literal
	for _, n := range consts {
		c := stringConst(n)
		if c == nil {
			continue
		}
		start := int(c.GetLocation())
		end, ok := stringTokenEnd(sql, start)
		if !ok {
			continue
		}
		lit := base
		lit.Value = c.GetSval().GetSval()
		lit.Location, lit.Length = start, end-start
		out = append(out, lit)
	}
	return out
}

// columnOf returns the column reference of n, looking through casts
// (col::text = 'x').
func columnOf(n *pg_query.Node) *pg_query.ColumnRef {
	if tc := n.GetTypeCast(); tc != nil {
		n = tc.GetArg()
	}
	return n.GetColumnRef()
}

// stringConst returns n's string constant, looking through casts ('x'::text).
// Typed literals written as type 'x' are skipped: their location is the type.
func stringConst(n *pg_query.Node) *pg_query.A_Const {
	if tc := n.GetTypeCast(); tc != nil {
		n = tc.GetArg()
	}
	c := n.GetAConst()
	if c == nil || c.GetSval() == nil {
		return nil
	}
	return c
}

// QuoteLiteral renders s as a standard SQL string literal. Backslashes are
// ordinary characters under standard_conforming_strings (on by default since
// PostgreSQL 9.1); if s contains one, an E” literal is used so the result
// is right whatever that setting.
func QuoteLiteral(s string) string {
	s = strings.ReplaceAll(s, "\x00", "") // text cannot hold NUL
	if strings.Contains(s, `\`) {
		s = strings.ReplaceAll(s, `\`, `\\`)
		return "E'" + strings.ReplaceAll(s, "'", "''") + "'"
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// ReplaceLiteral returns sql with the literal token lit replaced by newValue,
// quoted. If lit cannot delimit a quoted token of sql (stale Location), sql
// is returned unchanged.
func ReplaceLiteral(sql string, lit Literal, newValue string) string {
	return ReplaceLiterals(sql, []Replacement{{Literal: lit, Value: newValue}})
}

// Replacement is one literal correction.
type Replacement struct {
	Literal Literal
	Value   string
}

// ReplaceLiterals applies several corrections at once; locations refer to
// the original sql. Overlapping or stale replacements are skipped.
func ReplaceLiterals(sql string, reps []Replacement) string {
	rs := append([]Replacement(nil), reps...)
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].Literal.Location > rs[j].Literal.Location })
	limit := len(sql)
	for _, r := range rs {
		start, end := r.Literal.Location, r.Literal.Location+r.Literal.Length
		if start < 0 || r.Literal.Length < 2 || end > limit || (sql[end-1] != '\'' && sql[end-1] != '$') {
			continue
		}
		sql = sql[:start] + QuoteLiteral(r.Value) + sql[end:]
		limit = start
	}
	return sql
}

// stringTokenEnd returns the end offset of the string-literal token starting
// at start: '...', E'...', U&'...', $tag$...$tag$, and quoted literals
// continued across a newline ('a'\n'b'), which pg_query reports no usable
// extent for. A U&'...' literal with its own escape character (UESCAPE) is
// left alone.
func stringTokenEnd(sql string, start int) (int, bool) {
	if start < 0 || start >= len(sql) {
		return 0, false
	}
	sc := sqlscan.NewScanner(sql[start:], sqlscan.Options{})
	tok := sc.Next()
	if tok.Unterminated || (tok.Kind != sqlscan.String && tok.Kind != sqlscan.DollarString) {
		return 0, false
	}
	next := sc.Next()
	for next.Kind.Trivia() {
		next = sc.Next()
	}
	if next.Kind == sqlscan.Ident && strings.EqualFold(sql[start+next.Start:start+next.End], "uescape") {
		return 0, false
	}
	return start + tok.End, true
}
