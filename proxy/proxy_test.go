package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
	"github.com/nlproxy/nlproxy/testkit/poll"
	"go.uber.org/zap/zaptest"
)

// relayLoopFlag runs every test's proxy with that kind of event loop
// unless the test picks one (go test ./proxy -relay-loop=io_uring); the
// relay tests run each kind anyway. Epoll here, though a Server's zero
// value is auto: this package keeps the fallback (and TLS's loop) under
// every test, and the suites of the other packages run io_uring.
var relayLoopFlag = flag.String("relay-loop", string(RelayEpoll), "the event loops' I/O: epoll, io_uring or auto")

// Clusters shared by the tests of this package, started once by the first
// test that needs them (needPG; each takes ~1-2 s), so the fuzz targets that
// need none (and their worker processes) start none. Tests only read these.
var (
	scramPG *pgcluster.Cluster // scram-sha-256, TLS on
	trustPG *pgcluster.Cluster // trust, no TLS
	pgOnce  sync.Once
	pgErr   error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if scramPG != nil {
		scramPG.Stop()
	}
	if trustPG != nil {
		trustPG.Stop()
	}
	os.Exit(code)
}

func startPG() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if scramPG, pgErr = pgtest.Start(ctx, pgcluster.Options{AuthMethod: "scram-sha-256", TLS: true}); pgErr != nil {
		return
	}
	trustPG, pgErr = pgtest.Start(ctx, pgcluster.Options{AuthMethod: "trust"})
}

// needPG makes the shared clusters available, or skips the test when this
// machine has no PostgreSQL binaries.
func needPG(t *testing.T) {
	t.Helper()
	pgOnce.Do(startPG)
	switch {
	case errors.Is(pgErr, pgtest.ErrNoPostgres):
		t.Skip("no PostgreSQL binaries")
	case pgErr != nil:
		t.Fatalf("shared clusters: %v", pgErr)
	}
}

// serve starts srv on a loopback port and returns its address; the server is
// closed (and Serve's result checked) when the test ends.
func serve(t *testing.T, srv *Server) string {
	t.Helper()
	if srv.RelayLoop == "" {
		srv.RelayLoop = RelayLoop(*relayLoopFlag)
	}
	if srv.Logger == nil {
		srv.Logger = zaptest.NewLogger(t)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-errc; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
		srv.waitSessions() // sessions log through t; they must end with the test
	})
	return ln.Addr().String()
}

func proxyURL(addr, user, password, db, sslmode string) string {
	u := url.URL{Scheme: "postgres", Host: addr, Path: "/" + db, User: url.UserPassword(user, password)}
	u.RawQuery = "sslmode=" + sslmode
	return u.String()
}

