//go:build linux

package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestEntryDecisionBothRelays runs the same client messages through the
// entry decision of each relay: the goroutine relay's clientQuery and
// clientParse (plain SQL leaves as sent, an ask does not) and the event
// loop's clientMsg (plain SQL stays on the loop, an ask is handed off). The
// two must agree on every form of ask and on the plain SQL that looks like
// one, so no form reaches the server as plain SQL on either path.
func TestEntryDecisionBothRelays(t *testing.T) {
	long := "SELECT " + strings.Repeat("1 + ", 40) + "1"
	for _, tc := range []struct {
		name string
		msg  []byte
		ask  bool
	}{
		{"select", queryMsg("SELECT 1"), false},
		{"leading line comment", queryMsg("-- a comment\nSELECT 1"), false},
		{"leading block comment", queryMsg("/* app=web */ SELECT 1"), false},
		{"word starting with a", queryMsg("analyze pgbench_accounts"), false},
		{"lone BEGIN", queryMsg("BEGIN"), false},
		{"transaction control then SQL", queryMsg("BEGIN; SELECT 1"), false},
		{"nlproxy in a string", queryMsg("SELECT 'nlproxy.ask'"), false},
		{"long plain", queryMsg(long), false},
		{"ASK", queryMsg("ASK how many orders are open?"), true},
		{"line comment ask", queryMsg("-- ask: how many orders"), true},
		{"block comment ask with profile", queryMsg("/* ask(fast): how many orders */"), true},
		{"ask-sql", queryMsg("-- ask-sql: how many orders"), true},
		{"optimize", queryMsg("/* optimize: SELECT 1 */"), true},
		{"ask after BEGIN", queryMsg("BEGIN;/* ask: how many */"), true},
		{"ask after savepoints", queryMsg("RELEASE _EXEC_SVP_1;SAVEPOINT _EXEC_SVP_1;-- ask: how many"), true},
		{"table function", queryMsg("SELECT n FROM (SELECT * FROM nlproxy.ask('how many')) q LIMIT 10"), true},
		{"table function late in a long Query", queryMsg(long + " + (SELECT count(*) FROM NLPROXY.ask('how many'))"), true},
		{"table function after BEGIN", queryMsg("BEGIN; SELECT * FROM nlproxy.ask('how many')"), true},
		{"misused table function", queryMsg("SELECT * FROM nlproxy.ask('a'); SELECT 1"), true},
		{"Parse plain", parseMsg("", "SELECT $1::int", []byte{0, 0}), false},
		{"Parse plain with a comment", parseMsg("s1", "/* orm */ SELECT 1", []byte{0, 0}), false},
		{"Parse with a long name", parseMsg(strings.Repeat("n", 300), "SELECT 1", []byte{0, 0}), false},
		{"Parse transaction control then ask", parseMsg("", "BEGIN;/* ask: how many */", []byte{0, 0}), false},
		{"Parse marker", parseMsg("s1", "-- ask: how many orders", []byte{0, 0}), true},
		{"Parse unnamed marker", parseMsg("", "ASK how many orders", []byte{0, 0}), true},
		{"Parse table function", parseMsg("", "SELECT * FROM nlproxy.ask('how many')", []byte{0, 0}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			typ, n := tc.msg[0], int(binary.BigEndian.Uint32(tc.msg[1:5]))-4
			if got := relayedPlainByGoroutines(t, tc.msg); got == tc.ask {
				t.Errorf("goroutine relay: passed on as plain SQL = %v, want %v", got, !tc.ask)
			}
			if got := keptByLoop(t, typ, n, tc.msg); got == tc.ask {
				t.Errorf("event loop: kept as plain SQL = %v, want %v", got, !tc.ask)
			}
		})
	}
}

// entrySession is a session whose client has sent msg, with no upstream:
// it counts as closing, so an ask stops where it would first wait for the
// server, having written nothing of the client's message upstream.
func entrySession(msg []byte, up *bytes.Buffer) *session {
	s := newEntrySession()
	s.cl.cr = bufio.NewReaderSize(bytes.NewReader(msg), bufSize)
	s.cl.uw = newOutBuf(up, bufSize)
	return s
}

// relayedPlainByGoroutines reports whether clientQuery / clientParse passed
// msg upstream exactly as sent.
func relayedPlainByGoroutines(t *testing.T, msg []byte) bool {
	var up bytes.Buffer
	s := entrySession(msg, &up)
	n := len(msg) - 5
	var err error
	if msg[0] == 'Q' {
		err = s.clientQuery(n)
	} else {
		err = s.clientParse(n)
	}
	if ferr := s.cl.uw.Flush(); ferr != nil {
		t.Fatal(ferr)
	}
	if err != nil && err != errQuiet {
		t.Fatalf("goroutine relay: %v", err)
	}
	return err == nil && bytes.Equal(up.Bytes(), msg)
}

// keptByLoop reports whether the event loop's clientMsg passes the message
// on itself rather than handing the session to the goroutine relay.
func keptByLoop(t *testing.T, typ byte, n int, msg []byte) bool {
	srv := &Server{AskFuncs: pgQueryAskFuncs{}}
	l := &eventLoop{srv: srv, sessions: 1, epfd: -1} // no sockets: finish only forgets them
	ls := &loopSess{s: newEntrySession(), cfd: 1 << 20, ufd: 1<<20 + 1, done: make(chan loopResult, 1)}
	ls.c.buf = make([]byte, bufSize)
	ls.c.w = copy(ls.c.buf, msg)
	ok, wait := l.clientMsg(ls, typ, n, ls.c.buf[:ls.c.w])
	if wait {
		t.Fatal("event loop: waits for more of a whole message")
	}
	if !ok {
		if res := <-ls.done; res.kind != loopHandoff {
			t.Fatalf("event loop: left with %v, want a handoff", res.kind)
		}
	}
	return ok
}

// newEntrySession is a session after its handshake, closing (see entrySession),
// reading the table-function form as router.Translator does.
func newEntrySession() *session {
	s := &session{srv: &Server{AskFuncs: pgQueryAskFuncs{}}, log: zap.NewNop(), maxMsg: 1 << 30,
		cl: clientSide{stmts: map[string]*askStmt{}, portals: map[string]*askPortal{}}}
	s.sh.init()
	s.sh.setClosing()
	return s
}
