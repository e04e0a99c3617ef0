package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/guard/sealed"
	"github.com/nlproxy/nlproxy/internal/askreport"
	"github.com/nlproxy/nlproxy/internal/conversation"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// The tools' inputs. Descriptions are short on purpose: an agent pays for
// every definition in its context on every turn (docs/mcp.md gives the size).
type askIn struct {
	Question string `json:"question" jsonschema:"the question in plain language"`
	Profile  string `json:"profile,omitempty" jsonschema:"fast (default), balanced or max; new starts the conversation again"`
}

type sqlIn struct {
	SQL string `json:"sql" jsonschema:"one read-only SELECT statement"`
}

type describeIn struct {
	Tables []string `json:"tables,omitempty" jsonschema:"table names (schema.table or table); none: every table"`
}

type noIn struct{}

// Tool names.
const (
	ToolAsk         = "ask"
	ToolAskSQL      = "ask_sql"
	ToolQuery       = "query"
	ToolListSchemas = "list_schemas"
	ToolDescribe    = "describe"
	ToolExplain     = "explain"
)

// readOnly marks every tool: none changes anything, each may be repeated.
var readOnly = &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}

func (s *Server) addTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolAsk, Annotations: readOnly,
		Description: "Answer a question about the data: nlproxy writes read-only SQL as your role, runs it and returns rows (capped), the SQL and its confidence."},
		func(ctx context.Context, req *mcp.CallToolRequest, in askIn) (*mcp.CallToolResult, any, error) {
			return s.handle(ctx, req, ToolAsk, in.Question, func(ctx context.Context, u *upstream, c *Call) (any, error) {
				return s.ask(ctx, u, c, in, s.conversation(req), true)
			}), nil, nil
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolAskSQL, Annotations: readOnly,
		Description: "Like ask, but return only the SQL nlproxy would run, without running it."},
		func(ctx context.Context, req *mcp.CallToolRequest, in askIn) (*mcp.CallToolResult, any, error) {
			return s.handle(ctx, req, ToolAskSQL, in.Question, func(ctx context.Context, u *upstream, c *Call) (any, error) {
				return s.ask(ctx, u, c, in, s.conversation(req), false)
			}), nil, nil
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolQuery, Annotations: readOnly,
		Description: "Run one read-only SELECT as your role: built-in functions only, time-bounded, rows capped. Errors carry the SQLSTATE."},
		func(ctx context.Context, req *mcp.CallToolRequest, in sqlIn) (*mcp.CallToolResult, any, error) {
			return s.handle(ctx, req, ToolQuery, "", func(ctx context.Context, u *upstream, c *Call) (any, error) {
				return s.query(ctx, u, c, in.SQL)
			}), nil, nil
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolListSchemas, Annotations: readOnly,
		Description: "List the schemas and tables your role may read."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ noIn) (*mcp.CallToolResult, any, error) {
			return s.handle(ctx, req, ToolListSchemas, "", func(ctx context.Context, u *upstream, c *Call) (any, error) {
				return s.listSchemas(ctx, u, c)
			}), nil, nil
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolDescribe, Annotations: readOnly,
		Description: "Describe tables your role may read: columns, types, comments, keys and join paths."},
		func(ctx context.Context, req *mcp.CallToolRequest, in describeIn) (*mcp.CallToolResult, any, error) {
			return s.handle(ctx, req, ToolDescribe, "", func(ctx context.Context, u *upstream, c *Call) (any, error) {
				return s.describe(ctx, u, c, in.Tables)
			}), nil, nil
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolExplain, Annotations: readOnly,
		Description: "Show the planner's plan (EXPLAIN, JSON, not executed) for one read-only SELECT."},
		func(ctx context.Context, req *mcp.CallToolRequest, in sqlIn) (*mcp.CallToolResult, any, error) {
			return s.handle(ctx, req, ToolExplain, "", func(ctx context.Context, u *upstream, c *Call) (any, error) {
				return s.explain(ctx, u, c, in.SQL)
			}), nil, nil
		})
}

// handle runs one tool call on the caller's session and records it.
func (s *Server) handle(ctx context.Context, req *mcp.CallToolRequest, tool, question string,
	run func(context.Context, *upstream, *Call) (any, error)) *mcp.CallToolResult {
	c := &Call{Time: time.Now(), Tool: tool, Question: question}
	u, err := s.session(ctx, req)
	var out any
	if err == nil {
		c.User, c.Database, c.Client = u.id.User, u.id.Database, u.id.Client
		out, err = run(ctx, u, c)
	}
	c.Duration = time.Since(c.Time)
	if err != nil {
		c.Err = pg.ErrorFor(err)
		s.cfg.Logger.Debug("mcp tool call failed", zap.String("tool", tool), zap.Error(err))
	}
	if s.cfg.OnCall != nil {
		s.cfg.OnCall(c)
	}
	if c.Err != nil {
		return errorResult(c.Err)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return errorResult(pg.ErrorFor(err))
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}
}