func connect(t *testing.T, connString string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, connString)
	if err != nil {
		t.Fatalf("connect %s: %v", connString, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func proxyTLS(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	certPEM, keyPEM, err := pgtest.SelfSignedCert()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return &tls.Config{Certificates: []tls.Certificate{cert}}, pool
}

func queryInt(t *testing.T, c *pgx.Conn, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := c.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestAuth(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	md5PG := pgtest.New(t, pgcluster.Options{AuthMethod: "md5"})
	tlsCfg, _ := proxyTLS(t)
	for _, tc := range []struct {
		name    string
		pg      *pgcluster.Cluster
		proxyTL bool
	}{
		{"trust", trustPG, false},
		{"md5", md5PG, false},
		{"scram", scramPG, false},
		{"trust+proxyTLS", trustPG, true},
		{"md5+proxyTLS", md5PG, true},
		{"scram+proxyTLS", scramPG, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &Server{Upstreams: []Upstream{{Address: tc.pg.Addr(), TLS: UpstreamTLSDisable}}}
			mode := "disable"
			if tc.proxyTL {
				srv.TLSConfig = tlsCfg
				srv.RequireTLS = true
				mode = "require"
			}
			addr := serve(t, srv)
			c := connect(t, proxyURL(addr, pgtest.Superuser, pgtest.SuperuserPassword, "postgres", mode))
			if got := queryInt(t, c, "SELECT $1::int + 1", 41); got != 42 {
				t.Fatalf("got %d", got)
			}
			if _, ok := c.PgConn().Conn().(*tls.Conn); ok != tc.proxyTL {
				t.Fatalf("client TLS = %v, want %v", ok, tc.proxyTL)
			}
			if tc.pg != trustPG {
				// A wrong password must be refused by the upstream, relayed as 28P01.
				_, err := pgx.Connect(ctx, proxyURL(addr, pgtest.Superuser, "wrong", "postgres", mode))
				if pgCode(err) != "28P01" {
					t.Fatalf("wrong password: err = %v, want 28P01", err)
				}
			}
			if tc.proxyTL {
				_, err := pgx.Connect(ctx, proxyURL(addr, pgtest.Superuser, pgtest.SuperuserPassword, "postgres", "disable"))
				if pgCode(err) != "28000" {
					t.Fatalf("plaintext with RequireTLS: err = %v, want 28000", err)
				}
			}
		})
	}
}

// TestSCRAMPlusStripped reads the SASL mechanisms a TLS client is offered when
// the upstream (over TLS) offers SCRAM-SHA-256-PLUS.
func TestSCRAMPlusStripped(t *testing.T) {
	needPG(t)
	tlsCfg, _ := proxyTLS(t)
	// Direct to Postgres over TLS: PLUS is offered.
	direct := saslMechanisms(t, scramPG.Addr(), &tls.Config{InsecureSkipVerify: true})
	if !strings.Contains(direct, "SCRAM-SHA-256-PLUS") {
		t.Fatalf("direct mechanisms %q lack PLUS; test premise broken", direct)
	}
	addr := serve(t, &Server{TLSConfig: tlsCfg, Upstreams: []Upstream{{Address: scramPG.Addr(), TLS: UpstreamTLSRequire}}})
	got := saslMechanisms(t, addr, &tls.Config{InsecureSkipVerify: true})
	if strings.Contains(got, "PLUS") || !strings.Contains(got, "SCRAM-SHA-256") {
		t.Fatalf("through proxy mechanisms = %q, want SCRAM-SHA-256 only", got)
	}
	// TLS on both legs: a channel-binding-capable client must disable channel
	// binding (it would send "y", which a TLS upstream rejects); documented limit.
	url := proxyURL(addr, pgtest.Superuser, pgtest.SuperuserPassword, "postgres", "require")
	c := connect(t, url+"&channel_binding=disable")
	if got := queryInt(t, c, "SELECT 1"); got != 1 {
		t.Fatal("query failed")
	}
	if _, err := pgx.Connect(context.Background(), url); err == nil {
		t.Log("note: SCRAM with channel binding now succeeds on TLS-both-sides; update the doc.go limitation")
	}
}

func saslMechanisms(t *testing.T, addr string, cfg *tls.Config) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil || b[0] != 'S' {
		t.Fatalf("SSLRequest reply %q, %v", b[0], err)
	}
	tc := tls.Client(conn, cfg)
	if _, err := tc.Write(encodeStartup(196608, []param{{"user", pgtest.Superuser}, {"database", "postgres"}})); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := tc.Read(buf)
	if err != nil || n < 9 || buf[0] != 'R' {
		t.Fatalf("auth request: %q %v", buf[:n], err)
	}
	return string(bytes.ReplaceAll(buf[9:n], []byte{0}, []byte{' '}))
}

func TestUpstreamTLS(t *testing.T) {
	needPG(t)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(scramPG.CertPEM)
	for _, tc := range []struct {
		name    string
		up      Upstream
		wantSSL bool
		wantErr string
	}{
		{"require", Upstream{TLS: UpstreamTLSRequire}, true, ""},
		{"prefer", Upstream{TLS: UpstreamTLSPrefer}, true, ""},
		{"disable", Upstream{TLS: UpstreamTLSDisable}, false, ""},
		{"verify-full", Upstream{TLS: UpstreamTLSVerifyFull, TLSConfig: &tls.Config{RootCAs: pool}}, true, ""},
		{"verify-ca wrong CA", Upstream{TLS: UpstreamTLSVerifyCA, TLSConfig: &tls.Config{RootCAs: x509.NewCertPool()}}, false, "08001"},
		{"require on non-TLS server", Upstream{TLS: UpstreamTLSRequire, Address: trustPG.Addr()}, false, "08001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := tc.up
			if up.Address == "" {
				up.Address = scramPG.Addr()
			}
			addr := serve(t, &Server{Upstreams: []Upstream{up}})
			url := proxyURL(addr, pgtest.Superuser, pgtest.SuperuserPassword, "postgres", "disable")
			if tc.wantErr != "" {
				_, err := pgx.Connect(context.Background(), url)
				if pgCode(err) != tc.wantErr {
					t.Fatalf("err = %v, want %s", err, tc.wantErr)
				}
				return
			}
			c := connect(t, url)
			if ssl := upstreamSSL(t, c); ssl != tc.wantSSL {
				t.Fatalf("upstream ssl = %v, want %v", ssl, tc.wantSSL)
			}
		})
	}
}

