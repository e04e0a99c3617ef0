package guard

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// Bounds cap what one statement may ask of the server before it runs. The
// planner does not honour statement_timeout while it plans (a thousand
// chained CTEs planned for a minute), and deep expressions or
// argument-sized functions take the backend's memory before any timeout
// fires, so these are judged on the text.
type Bounds struct {
	// MaxDepth is the deepest nesting of expressions and subqueries.
	MaxDepth int
	// MaxNodes is the most parse-tree nodes.
	MaxNodes int
	// MaxCTEs is the most common table expressions.
	MaxCTEs int
	// MaxSubqueries is the most subqueries (FROM and expression sublinks).
	MaxSubqueries int
	// MaxSizedArg is the largest constant a function whose cost grows with
	// an argument may be given (repeat's count, lpad's length,
	// generate_series' span).
	MaxSizedArg int64
}

// DefaultBounds are used where Options.Bounds leaves a field zero: generous
// for questions people ask, far below what harms a server.
func DefaultBounds() Bounds {
	return Bounds{MaxDepth: 64, MaxNodes: 20000, MaxCTEs: 32, MaxSubqueries: 128, MaxSizedArg: 1 << 20}
}

func (b Bounds) withDefaults() Bounds {
	d := DefaultBounds()
	if b.MaxDepth > 0 {
		d.MaxDepth = b.MaxDepth
	}
	if b.MaxNodes > 0 {
		d.MaxNodes = b.MaxNodes
	}
	if b.MaxCTEs > 0 {
		d.MaxCTEs = b.MaxCTEs
	}
	if b.MaxSubqueries > 0 {
		d.MaxSubqueries = b.MaxSubqueries
	}
	if b.MaxSizedArg > 0 {
		d.MaxSizedArg = b.MaxSizedArg
	}
	return d
}

type boundsCounter struct {
	limit                   Bounds
	nodes, ctes, subqueries int
}

func (c *boundsCounter) enter(depth int) error {
	c.nodes++
	switch {
	case depth > c.limit.MaxDepth:
		return limitError(fmt.Sprintf("expressions nested more than %d deep", c.limit.MaxDepth))
	case c.nodes > c.limit.MaxNodes:
		return limitError(fmt.Sprintf("more than %d expression nodes", c.limit.MaxNodes))
	}
	return nil
}

func (c *boundsCounter) check() error {
	switch {
	case c.ctes > c.limit.MaxCTEs:
		return limitError(fmt.Sprintf("%d common table expressions, over the limit of %d", c.ctes, c.limit.MaxCTEs))
	case c.subqueries > c.limit.MaxSubqueries:
		return limitError(fmt.Sprintf("%d subqueries, over the limit of %d", c.subqueries, c.limit.MaxSubqueries))
	}
	return nil
}

func limitError(what string) error {
	return &RejectError{Reason: "the statement asks too much of the server: " + what, Code: pg.CodeProgramLimitExceeded}
}

// expressionNode reports whether m counts toward depth and size: every
// parse node except the Node and List wrappers around them.
func expressionNode(m protoreflect.Message) bool {
	switch m.Descriptor().Name() {
	case "Node", "List", "String", "Integer", "Float", "Boolean", "BitString", "ParseResult", "RawStmt":
		return false
	}
	return true
}

// sizedArgs maps built-ins whose time or memory grows with an argument to
// the 0-based positions of those arguments. A constant there must be within
// MaxSizedArg; anything else there (a column, an expression) is refused,
// since its value is not known before the server has spent the memory.
var sizedArgs = map[string][]int{
	"repeat":          {1},
	"lpad":            {1},
	"rpad":            {1},
	"array_fill":      {1},
	"generate_series": {0, 1},
	"space":           {0},
}

