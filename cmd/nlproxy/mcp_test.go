package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/mcpserver"
	"github.com/nlproxy/nlproxy/testkit/needs"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

func TestMCPConfig(t *testing.T) {
	base := []string{"--upstream", "postgres://u@127.0.0.1:5432/db"}
	for _, tt := range []struct {
		args []string
		want string // "" means valid
	}{
		{[]string{"--mcp-listen", "127.0.0.1:7000"}, ""},
		{[]string{"--mcp-listen", "localhost:7000"}, ""},
		{[]string{"--mcp-listen", "[::1]:7000"}, ""},
		{[]string{"--mcp-listen", "0.0.0.0:7000"}, "needs --tls-cert"},
		{[]string{"--mcp-listen", ":7000"}, "needs --tls-cert"},
		{[]string{"--mcp-listen", "10.1.2.3:7000"}, "needs --tls-cert"},
		{[]string{"--mcp-listen", "127.0.0.1:7000", "--no-engine"}, "needs the engine"},
		{[]string{"--mcp-max-rows", "-1"}, "must not be negative"},
	} {
		_, err := loadConfig(append(slices.Clone(base), tt.args...), func(string) string { return "" }, io.Discard)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%v: %v", tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%v: error %v, want %q", tt.args, err, tt.want)
		}
	}
	if err := run(context.Background(), []string{"mcp"}, io.Discard, io.Discard); exitCode(err) != 2 {
		t.Errorf("mcp without --stdio: %v", err)
	}
	var help strings.Builder
	if err := run(context.Background(), []string{"help", "mcp"}, &help, io.Discard); err != nil || !strings.Contains(help.String(), "nlproxy mcp --stdio") {
		t.Errorf("help mcp: %v %q", err, help.String())
	}
}

// mcpEnv is a cluster with an agent role and a table it may read.
type mcpEnv struct {
	c                 *pgcluster.Cluster
	db, role, pass    string
	certFile, keyFile string
	certPEM           []byte
}

func newMCPEnv(t *testing.T) *mcpEnv {
	t.Helper()
	ctx := context.Background()
	e := &mcpEnv{c: pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"}), db: pgtest.UniqueName(t, "mcpdb"),
		role: pgtest.UniqueName(t, "agent"), pass: "agent-secret"}
	if err := e.c.CreateRole(ctx, e.role, e.pass, false); err != nil {
		t.Fatal(err)
	}
	if err := e.c.CreateDatabase(ctx, e.db); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Exec(ctx, e.db, "CREATE TABLE items (id int PRIMARY KEY, name text); INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 10) g; GRANT SELECT ON items TO "+e.role); err != nil {
		t.Fatal(err)
	}
	cert, key, err := pgtest.SelfSignedCert()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e.certFile, e.keyFile, e.certPEM = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), cert
	if err := os.WriteFile(e.certFile, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// serve runs `nlproxy serve` with MCP on HTTPS and returns the wire
// address and the MCP URL once both listen.
func (e *mcpEnv) serve(t *testing.T, extra ...string) (wire, mcpURL string) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	logR, logW := io.Pipe()
	done := make(chan error, 1)
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--upstream", e.c.URL(pgtest.Superuser, pgtest.SuperuserPassword, ""),
		"--mcp-listen", "127.0.0.1:0", "--mcp-database", e.db, "--tls-cert", e.certFile, "--tls-key", e.keyFile,
		"--ollama-host", "http://127.0.0.1:1", "--data-dir", "", "--log-format", "json"}, extra...)
	go func() {
		done <- run(ctx, args, io.Discard, logW)
		logW.Close()
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	sc := bufio.NewScanner(logR)
	for (wire == "" || mcpURL == "") && sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			continue
		}
		switch m["msg"] {
		case "nlproxy listening":
			wire, _ = m["addr"].(string)
		case "MCP endpoint listening":
			mcpURL, _ = m["url"].(string)
		}
	}
	go io.Copy(io.Discard, logR) //nolint:errcheck // keep draining until serve ends
	if wire == "" || mcpURL == "" {
		t.Fatalf("serve did not listen (wire %q, mcp %q)", wire, mcpURL)
	}
	return wire, mcpURL
}

// client connects the Go SDK over HTTPS, trusting the test certificate.
func (e *mcpEnv) client(url, user, password string) (*mcp.ClientSession, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.certPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return mcp.NewClient(&mcp.Implementation{Name: "nlproxy-cmd-test", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: basicAuthRT{user, password, tr}}}, nil)
}

type basicAuthRT struct {
	user, password string
	next           http.RoundTripper
}

func (b basicAuthRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(b.user, b.password)
	return b.next.RoundTrip(r)
}

func toolText(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res.Content[0].(*mcp.TextContent).Text, res.IsError
}