func TestRouting(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	routeDB := pgtest.UniqueName(t, "route_a") // shared cluster: unique per run
	if err := scramPG.CreateDatabase(ctx, routeDB); err != nil {
		t.Fatal(err)
	}
	addr := serve(t, &Server{Upstreams: []Upstream{
		{Database: "alpha", Address: scramPG.Addr(), OverrideDatabase: routeDB, TLS: UpstreamTLSDisable},
		{Database: "other", Address: trustPG.Addr(), OverrideDatabase: "postgres", TLS: UpstreamTLSDisable},
		{Address: scramPG.Addr(), TLS: UpstreamTLSDisable},
	}})
	for _, tc := range []struct {
		db, wantDB string
		wantPort   int
	}{
		{"alpha", routeDB, scramPG.Port},
		{"other", "postgres", trustPG.Port},
		{"postgres", "postgres", scramPG.Port},
	} {
		c := connect(t, proxyURL(addr, pgtest.Superuser, pgtest.SuperuserPassword, tc.db, "disable"))
		var db string
		var port int
		if err := c.QueryRow(ctx, "SELECT current_database(), current_setting('port')::int").Scan(&db, &port); err != nil {
			t.Fatal(err)
		}
		if db != tc.wantDB || port != tc.wantPort {
			t.Errorf("database %s: got %s on port %d, want %s on %d", tc.db, db, port, tc.wantDB, tc.wantPort)
		}
	}
	_, err := pgx.Connect(ctx, proxyURL(addr, pgtest.Superuser, pgtest.SuperuserPassword, "nosuchdb", "disable"))
	if pgCode(err) != "3D000" {
		t.Fatalf("unknown database: err = %v, want 3D000 from upstream", err)
	}
}

// forLoops runs a test once per kind of event loop (on Linux: epoll and
// io_uring; elsewhere both are the goroutine relay). The test calls onLoop
// to check that its sessions are on the kind it was given.
func forLoops(t *testing.T, f func(*testing.T, RelayLoop)) {
	for _, k := range []RelayLoop{RelayEpoll, RelayIOUring} {
		t.Run(string(k), func(t *testing.T) { f(t, k) })
	}
}

func trustServer(t *testing.T, srv *Server) (*Server, string) {
	t.Helper()
	if srv == nil {
		srv = &Server{}
	}
	srv.Upstreams = []Upstream{{Address: trustPG.Addr(), TLS: UpstreamTLSDisable}}
	return srv, serve(t, srv)
}

