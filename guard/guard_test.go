package guard

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/nlproxy/nlproxy/internal/pg"
)

type guardCase struct {
	name     string
	sql      string
	opts     Options
	wantCode string // "" = accepted
}

// corpus is shared with the Postgres test, which runs every accepted case.
var corpus = []guardCase{
	// Rejected: more than one statement, however disguised.
	{"stacked", "SELECT 1; DROP TABLE customers", Options{}, pg.CodeInsufficientPrivilege},
	{"stacked two selects", "SELECT 1; SELECT 2", Options{}, pg.CodeInsufficientPrivilege},
	{"comment hides semicolon", "SELECT 1 /* ; */; DELETE FROM customers --", Options{}, pg.CodeInsufficientPrivilege},
	{"line comment then stmt", "SELECT 1 -- harmless\n; DELETE FROM customers", Options{}, pg.CodeInsufficientPrivilege},
	{"nested comment", "SELECT 1 /* a /* b */ ; */ ; UPDATE customers SET name = 'x'", Options{}, pg.CodeInsufficientPrivilege},
	// Rejected: not a SELECT.
	{"DO", "DO $$BEGIN PERFORM 1; END$$", Options{}, pg.CodeInsufficientPrivilege},
	{"CALL", "CALL p()", Options{}, pg.CodeInsufficientPrivilege},
	{"COPY to program", "COPY customers TO PROGRAM 'curl evil'", Options{}, pg.CodeInsufficientPrivilege},
	{"COPY from program", "COPY customers FROM PROGRAM 'id'", Options{}, pg.CodeInsufficientPrivilege},
	{"COPY query to stdout", "COPY (SELECT 1) TO STDOUT", Options{}, pg.CodeInsufficientPrivilege},
	{"SET", "SET search_path = evil", Options{}, pg.CodeInsufficientPrivilege},
	{"SET LOCAL", "SET LOCAL statement_timeout = 0", Options{}, pg.CodeInsufficientPrivilege},
	{"RESET", "RESET ALL", Options{}, pg.CodeInsufficientPrivilege},
	{"SHOW", "SHOW search_path", Options{}, pg.CodeInsufficientPrivilege},
	{"INSERT", "INSERT INTO customers(name) VALUES ('x')", Options{}, pg.CodeInsufficientPrivilege},
	{"UPDATE", "UPDATE customers SET name = 'x'", Options{}, pg.CodeInsufficientPrivilege},
	{"DELETE", "DELETE FROM customers", Options{}, pg.CodeInsufficientPrivilege},
	{"MERGE", "MERGE INTO customers c USING orders o ON o.customer_id = c.id WHEN MATCHED THEN DELETE", Options{}, pg.CodeInsufficientPrivilege},
	{"TRUNCATE", "TRUNCATE customers", Options{}, pg.CodeInsufficientPrivilege},
	{"CREATE TABLE AS", "CREATE TABLE t2 AS SELECT * FROM customers", Options{}, pg.CodeInsufficientPrivilege},
	{"CREATE MATERIALIZED VIEW", "CREATE MATERIALIZED VIEW mv AS SELECT 1", Options{}, pg.CodeInsufficientPrivilege},
	{"LOCK", "LOCK TABLE customers IN ACCESS EXCLUSIVE MODE", Options{}, pg.CodeInsufficientPrivilege},
	{"VACUUM", "VACUUM customers", Options{}, pg.CodeInsufficientPrivilege},
	{"GRANT", "GRANT ALL ON customers TO public", Options{}, pg.CodeInsufficientPrivilege},
	{"PREPARE", "PREPARE p AS SELECT 1", Options{}, pg.CodeInsufficientPrivilege},
	{"EXECUTE", "EXECUTE p", Options{}, pg.CodeInsufficientPrivilege},
	{"DECLARE CURSOR", "DECLARE c CURSOR FOR SELECT 1", Options{}, pg.CodeInsufficientPrivilege},
	{"LISTEN", "LISTEN ch", Options{}, pg.CodeInsufficientPrivilege},
	{"NOTIFY", "NOTIFY ch, 'x'", Options{}, pg.CodeInsufficientPrivilege},
	{"BEGIN", "BEGIN", Options{}, pg.CodeInsufficientPrivilege},
	{"COMMIT", "COMMIT", Options{}, pg.CodeInsufficientPrivilege},
	{"ALTER SYSTEM", "ALTER SYSTEM SET fsync = off", Options{}, pg.CodeInsufficientPrivilege},
	// Rejected: EXPLAIN forms.
	{"EXPLAIN when not allowed", "EXPLAIN SELECT 1", Options{}, pg.CodeInsufficientPrivilege},
	{"EXPLAIN ANALYZE DELETE", "EXPLAIN ANALYZE DELETE FROM customers", Options{AllowExplain: true}, pg.CodeInsufficientPrivilege},
	{"EXPLAIN ANALYZE SELECT", "EXPLAIN ANALYZE SELECT * FROM customers", Options{AllowExplain: true}, pg.CodeInsufficientPrivilege},
	{"EXPLAIN (ANALYZE) SELECT", "EXPLAIN (ANALYZE, BUFFERS) SELECT 1", Options{AllowExplain: true}, pg.CodeInsufficientPrivilege},
	{"EXPLAIN (analyze false)", "EXPLAIN (ANALYZE false) SELECT 1", Options{AllowExplain: true}, pg.CodeInsufficientPrivilege},
	{"EXPLAIN DELETE", "EXPLAIN DELETE FROM customers", Options{AllowExplain: true}, pg.CodeInsufficientPrivilege},
	{"EXPLAIN CREATE TABLE AS", "EXPLAIN CREATE TABLE x AS SELECT 1", Options{AllowExplain: true}, pg.CodeInsufficientPrivilege},
	// Rejected: writes and locks inside a SELECT.
	{"writable CTE delete", "WITH d AS (DELETE FROM customers RETURNING *) SELECT * FROM d", Options{}, pg.CodeInsufficientPrivilege},
	{"writable CTE insert", "WITH i AS (INSERT INTO customers(name) VALUES ('x') RETURNING id) SELECT * FROM i", Options{}, pg.CodeInsufficientPrivilege},
	{"writable CTE update nested", "WITH a AS (SELECT 1), b AS (WITH u AS (UPDATE customers SET name='x' RETURNING 1) SELECT * FROM u) SELECT * FROM b", Options{}, pg.CodeInsufficientPrivilege},
	{"SELECT INTO", "SELECT * INTO newt FROM customers", Options{}, pg.CodeInsufficientPrivilege},
	{"FOR UPDATE", "SELECT * FROM customers FOR UPDATE", Options{}, pg.CodeInsufficientPrivilege},
	{"FOR SHARE", "SELECT * FROM customers FOR SHARE", Options{}, pg.CodeInsufficientPrivilege},
	{"FOR NO KEY UPDATE", "SELECT * FROM customers FOR NO KEY UPDATE SKIP LOCKED", Options{}, pg.CodeInsufficientPrivilege},
	{"FOR KEY SHARE in subquery", "SELECT * FROM (SELECT * FROM customers FOR KEY SHARE) s", Options{}, pg.CodeInsufficientPrivilege},
	// Rejected: side-effecting functions anywhere.
	{"nextval", "SELECT nextval('s')", Options{}, pg.CodeInsufficientPrivilege},
	{"setval qualified", "SELECT pg_catalog.setval('s', 1)", Options{}, pg.CodeInsufficientPrivilege},
	{"pg_sleep in scalar subquery", "SELECT (SELECT pg_sleep(10))", Options{}, pg.CodeInsufficientPrivilege},
	{"pg_sleep_for in where", "SELECT * FROM customers WHERE id IN (SELECT 1 FROM pg_sleep_for('1s'))", Options{}, pg.CodeInsufficientPrivilege},
	{"pg_sleep upper case", "SELECT PG_SLEEP(1)", Options{}, pg.CodeInsufficientPrivilege},
	{"pg_sleep quoted", `SELECT "pg_sleep"(1)`, Options{}, pg.CodeInsufficientPrivilege},
	{"unicode escaped function", `SELECT U&"\0070g_sleep"(1)`, Options{}, pg.CodeInsufficientPrivilege},
	{"pg_notify", "SELECT pg_notify('ch', 'x')", Options{}, pg.CodeInsufficientPrivilege},
	{"set_config", "SELECT set_config('search_path', 'evil', false)", Options{}, pg.CodeInsufficientPrivilege},
	{"dblink", "SELECT * FROM dblink('host=x', 'DELETE FROM t') AS t(a int)", Options{}, pg.CodeInsufficientPrivilege},
	{"dblink_exec", "SELECT dblink_exec('DROP TABLE t')", Options{}, pg.CodeInsufficientPrivilege},
	{"lo_import", "SELECT lo_import('/etc/passwd')", Options{}, pg.CodeInsufficientPrivilege},
	{"lo_export", "SELECT lo_export(1, '/tmp/x')", Options{}, pg.CodeInsufficientPrivilege},
	{"pg_read_file", "SELECT pg_read_file('/etc/passwd')", Options{}, pg.CodeInsufficientPrivilege},
	{"pg_ls_dir", "SELECT * FROM pg_ls_dir('.')", Options{}, pg.CodeInsufficientPrivilege},
	{"pg_terminate_backend", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity", Options{}, pg.CodeInsufficientPrivilege},
	{"pg_cancel_backend in case", "SELECT CASE WHEN true THEN pg_cancel_backend(1) END", Options{}, pg.CodeInsufficientPrivilege},
	{"pg_reload_conf", "SELECT pg_reload_conf()", Options{}, pg.CodeInsufficientPrivilege},
	{"advisory lock", "SELECT pg_advisory_lock(1)", Options{}, pg.CodeInsufficientPrivilege},
	{"try advisory lock", "SELECT pg_try_advisory_xact_lock(1)", Options{}, pg.CodeInsufficientPrivilege},
	{"query_to_xml", "SELECT query_to_xml('DELETE FROM customers RETURNING 1', true, false, '')", Options{}, pg.CodeInsufficientPrivilege},
	{"ts_stat runs query text", "SELECT * FROM ts_stat('SELECT 1')", Options{}, pg.CodeInsufficientPrivilege},
	{"replication slot", "SELECT pg_create_logical_replication_slot('s', 'pgoutput')", Options{}, pg.CodeInsufficientPrivilege},
	{"pg_logical_emit_message", "SELECT pg_logical_emit_message(true, 'p', 'x')", Options{}, pg.CodeInsufficientPrivilege},
	{"pg_switch_wal", "SELECT pg_switch_wal()", Options{}, pg.CodeInsufficientPrivilege},
	{"denied in order by", "SELECT id FROM customers ORDER BY pg_sleep(1)", Options{}, pg.CodeInsufficientPrivilege},
	{"denied in lateral", "SELECT * FROM customers c, LATERAL (SELECT nextval('s')) x", Options{}, pg.CodeInsufficientPrivilege},
	{"denied in window filter", "SELECT count(*) FILTER (WHERE pg_sleep(1) IS NULL) FROM customers", Options{}, pg.CodeInsufficientPrivilege},
	{"denied named arg", "SELECT set_config(setting_name => 'a', new_value => 'b', is_local => true)", Options{}, pg.CodeInsufficientPrivilege},
	{"extra denied function", "SELECT audit_log('x')", Options{DenyFunctions: []string{"AUDIT_*"}, AllowFunctions: []string{"audit_log"}}, pg.CodeInsufficientPrivilege},
	// Rejected: functions the guard cannot prove harmless.
	{"user-defined function", "SELECT write_when_writable()", Options{}, pg.CodeInsufficientPrivilege},
	{"user-defined in case", "SELECT CASE WHEN id > 0 THEN write_when_writable() END FROM customers", Options{}, pg.CodeInsufficientPrivilege},
	{"qualified user function", "SELECT public.lower(name) FROM customers", Options{}, pg.CodeInsufficientPrivilege},
	{"qualified allowance needs qualified call", "SELECT f(1)", Options{AllowFunctions: []string{"app.f"}}, pg.CodeInsufficientPrivilege},
	{"volatile built-in", "SELECT pg_relation_size('customers'), pg_blocking_pids(1)", Options{}, pg.CodeInsufficientPrivilege},
	{"brin_summarize_new_values", "SELECT brin_summarize_new_values('i'::regclass)", Options{}, pg.CodeInsufficientPrivilege},
	{"brin_summarize_range", "SELECT brin_summarize_range('i', 0)", Options{}, pg.CodeInsufficientPrivilege},
	{"brin_desummarize_range", "SELECT brin_desummarize_range('i', 0)", Options{}, pg.CodeInsufficientPrivilege},
	{"gin_clean_pending_list", "SELECT gin_clean_pending_list('i')", Options{}, pg.CodeInsufficientPrivilege},
	{"denied even if allowed", "SELECT pg_sleep(1)", Options{AllowFunctions: []string{"pg_sleep"}}, pg.CodeInsufficientPrivilege},
	{"parameter", "SELECT * FROM customers WHERE id = $1", Options{}, pg.CodeSyntaxError},
	// Rejected: length, emptiness, syntax.
	{"too long", "SELECT '" + strings.Repeat("a", DefaultMaxLen) + "'", Options{}, pg.CodeProgramLimitExceeded},
	{"custom max len", "SELECT 12345", Options{MaxLen: 5}, pg.CodeProgramLimitExceeded},
	{"empty", "", Options{}, pg.CodeSyntaxError},
	{"only whitespace", "  \n\t ", Options{}, pg.CodeSyntaxError},
	{"only comment", "-- nothing here", Options{}, pg.CodeSyntaxError},
	{"only semicolons", ";;;", Options{}, pg.CodeSyntaxError},
	{"syntax error", "SELEC * FROM customers", Options{}, pg.CodeSyntaxError},
	{"unterminated string", "SELECT 'abc", Options{}, pg.CodeSyntaxError},
	{"unterminated dollar quote", "SELECT $$abc", Options{}, pg.CodeSyntaxError},
	{"markdown fence left in", "```sql\nSELECT 1\n```", Options{}, pg.CodeSyntaxError},

	// Accepted.
	{"simple", "SELECT id, name FROM customers", Options{}, ""},
	{"trailing semicolon", "SELECT 1;", Options{}, ""},
	{"comment only around", "/* lead */ SELECT 1 -- trail", Options{}, ""},
	{"join", "SELECT c.name, sum(o.amount) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.name HAVING sum(o.amount) > 10 ORDER BY 2 DESC LIMIT 5", Options{}, ""},
	{"left join schema qualified", "SELECT * FROM public.customers c LEFT JOIN public.orders o USING (id)", Options{}, ""},
	{"window", "SELECT id, rank() OVER (PARTITION BY city ORDER BY id), lag(id) OVER w FROM customers WINDOW w AS (ORDER BY id)", Options{}, ""},
	{"cte", "WITH big AS (SELECT customer_id, sum(amount) s FROM orders GROUP BY 1) SELECT c.name, b.s FROM big b JOIN customers c ON c.id = b.customer_id", Options{}, ""},
	{"recursive cte", "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) SELECT i FROM n", Options{}, ""},
	{"union", "SELECT name FROM customers UNION SELECT 'x' EXCEPT SELECT 'y'", Options{}, ""},
	{"values", "VALUES (1, 'a'), (2, 'b')", Options{}, ""},
	{"lateral", "SELECT c.name, x.amount FROM customers c CROSS JOIN LATERAL (SELECT amount FROM orders o WHERE o.customer_id = c.id ORDER BY amount DESC LIMIT 1) x", Options{}, ""},
	{"generate_series", "SELECT g FROM generate_series(1, 10) g", Options{}, ""},
	{"string functions", "SELECT upper(name), lower(city), length(name), substr(name, 1, 2), concat_ws('-', name, city), name || '!' FROM customers", Options{}, ""},
	{"casts and dates", "SELECT created_at::date, date_trunc('month', created_at), CAST(amount AS text), extract(year FROM created_at), now() - interval '1 day' FROM orders", Options{}, ""},
	{"ilike", "SELECT * FROM customers WHERE name ILIKE '%bo%' AND city NOT LIKE 'x%'", Options{}, ""},
	{"subqueries", "SELECT * FROM customers WHERE id IN (SELECT customer_id FROM orders) AND EXISTS (SELECT 1 FROM orders) AND id = ANY (ARRAY[1,2])", Options{}, ""},
	{"case coalesce nullif", "SELECT CASE WHEN amount > 10 THEN 'big' ELSE 'small' END, coalesce(note, ''), nullif(amount, 0), greatest(1, 2) FROM orders", Options{}, ""},
	{"aggregates", "SELECT count(DISTINCT city), string_agg(name, ',' ORDER BY name), percentile_cont(0.5) WITHIN GROUP (ORDER BY id), count(*) FILTER (WHERE city IS NOT NULL) FROM customers", Options{}, ""},
	{"grouping sets", "SELECT city, count(*), grouping(city) FROM customers GROUP BY ROLLUP (city)", Options{}, ""},
	{"dollar quoted semicolon drop", "SELECT $$;DROP TABLE customers;$$ AS s", Options{}, ""},
	{"string with semicolon", "SELECT ';DELETE FROM customers' AS s", Options{}, ""},
	{"comment with statement", "SELECT 1 /* ; DELETE FROM customers */", Options{}, ""},
	{"unicode escaped identifier", `SELECT U&"n\0061me" FROM customers`, Options{}, ""},
	{"quoted identifiers", `SELECT "name" AS "Customer Name" FROM "customers"`, Options{}, ""},
	{"currval and lastval-free sequence read", "SELECT last_value FROM s", Options{}, ""},
	{"json", "SELECT json_build_object('n', name), to_jsonb(c) -> 'city' FROM customers c", Options{}, ""},
	{"distinct on", "SELECT DISTINCT ON (city) city, name FROM customers ORDER BY city, name", Options{}, ""},
	{"collate and between", "SELECT * FROM customers WHERE name COLLATE \"C\" BETWEEN 'a' AND 'z' AND id IS DISTINCT FROM 3", Options{}, ""},
	{"sql value functions", "SELECT current_date, current_user, localtimestamp", Options{}, ""},
	{"catalog query", "SELECT relname FROM pg_catalog.pg_class WHERE relkind = 'r' LIMIT 3", Options{}, ""},
	{"TABLE shorthand", "TABLE customers", Options{}, ""},
	{"star and indirection", "SELECT c.*, (ARRAY[1, 2])[1], (c).name FROM customers c", Options{}, ""},
	{"unnest with ordinality", "SELECT x, n FROM unnest(ARRAY['a', 'b']) WITH ORDINALITY AS u(x, n)", Options{}, ""},
	{"tablesample", "SELECT count(*) FROM customers TABLESAMPLE SYSTEM (50)", Options{}, ""},
	{"row and jsonb operators", "SELECT ROW(1, 2) IS NOT NULL, '{\"a\": 1}'::jsonb ? 'a'", Options{}, ""},
	{"xml constructor", "SELECT xmlelement(name a, name) FROM customers", Options{}, ""},
	{"materialized cte", "WITH x AS MATERIALIZED (SELECT 1 AS a) SELECT a FROM x", Options{}, ""},
	{"harmless volatile built-ins", "SELECT random(), clock_timestamp(), gen_random_uuid()", Options{}, ""},
	{"operator-allowed function", "SELECT app.score(id), score(id) FROM customers", Options{AllowFunctions: []string{"app.score", "score"}}, ""},
	{"explain allowed", "EXPLAIN SELECT * FROM customers", Options{AllowExplain: true}, ""},
	{"explain options", "EXPLAIN (VERBOSE, COSTS false, FORMAT JSON) SELECT * FROM customers c JOIN orders o ON o.customer_id = c.id", Options{AllowExplain: true}, ""},
}

func TestCheckCorpus(t *testing.T) {
	for _, tc := range corpus {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Check(tc.sql, withCatalog(t, tc.opts))
			if tc.wantCode == "" {
				if err != nil {
					t.Fatalf("Check(%q) rejected: %v", tc.sql, err)
				}
				if c.Kind == "" || c.Fingerprint == "" {
					t.Errorf("incomplete Checked: %+v", c)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check(%q) accepted, want SQLSTATE %s", tc.sql, tc.wantCode)
			}
			var re *RejectError
			if !errors.As(err, &re) {
				t.Fatalf("error %v is not a *RejectError", err)
			}
			t.Log(re.Error())
			if re.Code != tc.wantCode || re.Reason == "" {
				t.Errorf("Check(%q) = %v, want SQLSTATE %s", tc.sql, err, tc.wantCode)
			}
		})
	}
}

