package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/router/askfunc"
)

// pgQueryAskFuncs parses the table-function form as router.Translator does
// (the relay itself links no parser).
type pgQueryAskFuncs struct{}

func (pgQueryAskFuncs) ParseAskFunc(sql string) (AskFunc, bool) {
	c, ok := askfunc.Find(sql)
	return AskFunc(c), ok
}

func TestFindAskFunc(t *testing.T) {
	tests := []struct {
		in       string
		kind     MarkerKind
		question string
		profile  string
		code     string // SQLSTATE of a misuse, "" when valid
	}{
		{"SELECT 1", MarkerNone, "", "", ""},
		{"SELECT * FROM nlproxy_stats", MarkerNone, "", "", ""},
		{"SELECT 'nlproxy.ask(1)'", MarkerNone, "", "", ""},
		{"SELECT * FROM nlproxy.ask('how many orders')", MarkerAsk, "how many orders", "", ""},
		{"select * from NLPROXY.ASK(' spaced ')", MarkerAsk, "spaced", "", ""},
		{`SELECT * FROM "nlproxy"."ask"('q')`, MarkerAsk, "q", "", ""},
		{`SELECT * FROM "NLProxy".ask('q')`, MarkerNone, "", "", ""},
		{"SELECT * FROM (SELECT * FROM nlproxy.ask('how many orders')) q LIMIT 1000", MarkerAsk, "how many orders", "", ""},
		{"SELECT * FROM nlproxy.ask('top', profile => 'MAX') t WHERE t.n > 1", MarkerAsk, "top", "max", ""},
		{"SELECT * FROM nlproxy.ask('top', 'fast')", MarkerAsk, "top", "fast", ""},
		{"SELECT * FROM nlproxy.ask_sql('revenue')", MarkerAskSQL, "revenue", "", ""},
		{"SELECT * FROM nlproxy.optimize('SELECT 1')", MarkerOptimize, "SELECT 1", "", ""},
		{"SELECT c.name FROM customers c JOIN nlproxy.ask('x') a ON a.id = c.id", MarkerAsk, "x", "", ""},
		{"WITH a AS (SELECT * FROM nlproxy.ask('x')) SELECT count(*) FROM a", MarkerAsk, "x", "", ""},
		{"SELECT * FROM nlproxy.ask($1)", MarkerAsk, "", "", "22023"},
		{"SELECT * FROM nlproxy.ask('q' || 'r')", MarkerAsk, "", "", "22023"},
		{"SELECT * FROM nlproxy.ask('q', profile => 1)", MarkerAsk, "", "", "22023"},
		{"SELECT * FROM nlproxy.ask('q', mode => 'x')", MarkerAsk, "", "", "42883"},
		{"SELECT * FROM nlproxy.ask()", MarkerAsk, "", "", "42883"},
		{"SELECT * FROM nlproxy.optimize('SELECT 1', 'max')", MarkerOptimize, "", "", "42883"},
		{"SELECT * FROM nlproxy.tell('q')", MarkerAsk, "", "", "42883"},
		{"SELECT nlproxy.ask('q')", MarkerAsk, "", "", "0A000"},
		{"SELECT * FROM nlproxy.ask('a'), nlproxy.ask('b')", MarkerAsk, "", "", "0A000"},
		{"SELECT * FROM nlproxy.ask('a') WITH ORDINALITY", MarkerAsk, "", "", "0A000"},
		{"SELECT 1; SELECT * FROM nlproxy.ask('a')", MarkerAsk, "", "", "0A000"},
		{"SELECT * FROM nlproxy.ask('a'", MarkerNone, "", "", ""}, // a syntax error is Postgres's to report
	}
	for _, tt := range tests {
		if !mayHoldAskFunc([]byte(tt.in)) && tt.kind != MarkerNone {
			t.Errorf("mayHoldAskFunc(%q) = false", tt.in)
			continue
		}
		m := findAskFunc(pgQueryAskFuncs{}, tt.in)
		code := ""
		if m.invalid != nil {
			code = m.invalid.Code
		}
		if m.Kind != tt.kind || code != tt.code || tt.code == "" && (m.Question != tt.question || m.Profile != tt.profile) {
			t.Errorf("findAskFunc(%q) = {%v %q %q %s}, want {%v %q %q %s}", tt.in, m.Kind, m.Question, m.Profile, code, tt.kind, tt.question, tt.profile, tt.code)
		}
		if tt.kind != MarkerNone && m.Statement != tt.in {
			t.Errorf("findAskFunc(%q).Statement = %q", tt.in, m.Statement)
		}
	}
}

