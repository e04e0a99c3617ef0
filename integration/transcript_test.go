package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// wire drives one hijacked session message by message and records every
// backend message it receives.
type wire struct {
	t   *testing.T
	hc  *pgconn.HijackedConn
	fe  *pgproto3.Frontend
	log []string
	raw [][]byte // the same messages re-encoded, for a byte-level comparison
}

func openWire(ctx context.Context, t *testing.T, tg target) *wire {
	t.Helper()
	conn, err := pgconn.ConnectConfig(ctx, &tg.pgxConfig(t).Config)
	if err != nil {
		t.Fatalf("connect %s: %v", tg.Addr(), err)
	}
	hc, err := conn.Hijack()
	if err != nil {
		t.Fatalf("hijack: %v", err)
	}
	t.Cleanup(func() { hc.Conn.Close() })
	if err := hc.Conn.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return &wire{t: t, hc: hc, fe: hc.Frontend}
}

func (w *wire) send(msgs ...pgproto3.FrontendMessage) {
	w.t.Helper()
	for _, m := range msgs {
		w.fe.Send(m)
	}
	if err := w.fe.Flush(); err != nil {
		w.t.Fatalf("flush: %v", err)
	}
}

// recvUntil records messages until stop returns true for one of them.
func (w *wire) recvUntil(stop func(pgproto3.BackendMessage) bool) {
	w.t.Helper()
	for {
		msg, err := w.fe.Receive()
		if err != nil {
			w.t.Fatalf("receive after %d messages: %v\n%s", len(w.log), err, strings.Join(w.log, "\n"))
		}
		w.log = append(w.log, describe(msg))
		enc, err := msg.Encode(nil)
		if err != nil {
			w.t.Fatalf("encode %T: %v", msg, err)
		}
		w.raw = append(w.raw, enc)
		if stop(msg) {
			return
		}
	}
}

// ready records messages through the next n ReadyForQuery.
func (w *wire) ready(n int) {
	w.t.Helper()
	for i := 0; i < n; i++ {
		w.recvUntil(func(m pgproto3.BackendMessage) bool { _, ok := m.(*pgproto3.ReadyForQuery); return ok })
	}
}

func (w *wire) until(kind any) {
	w.t.Helper()
	want := fmt.Sprintf("%T", kind)
	w.recvUntil(func(m pgproto3.BackendMessage) bool { return fmt.Sprintf("%T", m) == want })
}

// describe renders a message for comparison. Nothing is normalized here:
// after the handshake both paths must produce the same messages.
func describe(m pgproto3.BackendMessage) string {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Sprintf("%T <%v>", m, err)
	}
	return fmt.Sprintf("%T %s", m, b)
}

func q(sql string) *pgproto3.Query { return &pgproto3.Query{String: sql} }

func pbe(name, sql string, params ...string) []pgproto3.FrontendMessage {
	vals := make([][]byte, len(params))
	for i, p := range params {
		vals[i] = []byte(p)
	}
	return []pgproto3.FrontendMessage{
		&pgproto3.Parse{Name: name, Query: sql},
		&pgproto3.Bind{PreparedStatement: name, Parameters: vals},
		&pgproto3.Describe{ObjectType: 'P'},
		&pgproto3.Execute{},
	}
}

