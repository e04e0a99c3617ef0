// Package guard decides whether generated SQL is safe to run on a client's
// session: exactly one read-only SELECT (optionally a plain EXPLAIN of one),
// judged on the pg_query parse tree rather than on the text, so comments,
// quoting and Unicode escapes cannot hide anything. It also lists the string
// literals compared against columns so the engine can correct them.
//
// The guard is one layer; the database still enforces READ ONLY transactions,
// statement_timeout and the client's own privileges.
package guard

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"github.com/pganalyze/pg_query_go/v5/parser"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// DefaultMaxLen caps SQL length (bytes) when Options.MaxLen is zero.
const DefaultMaxLen = 100 << 10

// Kind is the kind of an accepted statement.
type Kind string

// Statement kinds.
const (
	KindSelect  Kind = "SELECT"
	KindExplain Kind = "EXPLAIN"
)

// Options tune Check. The zero value is the strict default.
type Options struct {
	// MaxLen is the largest SQL accepted, in bytes; 0 means DefaultMaxLen.
	MaxLen int
	// AllowExplain accepts EXPLAIN (without ANALYZE) of a SELECT.
	AllowExplain bool
	// DenyFunctions adds function-name patterns to the built-in denylist.
	// Matching is case-insensitive on the unqualified name; '*' and '?' are
	// wildcards (path.Match syntax), e.g. "audit_*".
	DenyFunctions []string
	// AllowFunctions names functions accepted beyond the built-in rule
	// (pg_catalog functions that are not volatile, plus a short reviewed
	// list): "name" allows an unqualified call found through search_path,
	// "schema.name" a qualified one; path.Match wildcards. The denylist
	// still wins.
	AllowFunctions []string
	// Catalog knows pg_catalog's functions and the database's views. Without
	// it only the reviewed harmless volatile built-ins and AllowFunctions
	// are accepted.
	Catalog Catalog
	// Names is how the asking session resolves relations, types and user
	// functions; Seal qualifies them from it. Nil means nothing is known of
	// the session: unqualified names are taken to be pg_catalog's.
	Names Names
	// Bounds caps what a statement may ask of the server; zero fields take
	// the defaults.
	Bounds Bounds
}

// RejectError says why SQL was refused, with the SQLSTATE the proxy should
// report. Match it with errors.As.
type RejectError struct {
	Reason string
	Code   string
	// Position is the 1-based character position of the offending token when
	// known (as in an ErrorResponse), else 0.
	Position int
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("guard: %s (SQLSTATE %s)", e.Reason, e.Code)
}

// TableRef is a relation named in the statement. CTE names are excluded.
type TableRef struct {
	Schema string // "" when unqualified
	Name   string
	Alias  string // "" when none
}

// String renders the reference as schema.name.
func (t TableRef) String() string {
	if t.Schema == "" {
		return t.Name
	}
	return t.Schema + "." + t.Name
}

// Checked describes an accepted statement.
type Checked struct {
	SQL  string
	Kind Kind
	// Tables lists relations in order of first appearance, deduplicated by
	// schema, name and alias.
	Tables []TableRef
	// Functions lists called functions, lowercased and qualified as written
	// ("lower", "pg_catalog.date_part"), sorted and deduplicated.
	Functions []string
	// Fingerprint identifies the statement's shape regardless of constants and
	// formatting (pg_query fingerprint), useful for caching and clustering.
	Fingerprint string

	tree         *pg_query.ParseResult
	builtinCalls []*pg_query.FuncCall
	// userCalls are unqualified calls of operator-allowed user functions,
	// sealed qualified from Options.Names.
	userCalls []*pg_query.FuncCall
}