// connectDirect is a superuser connection straight to cluster, closed at the
// end of the test.
func connectDirect(t *testing.T, cluster *pgcluster.Cluster) *pgx.Conn {
	t.Helper()
	c, err := cluster.Connect(context.Background(), "postgres")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// waitServerClose blocks until the proxy closes c's connection (EOF after
// whatever it sent last), so a test waits for the event, not for a guess of
// how long it takes. The deadline is a hang guard.
func waitServerClose(t *testing.T, c *pgx.Conn) {
	t.Helper()
	nc := c.PgConn().Conn()
	_ = nc.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.Copy(io.Discard, nc); err != nil {
		t.Fatalf("connection not closed by the proxy: %v", err)
	}
}

func trustURL(addr string) string {
	return proxyURL(addr, pgtest.Superuser, "", "postgres", "disable")
}

func TestMarkerWithoutEngine(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	_, addr := trustServer(t, nil)
	c := connect(t, trustURL(addr))
	pc := c.PgConn()
	for _, q := range []string{"-- ask: how many users?", "/* ask: top customers */;", "ASK revenue by month;"} {
		// Simple protocol.
		_, err := pc.Exec(ctx, q).ReadAll()
		if pgCode(err) != "0A000" || !strings.Contains(err.Error(), "need an engine") {
			t.Fatalf("simple %q: err = %v, want 0A000", q, err)
		}
		if pc.TxStatus() != 'I' {
			t.Fatalf("tx status %q after failed marker", pc.TxStatus())
		}
		// Extended protocol.
		err = pc.ExecParams(ctx, q, nil, nil, nil, nil).Read().Err
		if pgCode(err) != "0A000" {
			t.Fatalf("extended %q: err = %v, want 0A000", q, err)
		}
		if got := queryInt(t, c, "SELECT 7"); got != 7 {
			t.Fatalf("session unusable after marker error: %d", got)
		}
	}
	// In a transaction block the marker fails the transaction, as an error would.
	if _, err := pc.Exec(ctx, "BEGIN").ReadAll(); err != nil {
		t.Fatal(err)
	}
	_, err := pc.Exec(ctx, "-- ask: anything").ReadAll()
	if pgCode(err) != "0A000" || pc.TxStatus() != 'E' {
		t.Fatalf("in tx: err = %v status %q, want 0A000 and 'E'", err, pc.TxStatus())
	}
	if _, err := pc.Exec(ctx, "ROLLBACK").ReadAll(); err != nil || pc.TxStatus() != 'I' {
		t.Fatalf("rollback: %v %q", err, pc.TxStatus())
	}
}

func TestPipelinedBatch(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	_, addr := trustServer(t, nil)
	c := connect(t, trustURL(addr))
	p := c.PgConn().StartPipeline(ctx)
	p.SendQueryParams("SELECT $1::int * 2", [][]byte{[]byte("21")}, nil, nil, nil)
	p.SendQueryParams("-- ask: in the middle", nil, nil, nil, nil)
	p.SendQueryParams("SELECT 3", nil, nil, nil, nil)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	p.SendQueryParams("SELECT 'after'", nil, nil, nil, nil)
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	got := pipelineResults(t, p, 21)
	want := "42,err:0A000,sync,after,sync"
	if strings.Join(got, ",") != want {
		t.Fatalf("pipeline results %v, want %s", got, want)
	}
}

func TestCopyInOut(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	_, addr := trustServer(t, nil)
	c := connect(t, trustURL(addr))
	pc := c.PgConn()
	if _, err := pc.Exec(ctx, "CREATE TEMP TABLE copy_t (id int, s text)").ReadAll(); err != nil {
		t.Fatal(err)
	}
	const rows = 200000
	var in bytes.Buffer
	for i := 0; i < rows; i++ {
		fmt.Fprintf(&in, "%d\trow %d\n", i, i)
	}
	tag, err := pc.CopyFrom(ctx, bytes.NewReader(in.Bytes()), "COPY copy_t FROM STDIN")
	if err != nil || tag.RowsAffected() != rows {
		t.Fatalf("copy from: %v %v", tag, err)
	}
	var out bytes.Buffer
	tag, err = pc.CopyTo(ctx, &out, "COPY (SELECT * FROM copy_t ORDER BY id) TO STDOUT")
	if err != nil || tag.RowsAffected() != rows {
		t.Fatalf("copy to: %v %v", tag, err)
	}
	if !bytes.Equal(out.Bytes(), in.Bytes()) {
		t.Fatalf("copied data differs (%d vs %d bytes)", out.Len(), in.Len())
	}
	// A failed COPY FROM (bad data) leaves the session usable.
	_, err = pc.CopyFrom(ctx, strings.NewReader("x\ty\n"), "COPY copy_t FROM STDIN")
	if pgCode(err) != "22P02" {
		t.Fatalf("bad copy: %v", err)
	}
	if got := queryInt(t, c, "SELECT count(*) FROM copy_t"); got != rows {
		t.Fatalf("count %d", got)
	}
}

func TestListenNotify(t *testing.T) {
	needPG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, addr := trustServer(t, nil)
	listener := connect(t, trustURL(addr))
	notifier := connect(t, trustURL(addr))
	if _, err := listener.Exec(ctx, "LISTEN nlproxy_chan"); err != nil {
		t.Fatal(err)
	}
	if _, err := notifier.Exec(ctx, "SELECT pg_notify('nlproxy_chan', 'hello')"); err != nil {
		t.Fatal(err)
	}
	// The listener is idle: the notification must arrive without it sending anything.
	n, err := listener.WaitForNotification(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Channel != "nlproxy_chan" || n.Payload != "hello" {
		t.Fatalf("notification %+v", n)
	}
}

func TestCancel(t *testing.T) { forLoops(t, testCancel) }

func testCancel(t *testing.T, loop RelayLoop) {
	needPG(t)
	ctx := context.Background()
	srv, addr := trustServer(t, &Server{RelayLoop: loop})
	c := connect(t, trustURL(addr))
	if got := queryInt(t, c, "SELECT 1"); got != 1 {
		t.Fatalf("SELECT: %d", got)
	}
	onLoop(t, srv, loop)
	pid := c.PgConn().PID()
	direct := connectDirect(t, trustPG)
	go func() {
		// A cancel that arrives before the query runs cancels nothing: wait
		// until the backend is in the sleep.
		poll.Until(t, "the query to run", func() bool {
			var n int
			err := direct.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep'", pid).Scan(&n)
			if err != nil {
				t.Errorf("pg_stat_activity: %v", err)
			}
			return err != nil || n == 1
		})
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := c.PgConn().CancelRequest(cctx); err != nil {
			t.Errorf("cancel request: %v", err)
		}
	}()
	// Without the cancel the statement would run for an hour; the context
	// (a hang guard) would end it with a context error, not 57014.
	ectx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	_, err := c.Exec(ectx, "SELECT pg_sleep(3600)")
	if pgCode(err) != "57014" {
		t.Fatalf("err = %v, want 57014 query_canceled", err)
	}
	if got := queryInt(t, c, "SELECT 1"); got != 1 {
		t.Fatal("session unusable after cancel")
	}
	// The client sees its backend's real PID; only the secret is the proxy's.
	var realPID uint32
	if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&realPID); err != nil {
		t.Fatal(err)
	}
	if c.PgConn().PID() != realPID {
		t.Fatalf("client pid %d, backend pid %d", c.PgConn().PID(), realPID)
	}
}

func TestMaxConnsAndUpstreamDown(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	_, addr := trustServer(t, &Server{MaxConns: 2})
	c1 := connect(t, trustURL(addr))
	c2 := connect(t, trustURL(addr))
	_, err := pgx.Connect(ctx, trustURL(addr))
	if pgCode(err) != "53300" {
		t.Fatalf("third conn: err = %v, want 53300", err)
	}
	c1.Close(ctx)
	// The slot frees once the session has torn down (the bound is a hang guard).
	deadline := time.Now().Add(time.Minute)
	for {
		c3, err := pgx.Connect(ctx, trustURL(addr))
		if err == nil {
			c3.Close(ctx)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot not freed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := queryInt(t, c2, "SELECT 2"); got != 2 {
		t.Fatal("c2 broken")
	}

	// Upstream down: a closed port.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	addr2 := serve(t, &Server{Upstreams: []Upstream{{Address: dead, TLS: UpstreamTLSDisable}}})
	_, err = pgx.Connect(ctx, trustURL(addr2))
	// The client learns what happened, not where the database server is.
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "08001" || pe.Message != "nlproxy: cannot connect to the database server" {
		t.Fatalf("err = %v, want 08001 \"nlproxy: cannot connect to the database server\"", err)
	}
	if _, port, _ := net.SplitHostPort(dead); strings.Contains(pe.Error(), port) {
		t.Fatalf("client error %q reveals the upstream address %s", pe.Error(), dead)
	}
}

func TestMalformedClient(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	_, addr := trustServer(t, &Server{MaxMessageSize: 1024})
	other := connect(t, trustURL(addr))
	c := connect(t, trustURL(addr))
	_, err := c.Exec(ctx, "SELECT '"+strings.Repeat("x", 2000)+"'")
	if pgCode(err) != "08P01" {
		t.Fatalf("oversized: err = %v, want 08P01", err)
	}
	if !c.IsClosed() {
		if _, err := c.Exec(ctx, "SELECT 1"); err == nil {
			t.Fatal("session still open after oversized message")
		}
	}
	if got := queryInt(t, other, "SELECT 5"); got != 5 {
		t.Fatal("other session affected")
	}

	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"bad startup length", []byte{0, 0, 0, 2}},
		{"unknown startup code", []byte{0, 0, 0, 8, 0, 9, 0, 9}},
		{"plaintext after SSLRequest", append([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f},
			encodeStartup(196608, []param{{"user", "postgres"}})...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tlsCfg, _ := proxyTLS(t)
			_, a := trustServer(t, &Server{TLSConfig: tlsCfg})
			conn, err := net.Dial("tcp", a)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := conn.Write(tc.data); err != nil {
				t.Fatal(err)
			}
			var all bytes.Buffer
			_, err = all.ReadFrom(conn) // until the proxy closes
			if err != nil {
				t.Fatalf("proxy did not close the connection: %v", err)
			}
			b := bytes.TrimPrefix(all.Bytes(), []byte("S"))
			if len(b) == 0 || b[0] != 'E' || !bytes.Contains(b, []byte("C08P01")) {
				t.Fatalf("reply %q, want ErrorResponse 08P01", all.Bytes())
			}
		})
	}
}

func TestServeValidates(t *testing.T) {
	for _, srv := range []*Server{
		{},
		{Upstreams: []Upstream{{Address: "127.0.0.1:1"}}, RequireTLS: true},
		{Upstreams: []Upstream{{Address: "127.0.0.1:1"}, {Address: "127.0.0.1:2"}}},
		{Upstreams: []Upstream{{Database: "x"}}},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Serve(ln); err == nil || errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve(%+v) = %v, want a configuration error", srv.Upstreams, err)
		}
	}
}

