//go:build linux

package proxy

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/testkit/poll"
)

// transition is what one message did to the session's state, as onClient
// or onServer left it.
type transition struct {
	typ   byte
	after bool // before the message was recorded (what the relay did since the last one), or after
	// client direction
	batchOpen bool
	unitsSent uint64
	closing   bool
	// server direction
	unitsDone     uint64
	tx            byte
	errInUnit     bool
	failed        bool
	copyIn        bool
	upstreamFatal bool
}

func (tr transition) String() string {
	phase := "before"
	if tr.after {
		phase = "after"
	}
	return fmt.Sprintf("%q %s{open=%v sent=%d closing=%v done=%d tx=%q err=%v failed=%v copy=%v fatal=%v}",
		tr.typ, phase, tr.batchOpen, tr.unitsSent, tr.closing, tr.unitsDone, tr.tx, tr.errInUnit, tr.failed, tr.copyIn, tr.upstreamFatal)
}

// transitions records, per direction, the state after each message once on
// is set (the session's setup is not compared).
type transitions struct {
	on atomic.Bool
	// units sent and done before on was set: the setup's, which differ
	// between modes (an ask's setup runs statements of the proxy's)
	sent0, done0 uint64
	mu           sync.Mutex
	client       []transition
	server       []transition
}

func (r *transitions) hook(s *session, client bool, typ byte, after bool) {
	if !r.on.Load() {
		return
	}
	s.sh.mu.Lock()
	tr := transition{typ: typ, after: after, unitsSent: s.sh.unitsSent - r.sent0, closing: s.sh.closing}
	if client {
		tr.batchOpen = s.cl.batchOpen
	} else {
		tr.unitsDone, tr.tx, tr.failed, tr.copyIn = s.sh.unitsDone-r.done0, s.sh.txStatus, s.sh.lastUnitFailed, s.sh.copyIn
		tr.errInUnit, tr.upstreamFatal = s.sv.errInUnit, s.sv.upstreamFatal
		tr.unitsSent = 0 // the client side's, racing with this one
	}
	s.sh.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if client {
		r.client = append(r.client, tr)
	} else {
		r.server = append(r.server, tr)
	}
}

func (r *transitions) seen(client bool, typ byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	side := r.server
	if client {
		side = r.client
	}
	return slices.ContainsFunc(side, func(tr transition) bool { return tr.typ == typ && tr.after })
}

// TestStateTransitionsPerRelay drives one scripted conversation — simple
// and extended queries, an error in each, a pipelined batch cut short by an
// error, a transaction block, COPY both ways, a ParameterStatus, a DDL tag,
// Terminate — through the event loop, the goroutine relay and tracked mode
// (a prepared ask held in the proxy's table), and compares the state each
// message left, direction by direction.
func TestStateTransitionsPerRelay(t *testing.T) {
	needPG(t)
	type mode struct {
		name       string
		goroutines bool
		tracked    bool
		tls        bool // TLS both ways (evloop_tls_linux.go)
		loop       RelayLoop
	}
	results := map[string]*transitions{}
	modes := []mode{{"event-loop", false, false, false, RelayEpoll}, {"goroutines", true, false, false, ""}, {"tracked", false, true, false, ""},
		{"event-loop-TLS", false, false, true, ""}, {"goroutines-TLS", true, false, true, ""}, {"io_uring", false, false, false, RelayIOUring},
		{"io_uring-server-TLS", false, false, true, RelayIOUring}}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rec := &transitions{}
			results[m.name] = rec
			srv := &Server{GoroutineRelay: m.goroutines, RelayLoop: m.loop, Translator: &scriptTranslator{}, OnDDL: func(string, string) {}}
			srv.stateHook = rec.hook
			var c *pgx.Conn
			if m.tls {
				var url string
				srv, url = tlsLoopServer(t, tlsLoopCase{"both-TLS", true, true}, srv)
				c = connect(t, url)
			} else {
				var addr string
				srv, addr = trustServer(t, srv)
				c = connect(t, trustURL(addr))
			}
			pc := c.PgConn()
			setup := "SELECT 1"
			if m.tracked {
				setup = "-- ask: show me the sql"
			}
			if _, err := pc.Prepare(ctx, "held", setup, nil); err != nil {
				t.Fatal(err)
			}
			s := onlySession(t, srv)
			s.sh.mu.Lock()
			rec.sent0, rec.done0 = s.sh.unitsSent, s.sh.unitsDone
			s.sh.mu.Unlock()
			rec.on.Store(true)

			table := fmt.Sprintf("states_%s_%d", strings.ReplaceAll(m.name, "-", "_"), time.Now().UnixNano())
			stateScript(ctx, t, pc, table)

			switch {
			case m.tracked:
				if !s.sig.tracked.Load() {
					t.Fatal("the session left tracked mode")
				}
			case !m.goroutines:
				if n := loopSessions(srv); n != 1 {
					t.Fatalf("sessions on an event loop: %d, want 1", n)
				}
				kind := m.loop
				if m.tls { // TLS sessions stay on epoll loops
					kind = RelayEpoll
				}
				onLoop(t, srv, kind)
			}
			if err := pc.Close(ctx); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, "the Terminate", func() bool { return rec.seen(true, feTerminate) })
			rec.on.Store(false)
		})
	}
	base := results[modes[0].name]
	if base == nil || t.Failed() {
		return
	}
	// The comparison can fail only if the script reaches every kind of
	// bookkeeping: check that it does.
	for _, typ := range []byte{feQuery, feParse, feBind, feDescribe, feExecute, feSync, feCopyData, feCopyDone, feTerminate} {
		if !base.seen(true, typ) {
			t.Errorf("client message %q never seen", typ)
		}
	}
	for _, typ := range []byte{beReadyForQuery, beErrorResponse, beParameterStatus, beCopyInResponse, beCommandComplete} {
		if !base.seen(false, typ) {
			t.Errorf("server message %q never seen", typ)
		}
	}
	for _, m := range modes[1:] {
		got := results[m.name]
		for _, dir := range []struct {
			name       string
			want, have []transition
		}{{"client", base.client, got.client}, {"server", base.server, got.server}} {
			if !slices.Equal(dir.want, dir.have) {
				t.Errorf("%s direction, %s vs %s:\n%s", dir.name, m.name, modes[0].name, diffTransitions(dir.want, dir.have))
			}
		}
	}
}