func cat(parts ...[]pgproto3.FrontendMessage) []pgproto3.FrontendMessage {
	var out []pgproto3.FrontendMessage
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

type transcriptCase struct {
	name string
	run  func(w *wire)
}

var transcriptCases = []transcriptCase{
	{"error mid-batch then Sync recovery", func(w *wire) {
		w.send(cat(pbe("", "SELECT 1"), pbe("", "SELECT 1/0"), pbe("", "SELECT 2"),
			[]pgproto3.FrontendMessage{&pgproto3.Sync{}})...)
		w.ready(1)
		w.send(cat(pbe("", "SELECT $1::int + 1", "41"), []pgproto3.FrontendMessage{&pgproto3.Sync{}})...)
		w.ready(1)
		w.send(q("SELECT 3"))
		w.ready(1)
	}},
	{"error inside transaction block", func(w *wire) {
		w.send(q("BEGIN"), q("SELECT 1/0"), q("SELECT 1"), q("ROLLBACK"), q("SELECT 'ok'"))
		w.ready(5)
	}},
	{"multi-statement simple query with error", func(w *wire) {
		w.send(q("SELECT 1; SELECT 1/0; SELECT 2"))
		w.ready(1)
		w.send(q("SELECT 'after'"))
		w.ready(1)
	}},
	{"portal row limits", func(w *wire) {
		w.send(q("BEGIN"))
		w.ready(1)
		w.send(&pgproto3.Parse{Name: "s", Query: "SELECT g, repeat('x', g) FROM generate_series(1, 10) g"},
			&pgproto3.Bind{DestinationPortal: "p", PreparedStatement: "s"},
			&pgproto3.Describe{ObjectType: 'P', Name: "p"},
			&pgproto3.Execute{Portal: "p", MaxRows: 3},
			&pgproto3.Flush{})
		w.until(&pgproto3.PortalSuspended{})
		w.send(&pgproto3.Execute{Portal: "p", MaxRows: 3}, &pgproto3.Execute{Portal: "p", MaxRows: 3},
			&pgproto3.Execute{Portal: "p"}, &pgproto3.Close{ObjectType: 'P', Name: "p"},
			&pgproto3.Describe{ObjectType: 'S', Name: "s"}, &pgproto3.Close{ObjectType: 'S', Name: "s"}, &pgproto3.Sync{})
		w.ready(1)
		w.send(q("COMMIT"))
		w.ready(1)
	}},
	{"copy out simple and extended", func(w *wire) {
		w.send(q("COPY (SELECT g, 'row ' || g, NULL FROM generate_series(1, 5) g) TO STDOUT"))
		w.ready(1)
		w.send(cat(pbe("", "COPY (SELECT g FROM generate_series(1, 3) g) TO STDOUT (FORMAT csv)"),
			[]pgproto3.FrontendMessage{&pgproto3.Sync{}})...)
		w.ready(1)
	}},
	{"copy in, copy fail", func(w *wire) {
		// copy_target exists already (TestTranscripts creates it) so both
		// runs see the same table OID in RowDescription.
		w.send(q("BEGIN"))
		w.ready(1)
		w.send(q("COPY copy_target FROM STDIN"))
		w.until(&pgproto3.CopyInResponse{})
		w.send(&pgproto3.CopyData{Data: []byte("1\théllo\n2\t\\N\n")}, &pgproto3.CopyData{Data: []byte("3\t日本\n")}, &pgproto3.CopyDone{})
		w.ready(1)
		w.send(q("SELECT * FROM copy_target ORDER BY id"))
		w.ready(1)
		w.send(q("SAVEPOINT s"), q("COPY copy_target FROM STDIN"))
		w.ready(1)
		w.until(&pgproto3.CopyInResponse{})
		w.send(&pgproto3.CopyData{Data: []byte("4\tx\n")}, &pgproto3.CopyFail{Message: "client gave up"})
		w.ready(1)
		w.send(q("ROLLBACK TO s"), q("COPY copy_target FROM STDIN"))
		w.ready(1)
		w.until(&pgproto3.CopyInResponse{})
		w.send(&pgproto3.CopyData{Data: []byte("not-a-number\tx\n")}, &pgproto3.CopyDone{})
		w.ready(1)
		w.send(q("ROLLBACK"))
		w.ready(1)
	}},
	{"empty queries", func(w *wire) {
		w.send(q(""), q(";"), q("  -- just a comment"))
		w.ready(3)
		w.send(cat(pbe("", ""), []pgproto3.FrontendMessage{&pgproto3.Sync{}})...)
		w.ready(1)
	}},
	{"notices and parameter status", func(w *wire) {
		w.send(q("DO $$BEGIN RAISE NOTICE 'hello %', 42; RAISE WARNING 'careful' USING DETAIL = 'some detail', HINT = 'a hint'; END$$"))
		w.ready(1)
		w.send(q("SET application_name = 'transcript'"), q("SET client_min_messages = warning"),
			q("DO $$BEGIN RAISE NOTICE 'hidden'; RAISE WARNING 'shown'; END$$"))
		w.ready(3)
		w.send(cat(pbe("", "SELECT set_config('application_name', 'via-extended', false)"),
			[]pgproto3.FrontendMessage{&pgproto3.Sync{}})...)
		w.ready(1)
	}},
	{"pipelined batches without intermediate Sync", func(w *wire) {
		// Three extended queries, a named statement reused, Flush in the middle,
		// then one Sync; and simple Queries sent back to back.
		msgs := cat(
			[]pgproto3.FrontendMessage{&pgproto3.Parse{Name: "add", Query: "SELECT $1::int + $2::int", ParameterOIDs: []uint32{23, 23}},
				&pgproto3.Describe{ObjectType: 'S', Name: "add"}},
			[]pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: "add", Parameters: [][]byte{[]byte("1"), []byte("2")}}, &pgproto3.Execute{}},
			[]pgproto3.FrontendMessage{&pgproto3.Flush{}},
			[]pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: "add", Parameters: [][]byte{[]byte("10"), []byte("20")},
				ResultFormatCodes: []int16{1}}, &pgproto3.Execute{}},
			pbe("", "SELECT 'text', now() IS NOT NULL"),
			[]pgproto3.FrontendMessage{&pgproto3.Sync{}},
			pbe("", "SELECT 'second batch'"),
			[]pgproto3.FrontendMessage{&pgproto3.Sync{}},
		)
		w.send(msgs...)
		w.ready(2)
		w.send(q("SELECT 1"), q("SELECT 2"), q("SELECT 3"))
		w.ready(3)
	}},
}