func TestHandshakeTimeout(t *testing.T) {
	needPG(t)
	_, addr := trustServer(t, &Server{HandshakeTimeout: 200 * time.Millisecond})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The test's own deadline only guards against a hang; the 200 ms
	// handshake timeout is what must end the connection (EOF, not timeout).
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(conn); err != nil {
		t.Fatalf("silent client not disconnected: %v", err)
	}
}

func TestIdleTimeouts(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	_, addr := trustServer(t, &Server{IdleTimeout: 300 * time.Millisecond, IdleInTransactionTimeout: 400 * time.Millisecond})
	c := connect(t, trustURL(addr))
	// A statement running longer than the idle timeout is not idle.
	if _, err := c.Exec(ctx, "SELECT pg_sleep(0.6)"); err != nil {
		t.Fatalf("busy session killed: %v", err)
	}
	waitServerClose(t, c)
	if _, err := c.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("idle session not closed")
	}
	c2 := connect(t, trustURL(addr))
	if _, err := c2.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	waitServerClose(t, c2)
	if _, err := c2.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("idle-in-transaction session not closed")
	}
}

func TestGracefulShutdown(t *testing.T) { forLoops(t, testGracefulShutdown) }

func testGracefulShutdown(t *testing.T, loop RelayLoop) {
	needPG(t)
	ctx := context.Background()
	srv, addr := trustServer(t, &Server{RelayLoop: loop})
	idle := connect(t, trustURL(addr))
	busy := connect(t, trustURL(addr))
	if _, err := busy.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	onLoop(t, srv, loop)
	shutdownDone := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		shutdownDone <- srv.Shutdown(sctx)
	}()
	// Idle session: terminated with 57P01 once the shutdown has begun.
	waitServerClose(t, idle)
	if _, err := idle.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("idle session survived shutdown")
	}
	// New connections are refused.
	if c, err := pgx.Connect(ctx, trustURL(addr)); err == nil {
		c.Close(ctx)
		t.Fatal("connected during shutdown")
	}
	// The session in a transaction may finish it.
	if got := queryInt(t, busy, "SELECT 11"); got != 11 {
		t.Fatal("busy session broken during drain")
	}
	select {
	case err := <-shutdownDone:
		t.Fatalf("shutdown finished before the transaction ended: %v", err)
	default:
	}
	if _, err := busy.Exec(ctx, "COMMIT"); err != nil {
		t.Fatalf("commit during drain: %v", err)
	}
	select {
	case err := <-shutdownDone:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("shutdown did not finish after the transaction ended")
	}
}

