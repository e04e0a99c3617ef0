package asksafety_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// rowLimitDDL gives mallory an operator = (integer, numeric) in its own
// schema, first on its path, and one = (smallint, numeric) in public, where
// it may create (as in every database made before PostgreSQL 15):
// pg_catalog has no operator for exactly those types, so under mallory's
// own path `v = 1.0` and `w = 1.0` mean mallory's. Its functions write,
// count their calls and set a session setting; their selectivity estimator
// is eqsel, which calls the operator's function on the column's most common
// values while the statement is planned, at Bind.
const rowLimitDDL = `
GRANT CREATE ON SCHEMA public TO mallory;
SET ROLE mallory;
CREATE TABLE mallory.loot (what text);
CREATE TABLE mallory.skew (v int, w smallint);
INSERT INTO mallory.skew SELECT 1, 1 FROM generate_series(1, 7);
INSERT INTO mallory.skew SELECT 2, 2 FROM generate_series(1, 5);
INSERT INTO mallory.skew SELECT g, g FROM generate_series(3, 40) g;
CREATE FUNCTION mallory.int_num_eq(int, numeric) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_catalog.nextval('mallory.calls');
  PERFORM pg_catalog.set_config('mallory.flag', 'set', false);
  INSERT INTO mallory.loot VALUES ('written at ' || pg_catalog.current_setting('transaction_read_only'));
  RETURN $1::numeric OPERATOR(pg_catalog.=) $2;
END $$;
CREATE OPERATOR mallory.= (LEFTARG = int, RIGHTARG = numeric, FUNCTION = mallory.int_num_eq, RESTRICT = pg_catalog.eqsel);
CREATE FUNCTION public.int2_num_eq(smallint, numeric) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_catalog.nextval('mallory.calls');
  PERFORM pg_catalog.set_config('mallory.flag', 'set', false);
  INSERT INTO mallory.loot VALUES ('written at ' || pg_catalog.current_setting('transaction_read_only'));
  RETURN $1::numeric OPERATOR(pg_catalog.=) $2;
END $$;
CREATE OPERATOR public.= (LEFTARG = smallint, RIGHTARG = numeric, FUNCTION = public.int2_num_eq, RESTRICT = pg_catalog.eqsel);
RESET ROLE;
ANALYZE mallory.skew;
`

