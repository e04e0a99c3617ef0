//go:build linux

package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
	"github.com/nlproxy/nlproxy/testkit/poll"
)

// tlsLoopCase is one way TLS can sit on a session: client → proxy,
// proxy → upstream, or both.
type tlsLoopCase struct {
	name             string
	client, upstream bool
}

var tlsLoopCases = []tlsLoopCase{
	{"client-TLS", true, false},
	{"upstream-TLS", false, true},
	{"both-TLS", true, true},
}

// tlsLoopServer starts a proxy with TLS where c says and returns a client
// URL for it: upstream TLS goes to the scram cluster (TLS required), plain
// upstream to the trust cluster.
func tlsLoopServer(t *testing.T, c tlsLoopCase, srv *Server) (*Server, string) {
	t.Helper()
	if srv == nil {
		srv = &Server{}
	}
	mode, password := "disable", ""
	if c.client {
		cfg, _ := proxyTLS(t)
		srv.TLSConfig, srv.RequireTLS = cfg, true
		mode = "require"
	}
	srv.Upstreams = []Upstream{{Address: trustPG.Addr(), TLS: UpstreamTLSDisable}}
	if c.upstream {
		srv.Upstreams = []Upstream{{Address: scramPG.Addr(), TLS: UpstreamTLSRequire}}
		password = pgtest.SuperuserPassword
	}
	addr := serve(t, srv)
	url := proxyURL(addr, pgtest.Superuser, password, "postgres", mode)
	if c.client && c.upstream {
		url += "&channel_binding=disable" // the documented limit (TestSCRAMPlusStripped)
	}
	return srv, url
}

// checkTLSLegs fails unless the session's legs are TLS where c says.
func checkTLSLegs(t *testing.T, c tlsLoopCase, conn *pgx.Conn) {
	t.Helper()
	if _, ok := conn.PgConn().Conn().(*tls.Conn); ok != c.client {
		t.Fatalf("client TLS = %v, want %v", ok, c.client)
	}
	if ssl := upstreamSSL(t, conn); ssl != c.upstream {
		t.Fatalf("upstream TLS = %v, want %v", ssl, c.upstream)
	}
}

