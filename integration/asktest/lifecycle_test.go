package asktest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/nlproxy/nlproxy/testkit/fakeollama"
)

// wire drives one hijacked session message by message and records the
// replies that say what became of the client's statements and portals.
type wire struct {
	t   *testing.T
	fe  *pgproto3.Frontend
	log []string
}

func openWire(t *testing.T, url string) *wire {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgconn.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	hc, err := conn.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Conn.Close() })
	if err := hc.Conn.SetDeadline(time.Now().Add(2 * time.Minute)); err != nil { // hang guard
		t.Fatal(err)
	}
	return &wire{t: t, fe: hc.Frontend}
}

// run sends msgs and records the replies through the n-th ReadyForQuery.
// Replies that carry an ask's answer (its rows, row shape, SELECT tag,
// notices) are left out: Postgres answers the marker text as SQL, the
// proxy with the generated statement's rows; everything about the
// statement's lifecycle must be the same.
func (w *wire) run(n int, msgs ...pgproto3.FrontendMessage) {
	w.t.Helper()
	for _, m := range msgs {
		w.fe.Send(m)
	}
	if err := w.fe.Flush(); err != nil {
		w.t.Fatalf("flush: %v", err)
	}
	for n > 0 {
		msg, err := w.fe.Receive()
		if err != nil {
			w.t.Fatalf("receive after %v: %v", w.log, err)
		}
		switch m := msg.(type) {
		case *pgproto3.RowDescription, *pgproto3.DataRow, *pgproto3.NoData, *pgproto3.EmptyQueryResponse,
			*pgproto3.ParameterDescription, *pgproto3.NoticeResponse, *pgproto3.PortalSuspended:
		case *pgproto3.CommandComplete:
			if tag := string(m.CommandTag); !strings.HasPrefix(tag, "SELECT ") {
				w.log = append(w.log, "CommandComplete "+tag)
			}
		case *pgproto3.ErrorResponse:
			w.log = append(w.log, fmt.Sprintf("ErrorResponse %s %s", m.Code, m.Message))
		case *pgproto3.ReadyForQuery:
			w.log = append(w.log, "ReadyForQuery "+string(m.TxStatus))
			n--
		default:
			w.log = append(w.log, strings.TrimPrefix(fmt.Sprintf("%T", m), "*pgproto3."))
		}
	}
}

func (w *wire) q(sqls ...string) {
	w.t.Helper()
	msgs := make([]pgproto3.FrontendMessage, len(sqls))
	for i, s := range sqls {
		msgs[i] = &pgproto3.Query{String: s}
	}
	w.run(len(sqls), msgs...)
}

var syncMsg = &pgproto3.Sync{}

func parse(name, sql string) *pgproto3.Parse { return &pgproto3.Parse{Name: name, Query: sql} }
func bind(portal, stmt string) *pgproto3.Bind {
	return &pgproto3.Bind{DestinationPortal: portal, PreparedStatement: stmt}
}
func execute(portal string) *pgproto3.Execute { return &pgproto3.Execute{Portal: portal} }
func closeS(name string) *pgproto3.Close      { return &pgproto3.Close{ObjectType: 'S', Name: name} }
func closeP(name string) *pgproto3.Close      { return &pgproto3.Close{ObjectType: 'P', Name: name} }