// TestMCPServe: `nlproxy serve --mcp-listen` serves MCP over TLS with the
// wire listener's certificate; the agent is its own role, checked by the
// server; its calls reach the audit log like wire asks.
func TestMCPServe(t *testing.T) {
	e := newMCPEnv(t)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	_, url := e.serve(t, "--audit-log", audit, "--audit-redact", "literals")
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("MCP URL %s is not TLS", url)
	}
	if _, err := e.client(url, e.role, "wrong"); err == nil {
		t.Fatal("connected with a wrong password")
	}
	cs, err := e.client(url, e.role, e.pass)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	text, isErr := toolText(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "SELECT current_user AS who, count(*) AS n FROM items WHERE name <> 'secret literal'"})
	if isErr || !strings.Contains(text, `"rows":[["`+e.role+`","10"]]`) {
		t.Fatalf("query: %s", text)
	}
	if text, isErr := toolText(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "DELETE FROM items"}); !isErr {
		t.Fatalf("DELETE ran: %s", text)
	}
	// The audit lines are written as the calls end.
	b, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("audit log has %d lines:\n%s", len(lines), b)
	}
	var first, second map[string]any
	if json.Unmarshal([]byte(lines[0]), &first) != nil || json.Unmarshal([]byte(lines[1]), &second) != nil {
		t.Fatalf("audit lines not JSON:\n%s", b)
	}
	if first["mcp_tool"] != "query" || first["user"] != e.role || first["database"] != e.db || first["outcome"] != "answered" ||
		strings.Contains(lines[0], "secret literal") {
		t.Errorf("audit line %s", lines[0])
	}
	if second["outcome"] != "failed" || second["sqlstate"] == "" {
		t.Errorf("audit line %s", lines[1])
	}
}

// TestMCPStdio: `nlproxy mcp --stdio` serves an agent that starts it as a
// process (the Go SDK's command transport), as the DSN's role.
func TestMCPStdio(t *testing.T) {
	e := newMCPEnv(t)
	bin := buildNLProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "mcp", "--stdio", "--mcp-dsn", e.c.URL(e.role, e.pass, e.db),
		"--catalog-dsn", e.c.URL(pgtest.Superuser, pgtest.SuperuserPassword, e.db),
		"--ollama-host", "http://127.0.0.1:1", "--data-dir", "")
	cmd.Env = append(os.Environ(), "NLPROXY_UPSTREAM=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	text, isErr := toolText(t, cs, mcpserver.ToolQuery, map[string]any{"sql": "SELECT current_user AS who, count(*) AS n FROM items"})
	if isErr || !strings.Contains(text, `"rows":[["`+e.role+`","10"]]`) {
		t.Fatalf("query: %s\n%s", text, stderr.String())
	}
	text, isErr = toolText(t, cs, mcpserver.ToolListSchemas, nil)
	if isErr || !strings.Contains(text, `"items"`) {
		t.Fatalf("list_schemas: %s", text)
	}
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}

	// The official Python SDK starts it the same way (stdio_client).
	py := os.Getenv("NLPROXY_MCP_PYTHON")
	if py == "" {
		if base, err := os.UserCacheDir(); err == nil {
			py = filepath.Join(base, "nlproxy", "mcpclients", "venv", "bin", "python")
		}
	}
	if _, err := os.Stat(py); err != nil {
		needs.Missing(t, "the MCP Python SDK is not installed: run scripts/mcpclients.sh (CI's .ci/run does)")
	}
	command, _ := json.Marshal(append([]string{bin}, cmd.Args[1:]...))
	pc := exec.CommandContext(ctx, py, "../../mcpserver/testdata/client.py", `[["query", {"sql": "SELECT current_user AS who"}], ["list_schemas", {}]]`)
	pc.Env = append(os.Environ(), "NLPROXY_UPSTREAM=", "MCP_COMMAND="+string(command))
	var perr strings.Builder
	pc.Stderr = &perr
	out, err := pc.Output() // the client's JSON line only; nlproxy's log goes to stderr
	if err != nil || !strings.Contains(string(out), `\"rows\":[[\"`+e.role+`\"]]`) || !strings.Contains(string(out), `\"items\"`) {
		t.Fatalf("python over stdio: %v\n%s\n%s", err, out, perr.String())
	}
}

// TestMCPLatency measures what a query call over MCP (HTTPS, the guard,
// the sealed scope) adds over the same statement sent through the wire
// protocol to the proxy (relayed untouched), alternating the two in one
// run. A measurement, not a check: set NLPROXY_MCP_LATENCY=N to run N
// rounds.
func TestMCPLatency(t *testing.T) {
	n := 0
	if _, err := fmt.Sscan(os.Getenv("NLPROXY_MCP_LATENCY"), &n); err != nil || n <= 0 {
		t.Skip("a measurement: set NLPROXY_MCP_LATENCY=rounds to run it")
	}
	e := newMCPEnv(t)
	wire, url := e.serve(t)
	cs, err := e.client(url, e.role, e.pass)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", e.role, e.pass, wire, e.db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const sql = "SELECT id, name FROM items WHERE id <= 5 ORDER BY id"
	var wireT, mcpT []time.Duration
	for i := 0; i < n+5; i++ { // the first rounds warm both paths up
		s := time.Now()
		rows, err := conn.Query(ctx, sql)
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for rows.Next() {
			k++
		}
		rows.Close()
		w := time.Since(s)
		s = time.Now()
		if text, isErr := toolText(t, cs, mcpserver.ToolQuery, map[string]any{"sql": sql}); isErr || k != 5 {
			t.Fatalf("query: %s", text)
		}
		m := time.Since(s)
		if i >= 5 {
			wireT, mcpT = append(wireT, w), append(mcpT, m)
		}
	}
	slices.Sort(wireT)
	slices.Sort(mcpT)
	med := func(d []time.Duration) time.Duration { return d[len(d)/2] }
	p90 := func(d []time.Duration) time.Duration { return d[len(d)*9/10] }
	t.Logf("%d rounds: wire median %v p90 %v; MCP query median %v p90 %v; MCP adds %v at the median (%.1fx)",
		n, med(wireT), p90(wireT), med(mcpT), p90(mcpT), med(mcpT)-med(wireT), float64(med(mcpT))/float64(med(wireT)))
}