// TestTLSOnEventLoop: a session with TLS on either side or both is relayed
// by the event loop, and stays there through a large result (many records,
// the loop's writes falling behind), messages larger than a TLS record
// both ways, many messages in one record both ways, and COPY; a marker in a
// pipelined batch then hands it, with TLS input already read, to the
// goroutine relay, which carries on.
func TestTLSOnEventLoop(t *testing.T) {
	needPG(t)
	for _, tc := range tlsLoopCases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			srv, url := tlsLoopServer(t, tc, nil)
			c := connect(t, url)
			pc := c.PgConn()
			checkTLSLegs(t, tc, c)
			if n := loopSessions(srv); n != 1 {
				t.Fatalf("sessions on an event loop: %d, want 1", n)
			}

			// A Bind and a DataRow of 300 kB: each crosses many records
			// (16 kB at most) and the loop's 64 kB pipe.
			big := strings.Repeat("0123456789abcdef", 300<<10/16)
			sum := sha256.Sum256([]byte(big))
			var n int
			var echo, digest string
			if err := c.QueryRow(ctx, "SELECT length($1::text), $1::text, encode(sha256(convert_to($1::text, 'UTF8')), 'hex')", big).Scan(&n, &echo, &digest); err != nil {
				t.Fatal(err)
			}
			if n != len(big) || echo != big || digest != hex.EncodeToString(sum[:]) {
				t.Fatalf("big message: length %d, echo %d bytes, digest %s", n, len(echo), digest)
			}

			// A large result in many small messages: several to a record.
			rr := pc.ExecParams(ctx, "SELECT g, repeat('x', g % 700) FROM generate_series(1, 50000) g", nil, nil, nil, nil)
			rows, total := 0, 0
			for rr.NextRow() {
				rows++
				var g int
				fmt.Sscan(string(rr.Values()[0]), &g)
				total += g
				if len(rr.Values()[1]) != g%700 {
					t.Fatalf("row %d: %d bytes", g, len(rr.Values()[1]))
				}
			}
			if _, err := rr.Close(); err != nil || rows != 50000 || total != 50000*50001/2 {
				t.Fatalf("large result: %d rows, sum %d, %v", rows, total, err)
			}

			// Many messages in one record from the client: a pipeline
			// of 200 statements sent in one write.
			p := pc.StartPipeline(ctx)
			for i := 0; i < 200; i++ {
				p.SendQueryParams("SELECT $1::int * 2", [][]byte{[]byte(fmt.Sprint(i))}, nil, nil, nil)
			}
			if err := p.Sync(); err != nil {
				t.Fatal(err)
			}
			got := pipelineResults(t, p, 300)
			if len(got) != 201 || got[0] != "0" || got[199] != "398" || got[200] != "sync" {
				t.Fatalf("pipeline: %d results, %v ... %v", len(got), got[:min(3, len(got))], got[max(0, len(got)-2):])
			}

			// COPY both ways.
			copyRoundTrip(ctx, t, pc, "tls_t")
			if n := loopSessions(srv); n != 1 {
				t.Fatalf("sessions on an event loop after the traffic: %d, want 1", n)
			}

			// A marker in the middle of a pipelined batch: the loop has
			// read it, with what follows, out of one TLS record, and hands
			// the session back mid-batch.
			p = pc.StartPipeline(ctx)
			p.SendQueryParams("SELECT $1::int * 2", [][]byte{[]byte("21")}, nil, nil, nil)
			p.SendQueryParams("-- ask: in the middle", nil, nil, nil, nil)
			p.SendQueryParams("SELECT $1::int * 3", [][]byte{[]byte("5")}, nil, nil, nil)
			if err := p.Sync(); err != nil {
				t.Fatal(err)
			}
			if g := strings.Join(pipelineResults(t, p, 10), ","); g != "42,err:0A000,sync" {
				t.Fatalf("pipeline results %s", g)
			}
			if n := loopSessions(srv); n != 0 {
				t.Fatalf("sessions on an event loop after a marker: %d, want 0", n)
			}
			// The goroutine relay carries on over the same TLS.
			if got := queryInt(t, c, "SELECT count(*) FROM tls_t"); got != 20000 {
				t.Fatalf("after the marker: count %d", got)
			}
			checkTLSLegs(t, tc, c)
			if err := c.QueryRow(ctx, "SELECT $1::text", big).Scan(&echo); err != nil || echo != big {
				t.Fatalf("big message after the hand-back: %d bytes, %v", len(echo), err)
			}
		})
	}
}

// TestTLSLoopSessionEnds: a TLS session on the event loop ends cleanly
// whichever way it ends: Terminate, the client's close_notify without a
// Terminate, and the server's Close.
func TestTLSLoopSessionEnds(t *testing.T) {
	needPG(t)
	for _, tc := range tlsLoopCases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			srv, url := tlsLoopServer(t, tc, nil)
			sessions := func() int {
				srv.mu.Lock()
				defer srv.mu.Unlock()
				return len(srv.conns)
			}

			c := connect(t, url)
			queryInt(t, c, "SELECT 1")
			if n := loopSessions(srv); n != 1 {
				t.Fatalf("sessions on an event loop: %d, want 1", n)
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, "the session to end after Terminate", func() bool { return sessions() == 0 })

			c = connect(t, url)
			queryInt(t, c, "SELECT 1")
			if n := loopSessions(srv); n != 1 {
				t.Fatalf("sessions on an event loop: %d, want 1", n)
			}
			// close_notify (TLS) or FIN, without a Terminate.
			if err := c.PgConn().Conn().Close(); err != nil {
				t.Fatal(err)
			}
			poll.Until(t, "the session to end after the client's close", func() bool { return sessions() == 0 })
			if n := loopSessions(srv); n != 0 {
				t.Fatalf("sessions on an event loop: %d, want 0", n)
			}

			c = connect(t, url)
			queryInt(t, c, "SELECT 1")
			srv.Close()
			waitServerClose(t, c)
		})
	}
}