func TestCheckDetails(t *testing.T) {
	tests := []struct {
		sql       string
		opts      Options
		kind      Kind
		tables    []TableRef
		functions []string
	}{
		{
			sql:    "WITH big AS (SELECT customer_id FROM sales.orders) SELECT upper(c.name), pg_catalog.date_part('year', now()) FROM customers c JOIN big b ON b.customer_id = c.id JOIN customers c2 ON true",
			kind:   KindSelect,
			tables: []TableRef{{Schema: "sales", Name: "orders"}, {Name: "customers", Alias: "c"}, {Name: "customers", Alias: "c2"}},
			// now() is a plain function call; date_part keeps its qualifier.
			functions: []string{"now", "pg_catalog.date_part", "upper"},
		},
		{
			sql:    "EXPLAIN SELECT * FROM t",
			opts:   Options{AllowExplain: true},
			kind:   KindExplain,
			tables: []TableRef{{Name: "t"}},
		},
		{
			sql:  "SELECT 1",
			kind: KindSelect,
		},
	}
	for _, tt := range tests {
		t.Run(tt.sql, func(t *testing.T) {
			c, err := Check(tt.sql, withCatalog(t, tt.opts))
			if err != nil {
				t.Fatal(err)
			}
			if c.Kind != tt.kind || c.SQL != tt.sql {
				t.Errorf("Kind, SQL = %q, %q", c.Kind, c.SQL)
			}
			if !reflect.DeepEqual(c.Tables, tt.tables) {
				t.Errorf("Tables = %+v, want %+v", c.Tables, tt.tables)
			}
			if !reflect.DeepEqual(c.Functions, tt.functions) {
				t.Errorf("Functions = %q, want %q", c.Functions, tt.functions)
			}
		})
	}
}