// TestTranscripts sends identical message sequences to Postgres directly and
// through the proxy, on each relay (the event loop, goroutines), plaintext
// and with TLS on both legs, and requires identical responses.
func TestTranscripts(t *testing.T) {
	// TLS on (plaintext allowed), for the proxies with TLS upstream.
	c := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256", TLS: true})
	p := startProxy(t, c, proxyOptions{})
	direct := targetFor(t, c.Addr(), "postgres")
	via := targetFor(t, p.Addr, "postgres")
	ctx := context.Background()
	if err := c.Exec(ctx, "postgres", "CREATE TABLE copy_target(id int, name text)"); err != nil {
		t.Fatal(err)
	}
	relays := []struct {
		name string
		via  target
	}{
		{"event-loop", via},
		{"goroutines", targetFor(t, startProxy(t, c, proxyOptions{GoroutineRelay: true}).Addr, "postgres")},
	}
	if viaProxy {
		tm := newTLSMaterial(t)
		for _, goroutines := range []bool{false, true} {
			p := startProxyTLSBothLegs(t, c, tm, goroutines)
			tg := targetFor(t, p.Addr, "postgres")
			tg.CAFile, tg.ChannelBinding = tm.CAFile, "disable"
			name := map[bool]string{false: "event-loop-TLS", true: "goroutines-TLS"}[goroutines]
			relays = append(relays, struct {
				name string
				via  target
			}{name, tg})
		}
	}
	for _, relay := range relays {
		for _, tc := range transcriptCases {
			t.Run(relay.name+"/"+tc.name, func(t *testing.T) {
				wd := openWire(ctx, t, direct)
				tc.run(wd)
				wp := openWire(ctx, t, relay.via)
				tc.run(wp)
				if len(wd.log) < 2 {
					t.Fatalf("direct transcript too short: %v", wd.log)
				}
				if a, b := strings.Join(wd.log, "\n"), strings.Join(wp.log, "\n"); a != b {
					t.Errorf("transcripts differ\n--- direct:\n%s\n--- proxy:\n%s", a, b)
				} else if !bytes.Equal(bytes.Join(wd.raw, nil), bytes.Join(wp.raw, nil)) {
					t.Errorf("transcripts decode alike but differ in bytes")
				}
			})
		}
	}
	t.Run("listen/notify", func(t *testing.T) {
		conn := via.connect(ctx, t)
		if _, err := conn.Exec(ctx, "LISTEN nlproxy_events"); err != nil {
			t.Fatal(err)
		}
		admin, err := c.Connect(ctx, "postgres")
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(ctx)
		var senderPID uint32
		if err := admin.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&senderPID); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, "SELECT pg_notify('nlproxy_events', 'héllo')"); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("no notification through the proxy: %v", err)
		}
		if n.Channel != "nlproxy_events" || n.Payload != "héllo" || n.PID != senderPID {
			t.Errorf("notification %+v, want channel nlproxy_events, payload héllo, pid %d", *n, senderPID)
		}
	})
}

