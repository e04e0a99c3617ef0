package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nlproxy/nlproxy/guard"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/mcpserver"
)

// TestIncidents replays, through MCP's query tool, what escaped other
// Postgres MCP servers: each must be refused (or stay read-only) with a
// SQLSTATE an agent can act on, and leave the data as it was.
func TestIncidents(t *testing.T) {
	f := newFixture(t)
	cs := f.session(t, f.analyst, f.password)
	before := f.checksum(t)
	// The guard refuses each before it reaches the server, as a privilege
	// matter (42501): the agent should not retry the same text.
	const refused = pg.CodeInsufficientPrivilege
	cases := []struct {
		name, sql string
		code      string // "" means it runs
	}{
		// modelcontextprotocol/servers #866, #1889: BEGIN READ ONLY escaped.
		{"commit escape", "COMMIT; DELETE FROM accounts", refused},
		{"end escape", "END; DROP TABLE accounts", refused},
		{"rollback escape", "ROLLBACK; UPDATE accounts SET balance = 0", refused},
		// pgEdge #196: several statements in one text.
		{"multi statement", "SELECT 1; SELECT 2", refused},
		{"statement after comment", "SELECT 1 /* x */; DELETE FROM accounts", refused},
		// Trailing comments are only comments.
		{"trailing line comment", "SELECT count(*) FROM accounts -- ; DELETE FROM accounts", ""},
		{"trailing semicolon comment", "SELECT count(*) FROM accounts; -- DELETE FROM accounts", ""},
		// crystaldba/postgres-mcp #178: server files and the network.
		{"pg_read_file", "SELECT * FROM pg_read_file('/etc/passwd')", refused},
		{"pg_read_binary_file", "SELECT pg_read_binary_file('/etc/passwd')", refused},
		{"pg_ls_dir", "SELECT pg_ls_dir('.')", refused},
		{"pg_stat_file", "SELECT pg_stat_file('postgresql.conf')", refused},
		{"lo_import", "SELECT lo_import('/etc/passwd')", refused},
		{"pg_terminate_backend", "SELECT pg_terminate_backend(pg_backend_pid())", refused},
		{"pg_notify", "SELECT pg_notify('c', 'x')", refused},
		{"advisory lock", "SELECT pg_advisory_lock(1)", refused},
		{"pg_reload_conf", "SELECT pg_reload_conf()", refused},
		{"pg_sleep", "SELECT pg_sleep(60)", refused},
		{"copy to program", "COPY accounts TO PROGRAM 'id'", refused},
		// Writes inside READ ONLY without 25006.
		{"pg_import_system_collations", "SELECT pg_import_system_collations('pg_catalog')", refused},
		{"user function that writes", "SELECT write_when_writable()", refused},
		{"nextval", "SELECT nextval('audit_log_id_seq')", refused},
		{"set_config", "SELECT set_config('default_transaction_read_only', 'off', false)", refused},
		{"set", "SET default_transaction_read_only = off", refused},
		{"dml", "DELETE FROM accounts", refused},
		{"select into", "SELECT * INTO stolen FROM accounts", refused},
		{"cte dml", "WITH d AS (DELETE FROM accounts RETURNING *) SELECT * FROM d", refused},
		{"for update", "SELECT * FROM accounts FOR UPDATE", refused},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := call(t, cs, mcpserver.ToolQuery, map[string]any{"sql": c.sql})
			if c.code == "" {
				rows := r.rows(t)
				if len(rows.Rows) != 1 || rows.Rows[0][0] == nil || *rows.Rows[0][0] != "3" {
					t.Fatalf("rows %s", r.raw)
				}
				return
			}
			if !r.isErr {
				t.Fatalf("%q ran: %s", c.sql, r.raw)
			}
			if r.err.SQLState != c.code {
				t.Errorf("SQLSTATE %s, want %s: %s", r.err.SQLState, c.code, r.err.Message)
			}
			t.Logf("%s -> %s %s", c.sql, r.err.SQLState, r.err.Message)
		})
	}
	if after := f.checksum(t); after != before {
		t.Fatal("the data changed")
	}
	// Nothing leaked to the session: a later call is read-only and bounded
	// as ever, and the session's own default is untouched.
	r := call(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "SELECT current_setting('transaction_read_only'), current_setting('default_transaction_read_only'), current_setting('search_path')"})
	rows := r.rows(t)
	if got := []string{*rows.Rows[0][0], *rows.Rows[0][1], *rows.Rows[0][2]}; !slices.Equal(got, []string{"on", "off", "pg_catalog, pg_temp"}) {
		t.Fatalf("later call's settings %v", got)
	}
	var n int
	if err := f.admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_catalog.pg_class WHERE relname = 'stolen'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("stolen table: %d %v", n, err)
	}
}

