package asktest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// testTableFunction drives the valid-SQL ask form, SELECT … FROM
// nlproxy.ask('…'), with psql and pgx (simple and extended protocol, a
// statement prepared once and executed twice): bare, wrapped as BI tools
// wrap queries, and with a WHERE and a join around it.
func testTableFunction(t *testing.T, f *fixture) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const q = "orders per customer, as a table function"
	const gen = "SELECT customer_id, count(*) AS n FROM orders GROUP BY customer_id"
	f.script(q, keywordsReply([]string{"orders", "customer"}, nil), sqlReply(gen))
	ask := "nlproxy.ask('" + q + "')"

	cases := []struct{ name, stmt, direct string }{
		{"bare", "SELECT * FROM " + ask + " ORDER BY customer_id",
			"SELECT * FROM (" + gen + ") a ORDER BY customer_id"},
		{"wrapped", "SELECT * FROM (SELECT * FROM " + ask + " ORDER BY 1) q LIMIT 1000",
			"SELECT * FROM (SELECT * FROM (" + gen + ") a ORDER BY 1) q LIMIT 1000"},
		{"where and join", "SELECT c.name, a.n FROM customers c JOIN " + ask + " a ON a.customer_id = c.customer_id WHERE a.n > 1 ORDER BY c.name, a.n",
			"SELECT c.name, a.n FROM customers c JOIN (" + gen + ") a ON a.customer_id = c.customer_id WHERE a.n > 1 ORDER BY c.name, a.n"},
	}
	t.Run("psql", func(t *testing.T) {
		for _, tc := range cases {
			out, stderr, err := psql(ctx, t, f.proxy, "-F", ",", "-R", ";", "-c", tc.stmt)
			if err != nil {
				t.Fatalf("%s: %v\n%s", tc.name, err, stderr)
			}
			if want := f.direct(t, tc.direct); out != want || want == "" {
				t.Errorf("%s: %q, want %q", tc.name, out, want)
			}
			if !strings.Contains(stderr, "NOTICE:") || !strings.Contains(stderr, gen) {
				t.Errorf("%s: no NOTICE with the generated SQL: %q", tc.name, stderr)
			}
		}
	})
	t.Run("pgx", func(t *testing.T) {
		c := f.connect(t, f.proxy)
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec} {
			for _, tc := range cases {
				// The same statement written out as plain SQL, in the same
				// protocol mode (binary results in the extended ones).
				want, err := queryText(ctx, c.Conn, tc.direct, mode)
				if err != nil || want == "" {
					t.Fatalf("%v %s: direct: %q, %v", mode, tc.name, want, err)
				}
				// CacheStatement prepares the statement once and executes
				// it again the second time.
				for i := 0; i < 2; i++ {
					got, err := queryText(ctx, c.Conn, tc.stmt, mode)
					if err != nil || got != want {
						t.Fatalf("%v %s #%d: %d bytes, %v; want the %d bytes of the direct query", mode, tc.name, i, len(got), err, len(want))
					}
				}
			}
			assertUsable(ctx, t, c)
		}
	})
	t.Run("ask_sql", func(t *testing.T) {
		c := f.connect(t, f.proxy)
		got, err := queryText(ctx, c.Conn, "SELECT sql, profile FROM nlproxy.ask_sql('"+q+"') WHERE llm_calls <> '0' OR cached = 'true'")
		if err != nil || got != gen+",fast" {
			t.Fatalf("ask_sql: %q, %v; want %q", got, err, gen+",fast")
		}
	})
	t.Run("refused", func(t *testing.T) {
		c := f.connect(t, f.proxy)
		calls := f.chatCalls()
		tests := []struct{ stmt, code string }{
			// The SQL around the call is checked as generated SQL is, before
			// the model is asked.
			{"INSERT INTO scratch (note) SELECT 'x' FROM " + ask, "42501"},
			{"SELECT * FROM " + ask + " FOR UPDATE", "42501"},
			{"SELECT * FROM nlproxy.ask('" + q + "' || '')", "22023"},
			{"SELECT nlproxy.ask('" + q + "')", "0A000"},
			{"SELECT * FROM nlproxy.answer('" + q + "')", "42883"},
		}
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			for _, tt := range tests {
				_, err := queryText(ctx, c.Conn, tt.stmt, mode)
				var pe *pgconn.PgError
				if !asPgError(err, &pe) || pe.Code != tt.code || pe.Hint == "" {
					t.Errorf("%v %s: %v, want SQLSTATE %s with a hint", mode, tt.stmt, err, tt.code)
				}
				assertUsable(ctx, t, c)
			}
		}
		if n := f.chatCalls(); n != calls {
			t.Errorf("refused statements made %d model calls", n-calls)
		}
		if after := f.direct(t, "SELECT count(*) FROM scratch WHERE note = 'x'"); after != "0" {
			t.Errorf("scratch rows written: %s", after)
		}
	})
}