// allowedNodes are the raw-parse-tree node types a read-only SELECT may
// contain. Anything else is rejected: either it is a known write/utility node
// (reported as such) or it is a construct the guard has not classified.
var allowedNodes = map[protoreflect.Name]bool{
	"ParseResult": true, "RawStmt": true, "Node": true, "List": true,
	"SelectStmt": true, "ResTarget": true, "ColumnRef": true, "A_Star": true,
	"A_Const": true, "String": true, "Integer": true, "Float": true,
	"Boolean": true, "BitString": true, "A_Expr": true, "BoolExpr": true,
	"FuncCall": true, "NamedArgExpr": true, "TypeCast": true, "TypeName": true,
	"RangeVar": true, "Alias": true, "JoinExpr": true, "RangeSubselect": true,
	"RangeFunction": true, "RangeTableFunc": true, "RangeTableFuncCol": true,
	"RangeTableSample": true, "SubLink": true, "CaseExpr": true, "CaseWhen": true,
	"CoalesceExpr": true, "MinMaxExpr": true, "NullTest": true, "BooleanTest": true,
	"SortBy": true, "WindowDef": true, "WithClause": true, "CommonTableExpr": true,
	"CTESearchClause": true, "CTECycleClause": true, "GroupingSet": true,
	"GroupingFunc": true, "A_Indices": true, "A_Indirection": true,
	"A_ArrayExpr": true, "RowExpr": true, "CollateClause": true, "ParamRef": true,
	"SQLValueFunction": true, "XmlExpr": true, "XmlSerialize": true,
	"JsonFormat": true, "JsonReturning": true, "JsonValueExpr": true,
	"JsonOutput": true, "JsonKeyValue": true, "JsonObjectConstructor": true,
	"JsonArrayConstructor": true, "JsonArrayQueryConstructor": true,
	"JsonAggConstructor": true, "JsonObjectAgg": true, "JsonArrayAgg": true,
	"JsonIsPredicate": true,
}

// writeNodes are reported as privilege violations rather than as unknown.
var writeNodes = map[protoreflect.Name]string{
	"InsertStmt":    "INSERT",
	"UpdateStmt":    "UPDATE",
	"DeleteStmt":    "DELETE",
	"MergeStmt":     "MERGE",
	"IntoClause":    "SELECT INTO",
	"LockingClause": "a locking clause (FOR UPDATE/SHARE)",
}

// Check parses sql and accepts it only if it is a single read-only SELECT
// (or, with opts.AllowExplain, EXPLAIN without ANALYZE of one). A refusal is
// a *RejectError.
func Check(sql string, opts Options) (*Checked, error) {
	maxLen := opts.MaxLen
	if maxLen <= 0 {
		maxLen = DefaultMaxLen
	}
	if len(sql) > maxLen {
		return nil, &RejectError{Reason: fmt.Sprintf("SQL is %d bytes, over the %d-byte limit", len(sql), maxLen), Code: pg.CodeProgramLimitExceeded}
	}
	if !utf8.ValidString(sql) || strings.IndexByte(sql, 0) >= 0 {
		// The server would refuse such text; refusing it here keeps what the
		// guard parses the same as what the server would.
		return nil, &RejectError{Reason: "SQL is not valid UTF-8 text", Code: pg.CodeCharacterNotInRepertoire}
	}
	tree, err := parse(sql)
	if err != nil {
		return nil, err
	}
	if len(tree.Stmts) == 0 {
		return nil, &RejectError{Reason: "no statement", Code: pg.CodeSyntaxError}
	}
	if len(tree.Stmts) > 1 {
		return nil, &RejectError{Reason: fmt.Sprintf("%d statements; exactly one is allowed", len(tree.Stmts)), Code: pg.CodeInsufficientPrivilege}
	}
	stmt := tree.Stmts[0].GetStmt()
	c := &Checked{SQL: sql, Kind: KindSelect}
	var body *pg_query.Node
	switch {
	case stmt.GetSelectStmt() != nil:
		body = stmt
	case stmt.GetExplainStmt() != nil:
		ex := stmt.GetExplainStmt()
		if !opts.AllowExplain {
			return nil, &RejectError{Reason: "EXPLAIN is not allowed here", Code: pg.CodeInsufficientPrivilege}
		}
		if err := checkExplainOptions(ex.GetOptions()); err != nil {
			return nil, err
		}
		if ex.GetQuery().GetSelectStmt() == nil {
			return nil, &RejectError{Reason: "EXPLAIN of " + nodeName(ex.GetQuery()) + "; only EXPLAIN of a SELECT is allowed", Code: pg.CodeInsufficientPrivilege}
		}
		c.Kind = KindExplain
		body = ex.GetQuery()
	default:
		return nil, &RejectError{Reason: "only SELECT is allowed, got " + nodeName(stmt), Code: pg.CodeInsufficientPrivilege}
	}

	if err := validatePatterns("DenyFunctions", opts.DenyFunctions); err != nil {
		return nil, err
	}
	if err := validatePatterns("AllowFunctions", opts.AllowFunctions); err != nil {
		return nil, err
	}
	w := newWalker(sql, &opts)
	if err := w.walk(body.ProtoReflect()); err != nil {
		return nil, err
	}
	if err := w.bounds.check(); err != nil {
		return nil, err
	}
	c.Tables = w.tableRefs()
	if err := checkViews(c.Tables, &opts, 0, map[string]bool{}); err != nil {
		return nil, err
	}
	for f := range w.funcs {
		c.Functions = append(c.Functions, f)
	}
	sort.Strings(c.Functions)
	// Fingerprinting an already-parsed statement cannot fail in practice; a
	// failure only loses the optional fingerprint.
	c.Fingerprint, _ = pg_query.Fingerprint(sql)
	c.tree = tree
	c.builtinCalls = w.builtinCalls
	c.userCalls = w.userCalls
	return c, nil
}

