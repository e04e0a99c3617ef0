package integration_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/poll"
)

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count fds: %v", err)
	}
	return len(entries)
}

// resources are the process-wide counters a finished session must give back.
type resources struct{ goroutines, fds int }

func snapshot(t *testing.T) resources {
	return resources{goroutines: runtime.NumGoroutine(), fds: openFDs(t)}
}

// settledSnapshot waits until the counters stop moving (earlier sessions'
// goroutines finishing) so a baseline is not inflated by stragglers.
func settledSnapshot(t *testing.T) resources {
	t.Helper()
	prev := snapshot(t)
	stable := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && stable < 6; {
		time.Sleep(50 * time.Millisecond)
		now := snapshot(t)
		if now == prev {
			stable++
		} else {
			stable = 0
		}
		prev = now
	}
	return prev
}

func waitBaseline(t *testing.T, base resources) {
	t.Helper()
	poll.UntilState(t, time.Minute, "goroutines and fds back to baseline", func() (bool, string) {
		now := snapshot(t)
		return now.goroutines <= base.goroutines && now.fds <= base.fds,
			fmt.Sprintf("goroutines %d (baseline %d), fds %d (baseline %d)", now.goroutines, base.goroutines, now.fds, base.fds)
	})
}

func backendAlive(ctx context.Context, t *testing.T, c *pgcluster.Cluster, pid uint32) bool {
	t.Helper()
	conn, err := c.Connect(ctx, "postgres")
	if err != nil {
		t.Fatalf("admin connect: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n); err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return n > 0
}

func clientBackends(ctx context.Context, t *testing.T, c *pgcluster.Cluster) int {
	t.Helper()
	conn, err := c.Connect(ctx, "postgres")
	if err != nil {
		t.Fatalf("admin connect: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()").Scan(&n); err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return n
}

func upstreamPID(ctx context.Context, t *testing.T, conn *pgconn.PgConn) uint32 {
	t.Helper()
	res := conn.ExecParams(ctx, "SELECT pg_backend_pid()", nil, nil, nil, nil).Read()
	if res.Err != nil || len(res.Rows) != 1 {
		t.Fatalf("pg_backend_pid: %v", res.Err)
	}
	var pid uint32
	if _, err := fmt.Sscan(string(res.Rows[0][0]), &pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

func selectOne(ctx context.Context, conn *pgconn.PgConn) error {
	res := conn.ExecParams(ctx, "SELECT 1", nil, nil, nil, nil).Read()
	if res.Err != nil {
		return res.Err
	}
	if len(res.Rows) != 1 || string(res.Rows[0][0]) != "1" {
		return fmt.Errorf("SELECT 1 returned %q", res.Rows)
	}
	return nil
}

func TestFaults(t *testing.T) {
	raiseFDLimit(t, 8192)
	c := newScramCluster(t, map[string]string{"max_connections": "1100"})
	ctx := context.Background()

	t.Run("upstream down at connect", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := ln.Addr().String()
		ln.Close() // nothing listens there now
		p := startProxy(t, c, proxyOptions{Upstream: dead})
		start := time.Now()
		_, err = pgconn.ConnectConfig(ctx, &targetFor(t, p.Addr, "postgres").pgxConfig(t).Config)
		if err == nil {
			t.Fatal("connect succeeded with the upstream down")
		}
		t.Logf("client error (%v): %v", time.Since(start).Round(time.Millisecond), err)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			t.Errorf("want an ErrorResponse from the proxy, got %T: %v", err, err)
		} else {
			if pgErr.Code != "08001" || pgErr.Message != "nlproxy: cannot connect to the database server" {
				t.Errorf("got %s %q, want 08001 \"nlproxy: cannot connect to the database server\"", pgErr.Code, pgErr.Message)
			}
			// What happened, not where: the upstream's address stays in the log.
			_, deadPort, _ := net.SplitHostPort(dead)
			if detail := pgErr.Message + pgErr.Detail + pgErr.Hint; strings.Contains(detail, deadPort) {
				t.Errorf("client error reveals the upstream address %s: %+v", dead, pgErr)
			}
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("failing took %v", d)
		}
	})

	t.Run("upstream backend killed mid-session", func(t *testing.T) {
		p := startProxy(t, c, proxyOptions{})
		tg := targetFor(t, p.Addr, "postgres")
		victim := tg.connectPg(ctx, t)
		pid := upstreamPID(ctx, t, victim)
		if err := c.Exec(ctx, "postgres", fmt.Sprintf("SELECT pg_terminate_backend(%d)", pid)); err != nil {
			t.Fatal(err)
		}
		poll.UntilState(t, time.Minute, "backend gone", func() (bool, string) { return !backendAlive(ctx, t, c, pid), "still in pg_stat_activity" })
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := selectOne(qctx, victim)
		if err == nil {
			t.Fatal("query on a terminated backend succeeded")
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("client hung instead of getting an error: %v", err)
		}
		t.Logf("client error: %v", err)
		// Postgres tells the client why (57P01); the proxy must relay that, not
		// replace it with its own connection error.
		if got := pgErrCode(err); got != "57P01" {
			t.Errorf("client got %s, want the relayed 57P01", got)
		}
		fresh := tg.connectPg(ctx, t)
		if err := selectOne(ctx, fresh); err != nil {
			t.Errorf("proxy stopped serving new clients: %v", err)
		}
	})

	t.Run("client disconnects mid-result", func(t *testing.T) {
		p := startProxy(t, c, proxyOptions{})
		tg := targetFor(t, p.Addr, "postgres")
		// One full session first so lazily started goroutines are in the baseline.
		warm := tg.connectPg(ctx, t)
		if err := selectOne(ctx, warm); err != nil {
			t.Fatal(err)
		}
		warm.Close(ctx)
		poll.UntilState(t, time.Minute, "warm-up session gone", func() (bool, string) { return clientBackends(ctx, t, c) == 0, "" })
		base := settledSnapshot(t)

		conn, err := pgconn.ConnectConfig(ctx, &tg.pgxConfig(t).Config)
		if err != nil {
			t.Fatal(err)
		}
		pid := upstreamPID(ctx, t, conn)
		hc, err := conn.Hijack()
		if err != nil {
			t.Fatal(err)
		}
		hc.Frontend.Send(&pgproto3.Query{String: "SELECT g, repeat('x', 200) FROM generate_series(1, 20000000) g"})
		if err := hc.Frontend.Flush(); err != nil {
			t.Fatal(err)
		}
		_ = hc.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.CopyN(io.Discard, hc.Conn, 1<<20); err != nil {
			t.Fatalf("reading the first MiB: %v", err)
		}
		hc.Conn.Close()
		poll.UntilState(t, time.Minute, "upstream backend gone from pg_stat_activity", func() (bool, string) {
			return !backendAlive(ctx, t, c, pid), fmt.Sprintf("pid %d still there", pid)
		})
		waitBaseline(t, base)
	})

	t.Run("slow reader keeps proxy memory bounded", func(t *testing.T) {
		p := startProxy(t, c, proxyOptions{})
		conn := targetFor(t, p.Addr, "postgres").connectPg(ctx, t)
		hc, err := conn.Hijack()
		if err != nil {
			t.Fatal(err)
		}
		defer hc.Conn.Close()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapInuse

		var peak uint64
		samples := 0
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					peak = max(peak, m.HeapInuse)
					samples++
				}
			}
		}()

		const rows, width = 200_000, 1000 // about 200 MB of DataRows
		hc.Frontend.Send(&pgproto3.Query{String: fmt.Sprintf("SELECT repeat('x', %d) FROM generate_series(1, %d)", width, rows)})
		if err := hc.Frontend.Flush(); err != nil {
			t.Fatal(err)
		}
		_ = hc.Conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
		start := time.Now()
		dataRows, total, err := slowDrain(hc.Conn, 40<<20)
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatalf("after %d rows / %d bytes: %v", dataRows, total, err)
		}
		if dataRows != rows {
			t.Errorf("got %d DataRows, want %d", dataRows, rows)
		}
		if samples < 10 {
			t.Fatalf("only %d memory samples during the read", samples)
		}
		growth := int64(peak) - int64(base)
		t.Logf("read %d MB in %v; HeapInuse baseline %.1f MB, peak %.1f MB over %d samples",
			total>>20, time.Since(start).Round(time.Millisecond), float64(base)/(1<<20), float64(peak)/(1<<20), samples)
		if growth > 64<<20 {
			t.Errorf("proxy heap grew by %d MB while a slow client read %d MB", growth>>20, total>>20)
		}
	})

	t.Run("oversized and malformed messages", func(t *testing.T) {
		p := startProxy(t, c, proxyOptions{})
		tg := targetFor(t, p.Addr, "postgres")
		bystander := tg.connectPg(ctx, t)
		if err := selectOne(ctx, bystander); err != nil {
			t.Fatal(err)
		}
		frame := func(typ byte, declared uint32, body string) []byte {
			b := []byte{typ, 0, 0, 0, 0}
			binary.BigEndian.PutUint32(b[1:], declared)
			return append(b, body...)
		}
		startup := func(declared uint32) []byte {
			b := make([]byte, 8)
			binary.BigEndian.PutUint32(b, declared)
			binary.BigEndian.PutUint32(b[4:], 196608) // protocol 3.0
			return b
		}
		cases := []struct {
			name    string
			preAuth bool // sent instead of a startup message
			bytes   []byte
		}{
			{"query declaring 1 GiB", false, frame('Q', 1<<30, "SELECT 1")},
			{"query with length 2", false, frame('Q', 2, "")},
			{"unknown message type", false, frame('z', 4, "")},
			{"startup declaring 1 GiB", true, startup(1 << 30)},
			{"startup with length 2", true, startup(2)[:4]},
		}
		direct := targetFor(t, c.Addr(), "postgres")
		// send writes the bytes on a fresh connection (after authentication
		// unless preAuth) and returns the SQLSTATEs received before the close.
		send := func(t *testing.T, tg target, preAuth bool, b []byte) []string {
			var raw net.Conn
			if preAuth {
				var err error
				if raw, err = net.Dial("tcp", tg.Addr()); err != nil {
					t.Fatal(err)
				}
			} else {
				hc, err := tg.connectPgRaw(ctx, t).Hijack()
				if err != nil {
					t.Fatal(err)
				}
				raw = hc.Conn
			}
			defer raw.Close()
			if _, err := raw.Write(b); err != nil {
				t.Fatal(err)
			}
			codes, err := readUntilClosed(raw, 10*time.Second)
			if err != nil {
				t.Errorf("%s: connection not closed: %v (errors seen: %v)", tg.Addr(), err, codes)
			}
			return codes
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				got := send(t, tg, tc.preAuth, tc.bytes)
				if tc.preAuth {
					// Postgres just closes; the proxy may say why first.
					for _, code := range got {
						if code != "08P01" {
							t.Errorf("ErrorResponse SQLSTATE %s, want 08P01", code)
						}
					}
				} else {
					// Postgres closes silently on a bad length (it only logs a
					// COMMERROR) and sends one 08P01 for an unknown type; the
					// proxy must say 08P01 exactly once, whoever detects it.
					pg := send(t, direct, false, tc.bytes)
					t.Logf("Postgres itself answers %v", pg)
					if strings.Join(got, ",") != "08P01" {
						t.Errorf("proxy answered %v, want exactly one 08P01 ErrorResponse before the close", got)
					}
				}
				t.Logf("proxy answered %v then closed", got)
				if err := selectOne(ctx, bystander); err != nil {
					t.Errorf("other session broken: %v", err)
				}
			})
		}
		fresh := tg.connectPg(ctx, t)
		if err := selectOne(ctx, fresh); err != nil {
			t.Errorf("new session after bad input: %v", err)
		}
	})

	t.Run("cancel pg_sleep", func(t *testing.T) {
		p := startProxy(t, c, proxyOptions{})
		conn := targetFor(t, p.Addr, "postgres").connectPg(ctx, t)
		admin, err := c.Connect(ctx, "postgres")
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(ctx)
		pid := conn.PID() // the backend's real PID
		start := time.Now()
		go func() {
			// A cancel sent before the query runs cancels nothing: wait
			// until the backend sleeps (the bound is a hang guard).
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				var n int
				if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep'", int32(pid)).Scan(&n); err != nil {
					t.Errorf("pg_stat_activity: %v", err)
					break
				}
				if n == 1 {
					break
				}
			}
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := conn.CancelRequest(cctx); err != nil {
				t.Errorf("CancelRequest: %v", err)
			}
		}()
		// Uncancelled, the sleep outlasts the context, which ends it with a
		// context error, not 57014.
		qctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		_, err = conn.Exec(qctx, "SELECT pg_sleep(3600)").ReadAll()
		if got := pgErrCode(err); got != "57014" {
			t.Fatalf("got %s (%v), want 57014", got, err)
		}
		t.Logf("cancelled after %v", time.Since(start).Round(time.Millisecond))
		if err := selectOne(ctx, conn); err != nil {
			t.Errorf("session unusable after cancel: %v", err)
		}
	})

	t.Run("1000 concurrent idle connections", func(t *testing.T) {
		const n = 1000
		p := startProxy(t, c, proxyOptions{})
		cfg := targetFor(t, p.Addr, "postgres").pgxConfig(t)
		base := settledSnapshot(t)
		before := clientBackends(ctx, t, c)
		conns := make([]*pgconn.PgConn, n)
		errs := make([]error, n)
		sem := make(chan struct{}, 16) // bound concurrent handshakes, not open sessions
		var wg sync.WaitGroup
		start := time.Now()
		for i := range conns {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				conns[i], errs[i] = pgconn.ConnectConfig(cctx, &cfg.Config)
			}()
		}
		wg.Wait()
		t.Logf("%d connections in %v", n, time.Since(start).Round(time.Millisecond))
		defer func() {
			for _, cn := range conns {
				if cn != nil {
					cn.Close(ctx)
				}
			}
		}()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("connect: %v", err)
		}
		if got := clientBackends(ctx, t, c) - before; got < n {
			t.Errorf("%d upstream backends for %d clients", got, n)
		}
		// All idle sessions are open at once; now each runs a query.
		for i, cn := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = selectOne(ctx, cn)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("SELECT 1: %v", err)
		}
		for i, cn := range conns {
			if err := cn.Close(ctx); err != nil {
				t.Errorf("close %d: %v", i, err)
			}
			conns[i] = nil
		}
		poll.UntilState(t, time.Minute, "upstream backends closed", func() (bool, string) {
			got := clientBackends(ctx, t, c)
			return got <= before, fmt.Sprintf("%d client backends, %d before", got, before)
		})
		waitBaseline(t, base)
	})
}