// checkSizedCall applies MaxSizedArg to a call of a function in sizedArgs
// (qualified with pg_catalog or not). generate_series is judged on its
// span, and only with numeric bounds: over timestamps its step decides.
func checkSizedCall(parts []string, fc *pg_query.FuncCall, limit int64) error {
	name := strings.ToLower(parts[len(parts)-1])
	if len(parts) > 1 && !strings.EqualFold(parts[len(parts)-2], "pg_catalog") {
		return nil
	}
	pos, ok := sizedArgs[name]
	if !ok {
		return nil
	}
	args := fc.GetArgs()
	vals := make([]float64, 0, len(pos))
	for _, p := range pos {
		if p >= len(args) {
			return nil // another overload; the server decides
		}
		v, ok := constNumber(args[p])
		if !ok {
			if name == "generate_series" {
				return nil
			}
			return limitError(fmt.Sprintf("%s's size argument must be a constant up to %d", name, limit))
		}
		vals = append(vals, v)
	}
	size := vals[0]
	if name == "generate_series" {
		size = math.Abs(vals[1] - vals[0])
	}
	if math.IsNaN(size) || size > float64(limit) {
		return limitError(fmt.Sprintf("%s asked for %.0f, over the limit of %d", name, size, limit))
	}
	// repeat multiplies what its input yields: sized calls inside that
	// input compose, or repeat(repeat('x', 1000000), 200) would ask for
	// 200 MB while each call alone is within the limit.
	if name == "repeat" && len(args) > 0 {
		if in := nestedSize(args[0].ProtoReflect()); in > 1 && size*in > float64(limit) {
			return limitError(fmt.Sprintf("repeat of a sized input asked for %.0f, over the limit of %d", size*in, limit))
		}
	}
	return nil
}

// nestedSize is the sum of what the sized calls within m ask for (their
// size argument, composed through repeat), or 1 when there are none. Calls
// whose size is not a constant are refused on their own visit.
func nestedSize(m protoreflect.Message) float64 {
	sum := 0.0
	var visit func(m protoreflect.Message) error
	visit = func(m protoreflect.Message) error {
		if fc, ok := m.Interface().(*pg_query.FuncCall); ok {
			if s, ok := sizedCallSize(fc); ok {
				sum += s
				return nil
			}
		}
		return eachChild(m, visit)
	}
	_ = visit(m)
	return max(sum, 1)
}

// sizedCallSize is what one sized call asks for, composed with the sized
// calls in repeat's input; false when fc is no sized call with constants.
func sizedCallSize(fc *pg_query.FuncCall) (float64, bool) {
	parts := stringList(fc.GetFuncname())
	if len(parts) == 0 || (len(parts) > 1 && !strings.EqualFold(parts[len(parts)-2], "pg_catalog")) {
		return 0, false
	}
	name := strings.ToLower(parts[len(parts)-1])
	pos, ok := sizedArgs[name]
	args := fc.GetArgs()
	if !ok || name == "generate_series" || pos[0] >= len(args) {
		return 0, false
	}
	v, ok := constNumber(args[pos[0]])
	if !ok {
		return 0, false
	}
	if name == "repeat" {
		v *= nestedSize(args[0].ProtoReflect())
	}
	return math.Abs(v), true
}

// constNumber reads an integer or float constant, negated or cast.
func constNumber(n *pg_query.Node) (float64, bool) {
	switch {
	case n.GetAConst() != nil:
		c := n.GetAConst()
		switch {
		case c.GetIval() != nil:
			return float64(c.GetIval().GetIval()), true
		case c.GetFval() != nil:
			f, err := strconv.ParseFloat(c.GetFval().GetFval(), 64)
			return f, err == nil
		case c.GetIsnull():
			return 0, true
		}
		return 0, false
	case n.GetTypeCast() != nil:
		return constNumber(n.GetTypeCast().GetArg())
	case n.GetAExpr() != nil:
		e := n.GetAExpr()
		if e.GetKind() == pg_query.A_Expr_Kind_AEXPR_OP && e.GetLexpr() == nil && len(stringList(e.GetName())) > 0 {
			if op := stringList(e.GetName()); op[len(op)-1] == "-" {
				v, ok := constNumber(e.GetRexpr())
				return -v, ok
			}
		}
	}
	return 0, false
}
