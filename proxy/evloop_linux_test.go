//go:build linux

package proxy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nlproxy/nlproxy/internal/uring"
	"github.com/nlproxy/nlproxy/testkit/poll"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

// relayKind is one way the proxy relays a plaintext session.
type relayKind struct {
	name       string
	goroutines bool
	loop       RelayLoop
}

// relayKinds are the relays the relay tests run through: the epoll loop
// (first: the others are compared with it), the io_uring loop, goroutines.
func relayKinds() []relayKind {
	return []relayKind{{"event-loop", false, RelayEpoll}, {"io_uring", false, RelayIOUring}, {"goroutines", true, RelayEpoll}}
}

// onLoop fails the test unless srv relays sessions on loops of kind and on
// none of the other kind, skipping it where io_uring is asked for and the
// kernel refuses it. Call it once a query has come back: by then the
// session has been handed to its loop.
func onLoop(t *testing.T, srv *Server, kind RelayLoop) {
	t.Helper()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if kind == RelayIOUring && srv.evloops.noRing {
		t.Skip("io_uring unavailable here")
	}
	epoll, rings := 0, 0
	for _, l := range srv.evloops.loops {
		if l != nil {
			epoll += l.sessions
		}
	}
	for _, l := range srv.evloops.rings {
		if l != nil {
			rings += l.sessions
		}
	}
	on, off := epoll, rings
	if kind == RelayIOUring {
		on, off = rings, epoll
	}
	if on == 0 || off > 0 {
		t.Fatalf("sessions on epoll loops %d, on io_uring loops %d; want %s only", epoll, rings, kind)
	}
}

// TestRingFallback: where the kernel refuses an io_uring (here: a ring
// size it rejects), the proxy says so once and relays on epoll loops.
func TestRingFallback(t *testing.T) {
	needPG(t)
	core, logs := observer.New(zap.InfoLevel)
	srv := &Server{RelayLoop: RelayIOUring, Logger: zap.New(core)}
	srv.evloops.ringSize = 1 << 20 // above IORING_MAX_ENTRIES: EINVAL
	srv, addr := trustServer(t, srv)
	for range 2 {
		c := connect(t, trustURL(addr))
		if got := queryInt(t, c, "SELECT 41 + 1"); got != 42 {
			t.Fatalf("SELECT: %d", got)
		}
	}
	srv.mu.Lock()
	epoll, rings, noRing := 0, 0, srv.evloops.noRing
	for _, l := range srv.evloops.loops {
		if l != nil {
			epoll += l.sessions
		}
	}
	for _, l := range srv.evloops.rings {
		if l != nil {
			rings += l.sessions
		}
	}
	srv.mu.Unlock()
	if !noRing || epoll != 2 || rings != 0 {
		t.Fatalf("noRing %v, sessions on epoll %d and io_uring %d loops; want the fallback, 2 and 0", noRing, epoll, rings)
	}
	if n := logs.FilterMessage("proxy: io_uring relay loop unavailable, using epoll").Len(); n != 1 {
		t.Fatalf("%d fallback log lines, want 1", n)
	}
}