// connectPgRaw connects without registering a Close cleanup (the caller
// hijacks the connection).
func (tg target) connectPgRaw(ctx context.Context, t testing.TB) *pgconn.PgConn {
	t.Helper()
	conn, err := pgconn.ConnectConfig(ctx, &tg.pgxConfig(t).Config)
	if err != nil {
		t.Fatalf("connect %s: %v", tg.Addr(), err)
	}
	return conn
}

// slowDrain reads a simple-query response at about bytesPerSec without
// allocating per message, and counts DataRows until ReadyForQuery.
func slowDrain(conn net.Conn, bytesPerSec int) (dataRows, total int, err error) {
	r := bufio.NewReaderSize(conn, 32<<10)
	var hdr [5]byte
	start := time.Now()
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return dataRows, total, err
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if _, err := r.Discard(n); err != nil {
			return dataRows, total, err
		}
		total += 5 + n
		switch hdr[0] {
		case 'D':
			dataRows++
		case 'E':
			return dataRows, total, errors.New("ErrorResponse during the result")
		case 'Z':
			return dataRows, total, nil
		}
		// Throttle: never get ahead of the target rate.
		if ahead := time.Duration(float64(total)/float64(bytesPerSec)*float64(time.Second)) - time.Since(start); ahead > 10*time.Millisecond {
			time.Sleep(ahead)
		}
	}
}

// readUntilClosed reads backend messages until the peer closes the
// connection, returning the SQLSTATEs of ErrorResponses seen; an error means
// the connection was still open at the deadline.
func readUntilClosed(conn net.Conn, timeout time.Duration) ([]string, error) {
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	fe := pgproto3.NewFrontend(conn, conn)
	var codes []string
	for {
		msg, err := fe.Receive()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return codes, err
			}
			return codes, nil // EOF, reset or a truncated frame: closed
		}
		if e, ok := msg.(*pgproto3.ErrorResponse); ok {
			codes = append(codes, e.Code)
		}
	}
}

// raiseFDLimit lifts the soft RLIMIT_NOFILE so a thousand proxied sessions
// (three descriptors each in this process) fit.
func raiseFDLimit(t *testing.T, want uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("getrlimit: %v", err)
	}
	if lim.Cur >= want {
		return
	}
	lim.Cur = min(want, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("setrlimit: %v", err)
	}
	if lim.Cur < want {
		t.Logf("RLIMIT_NOFILE capped at %d", lim.Cur)
	}
}