func TestMayHoldAskFunc(t *testing.T) {
	for in, want := range map[string]bool{
		"SELECT 1":                         false,
		"SELECT x FROM t WHERE y = 'xx'":   false,
		"x":                                false,
		"nlprox":                           false,
		"nlproxy":                          true,
		"NLPROXY":                          true,
		"select * from NlPrOxY.ask('q')":   true,
		"SELECT 'lproxy', 'nlproXY'":       true,
		"SELECT 'lproxy', 'nlpro' || 'xy'": false,
	} {
		if got := mayHoldAskFunc([]byte(in)); got != want {
			t.Errorf("mayHoldAskFunc(%q) = %v, want %v", in, got, want)
		}
	}
}

// BenchmarkPlainStatementCheck is what every Query and Parse of plain SQL
// pays to find asks: the marker prefix check (before this form existed)
// and, with it, the whole-statement check for nlproxy.* calls.
func BenchmarkPlainStatementCheck(b *testing.B) {
	long := "SELECT o.id, o.total, c.name, c.email FROM orders o JOIN customers c ON c.id = o.customer_id " +
		"WHERE o.created_at > now() - interval '7 days' AND o.status IN ('open', 'paid', 'shipped') ORDER BY o.total DESC LIMIT 100"
	for _, tc := range []struct{ name, sql string }{
		{"pgbench", "SELECT abalance FROM pgbench_accounts WHERE aid = $1;"},
		{"update", "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2;"},
		{"report", long},
		{"8KiB", strings.Repeat("SELECT 1 UNION ALL ", 431) + "SELECT 1"},
	} {
		text := []byte(tc.sql)
		b.Run(tc.name+"/prefix", func(b *testing.B) {
			for b.Loop() {
				if maybeMarker(text[:min(len(text), 64)]) {
					b.Fatal("marker")
				}
			}
		})
		b.Run(tc.name+"/prefix+func", func(b *testing.B) {
			for b.Loop() {
				if maybeMarker(text[:min(len(text), 64)]) || mayHoldAskFunc(text) {
					b.Fatal("marker")
				}
			}
		})
	}
}

// TestTableFunctionThroughProxy: statements holding the table-function form
// reach the translator whole, below and above the read buffer's size (the
// slow path reads those whole); plain statements that merely mention
// nlproxy, or are long, pass through untouched.
func TestTableFunctionThroughProxy(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	tr := &scriptTranslator{}
	_, addr := trustServer(t, &Server{Translator: tr})
	c, err := pgx.Connect(ctx, trustURL(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, size := range []int{10, 70 << 10} {
		pad := strings.Repeat("x", size)
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			var n, l int
			err := c.QueryRow(ctx, "SELECT n, length('"+pad+"') FROM (SELECT * FROM nlproxy.ask('table function')) q LIMIT 1000", mode).Scan(&n, &l)
			if err != nil || n != 7 || l != size {
				t.Errorf("size %d %v: ask = %d, %d, %v", size, mode, n, l, err)
			}
			var s string
			err = c.QueryRow(ctx, "SELECT 'SELECT * FROM nlproxy.ask(''q'')' || length('"+pad+"')", mode).Scan(&s)
			if want := fmt.Sprintf("SELECT * FROM nlproxy.ask('q')%d", size); err != nil || s != want {
				t.Errorf("size %d %v: plain = %q, %v; want %q", size, mode, s, err, want)
			}
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.reqs) != 4 {
		t.Errorf("translator asked %d times, want 4", len(tr.reqs))
	}
}