// TestRowLimitedPreparedAskInTransaction: a prepared ask executed with a row
// limit inside a transaction block (JDBC's fetch size) is parsed, planned
// and run inside the pinned, read-only scope like every other run: mallory's
// operator never runs, nothing it would write or set survives the client's
// COMMIT, the session is as it was, and the rows still come back in the
// portions the client asked for.
func TestRowLimitedPreparedAskInTransaction(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := f.malloryDatabase(t, "rowlimit")
	if err := f.cluster.Exec(ctx, db, rowLimitDDL); err != nil {
		t.Fatal(err)
	}
	admin, err := f.cluster.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	evidence := func(t *testing.T) string {
		t.Helper()
		var s string
		if err := admin.QueryRow(ctx, `SELECT concat_ws(' ', (SELECT last_value || '/' || is_called FROM mallory.calls), (SELECT count(*) FROM mallory.loot))`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	cases := []struct{ name, sql string }{
		{"operator in the asker's own schema", "SELECT v FROM skew WHERE v = 1.0"},
		{"operator in public", "SELECT w FROM skew WHERE w = 1.0"},
	}
	rules := []fakeollama.Rule{{Name: "keywords", PromptContains: []string{keywordsPrompt}, Reply: `{"keywords": ["skew"], "entities": []}`}}
	for i, c := range cases {
		tag := fmt.Sprintf("rowlimit case %d ", i)
		rules = append(rules,
			fakeollama.Rule{Name: "candidate " + tag, PromptContains: []string{candidatePrompt}, Match: fakeollama.QuestionContains(tag), Reply: sqlReply(c.sql)},
			fakeollama.Rule{Name: "fix " + tag, PromptContains: []string{fixerPrompt}, Match: fakeollama.QuestionContains(tag), Reply: sqlReply(c.sql)})
	}
	f.fake.SetRules(rules...)

	conn, err := pgconn.Connect(ctx, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", mallory, mallory+"-secret", f.proxy, db))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := conn.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Conn.Close()
	if err := hc.Conn.SetDeadline(time.Now().Add(2 * time.Minute)); err != nil { // hang guard
		t.Fatal(err)
	}
	w := &rowWire{t: t, fe: hc.Frontend}
	state := func() string {
		return strings.Join(w.query(`SELECT concat_ws(' | ',
			(SELECT count(*) FROM pg_catalog.pg_locks WHERE pid = pg_catalog.pg_backend_pid() AND locktype = 'advisory'),
			pg_catalog.current_setting('mallory.flag', true),
			pg_catalog.current_setting('search_path'),
			pg_catalog.current_setting('transaction_read_only'),
			pg_catalog.current_setting('statement_timeout'))`), ",")
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, was := state(), evidence(t)
			w.query("BEGIN")
			// Bind, Describe and the first Execute in one batch, as JDBC sends them.
			first := w.run(&pgproto3.Parse{Name: "rl", Query: fmt.Sprintf("-- ask: rowlimit case %d which skew values equal one", i)},
				&pgproto3.Bind{DestinationPortal: "cur", PreparedStatement: "rl"},
				&pgproto3.Describe{ObjectType: 'P', Name: "cur"},
				&pgproto3.Execute{Portal: "cur", MaxRows: 3}, &pgproto3.Sync{})
			second := w.run(&pgproto3.Execute{Portal: "cur", MaxRows: 3}, &pgproto3.Sync{})
			third := w.run(&pgproto3.Execute{Portal: "cur", MaxRows: 3}, &pgproto3.Sync{})
			for i, want := range []portionSeen{
				{rows: 3, described: true, suspended: true, status: 'T'},
				{rows: 3, suspended: true, status: 'T'},
				{rows: 1, tag: "SELECT 1", status: 'T'},
			} {
				got := []portionSeen{first, second, third}[i]
				if got.err != "" || got.rows != want.rows || got.described != want.described || got.suspended != want.suspended || got.tag != want.tag || got.status != want.status {
					t.Errorf("Execute %d: %+v, want %+v", i+1, got, want)
				}
			}
			if v := strings.Join(append(append(first.values, second.values...), third.values...), ","); v != "1,1,1,1,1,1,1" {
				t.Errorf("rows %q, want seven 1s", v)
			}
			// The client's transaction goes on, writable, and commits (an
			// error above left it aborted: ROLLBACK then ends it).
			if third.status == 'T' {
				w.query("CREATE TEMP TABLE scratch_rl (x int)", "INSERT INTO scratch_rl VALUES (1)", "DROP TABLE scratch_rl", "DEALLOCATE rl", "COMMIT")
			} else {
				w.query("ROLLBACK", "DEALLOCATE rl")
			}
			if now := evidence(t); now != was {
				t.Errorf("mallory's operator ran (calls, rows it wrote: %s, before %s)", now, was)
			}
			if after := state(); after != before {
				t.Errorf("the session changed:\n before %s\n after  %s", before, after)
			}
		})
	}
}

// rowWire drives one hijacked session message by message.
type rowWire struct {
	t  *testing.T
	fe *pgproto3.Frontend
}

// portionSeen is what one batch's replies said.
type portionSeen struct {
	rows      int
	values    []string
	described bool
	suspended bool
	tag       string
	err       string
	status    byte
}

func (w *rowWire) run(msgs ...pgproto3.FrontendMessage) portionSeen {
	w.t.Helper()
	for _, m := range msgs {
		w.fe.Send(m)
	}
	if err := w.fe.Flush(); err != nil {
		w.t.Fatalf("flush: %v", err)
	}
	var p portionSeen
	for {
		msg, err := w.fe.Receive()
		if err != nil {
			w.t.Fatalf("receive: %v", err)
		}
		switch m := msg.(type) {
		case *pgproto3.RowDescription:
			p.described = true
		case *pgproto3.DataRow:
			p.rows++
			p.values = append(p.values, string(m.Values[0]))
		case *pgproto3.PortalSuspended:
			p.suspended = true
		case *pgproto3.CommandComplete:
			p.tag = string(m.CommandTag)
		case *pgproto3.ErrorResponse:
			p.err += m.Code + " " + m.Message + ";"
		case *pgproto3.ReadyForQuery:
			p.status = m.TxStatus
			return p
		}
	}
}

// query runs simple Queries, failing the test on an error; it returns the
// first column of the last one's rows.
func (w *rowWire) query(sqls ...string) []string {
	w.t.Helper()
	var p portionSeen
	for _, s := range sqls {
		p = w.run(&pgproto3.Query{String: s})
		if p.err != "" {
			w.t.Fatalf("%s: %s", s, p.err)
		}
	}
	return p.values
}
