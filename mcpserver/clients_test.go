package mcpserver_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/mcpserver"
	"github.com/nlproxy/nlproxy/testkit/needs"
)

// clientOut is what testdata/client.py and client.mjs print.
type clientOut struct {
	SDK   string   `json:"sdk"`
	Tools []string `json:"tools"`
	Calls []struct {
		Tool    string `json:"tool"`
		IsError bool   `json:"is_error"`
		Text    string `json:"text"`
	} `json:"calls"`
}

// mcpClientsDir is where scripts/mcpclients.sh installs the SDKs.
func mcpClientsDir() string {
	if d := os.Getenv("NLPROXY_CACHE"); d != "" {
		return filepath.Join(d, "mcpclients")
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(base, "nlproxy", "mcpclients")
}

// pythonSDK is the interpreter with the `mcp` package, or "" when absent.
func pythonSDK() string {
	if p := os.Getenv("NLPROXY_MCP_PYTHON"); p != "" {
		return p
	}
	p := filepath.Join(mcpClientsDir(), "venv", "bin", "python")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	if exec.Command(p, "-c", "import mcp.client.streamable_http").Run() != nil {
		return ""
	}
	return p
}

// typescriptSDK is the node_modules holding @modelcontextprotocol/sdk, or "".
func typescriptSDK() string {
	d := os.Getenv("NLPROXY_MCP_NODE_MODULES")
	if d == "" {
		d = filepath.Join(mcpClientsDir(), "node", "node_modules")
	}
	if _, err := os.Stat(filepath.Join(d, "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		return ""
	}
	if _, err := exec.LookPath("node"); err != nil {
		return ""
	}
	return d
}

// clientCalls call every tool, some of them as both roles may and some as
// only the analyst may.
var clientCalls = [][2]any{
	{mcpserver.ToolListSchemas, map[string]any{}},
	{mcpserver.ToolDescribe, map[string]any{"tables": []string{"accounts"}}},
	{mcpserver.ToolQuery, map[string]any{"sql": "SELECT count(*) AS n FROM accounts"}},
	{mcpserver.ToolQuery, map[string]any{"sql": "SELECT sum(amount) AS total FROM salaries"}},
	{mcpserver.ToolQuery, map[string]any{"sql": "COMMIT; DELETE FROM accounts"}},
	{mcpserver.ToolExplain, map[string]any{"sql": "SELECT * FROM accounts WHERE id = 1"}},
	{mcpserver.ToolAsk, map[string]any{"question": "how many accounts are there"}},
	{mcpserver.ToolAskSQL, map[string]any{"question": "how many accounts are there"}},
}

// TestRealClients: the official Python and TypeScript SDKs connect over
// Streamable HTTP as two roles of different privileges, list the tools and
// call each one. It logs the client × tool matrix.
func TestRealClients(t *testing.T) {
	clients := []struct {
		name string
		// cmd is the client's command line, "" when the SDK is absent.
		cmd func(calls string) []string
		env func() []string
	}{
		{"python", func(calls string) []string {
			if py := pythonSDK(); py != "" {
				return []string{py, "testdata/client.py", calls}
			}
			return nil
		}, func() []string { return nil }},
		{"typescript", func(calls string) []string {
			if typescriptSDK() != "" {
				return []string{"node", "testdata/client.mjs", calls}
			}
			return nil
		}, func() []string { return []string{"NODE_PATH=" + typescriptSDK()} }},
	}
	calls, _ := json.Marshal(clientCalls)
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			argv := cl.cmd(string(calls))
			if argv == nil {
				needs.Missing(t, "the MCP %s SDK is not installed: run scripts/mcpclients.sh (CI's .ci/run does)", cl.name)
			}
			f := newFixture(t)
			f.script(map[string]string{"how many accounts": "SELECT count(*) AS n FROM accounts"})
			before := f.checksum(t)
			for _, role := range []string{f.analyst, f.intern} {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
				cmd.Env = append(os.Environ(), "MCP_URL="+f.http.URL+mcpserver.Path, "MCP_USER="+role, "MCP_PASSWORD="+f.password)
				cmd.Env = append(cmd.Env, cl.env()...)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				stdout, err := cmd.Output()
				cancel()
				if err != nil {
					t.Fatalf("%s client as %s: %v\n%s", cl.name, role, err, stderr.String())
				}
				var out clientOut
				if err := json.Unmarshal(stdout, &out); err != nil {
					t.Fatalf("%s client output: %v\n%s\n%s", cl.name, err, stdout, stderr.String())
				}
				checkClient(t, f, out, role == f.analyst)
			}
			if f.checksum(t) != before {
				t.Fatal("the data changed")
			}
		})
	}
}

// checkClient checks one client's calls as the analyst (all) or the intern
// (row security on accounts, no salaries), and logs the matrix row.
func checkClient(t *testing.T, f *fixture, out clientOut, analyst bool) {
	t.Helper()
	if want := []string{"ask", "ask_sql", "describe", "explain", "list_schemas", "query"}; !slices.Equal(out.Tools, want) {
		t.Fatalf("%s lists tools %v", out.SDK, out.Tools)
	}
	if len(out.Calls) != len(clientCalls) {
		t.Fatalf("%s made %d calls", out.SDK, len(out.Calls))
	}
	who, accounts := "intern", `"1"`
	if analyst {
		who, accounts = "analyst", `"3"`
	}
	var row []string
	for i, c := range out.Calls {
		var e struct {
			Error struct {
				SQLState string `json:"sqlstate"`
			} `json:"error"`
		}
		_ = json.Unmarshal([]byte(c.Text), &e)
		cell := c.Tool + "=ok"
		if c.IsError {
			cell = c.Tool + "=" + e.Error.SQLState
		}
		row = append(row, cell)
		fail := func(why string) { t.Errorf("%s as %s, call %d (%s): %s: %s", out.SDK, who, i, c.Tool, why, c.Text) }
		switch i {
		case 0: // list_schemas
			if c.IsError || strings.Contains(c.Text, "salaries") != analyst {
				fail("wrong tables")
			}
		case 1: // describe
			if c.IsError || !strings.Contains(c.Text, "customer accounts") {
				fail("no description")
			}
		case 2, 6: // query, ask: row security decides the count
			if c.IsError || !strings.Contains(c.Text, `"rows":[[`+accounts+`]]`) {
				fail("wrong count")
			}
		case 3: // salaries: the intern may not
			if analyst && (c.IsError || !strings.Contains(c.Text, `"11000"`)) || !analyst && e.Error.SQLState != pg.CodeInsufficientPrivilege {
				fail("wrong privileges")
			}
		case 4: // the COMMIT escape
			if !c.IsError || e.Error.SQLState != pg.CodeInsufficientPrivilege {
				fail("escape not refused")
			}
		case 5: // explain
			if c.IsError || !strings.Contains(c.Text, `"plan"`) {
				fail("no plan")
			}
		case 7: // ask_sql
			if c.IsError || !strings.Contains(c.Text, "count(*)") || strings.Contains(c.Text, `"rows"`) {
				fail("not the SQL alone")
			}
		}
	}
	t.Logf("matrix %s as %s: %s", out.SDK, who, strings.Join(row, " "))
}