func TestFingerprintIgnoresConstantsAndFormatting(t *testing.T) {
	a, err := Check("SELECT * FROM customers WHERE city = 'LA'", withCatalog(t, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Check("select *\n  from customers where city='NYC' -- x", withCatalog(t, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Check("SELECT * FROM orders WHERE city = 'LA'", withCatalog(t, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if a.Fingerprint != b.Fingerprint {
		t.Errorf("same shape, different fingerprints: %s vs %s", a.Fingerprint, b.Fingerprint)
	}
	if a.Fingerprint == c.Fingerprint {
		t.Errorf("different tables, same fingerprint %s", a.Fingerprint)
	}
}

func TestRejectPosition(t *testing.T) {
	sql := "SELECT id, pg_sleep(1) FROM customers"
	_, err := Check(sql, withCatalog(t, Options{}))
	var re *RejectError
	if !errors.As(err, &re) {
		t.Fatalf("want RejectError, got %v", err)
	}
	if want := strings.Index(sql, "pg_sleep") + 1; re.Position != want {
		t.Errorf("Position = %d, want %d", re.Position, want)
	}
	_, err = Check("SELECT * FORM customers", withCatalog(t, Options{}))
	if !errors.As(err, &re) || re.Code != pg.CodeSyntaxError || re.Position == 0 {
		t.Errorf("syntax error without position: %v", err)
	}
}

// TestDeeplyNested makes sure pathological nesting is refused or accepted
// cleanly, never a crash.
func TestDeeplyNested(t *testing.T) {
	for _, depth := range []int{100, 5000, 40000} {
		sql := "SELECT " + strings.Repeat("(", depth) + "1" + strings.Repeat(")", depth)
		if depth > 100 {
			// Nested scalar subqueries also deepen the protobuf tree.
			sql = strings.Repeat("SELECT (", depth/10) + "SELECT 1" + strings.Repeat(")", depth/10)
		}
		_, err := Check(sql, withCatalog(t, Options{}))
		t.Logf("depth %d: %v", depth, err)
		var re *RejectError
		if err != nil && !errors.As(err, &re) {
			t.Errorf("depth %d: untyped error %v", depth, err)
		}
		if depth == 100 && err != nil {
			t.Errorf("depth 100 rejected: %v", err)
		}
	}
}

func TestBadDenyPattern(t *testing.T) {
	_, err := Check("SELECT 1", Options{DenyFunctions: []string{"audit_["}})
	var re *RejectError
	if err == nil || errors.As(err, &re) {
		t.Fatalf("want a configuration error, got %v", err)
	}
}

// TestNodeTablesExist guards against typos in the node allowlists: every
// name must be a pg_query message.
func TestNodeTablesExist(t *testing.T) {
	names := map[protoreflect.Name]bool{}
	for n := range allowedNodes {
		names[n] = true
	}
	for n := range writeNodes {
		names[n] = true
	}
	for n := range names {
		if _, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName("pg_query." + n)); err != nil {
			t.Errorf("node %q: %v", n, err)
		}
	}
}