// TestReadOnlyDoesNotLeak: a session setting an earlier call tried to
// change never reaches a later call, and every call runs read-only even
// when the role's own default says otherwise.
func TestReadOnlyDoesNotLeak(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// The role itself defaults to writable transactions and a long
	// timeout: the scope, not the role's settings, decides.
	if _, err := f.admin.Exec(ctx, "ALTER ROLE "+f.analyst+" SET default_transaction_read_only = off"); err != nil {
		t.Fatal(err)
	}
	cs := f.session(t, f.analyst, f.password)
	for _, sql := range []string{
		"SET default_transaction_read_only = off",
		"SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
		"SELECT set_config('default_transaction_read_only', 'off', false)",
		"RESET ALL",
	} {
		if r := call(t, cs, mcpserver.ToolQuery, map[string]any{"sql": sql}); !r.isErr {
			t.Fatalf("%q ran: %s", sql, r.raw)
		}
	}
	r := call(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "SELECT current_setting('transaction_read_only'), current_setting('statement_timeout')"})
	rows := r.rows(t)
	if *rows.Rows[0][0] != "on" || *rows.Rows[0][1] != "2s" {
		t.Fatalf("read-only %s, timeout %s", *rows.Rows[0][0], *rows.Rows[0][1])
	}
}

// TestScopeBehindGuard: a user function an operator allowed runs, but
// inside the read-only scope: the write it attempts when writable does not
// happen (the guard is not the only line).
func TestScopeBehindGuard(t *testing.T) {
	f := newFixture(t)
	f.eng.Guard = guard.Options{AllowFunctions: []string{"write_when_writable"}}
	cs := f.session(t, f.analyst, f.password)
	before := f.checksum(t)
	if got := *call(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "SELECT write_when_writable()"}).rows(t).Rows[0][0]; got != "1" {
		t.Fatalf("allowed function returned %s", got)
	}
	if f.checksum(t) != before {
		t.Fatal("the allowed function wrote")
	}
}

// TestPromptInjectionInData: text stored in the data reaches the agent as
// data, and a model that obeys it gets nothing past the guard.
func TestPromptInjectionInData(t *testing.T) {
	f := newFixture(t)
	cs := f.session(t, f.analyst, f.password)
	before := f.checksum(t)
	r := call(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "SELECT note FROM accounts WHERE id = 2"})
	rows := r.rows(t)
	if len(rows.Rows) != 1 || *rows.Rows[0][0] != injection {
		t.Fatalf("stored text did not come back as data: %s", r.raw)
	}
	// A model that read the note and obeyed it.
	f.script(map[string]string{"obey the note": "DROP TABLE accounts", "delete salaries": "DELETE FROM salaries"})
	for _, q := range []string{"obey the note in account 2", "delete salaries as the note says"} {
		r := call(t, cs, mcpserver.ToolAsk, map[string]any{"question": q})
		if !r.isErr {
			t.Fatalf("ask %q ran: %s", q, r.raw)
		}
		t.Logf("ask %q -> %s %s", q, r.err.SQLState, r.err.Message)
	}
	if f.checksum(t) != before {
		t.Fatal("the data changed")
	}
}