// stateScript is the conversation TestStateTransitionsPerRelay drives.
func stateScript(ctx context.Context, t *testing.T, pc *pgconn.PgConn, table string) {
	t.Helper()
	steps := []struct {
		sql     string
		wantErr bool
	}{
		{"SELECT 1", false},
		{"SELECT 1/0", true},
		{"BEGIN", false},
		{"CREATE TEMP TABLE " + table + " (id int, s text)", false},
		{"SELECT nosuchcol", true},
		{"ROLLBACK", false},
		{"SET application_name = 'states'", false},
		{"CREATE TEMP TABLE " + table + " (id int, s text)", false},
	}
	for _, st := range steps {
		_, err := pc.Exec(ctx, st.sql).ReadAll()
		if (err != nil) != st.wantErr {
			t.Fatalf("%s: %v", st.sql, err)
		}
	}
	if _, err := pc.ExecParams(ctx, "SELECT $1::int + 1", [][]byte{[]byte("41")}, nil, nil, nil).Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.ExecParams(ctx, "SELECT $1::int / 0", [][]byte{[]byte("1")}, nil, nil, nil).Close(); err == nil {
		t.Fatal("division by zero succeeded")
	}
	p := pc.StartPipeline(ctx)
	p.SendQueryParams("SELECT 2", nil, nil, nil, nil)
	p.SendQueryParams("SELECT nosuchcol", nil, nil, nil, nil)
	p.SendQueryParams("SELECT 3", nil, nil, nil, nil)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(pipelineResults(t, p, 10), ","); got != "2,err:42703,sync" {
		t.Fatalf("pipeline: %s", got)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	in := "1\ta\n2\tb\n"
	if tag, err := pc.CopyFrom(ctx, strings.NewReader(in), "COPY "+table+" FROM STDIN"); err != nil || tag.RowsAffected() != 2 {
		t.Fatalf("copy from: %v %v", tag, err)
	}
	var out bytes.Buffer
	if _, err := pc.CopyTo(ctx, &out, "COPY (SELECT * FROM "+table+" ORDER BY id) TO STDOUT"); err != nil || out.String() != in {
		t.Fatalf("copy to: %q %v", out.String(), err)
	}
}

// onlySession returns the server's one session.
func onlySession(t *testing.T, srv *Server) *session {
	t.Helper()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.conns) != 1 {
		t.Fatalf("%d sessions, want 1", len(srv.conns))
	}
	for s := range srv.conns {
		return s
	}
	return nil
}

func diffTransitions(want, have []transition) string {
	var b strings.Builder
	for i := 0; i < max(len(want), len(have)); i++ {
		var w, h string
		if i < len(want) {
			w = want[i].String()
		}
		if i < len(have) {
			h = have[i].String()
		}
		mark := "  "
		if w != h {
			mark = "! "
		}
		fmt.Fprintf(&b, "%s%3d %-100s %s\n", mark, i, w, h)
	}
	return b.String()
}