// errorOut is what an agent is told of a failure: the SQLSTATE first, so
// it can act on the class (42: fix the SQL, 25006/0A000/42501: not allowed,
// 57014: too slow, 54000: too big).
type errorOut struct {
	SQLState string `json:"sqlstate"`
	Message  string `json:"message"`
	Detail   string `json:"detail,omitempty"`
	Hint     string `json:"hint,omitempty"`
	Position int    `json:"position,omitempty"`
}

func errorResult(e *pg.Error) *mcp.CallToolResult {
	b, _ := json.Marshal(struct {
		Error errorOut `json:"error"`
	}{errorOut{SQLState: e.Code, Message: e.Message, Detail: e.Detail, Hint: e.Hint, Position: e.Position}})
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}
}

// checkSize refuses text over the bound before any work (54000).
func (s *Server) checkSize(what, text string) error {
	if len(text) <= s.cfg.MaxSQLBytes {
		return nil
	}
	return &pg.Error{Code: pg.CodeProgramLimitExceeded,
		Message: fmt.Sprintf("nlproxy: the %s is %d bytes, more than the limit of %d", what, len(text), s.cfg.MaxSQLBytes)}
}

// Column is a result column: its name and its type's name.
type Column struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Rows is a capped result as an agent receives it; values are the text
// form Postgres sends, null for NULL.
type Rows struct {
	Columns   []Column    `json:"columns"`
	Rows      [][]*string `json:"rows"`
	RowCount  int         `json:"row_count"`
	Truncated string      `json:"truncated,omitempty"`
}

func (s *Server) rowsOut(r *pg.Rows) Rows {
	out := Rows{Columns: make([]Column, len(r.Columns)), Rows: r.Values, RowCount: len(r.Values)}
	if out.Rows == nil {
		out.Rows = [][]*string{}
	}
	for i, name := range r.Columns {
		out.Columns[i] = Column{Name: name}
		if i < len(r.Types) {
			out.Columns[i].Type = s.types.name(r.Types[i])
		}
	}
	if r.Truncated {
		out.Truncated = fmt.Sprintf("more rows exist: at most %d rows and %d bytes are returned; aggregate, filter or add LIMIT", s.cfg.MaxRows, s.cfg.MaxBytes)
	}
	return out
}

// runLimits bound a run whose rows go to the agent.
func (s *Server) runLimits() pg.Limits {
	return pg.Limits{Timeout: s.cfg.StatementTimeout, MaxRows: s.cfg.MaxRows, MaxBytes: s.cfg.MaxBytes}
}

// AskOut is ask's and ask_sql's answer.
type AskOut struct {
	SQL        string   `json:"sql"`
	Confidence *float64 `json:"confidence,omitempty"`
	Profile    string   `json:"profile"`
	Cached     bool     `json:"cached,omitempty"`
	// UnderstoodAs is a follow-up question as the engine rewrote it from
	// this MCP session's earlier asks.
	UnderstoodAs string `json:"understood_as,omitempty"`
	// Trace summarises the stages: name, time, model calls.
	Trace string `json:"trace"`
	// Notes are literal corrections and other readings the engine
	// considered.
	Notes []string `json:"notes,omitempty"`
	*Rows
}

func (s *Server) ask(ctx context.Context, u *upstream, c *Call, in askIn, h *conversation.History, run bool) (any, error) {
	if err := s.checkSize("question", in.Question); err != nil {
		return nil, err
	}
	select {
	case s.asks <- struct{}{}:
		defer func() { <-s.asks }()
	default:
		return nil, &pg.Error{Code: pg.CodeConfigurationLimitExceeded, Message: fmt.Sprintf("nlproxy: %d questions are being answered already", cap(s.asks)),
			Hint: "Ask again when one has finished; an operator can raise --max-asks."}
	}
	profile := in.Profile
	if profile == ProfileNew {
		h.Reset()
		profile = ""
	}
	res, err := s.cfg.Engine.Translate(ctx, engine.Request{Question: in.Question, Database: u.id.Database, User: u.id.User,
		TxStatus: pg.TxIdle, Exec: u, Profile: profile, History: h})
	if err != nil {
		var f *engine.Failed
		if errors.As(err, &f) {
			c.Report = f.Report()
		}
		return nil, err
	}
	c.Report = res.Report()
	out := AskOut{SQL: res.SQL(), Profile: res.Profile, Cached: res.Cached, Trace: traceSummary(c.Report), UnderstoodAs: res.Standalone}
	if res.Confidence >= 0 {
		conf := res.Confidence
		out.Confidence = &conf
	}
	for _, rw := range res.Rewrites() {
		out.Notes = append(out.Notes, "literal changed to a stored value: "+rw.String())
	}
	for _, alt := range res.Alternatives {
		out.Notes = append(out.Notes, "other reading: "+strings.Join(strings.Fields(alt.Statement.Display()), " "))
	}
	if !run {
		return out, nil
	}
	rows, err := u.run(ctx, res.Statement, s.runLimits(), true)
	if err != nil {
		return nil, err
	}
	r := s.rowsOut(rows)
	out.Rows = &r
	return out, nil
}