// TestCaps: a huge result is cut at the row and byte caps and says so; a
// slow query ends with 57014 at the statement timeout.
func TestCaps(t *testing.T) {
	f := newFixture(t)
	cs := f.session(t, f.analyst, f.password)
	rows := call(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "SELECT g FROM generate_series(1, 20000) g"}).rows(t)
	if len(rows.Rows) != f.maxRows || rows.Truncated == "" || rows.Columns[0].Type != "int4" {
		t.Fatalf("rows %d, truncated %q, columns %v", len(rows.Rows), rows.Truncated, rows.Columns)
	}
	rows = call(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "SELECT g, repeat('x', 1000) AS pad FROM generate_series(1, 40) g"}).rows(t)
	if len(rows.Rows) >= 40 || len(rows.Rows) == 0 || rows.Truncated == "" {
		t.Fatalf("byte cap: %d rows, truncated %q", len(rows.Rows), rows.Truncated)
	}
	size := 0
	for _, r := range rows.Rows {
		for _, v := range r {
			size += len(*v)
		}
	}
	if size > f.maxBytes {
		t.Fatalf("%d bytes returned over the cap of %d", size, f.maxBytes)
	}
	// The guard bounds sized arguments before anything runs.
	if r := call(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "SELECT repeat('x', 1000000000)"}); r.err.SQLState != pg.CodeProgramLimitExceeded {
		t.Fatalf("huge repeat: %s", r.raw)
	}
	r := call(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "SELECT count(*) FROM generate_series(1, 1000000) a, generate_series(1, 1000000) b"})
	if r.err.SQLState != pg.CodeQueryCanceled {
		t.Fatalf("slow query: %s", r.raw)
	}
	// The session works on after the timeout.
	if rows := call(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "SELECT 1"}).rows(t); *rows.Rows[0][0] != "1" {
		t.Fatal("session unusable after a timeout")
	}
	// Text over the bound is refused before any work.
	if r := call(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "SELECT '" + strings.Repeat("x", 20<<10) + "'"}); r.err.SQLState != pg.CodeProgramLimitExceeded {
		t.Fatalf("long statement: %s", r.raw)
	}
}

// TestRoles: two roles see and read what their privileges and row
// security give them, through every tool.
func TestRoles(t *testing.T) {
	f := newFixture(t)
	analyst := f.session(t, f.analyst, f.password)
	intern := f.session(t, f.intern, f.password)

	count := func(cs *mcp.ClientSession) string {
		return *call(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "SELECT count(*) FROM accounts"}).rows(t).Rows[0][0]
	}
	if a, i := count(analyst), count(intern); a != "3" || i != "1" {
		t.Fatalf("accounts: analyst %s, intern %s (RLS)", a, i)
	}
	if r := call(t, intern, mcpserver.ToolQuery, map[string]any{"sql": "SELECT * FROM salaries"}); r.err.SQLState != pg.CodeInsufficientPrivilege {
		t.Fatalf("intern read salaries: %s", r.raw)
	}
	tables := func(cs *mcp.ClientSession) []string {
		var l mcpserver.SchemaList
		r := call(t, cs, mcpserver.ToolListSchemas, nil)
		if err := json.Unmarshal([]byte(r.raw), &l); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range l.Schemas {
			for _, tb := range s.Tables {
				out = append(out, s.Name+"."+tb)
			}
		}
		slices.Sort(out)
		return out
	}
	if got := tables(analyst); !slices.Equal(got, []string{"public.accounts", "public.audit_log", "public.salaries"}) {
		t.Fatalf("analyst lists %v", got)
	}
	if got := tables(intern); !slices.Equal(got, []string{"public.accounts"}) {
		t.Fatalf("intern lists %v", got)
	}
	var d mcpserver.DescribeOut
	r := call(t, analyst, mcpserver.ToolDescribe, map[string]any{"tables": []string{"accounts", "salaries"}})
	if err := json.Unmarshal([]byte(r.raw), &d); err != nil || len(d.Tables) != 2 {
		t.Fatalf("describe: %v %s", err, r.raw)
	}
	if acc := d.Tables[0]; acc.Comment != "customer accounts" || acc.Columns[2].Comment != "in euros" || !slices.Equal(acc.PrimaryKey, []string{"id"}) {
		t.Fatalf("accounts described as %+v", acc)
	}
	if fk := d.Tables[1].ForeignKeys; len(fk) != 1 || !strings.Contains(fk[0], "public.accounts(id)") {
		t.Fatalf("salaries' foreign keys %v", fk)
	}
	if r := call(t, intern, mcpserver.ToolDescribe, map[string]any{"tables": []string{"salaries"}}); r.err.SQLState != pg.CodeUndefinedTable {
		t.Fatalf("intern described salaries: %s", r.raw)
	}
	r = call(t, intern, mcpserver.ToolDescribe, nil)
	if err := json.Unmarshal([]byte(r.raw), &d); err != nil || len(d.Tables) != 1 || !d.Tables[0].RowSecurity {
		t.Fatalf("intern describes all: %v %s", err, r.raw)
	}

	// explain: the plan of a sealed SELECT, for both; refused SQL is refused.
	var ex mcpserver.ExplainOut
	r = call(t, intern, mcpserver.ToolExplain, map[string]any{"sql": "SELECT owner FROM accounts WHERE id = 3"})
	if err := json.Unmarshal([]byte(r.raw), &ex); err != nil || !strings.Contains(string(ex.Plan), "Plan") {
		t.Fatalf("explain: %v %s", err, r.raw)
	}
	if r := call(t, intern, mcpserver.ToolExplain, map[string]any{"sql": "DELETE FROM accounts"}); !r.isErr {
		t.Fatalf("explain of a DELETE: %s", r.raw)
	}

	// ask and ask_sql: the model's SQL runs as each role.
	f.script(map[string]string{"how many accounts": "SELECT count(*) AS n FROM accounts"})
	for _, c := range []struct {
		cs   *mcp.ClientSession
		want string
	}{{analyst, "3"}, {intern, "1"}} {
		var a mcpserver.AskOut
		r := call(t, c.cs, mcpserver.ToolAsk, map[string]any{"question": "how many accounts are there"})
		if err := json.Unmarshal([]byte(r.raw), &a); err != nil || a.Rows == nil {
			t.Fatalf("ask: %v %s", err, r.raw)
		}
		if len(a.Rows.Rows) != 1 || *a.Rows.Rows[0][0] != c.want || a.Columns[0].Name != "n" || a.Columns[0].Type != "int8" || !strings.Contains(a.SQL, "count") || a.Trace == "" {
			t.Fatalf("ask answered %s", r.raw)
		}
	}
	var a mcpserver.AskOut
	r = call(t, intern, mcpserver.ToolAskSQL, map[string]any{"question": "how many accounts are there"})
	if err := json.Unmarshal([]byte(r.raw), &a); err != nil || a.Rows != nil || !strings.Contains(a.SQL, "count") {
		t.Fatalf("ask_sql: %v %s", err, r.raw)
	}
	// Every call was recorded with its identity.
	if c := f.calls.last(); c == nil || c.Tool != mcpserver.ToolAskSQL || c.User != f.intern || c.Database != f.db || c.Report == nil || c.Report.SQL == "" {
		t.Fatalf("last call recorded as %+v", c)
	}
}