// maxViewDepth bounds how deep views built on views are followed.
const maxViewDepth = 16

// checkViews applies the guard to the definitions of the views a statement
// reads, as if they were written inline: a view can call what the statement
// itself may not.
func checkViews(refs []TableRef, opts *Options, depth int, seen map[string]bool) error {
	if opts.Catalog == nil {
		return nil
	}
	for _, r := range refs {
		for _, def := range opts.Catalog.ViewDefinitions(strings.ToLower(r.Schema), r.Name) {
			if seen[def] {
				continue
			}
			seen[def] = true
			if depth >= maxViewDepth {
				return &RejectError{Reason: "view " + r.String() + " is nested too deeply to check", Code: pg.CodeFeatureNotSupported}
			}
			if err := checkView(r, def, opts, depth, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkView(r TableRef, def string, opts *Options, depth int, seen map[string]bool) error {
	wrap := func(err error) error {
		var re *RejectError
		if errors.As(err, &re) {
			return &RejectError{Reason: "view " + r.String() + ": " + re.Reason, Code: re.Code}
		}
		return err
	}
	tree, err := parse(def)
	if err != nil {
		return wrap(err)
	}
	if len(tree.Stmts) != 1 || tree.Stmts[0].GetStmt().GetSelectStmt() == nil {
		return &RejectError{Reason: "view " + r.String() + " is not a plain SELECT", Code: pg.CodeFeatureNotSupported}
	}
	w := newWalker(def, opts)
	if err := w.walk(tree.Stmts[0].GetStmt().ProtoReflect()); err != nil {
		return wrap(err)
	}
	refs := w.tableRefs()
	for _, t := range refs {
		// The view's own text may leave names unqualified; what it reads
		// is judged by name in any schema.
		if err := unsafeName(opts.Names, t.Schema, t.Name, "relation", -1); err != nil {
			return wrap(err)
		}
	}
	return checkViews(refs, opts, depth+1, seen)
}

// parse wraps pg_query.Parse, turning parser errors into RejectErrors.
func parse(sql string) (*pg_query.ParseResult, error) {
	tree, err := pg_query.Parse(sql)
	if err == nil {
		return tree, nil
	}
	var pe *parser.Error
	if errors.As(err, &pe) {
		return nil, &RejectError{Reason: "syntax error: " + pe.Message, Code: pg.CodeSyntaxError, Position: pe.Cursorpos}
	}
	// Not a parser error (e.g. nesting too deep to decode): refuse, keeping the cause.
	return nil, &RejectError{Reason: "cannot parse: " + err.Error(), Code: pg.CodeSyntaxError}
}

func checkExplainOptions(opts []*pg_query.Node) error {
	for _, o := range opts {
		d := o.GetDefElem()
		if d == nil {
			return &RejectError{Reason: "unrecognized EXPLAIN option " + nodeName(o), Code: pg.CodeFeatureNotSupported}
		}
		// ANALYZE executes the statement; refuse it even when set to false
		// rather than interpreting its argument.
		if strings.EqualFold(d.GetDefname(), "analyze") {
			return &RejectError{Reason: "EXPLAIN ANALYZE executes the statement", Code: pg.CodeInsufficientPrivilege}
		}
	}
	return nil
}

// nodeName names the concrete type inside a Node wrapper, for messages.
func nodeName(n *pg_query.Node) string {
	m := n.ProtoReflect()
	od := m.Descriptor().Oneofs().ByName("node")
	if od == nil {
		return string(m.Descriptor().Name())
	}
	fd := m.WhichOneof(od)
	if fd == nil {
		return "empty node"
	}
	return string(fd.Message().Name())
}

type walker struct {
	sql    string
	opts   *Options
	deny   []string
	ctes   map[string]bool
	funcs  map[string]bool
	tables []tableAt
	// builtinCalls are the calls sealed as pg_catalog.name.
	builtinCalls []*pg_query.FuncCall
	userCalls    []*pg_query.FuncCall
	bounds       boundsCounter
	depth        int
}

func newWalker(sql string, opts *Options) *walker {
	return &walker{
		sql:    sql,
		opts:   opts,
		deny:   append(deniedFunctions[:len(deniedFunctions):len(deniedFunctions)], opts.DenyFunctions...),
		ctes:   map[string]bool{},
		funcs:  map[string]bool{},
		bounds: boundsCounter{limit: opts.Bounds.withDefaults()},
	}
}

type tableAt struct {
	TableRef
	loc int32
}

// walk visits every message in the tree. Recursion depth is bounded by the
// protobuf decoder's nesting limit.
func (w *walker) walk(m protoreflect.Message) error {
	if err := w.visit(m); err != nil {
		return err
	}
	if expressionNode(m) {
		w.depth++
		defer func() { w.depth-- }()
		if err := w.bounds.enter(w.depth); err != nil {
			return err
		}
	}
	return eachChild(m, w.walk)
}

func (w *walker) visit(m protoreflect.Message) error {
	name := m.Descriptor().Name()
	if what, ok := writeNodes[name]; ok {
		return &RejectError{Reason: what + " is not allowed", Code: pg.CodeInsufficientPrivilege, Position: w.pos(m)}
	}
	if !allowedNodes[name] {
		if strings.HasSuffix(string(name), "Stmt") {
			return &RejectError{Reason: "nested " + string(name) + " is not allowed", Code: pg.CodeInsufficientPrivilege, Position: w.pos(m)}
		}
		return &RejectError{Reason: "unsupported construct " + string(name), Code: pg.CodeFeatureNotSupported, Position: w.pos(m)}
	}
	switch n := m.Interface().(type) {
	case *pg_query.FuncCall:
		parts := stringList(n.GetFuncname())
		if len(parts) == 0 {
			return &RejectError{Reason: "function call without a name", Code: pg.CodeFeatureNotSupported}
		}
		v := judgeFunction(parts, w.opts, w.deny)
		if v.reason != "" {
			return &RejectError{Reason: v.reason, Code: pg.CodeInsufficientPrivilege, Position: int(n.GetLocation()) + 1}
		}
		switch {
		case v.builtin && len(parts) == 1:
			w.builtinCalls = append(w.builtinCalls, n)
		case !v.builtin && len(parts) == 1:
			w.userCalls = append(w.userCalls, n)
		}
		if err := checkSizedCall(parts, n, w.bounds.limit.MaxSizedArg); err != nil {
			return err
		}
		w.funcs[strings.ToLower(strings.Join(parts, "."))] = true
	case *pg_query.ColumnRef:
		// a.b may be the call b(a) (field selection), resolved by the
		// server: any name after the first that is a function the guard
		// would refuse is refused.
		fields := stringList(n.GetFields())
		for i := 1; i < len(fields); i++ {
			if err := w.fieldName(fields[i], int(n.GetLocation())); err != nil {
				return err
			}
		}
	case *pg_query.A_Indirection:
		for _, ind := range n.GetIndirection() {
			if s := ind.GetString_(); s != nil {
				if err := w.fieldName(s.GetSval(), -1); err != nil {
					return err
				}
			}
		}
	case *pg_query.A_Expr:
		if err := operatorName(n.GetName(), int(n.GetLocation())); err != nil {
			return err
		}
	case *pg_query.SortBy:
		if err := operatorName(n.GetUseOp(), int(n.GetLocation())); err != nil {
			return err
		}
	case *pg_query.SubLink:
		w.bounds.subqueries++
		if err := operatorName(n.GetOperName(), int(n.GetLocation())); err != nil {
			return err
		}
	case *pg_query.RangeSubselect:
		w.bounds.subqueries++
	case *pg_query.ParamRef:
		return &RejectError{Reason: "parameter $" + fmt.Sprint(n.GetNumber()) + " has no value here", Code: pg.CodeSyntaxError, Position: int(n.GetLocation()) + 1}
	case *pg_query.CommonTableExpr:
		w.ctes[n.GetCtename()] = true
		w.bounds.ctes++
	case *pg_query.RangeVar:
		w.tables = append(w.tables, tableAt{TableRef{Schema: n.GetSchemaname(), Name: n.GetRelname(), Alias: n.GetAlias().GetAliasname()}, n.GetLocation()})
	}
	return nil
}

// fieldName refuses a field selection that the server would run as a
// function call the guard refuses (x.pg_advisory_lock is
// pg_advisory_lock(x)). User functions cannot be reached this way: under the
// pinned search_path the server looks in pg_catalog only.
func (w *walker) fieldName(name string, loc int) error {
	lower := strings.ToLower(name)
	known := false
	if w.opts.Catalog != nil {
		_, known = w.opts.Catalog.BuiltinVolatility(lower)
	}
	for _, p := range w.deny {
		if ok, _ := path.Match(strings.ToLower(p), lower); ok {
			known = true
		}
	}
	if !known {
		return nil
	}
	if v := judgeFunction([]string{name}, w.opts, w.deny); v.reason != "" {
		return &RejectError{Reason: "field selection ." + name + " would call a function: " + v.reason, Code: pg.CodeInsufficientPrivilege, Position: loc + 1}
	}
	return nil
}

// operatorName refuses an operator qualified with a schema other than
// pg_catalog (OPERATOR(s.=)): user operators run user functions. Unqualified
// operators are looked up in pg_catalog only, under the pinned search_path.
func operatorName(name []*pg_query.Node, loc int) error {
	parts := stringList(name)
	if len(parts) < 2 {
		return nil
	}
	if schema := parts[len(parts)-2]; !strings.EqualFold(schema, "pg_catalog") {
		return &RejectError{Reason: "operator " + strings.Join(parts, ".") + " is not a built-in operator", Code: pg.CodeInsufficientPrivilege, Position: loc + 1}
	}
	return nil
}

// eachChild calls fn on every message directly inside m, in field order,
// and stops at the first error.
func eachChild(m protoreflect.Message, fn func(protoreflect.Message) error) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil || fd.IsMap() {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = fn(l.Get(i).Message())
			}
		} else {
			err = fn(v.Message())
		}
		return err == nil
	})
	return err
}