// ProfileNew, as an ask's profile, starts the MCP session's conversation
// again (the wire's ask(new):).
const ProfileNew = "new"

// conversation is the follow-up history of the MCP session req came on: that
// session's own, never shared with another (the same role's other sessions
// included), and dropped when it ends.
func (s *Server) conversation(req *mcp.CallToolRequest) *conversation.History {
	ss := req.Session
	if ss == nil {
		return nil
	}
	h := &conversation.History{}
	if v, loaded := s.convs.LoadOrStore(ss, h); loaded {
		return v.(*conversation.History)
	}
	go func() {
		_ = ss.Wait()
		s.convs.Delete(ss)
	}()
	return h
}

// traceSummary is one line per ask: each stage's time and model calls.
func traceSummary(r *askreport.Report) string {
	var b strings.Builder
	var total time.Duration
	for i, st := range r.Stages {
		if i > 0 {
			b.WriteString("; ")
		}
		total += st.Duration
		fmt.Fprintf(&b, "%s %dms", st.Name, st.Duration.Milliseconds())
		if st.LLMCalls > 0 {
			fmt.Fprintf(&b, " (%d model calls)", st.LLMCalls)
		}
	}
	fmt.Fprintf(&b, "; %d model calls, %d+%d tokens", r.LLMCalls, r.PromptTokens, r.CompletionTokens)
	return b.String()
}

// seal checks an agent's SQL as the engine checks a model's answer.
func (s *Server) seal(ctx context.Context, u *upstream, c *Call, sql string) (sealed.Statement, error) {
	c.Report = &askreport.Report{Role: u.id.User, SQL: sql, Confidence: -1}
	if err := s.checkSize("statement", sql); err != nil {
		c.Report.SQL = ""
		return sealed.Statement{}, err
	}
	st, err := s.cfg.Engine.SealSQL(ctx, u.id.Database, u, sql)
	if err != nil {
		return sealed.Statement{}, err
	}
	c.Report.SQL = st.Display()
	return st, nil
}

func (s *Server) query(ctx context.Context, u *upstream, c *Call, sql string) (any, error) {
	st, err := s.seal(ctx, u, c, sql)
	if err != nil {
		return nil, err
	}
	rows, err := u.run(ctx, st, s.runLimits(), true)
	if err != nil {
		return nil, err
	}
	return s.rowsOut(rows), nil
}

// ExplainOut is explain's answer: the plan as EXPLAIN (FORMAT JSON) gives
// it.
type ExplainOut struct {
	SQL  string          `json:"sql"`
	Plan json.RawMessage `json:"plan"`
}

func (s *Server) explain(ctx context.Context, u *upstream, c *Call, sql string) (any, error) {
	st, err := s.seal(ctx, u, c, sql)
	if err != nil {
		return nil, err
	}
	ex, err := guard.Explain(st)
	if err != nil {
		return nil, engine.Refusal(err)
	}
	rows, err := u.run(ctx, ex, pg.Limits{Timeout: s.cfg.StatementTimeout, MaxRows: 1, MaxBytes: s.cfg.MaxBytes}, false)
	if err != nil {
		if errors.Is(err, pg.ErrResultTooLarge) {
			return nil, &pg.Error{Code: pg.CodeProgramLimitExceeded, Message: fmt.Sprintf("nlproxy: the plan is larger than %d bytes", s.cfg.MaxBytes)}
		}
		return nil, err
	}
	if len(rows.Values) != 1 || len(rows.Values[0]) != 1 || rows.Values[0][0] == nil || !json.Valid([]byte(*rows.Values[0][0])) {
		return nil, fmt.Errorf("mcp: EXPLAIN returned no plan")
	}
	return ExplainOut{SQL: st.Display(), Plan: json.RawMessage(*rows.Values[0][0])}, nil
}

// SchemaList is list_schemas' answer.
type SchemaList struct {
	Role       string         `json:"role"`
	SearchPath []string       `json:"search_path"`
	Schemas    []SchemaTables `json:"schemas"`
}

// SchemaTables are a schema's readable tables.
type SchemaTables struct {
	Name   string   `json:"name"`
	Tables []string `json:"tables"`
}