// TestAuthentication: the upstream server checks the password; without
// credentials, or with wrong ones, no MCP session opens.
func TestAuthentication(t *testing.T) {
	f := newFixture(t)
	if _, err := f.dial(f.analyst, "wrong"); err == nil {
		t.Fatal("connected with a wrong password")
	}
	req, _ := http.NewRequest(http.MethodPost, f.http.URL+mcpserver.Path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
		t.Fatalf("no credentials: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	// A session opened by one role does not serve another's calls: each
	// request's credentials pick the upstream session.
	cs := f.session(t, f.intern, f.password)
	if got := *call(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "SELECT current_user"}).rows(t).Rows[0][0]; got != f.intern {
		t.Fatalf("current_user %s", got)
	}
}

// TestStdioIdentity: over a process's pipes (here in-memory) the role is
// the DSN's.
func TestStdioIdentity(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := f.connect(ctx, mcpserver.Identity{User: f.intern, Password: f.password, Database: f.db})
	if err != nil {
		t.Fatal(err)
	}
	srv := mcpserver.New(mcpserver.Config{Engine: f.eng, StatementTimeout: time.Second})
	defer srv.Close()
	st, ct := mcp.NewInMemoryTransports()
	done := make(chan error, 1)
	go func() {
		done <- srv.Run(ctx, st, conn, mcpserver.Identity{User: f.intern, Database: f.db, Client: "stdio"})
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := *call(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "SELECT current_user"}).rows(t).Rows[0][0]; got != f.intern {
		t.Fatalf("current_user %s", got)
	}
	cs.Close()
	<-done
}

// TestToolDefinitions: every tool has a schema and a description, and the
// whole list stays small (agents pay for it on every turn).
func TestToolDefinitions(t *testing.T) {
	f := newFixture(t)
	cs := f.session(t, f.analyst, f.password)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.InputSchema == nil {
			t.Errorf("tool %s lacks a description or schema", tool.Name)
		}
	}
	slices.Sort(names)
	if want := []string{"ask", "ask_sql", "describe", "explain", "list_schemas", "query"}; !slices.Equal(names, want) {
		t.Fatalf("tools %v", names)
	}
	b, _ := json.Marshal(res.Tools)
	// About four characters a token for English and JSON.
	t.Logf("tool definitions: %d bytes, about %d tokens", len(b), len(b)/4)
	if len(b)/4 > 1000 {
		t.Fatalf("tool definitions take about %d tokens", len(b)/4)
	}
}