// TestMarkerTranscript pins the exact messages a marker yields without an
// engine, in simple and extended protocol and inside a pipeline.
func TestMarkerTranscript(t *testing.T) {
	if !viaProxy {
		t.Skip("markers are a proxy feature")
	}
	c := newScramCluster(t, nil)
	p := startProxy(t, c, proxyOptions{})
	w := openWire(context.Background(), t, targetFor(t, p.Addr, "postgres"))

	errLine := func(i int) string {
		if i >= len(w.log) {
			t.Fatalf("transcript too short: %v", w.log)
		}
		return w.log[i]
	}
	expectShape := func(from int, want ...string) {
		t.Helper()
		var got []string
		for i := from; i < len(w.log); i++ {
			typ, _, _ := strings.Cut(w.log[i], " ")
			got = append(got, strings.TrimPrefix(typ, "*pgproto3."))
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("messages %v, want %v\n%s", got, want, strings.Join(w.log[from:], "\n"))
		}
	}
	checkErr := func(i int) {
		t.Helper()
		line := errLine(i)
		if !strings.Contains(line, `"Code":"0A000"`) || !strings.Contains(line, "natural-language queries need an engine") {
			t.Errorf("want a 0A000 ErrorResponse, got %s", line)
		}
	}

	for _, sql := range []string{"/* ask: how many users */ SELECT 1", "ASK how many users;", "-- ask: how many users\nSELECT 1"} {
		from := len(w.log)
		w.send(q(sql))
		w.ready(1)
		expectShape(from, "ErrorResponse", "ReadyForQuery")
		checkErr(from)
	}

	from := len(w.log)
	w.send(cat(pbe("", "SELECT 1"), pbe("", "/* ask: how many users */ SELECT 1"), pbe("", "SELECT 2"),
		[]pgproto3.FrontendMessage{&pgproto3.Sync{}})...)
	w.ready(1)
	expectShape(from, "ParseComplete", "BindComplete", "RowDescription", "DataRow", "CommandComplete", "ErrorResponse", "ReadyForQuery")
	checkErr(from + 5)

	// Inside a transaction the proxy may either abort it (like a server
	// error would) or leave it open; whichever it reports in ReadyForQuery must
	// be what the session then does.
	from = len(w.log)
	w.send(q("BEGIN"), q("ASK how many users;"), q("SELECT 1"), q("ROLLBACK"), q("SELECT 'usable'"))
	w.ready(5)
	checkErr(from + 2)
	status := errLine(from + 3)
	t.Logf("ReadyForQuery after a marker error in a transaction: %s", status)
	switch {
	case strings.Contains(status, `"TxStatus":"E"`):
		expectShape(from, "CommandComplete", "ReadyForQuery", "ErrorResponse", "ReadyForQuery",
			"ErrorResponse", "ReadyForQuery", "CommandComplete", "ReadyForQuery",
			"RowDescription", "DataRow", "CommandComplete", "ReadyForQuery")
		if got := errLine(from + 4); !strings.Contains(got, `"Code":"25P02"`) {
			t.Errorf("status E must reject later statements with 25P02, got %s", got)
		}
	case strings.Contains(status, `"TxStatus":"T"`):
		expectShape(from, "CommandComplete", "ReadyForQuery", "ErrorResponse", "ReadyForQuery",
			"RowDescription", "DataRow", "CommandComplete", "ReadyForQuery", "CommandComplete", "ReadyForQuery",
			"RowDescription", "DataRow", "CommandComplete", "ReadyForQuery")
	default:
		t.Errorf("ReadyForQuery after a marker error inside BEGIN must be T or E, got %s", status)
	}
}