// TestTLSLoopTakesWhatTheHandshakeLeft: a client that sends its startup
// message and a Query in one TLS record leaves part of the Query decrypted
// inside the tls.Conn (beyond the handshake's reader) when the session
// moves to the event loop. The socket is then empty, so epoll never says
// so: the loop must take it from the tls.Conn itself, or the Query hangs.
func TestTLSLoopTakesWhatTheHandshakeLeft(t *testing.T) {
	needPG(t)
	srv, u := tlsLoopServer(t, tlsLoopCases[0], nil)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.DialTimeout("tcp", pu.Host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(time.Minute)) // a hang guard
	if _, err := raw.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(raw, b[:]); err != nil || b[0] != 'S' {
		t.Fatalf("SSLRequest: %q %v", b[0], err)
	}
	// One record for the startup and the Query (no small first records).
	tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, DynamicRecordSizingDisabled: true})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	lit := strings.Repeat("z", 3*handshakeBufSize/2) // the Query outlasts the handshake's reader
	first := encodeStartup(196608, []param{{"user", pgtest.Superuser}, {"database", "postgres"}})
	first = append(first, queryMsg("SELECT length('"+lit+"')")...)
	if len(first) > 16<<10 {
		t.Fatalf("%d bytes do not fit one TLS record", len(first))
	}
	if _, err := tc.Write(first); err != nil {
		t.Fatal(err)
	}
	fe := pgproto3.NewFrontend(tc, tc)
	var got []string
	for ready := 0; ready < 2; {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		switch m := m.(type) {
		case *pgproto3.ReadyForQuery:
			ready++
		case *pgproto3.DataRow:
			got = append(got, string(m.Values[0]))
		case *pgproto3.ErrorResponse:
			t.Fatalf("error %s: %s", m.Code, m.Message)
		}
	}
	if want := fmt.Sprint(len(lit)); len(got) != 1 || got[0] != want {
		t.Fatalf("rows %v, want [%s]", got, want)
	}
	if n := loopSessions(srv); n != 1 {
		t.Fatalf("sessions on an event loop: %d, want 1", n)
	}
}

// TestTLSLoopHandsOffBigQuery: a Query larger than the loop's buffer (which
// it would have to hold whole) sends a TLS session to the goroutine relay
// mid-message, part of it read out of the tls.Conn; the relay carries on.
func TestTLSLoopHandsOffBigQuery(t *testing.T) {
	needPG(t)
	for _, tc := range tlsLoopCases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			srv, url := tlsLoopServer(t, tc, nil)
			c := connect(t, url)
			queryInt(t, c, "SELECT 1")
			if n := loopSessions(srv); n != 1 {
				t.Fatalf("sessions on an event loop: %d, want 1", n)
			}
			lit := strings.Repeat("q", 3*bufSize)
			res, err := c.PgConn().Exec(ctx, "SELECT length('"+lit+"')").ReadAll()
			if err != nil || len(res) != 1 || len(res[0].Rows) != 1 || string(res[0].Rows[0][0]) != fmt.Sprint(len(lit)) {
				t.Fatalf("big Query: %v %v", res, err)
			}
			if n := loopSessions(srv); n != 0 {
				t.Fatalf("sessions on an event loop after a big Query: %d, want 0", n)
			}
			checkTLSLegs(t, tc, c)
		})
	}
}

// TestTLSLoopShutdown: a graceful shutdown ends TLS sessions on the event
// loop with 57P01 over their TLS: an idle one at once, one in a transaction
// at the ReadyForQuery that leaves it idle.
func TestTLSLoopShutdown(t *testing.T) {
	needPG(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, url := tlsLoopServer(t, tlsLoopCases[2], nil)
	idle, busy := connect(t, url), connect(t, url)
	if _, err := busy.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if n := loopSessions(srv); n != 2 {
		t.Fatalf("sessions on an event loop: %d, want 2", n)
	}
	shutdownDone := make(chan error, 1)
	go func() { shutdownDone <- srv.Shutdown(ctx) }()
	if _, err := idle.PgConn().ReceiveMessage(ctx); pgCode(err) != "57P01" {
		t.Fatalf("idle session: %v, want 57P01", err)
	}
	if got := queryInt(t, busy, "SELECT 11"); got != 11 {
		t.Fatal("busy session broken during drain")
	}
	if _, err := busy.Exec(ctx, "COMMIT"); err != nil {
		t.Fatalf("commit during drain: %v", err)
	}
	if _, err := busy.PgConn().ReceiveMessage(ctx); pgCode(err) != "57P01" {
		t.Fatalf("busy session after COMMIT: %v, want 57P01", err)
	}
	if err := <-shutdownDone; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