// lifecycleCases run the same messages against Postgres and through the
// proxy; ask is the text of an ask statement (Postgres reads a comment and
// SELECT 1).
var lifecycleCases = []struct {
	name string
	run  func(w *wire, ask string)
}{
	{"named: DEALLOCATE, reuse, EXECUTE", func(w *wire, ask string) {
		w.run(1, parse("a1", ask), syncMsg)
		w.run(1, bind("", "a1"), execute(""), syncMsg)
		w.q("EXECUTE a1", "EXECUTE a1(1, '(x)', \"a\")", "PREPARE a1 AS SELECT 2", "DEALLOCATE a1", "DEALLOCATE a1", "EXECUTE a1")
		w.run(1, bind("", "a1"), execute(""), syncMsg)
		w.run(1, parse("a1", ask), bind("", "a1"), execute(""), syncMsg)
		w.q("DEALLOCATE PREPARE a1")
		w.run(1, parse("a1", ask), syncMsg)
	}},
	{"PDO native prepare in a transaction keeps the data", func(w *wire, ask string) {
		w.q("BEGIN", "CREATE TEMP TABLE pdo_t(x int)")
		w.run(1, parse("pdo_stmt_00000001", ask), syncMsg)
		w.run(1, bind("", "pdo_stmt_00000001"), execute(""), syncMsg)
		w.q("DEALLOCATE pdo_stmt_00000001", "INSERT INTO pdo_t VALUES (1)", "COMMIT", "SELECT count(*) = 1 AS kept FROM pdo_t")
	}},
	{"re-Parse and Close", func(w *wire, ask string) {
		w.run(1, parse("a2", ask), syncMsg)
		w.run(1, parse("a2", ask), syncMsg)                                // 42P05
		w.run(1, parse("a2", "SELECT 2"), syncMsg)                         // 42P05
		w.run(1, closeS("a2"), closeS("a2"), bind("", "a2"), syncMsg)      // closed twice, then 26000
		w.run(1, parse("a2", ask), bind("p", "a2"), closeS("a2"), syncMsg) // a portal outlives its statement's Close
		w.q("BEGIN")
		w.run(1, parse("a2", ask), bind("p", "a2"), execute("p"), closeP("p"), closeP("p"), execute("p"), syncMsg) // 34000
		w.q("ROLLBACK")
		w.q("BEGIN")
		w.run(1, parse("a9", ask), bind("p9", "a9"), &pgproto3.Describe{ObjectType: 'P', Name: "p9"},
			&pgproto3.Execute{Portal: "p9", MaxRows: 2}, &pgproto3.Execute{Portal: "p9", MaxRows: 2}, closeP("p9"), syncMsg)
		w.q("ROLLBACK")
		w.q("BEGIN")
		w.run(1, parse("a2", ask), syncMsg) // 42P05 aborts the block
		w.q("SELECT 1", "ROLLBACK")
	}},
	{"a client statement's name is taken for an ask", func(w *wire, ask string) {
		w.run(1, parse("p1", "SELECT 1"), parse("p1", ask), bind("", "p1"), syncMsg)
		w.q("PREPARE p2 AS SELECT 2")
		w.run(1, parse("p2", ask), syncMsg)
		w.q("EXECUTE p1", "EXECUTE p2")
		w.run(1, parse("p3", ask), bind("", "p3"), execute(""), syncMsg)
	}},
	{"unnamed", func(w *wire, ask string) {
		w.run(1, parse("", "SELECT 1"), parse("", ask), parse("", ask), bind("", ""), execute(""), syncMsg)
		w.run(1, bind("", ""), execute(""), syncMsg)
		w.q("SELECT 1")
		w.run(1, bind("", ""), syncMsg) // a simple Query dropped the unnamed statement
		w.run(1, parse("", ask), syncMsg)
		w.run(1, parse("", "SELECT 2"), bind("", ""), execute(""), syncMsg)
	}},
	{"DEALLOCATE ALL and DISCARD ALL", func(w *wire, ask string) {
		w.run(1, parse("a3", ask), parse("a4", ask), syncMsg)
		w.q("DEALLOCATE ALL")
		w.run(1, bind("", "a3"), syncMsg)
		w.run(1, parse("a3", ask), syncMsg)
		w.q("BEGIN", "DISCARD ALL", "ROLLBACK") // refused in a block: the asks stay
		w.run(1, bind("", "a3"), execute(""), syncMsg)
		w.q("BEGIN", "DEALLOCATE ALL", "COMMIT")
		w.run(1, bind("", "a3"), syncMsg)
		w.run(1, parse("a3", ask), syncMsg)
		w.q("DISCARD ALL")
		w.run(1, parse("a3", ask), syncMsg)
		w.q("deallocate a3")
	}},
	{"in transactions", func(w *wire, ask string) {
		w.q("BEGIN")
		w.run(1, parse("a5", ask), bind("", "a5"), execute(""), syncMsg)
		w.q("DEALLOCATE a5", "DEALLOCATE a5", "ROLLBACK")
		w.q("BEGIN")
		w.run(1, parse("a5", ask), syncMsg)
		w.q("SELECT 1/0", "DEALLOCATE a5", "EXECUTE a5", "ROLLBACK", "EXECUTE a5", "DEALLOCATE a5")
	}},
	{"after transaction control in one Query (psqlodbc)", func(w *wire, ask string) {
		w.q("BEGIN;"+ask, "SAVEPOINT s", "RELEASE s;SAVEPOINT s;"+ask, "RELEASE SAVEPOINT s; savepoint s ;"+ask)
		w.q("RELEASE nosuch;SAVEPOINT s;"+ask, "ROLLBACK") // the ask is skipped with the rest
		w.q("START TRANSACTION;"+ask, "COMMIT")
		// psqlodbc deallocates its _PLAN statements so in a transaction.
		w.run(1, parse("_PLAN0x1", ask), syncMsg)
		w.q("BEGIN", `SAVEPOINT _per_query_svp_;DEALLOCATE "_PLAN0x1";RELEASE _per_query_svp_`)
		w.run(1, parse("_PLAN0x1", ask), syncMsg)
		w.q(`SAVEPOINT _per_query_svp_;DEALLOCATE "_PLAN0x1"`, "RELEASE _per_query_svp_",
			`RELEASE nosuch;DEALLOCATE "_PLAN0x1"`, "ROLLBACK")
		w.run(1, parse("_PLAN0x1", ask), syncMsg) // 42P05: the failed Query kept it
	}},
	{"names fold as in SQL", func(w *wire, ask string) {
		w.run(1, parse("A6", ask), syncMsg)
		w.q(`DEALLOCATE A6`, `DEALLOCATE "A6"`, `/* c */ DEALLOCATE -- c
 "A6";`)
	}},
}