// TestRingFailure: when a ring fails under its sessions (here /dev/null
// is put in place of its descriptor, so its next enter fails), a session
// with entries in flight ends, since a receive may still take its bytes
// and a send may have gone; the failure is logged and new sessions are
// served.
func TestRingFailure(t *testing.T) {
	needPG(t)
	core, logs := observer.New(zap.ErrorLevel)
	srv, addr := trustServer(t, &Server{RelayLoop: RelayIOUring, Logger: zap.New(core)})
	c := connect(t, trustURL(addr))
	if got := queryInt(t, c, "SELECT 41 + 1"); got != 42 {
		t.Fatalf("SELECT: %d", got)
	}
	onLoop(t, srv, RelayIOUring)
	srv.mu.Lock()
	var ring *eventLoop
	for _, l := range srv.evloops.rings {
		if l != nil && l.sessions > 0 {
			ring = l
		}
	}
	srv.mu.Unlock()
	if ring == nil {
		t.Fatal("no io_uring loop with the session")
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	// The loop closes the descriptor when it stops: a copy of /dev/null's.
	if err := unix.Dup2(int(null.Fd()), ring.ring.FD()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Handed to the goroutine relay instead, the session would go on with
	// bytes the ring's receives took: the reply's RowDescription, say.
	if _, err := c.Exec(ctx, "SELECT 1"); err == nil || !c.PgConn().IsClosed() || ctx.Err() != nil {
		t.Fatalf("after the ring failed: %v, connection closed %v; want the session ended", err, c.PgConn().IsClosed())
	}
	poll.Until(t, "the failure logged", func() bool {
		return logs.FilterMessage("proxy: io_uring event loop failed: sessions with I/O in flight end, the others go on on goroutines").Len() == 1
	})
	srv.mu.Lock()
	kept := len(srv.evloops.kernelHeld)
	srv.mu.Unlock()
	if kept != 3 {
		t.Errorf("%d buffers kept from the collector, want the session's 2 and the wake-up read's", kept)
	}
	c2 := connect(t, trustURL(addr))
	if got := queryInt(t, c2, "SELECT 40 + 2"); got != 42 {
		t.Fatalf("SELECT on a new session: %d", got)
	}
}

// loopSessions counts the sessions an event loop relays now.
func loopSessions(srv *Server) int {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	n := 0
	for _, l := range append(srv.evloops.loops, srv.evloops.rings...) {
		if l != nil {
			n += l.sessions
		}
	}
	return n
}

// TestRelayPaths runs the same traffic through the event loop and the
// goroutine relay: a large result (the loop's writes to the client fall
// behind), COPY both ways (client messages larger than its buffer), a
// notification while idle, and a marker in a pipelined batch, after which
// the loop hands the session to the goroutine relay mid-batch.
func TestRelayPaths(t *testing.T) {
	needPG(t)
	for _, k := range relayKinds() {
		goroutines := k.goroutines
		t.Run(k.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			srv, addr := trustServer(t, &Server{GoroutineRelay: goroutines, RelayLoop: k.loop})
			c := connect(t, trustURL(addr))
			pc := c.PgConn()
			if got := queryInt(t, c, "SELECT 41 + 1"); got != 42 {
				t.Fatalf("SELECT: %d", got)
			}
			want := 1
			if goroutines {
				want = 0
			}
			if n := loopSessions(srv); n != want {
				t.Fatalf("sessions on an event loop: %d, want %d", n, want)
			}
			if !goroutines {
				onLoop(t, srv, k.loop)
			}

			rr := pc.ExecParams(ctx, "SELECT g, repeat('x', 500) FROM generate_series(1, 100000) g", nil, nil, nil, nil)
			rows, sum := 0, 0
			for rr.NextRow() {
				rows++
				var g int
				fmt.Sscan(string(rr.Values()[0]), &g)
				sum += g
				if len(rr.Values()[1]) != 500 {
					t.Fatalf("row %d: %d bytes", rows, len(rr.Values()[1]))
				}
			}
			if _, err := rr.Close(); err != nil || rows != 100000 || sum != 100000*100001/2 {
				t.Fatalf("large result: %d rows, sum %d, %v", rows, sum, err)
			}

			copyRoundTrip(ctx, t, pc, "paths_t")

			other := connect(t, trustURL(addr))
			if _, err := c.Exec(ctx, "LISTEN paths_chan"); err != nil {
				t.Fatal(err)
			}
			if _, err := other.Exec(ctx, "NOTIFY paths_chan, 'idle'"); err != nil {
				t.Fatal(err)
			}
			if n, err := c.WaitForNotification(ctx); err != nil || n.Payload != "idle" {
				t.Fatalf("notification: %+v %v", n, err)
			}

			before := loopSessions(srv) // this session and other
			p := pc.StartPipeline(ctx)
			p.SendQueryParams("SELECT $1::int * 2", [][]byte{[]byte("21")}, nil, nil, nil)
			p.SendQueryParams("-- ask: in the middle", nil, nil, nil, nil)
			if err := p.Sync(); err != nil {
				t.Fatal(err)
			}
			got := pipelineResults(t, p, 10)
			if g := strings.Join(got, ","); g != "42,err:0A000,sync" {
				t.Fatalf("pipeline results %s", g)
			}
			if n := loopSessions(srv); n != before-want {
				t.Fatalf("sessions on an event loop after a marker: %d, want %d", n, before-want)
			}
			if got := queryInt(t, c, "SELECT count(*) FROM paths_t"); got != 20000 {
				t.Fatalf("after the marker: count %d", got)
			}
		})
	}
}

// TestStatementBeforeTerminate: a client that sends a statement and its
// Terminate in one write (without waiting for the reply) still has the
// statement run, whichever relay reads them.
func TestStatementBeforeTerminate(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	table := fmt.Sprintf("term_%d", time.Now().UnixNano())
	direct := connectDirect(t, trustPG)
	if _, err := direct.Exec(ctx, "CREATE TABLE "+table+" (id int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = direct.Exec(context.Background(), "DROP TABLE "+table) })
	for i, k := range relayKinds() {
		_, addr := trustServer(t, &Server{GoroutineRelay: k.goroutines, RelayLoop: k.loop})
		c := connect(t, trustURL(addr))
		msg := queryMsg(fmt.Sprintf("INSERT INTO %s VALUES (%d)", table, i))
		if _, err := c.PgConn().Conn().Write(append(msg, terminateMsg...)); err != nil {
			t.Fatal(err)
		}
		waitServerClose(t, c)
		poll.Until(t, "the insert", func() bool {
			var n int
			err := direct.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE id = %d", table, i)).Scan(&n)
			return err == nil && n == 1
		})
	}
}

// TestEventLoopHandsOffEveryAskForm: a session relayed by the event loop
// leaves it for each form the goroutine relay answers, not only a marker at
// the start: the table-function form anywhere in a Query or a Parse, and an
// ask after transaction-control statements in one Query (psqlodbc).
func TestEventLoopHandsOffEveryAskForm(t *testing.T) {
	needPG(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, k := range relayKinds()[:2] {
		srv, addr := trustServer(t, &Server{AskFuncs: pgQueryAskFuncs{}, RelayLoop: k.loop})
		for _, tc := range []struct {
			name, sql string
			extended  bool
		}{
			{"table function in a Query", "SELECT n FROM (SELECT * FROM nlproxy.ask('how many')) q LIMIT 10", false},
			{"table function in a Parse", "SELECT * FROM nlproxy.ask('how many')", true},
			{"ask after transaction control", "BEGIN;/* ask: how many */", false},
		} {
			t.Run(k.name+"/"+tc.name, func(t *testing.T) {
				c := connect(t, trustURL(addr))
				if got := queryInt(t, c, "SELECT 41 + 1"); got != 42 {
					t.Fatalf("SELECT: %d", got)
				}
				before := loopSessions(srv)
				var err error
				if tc.extended {
					_, err = c.PgConn().ExecParams(ctx, tc.sql, nil, nil, nil, nil).Close()
				} else {
					_, err = c.PgConn().Exec(ctx, tc.sql).ReadAll()
				}
				if err == nil || pgCode(err) == "42601" || pgCode(err) == "42883" {
					t.Fatalf("%q reached the server as plain SQL (%v)", tc.sql, err)
				}
				if n := loopSessions(srv); n != before-1 {
					t.Fatalf("sessions on an event loop: %d, want %d", n, before-1)
				}
			})
		}
	}
}

// copyRoundTrip copies 20,000 rows of growing width into a new temporary
// table and back out, and fails unless what came back is what went in.
func copyRoundTrip(ctx context.Context, t *testing.T, pc *pgconn.PgConn, table string) {
	t.Helper()
	if _, err := pc.Exec(ctx, "CREATE TEMP TABLE "+table+" (id int, s text)").ReadAll(); err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	for i := 0; i < 20000; i++ {
		fmt.Fprintf(&in, "%d\t%s\n", i, strings.Repeat("y", i%300))
	}
	if tag, err := pc.CopyFrom(ctx, bytes.NewReader(in.Bytes()), "COPY "+table+" FROM STDIN"); err != nil || tag.RowsAffected() != 20000 {
		t.Fatalf("copy from: %v %v", tag, err)
	}
	var out bytes.Buffer
	if _, err := pc.CopyTo(ctx, &out, "COPY (SELECT * FROM "+table+" ORDER BY id) TO STDOUT"); err != nil || !bytes.Equal(out.Bytes(), in.Bytes()) {
		t.Fatalf("copy to: %v (%d vs %d bytes)", err, out.Len(), in.Len())
	}
}

func TestRingHotWait(t *testing.T) {
	for _, tc := range []struct {
		ms      int
		godebug string
		want    int
	}{
		{preemptMS, "", uring.HotUntimed},
		{preemptMS, "http2debug=1", uring.HotUntimed},
		{preemptMS, "asyncpreemptoff=1", preemptMS},
		{preemptMS, "asyncpreemptoff=1,gctrace=1", preemptMS},
		{preemptMS, "asyncpreemptoff=1, asyncpreemptoff=0", uring.HotUntimed},
		{preemptMS, "asyncpreemptoff=0,asyncpreemptoff=1", preemptMS},
		{1, "", 1}, // GOMAXPROCS 1: shorter than the runtime's bound
	} {
		if got := ringHotWait(tc.ms, tc.godebug); got != tc.want {
			t.Errorf("ringHotWait(%d, %q) = %d, want %d", tc.ms, tc.godebug, got, tc.want)
		}
	}
}