func TestShutdownDeadline(t *testing.T) { forLoops(t, testShutdownDeadline) }

func testShutdownDeadline(t *testing.T, loop RelayLoop) {
	needPG(t)
	ctx := context.Background()
	srv, addr := trustServer(t, &Server{RelayLoop: loop})
	busy := connect(t, trustURL(addr))
	if _, err := busy.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	onLoop(t, srv, loop)
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := srv.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown err = %v, want deadline exceeded", err)
	}
	if _, err := busy.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("session survived forced close")
	}
}

func TestUpstreamGone(t *testing.T) { forLoops(t, testUpstreamGone) }

func testUpstreamGone(t *testing.T, loop RelayLoop) {
	needPG(t)
	ctx := context.Background()
	srv, addr := trustServer(t, &Server{RelayLoop: loop})
	c := connect(t, trustURL(addr))
	var pid int
	if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	onLoop(t, srv, loop)
	if err := trustPG.Exec(ctx, "postgres", fmt.Sprintf("SELECT pg_terminate_backend(%d)", pid)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Exec(ctx, "SELECT 1")
	if err == nil {
		t.Fatal("query succeeded on a terminated backend")
	}
	if code := pgCode(err); code != "57P01" && code != "08006" {
		t.Fatalf("error after upstream loss: %v, want FATAL 57P01 or 08006", err)
	}
	if !c.IsClosed() {
		t.Fatal("client connection still open after upstream loss")
	}
}

func TestOnDDLAndLargeResult(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	var mu sync.Mutex
	var tags []string
	got := make(chan struct{}, 4)
	_, addr := trustServer(t, &Server{OnDDL: func(db, tag string) {
		mu.Lock()
		tags = append(tags, db+":"+tag)
		mu.Unlock()
		got <- struct{}{}
	}})
	c := connect(t, trustURL(addr))
	if _, err := c.Exec(ctx, "CREATE TEMP TABLE ddl_t (id int); SELECT 1; DROP TABLE ddl_t"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		select {
		case <-got:
		case <-time.After(time.Minute):
			t.Fatal("OnDDL not called")
		}
	}
	mu.Lock()
	sort.Strings(tags)
	if strings.Join(tags, ",") != "postgres:CREATE TABLE,postgres:DROP TABLE" {
		t.Errorf("tags %v", tags)
	}
	mu.Unlock()
	rr := c.PgConn().ExecParams(ctx, "SELECT g, repeat('x', 100) FROM generate_series(1, 300000) g", nil, nil, nil, nil)
	rows := 0
	for rr.NextRow() {
		rows++
	}
	if _, err := rr.Close(); err != nil || rows != 300000 {
		t.Fatalf("large result: %d rows, %v", rows, err)
	}
}

// TestNoLeaks checks that sessions release their goroutines on every kind of end.
func TestNoLeaks(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	before := runtime.NumGoroutine()
	func() {
		srv := &Server{Upstreams: []Upstream{{Address: trustPG.Addr(), TLS: UpstreamTLSDisable}}}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(ln)
		for i := 0; i < 5; i++ {
			c, err := pgx.Connect(ctx, trustURL(ln.Addr().String()))
			if err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 {
				c.Close(ctx) // Terminate
			} else {
				c.PgConn().Conn().Close() // abrupt
			}
		}
		kept, err := pgx.Connect(ctx, trustURL(ln.Addr().String()))
		if err != nil {
			t.Fatal(err)
		}
		defer kept.Close(ctx)
		srv.Close()
	}()
	deadline := time.Now().Add(time.Minute) // a hang guard; the loop ends as soon as they are gone
	for runtime.NumGoroutine() > before+1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+1 {
		buf := make([]byte, 1<<16)
		t.Fatalf("goroutines: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// upstreamSSL reports whether the session's server connection uses TLS, as
// the server sees it.
func upstreamSSL(t *testing.T, c *pgx.Conn) bool {
	t.Helper()
	var ssl bool
	if err := c.QueryRow(context.Background(), "SELECT ssl FROM pg_catalog.pg_stat_ssl WHERE pid = pg_catalog.pg_backend_pid()").Scan(&ssl); err != nil {
		t.Fatal(err)
	}
	return ssl
}