func (s *Server) listSchemas(ctx context.Context, u *upstream, c *Call) (any, error) {
	v, err := s.cfg.Engine.SessionSchema(ctx, u.id.Database, u)
	if err != nil {
		return nil, err
	}
	c.Report = &askreport.Report{Role: v.Role, Confidence: -1}
	out := SchemaList{Role: v.Role, SearchPath: v.SearchPath, Schemas: []SchemaTables{}}
	for _, t := range v.Schema.Tables {
		if n := len(out.Schemas); n == 0 || out.Schemas[n-1].Name != t.Schema {
			i := slices.IndexFunc(out.Schemas, func(x SchemaTables) bool { return x.Name == t.Schema })
			if i < 0 {
				out.Schemas = append(out.Schemas, SchemaTables{Name: t.Schema})
			} else {
				// Keep the order of first appearance; move to the end.
				x := out.Schemas[i]
				out.Schemas = append(slices.Delete(out.Schemas, i, i+1), x)
			}
		}
		last := &out.Schemas[len(out.Schemas)-1]
		last.Tables = append(last.Tables, t.Name)
	}
	return out, nil
}

// maxDescribed bounds describe without names: the rest is listed by name.
const maxDescribed = 50

// TableOut describes one table.
type TableOut struct {
	Name        string      `json:"name"`
	Kind        string      `json:"kind"`
	Comment     string      `json:"comment,omitempty"`
	RowEstimate int64       `json:"row_estimate"`
	RowSecurity bool        `json:"row_security,omitempty"`
	Columns     []ColumnOut `json:"columns"`
	PrimaryKey  []string    `json:"primary_key,omitempty"`
	ForeignKeys []string    `json:"foreign_keys,omitempty"`
}

// ColumnOut describes one column.
type ColumnOut struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable,omitempty"`
	Comment  string `json:"comment,omitempty"`
}

// DescribeOut is describe's answer.
type DescribeOut struct {
	Tables []TableOut `json:"tables"`
	// JoinPaths are joins the workload uses or same-named keys suggest,
	// beyond the declared foreign keys.
	JoinPaths []string `json:"join_paths,omitempty"`
	// NotDescribed are further readable tables, by name.
	NotDescribed []string `json:"not_described,omitempty"`
}

func (s *Server) describe(ctx context.Context, u *upstream, c *Call, names []string) (any, error) {
	v, err := s.cfg.Engine.SessionSchema(ctx, u.id.Database, u)
	if err != nil {
		return nil, err
	}
	c.Report = &askreport.Report{Role: v.Role, Confidence: -1}
	var idx []int
	out := DescribeOut{Tables: []TableOut{}}
	if len(names) == 0 {
		for i := range v.Schema.Tables {
			if i < maxDescribed {
				idx = append(idx, i)
			} else {
				out.NotDescribed = append(out.NotDescribed, v.Schema.Tables[i].QualifiedName())
			}
		}
	}
	for _, n := range names {
		t := v.Schema.TableOnPath(n, v.SearchPath)
		if t == nil {
			// The same answer whether the table does not exist or the role
			// may not read it: describe tells nothing the role cannot see.
			return nil, &pg.Error{Code: pg.CodeUndefinedTable, Message: fmt.Sprintf("nlproxy: relation %q does not exist or your role may not read it", n),
				Hint: "list_schemas shows the tables your role may read."}
		}
		i := slices.IndexFunc(v.Schema.Tables, func(x catalog.Table) bool { return x.Schema == t.Schema && x.Name == t.Name })
		if !slices.Contains(idx, i) {
			idx = append(idx, i)
		}
	}
	for _, i := range idx {
		t := &v.Schema.Tables[i]
		to := TableOut{Name: t.QualifiedName(), Kind: t.Kind, Comment: t.Comment, RowEstimate: t.RowEstimate,
			RowSecurity: slices.Contains(v.Secured, t.Schema+"."+t.Name), PrimaryKey: t.PrimaryKey, Columns: make([]ColumnOut, len(t.Columns))}
		for j, col := range t.Columns {
			to.Columns[j] = ColumnOut{Name: col.Name, Type: col.Type, Nullable: col.Nullable, Comment: col.Comment}
		}
		for _, fk := range t.ForeignKeys {
			to.ForeignKeys = append(to.ForeignKeys, "("+strings.Join(fk.Columns, ", ")+") -> "+
				catalog.QuoteIdent(fk.RefSchema)+"."+catalog.QuoteIdent(fk.RefTable)+"("+strings.Join(fk.RefColumns, ", ")+")")
		}
		out.Tables = append(out.Tables, to)
	}
	for _, j := range v.JoinPaths(ctx, idx) {
		p := j.Left + " = " + j.Right
		if j.Uses > 0 {
			p += " (used " + strconv.Itoa(j.Uses) + "x)"
		}
		out.JoinPaths = append(out.JoinPaths, p)
	}
	return out, nil
}