func (f *fixture) askCount() int {
	f.asksMu.Lock()
	defer f.asksMu.Unlock()
	return len(f.asks)
}

// testLifecycle: a prepared ask's statement behaves as the client's own on
// Postgres (issue 19), and nothing of it upstream is reachable by name
// (issue 18, finding 7).
func testLifecycle(t *testing.T, f *fixture) {
	const topic = clientTopic + " for the lifecycle"
	f.fake.SetRules(
		fakeollama.Rule{Name: "keywords", PromptContains: []string{fakeollama.PromptKeywords, clientTopic}, Reply: keywordsReply([]string{"products", "product"}, nil)},
		fakeollama.Rule{Name: "candidate", PromptContains: []string{fakeollama.PromptCandidate, clientTopic}, Reply: sqlReply(clientSQL)},
	)
	f.fake.Reset()
	direct := f.cluster.URL(askUser, askPass, db)
	via := fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", askUser, askPass, f.proxy, db)
	for _, tc := range lifecycleCases {
		t.Run(tc.name, func(t *testing.T) {
			for _, ask := range []string{"/* ask: " + topic + " */ SELECT 1", "-- ask: " + topic + "\nSELECT 1"} {
				wd, wp := openWire(t, direct), openWire(t, via)
				tc.run(wd, ask)
				before := f.askCount()
				tc.run(wp, ask)
				if f.askCount() == before {
					t.Errorf("%q: the proxy answered no ask: the case tests nothing", ask)
				}
				if a, b := strings.Join(wd.log, "\n"), strings.Join(wp.log, "\n"); a != b {
					t.Errorf("%q: lifecycle transcripts differ\n--- direct:\n%s\n--- proxy:\n%s", ask, a, b)
				}
			}
		})
	}

	t.Run("nothing upstream to reach", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := f.connect(t, f.proxy)
		pc := c.PgConn()
		if err := pc.Exec(ctx, "PREPARE mine AS SELECT 1").Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := pc.Prepare(ctx, "a7", "/* ask: "+topic+" */", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := pc.Prepare(ctx, "", "-- ask: "+topic+" unnamed", nil); err != nil {
			t.Fatal(err)
		}
		if got, err := queryText(ctx, c.Conn, "/* ask: "+topic+" simple */", pgx.QueryExecModeSimpleProtocol); err != nil || got == "" {
			t.Fatalf("simple ask: %q, %v", got, err)
		}
		// In a transaction block too: its Bind and Executes.
		if err := pc.Exec(ctx, "BEGIN").Close(); err != nil {
			t.Fatal(err)
		}
		if rr := pc.ExecPrepared(ctx, "a7", nil, nil, nil).Read(); rr.Err != nil || len(rr.Rows) != 3 {
			t.Fatalf("prepared ask in a block: %d rows, %v", len(rr.Rows), rr.Err)
		}
		got, err := queryText(ctx, c.Conn, "SELECT string_agg(name, ',' ORDER BY name) FROM pg_prepared_statements", pgx.QueryExecModeSimpleProtocol)
		if err != nil || got != "mine" {
			t.Errorf("pg_prepared_statements lists %q (%v), want only the client's own statement", got, err)
		}
		if err := pc.Exec(ctx, "ROLLBACK").Close(); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"\x01nlproxy", "\x01nlproxy-ask-1", "\x01nlproxy-none"} {
			sql := `EXECUTE "` + name + `"` // the control character as is
			if err := pc.Exec(ctx, sql).Close(); pgCode(err) != "26000" {
				t.Errorf("%q: %v, want 26000", sql, err)
			}
			if rr := pc.ExecPrepared(ctx, name, nil, nil, nil).Read(); pgCode(rr.Err) != "26000" {
				t.Errorf("Bind to %q: %v, want 26000", name, rr.Err)
			}
		}
		assertUsable(ctx, t, c)

		// An ask's portal in a transaction block: SQL FETCH names portals
		// too, and would run the statement outside its read-only savepoint.
		w := openWire(t, via)
		w.q("BEGIN")
		w.run(1, parse("a8", "/* ask: "+topic+" portal */"), bind("ap", "a8"),
			&pgproto3.Describe{ObjectType: 'P', Name: "ap"}, execute("ap"), syncMsg)
		w.q("FETCH ALL FROM ap", "ROLLBACK")
		want := "CommandComplete BEGIN,ReadyForQuery T,ParseComplete,BindComplete,ReadyForQuery T," +
			"ErrorResponse 34000 cursor \"ap\" does not exist,ReadyForQuery E,CommandComplete ROLLBACK,ReadyForQuery I"
		if got := strings.Join(w.log, ","); got != want {
			t.Errorf("FETCH of an ask's portal:\n%s\nwant\n%s", got, want)
		}
	})
}