// pos returns the 1-based position of a node that carries a location.
func (w *walker) pos(m protoreflect.Message) int {
	fd := m.Descriptor().Fields().ByName("location")
	if fd == nil || fd.Kind() != protoreflect.Int32Kind {
		return 0
	}
	loc := int(m.Get(fd).Int())
	if loc < 0 || loc >= len(w.sql) {
		return 0
	}
	return loc + 1
}

// tableRefs drops references to CTEs (unqualified names matching a CTE of the
// statement; a CTE shadowing a real table of the same name hides that table)
// and duplicates, in order of appearance in the text.
func (w *walker) tableRefs() []TableRef {
	sort.SliceStable(w.tables, func(i, j int) bool { return w.tables[i].loc < w.tables[j].loc })
	var out []TableRef
	seen := map[TableRef]bool{}
	for _, ta := range w.tables {
		t := ta.TableRef
		if t.Schema == "" && w.ctes[t.Name] {
			continue
		}
		if seen[t] {
			continue
		}
		seen[t] = true
		out = append(out, t)
	}
	return out
}

// stringList returns the String values of a name list (function names,
// column references); non-String items (A_Star) are skipped.
func stringList(ns []*pg_query.Node) []string {
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		if s := n.GetString_(); s != nil {
			out = append(out, s.GetSval())
		}
	}
	return out
}
