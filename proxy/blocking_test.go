//go:build unix

package proxy

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// blockingCounts reports (established, in blocking mode) sessions.
func blockingCounts(srv *Server) (int, int) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.established, srv.blocking
}

// socketsBlocking reports, per established session, whether both its sockets
// are in blocking mode — read from the kernel, not from our bookkeeping.
func socketsBlocking(t *testing.T, srv *Server) []bool {
	t.Helper()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	var out []bool
	for sess := range srv.conns {
		b := sess.block
		if b.client == nil {
			continue
		}
		blocking := true
		for _, rc := range []syscall.RawConn{b.client, b.up} {
			var flags int
			var ferr error
			if err := rc.Control(func(fd uintptr) {
				r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
				flags = int(r)
				if e != 0 {
					ferr = e
				}
			}); err != nil || ferr != nil {
				t.Fatalf("fcntl: %v %v", err, ferr)
			}
			if flags&syscall.O_NONBLOCK != 0 {
				blocking = false
			}
		}
		out = append(out, blocking)
	}
	return out
}

func allEqual(bs []bool, want bool, n int) bool {
	if len(bs) != n {
		return false
	}
	for _, b := range bs {
		if b != want {
			return false
		}
	}
	return true
}

// TestBlockingMode: up to the limit every session blocks in read(2); one
// more switches them all to the netpoller, fewer switches them back; queries
// work throughout, and a session whose backend is killed while its threads
// block in read ends cleanly.
func TestBlockingMode(t *testing.T) {
	needPG(t)
	ctx := context.Background()
	srv, addr := trustServer(t, &Server{BlockingSessions: 2})
	query := func(c *pgx.Conn, v int) {
		t.Helper()
		var got int
		if err := c.QueryRow(ctx, fmt.Sprintf("SELECT %d", v)).Scan(&got); err != nil || got != v {
			t.Fatalf("SELECT %d = %d, %v", v, got, err)
		}
	}
	a := connect(t, trustURL(addr))
	waitFor(t, "one blocking session", func() bool { e, b := blockingCounts(srv); return e == 1 && b == 1 })
	if bs := socketsBlocking(t, srv); !allEqual(bs, true, 1) {
		t.Fatalf("sockets blocking = %v, want [true]", bs)
	}
	query(a, 1)
	b := connect(t, trustURL(addr))
	waitFor(t, "two blocking sessions", func() bool { e, b := blockingCounts(srv); return e == 2 && b == 2 })
	query(b, 2)

	c, err := pgx.Connect(ctx, trustURL(addr))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three sessions, none blocking", func() bool { e, b := blockingCounts(srv); return e == 3 && b == 0 })
	if bs := socketsBlocking(t, srv); !allEqual(bs, false, 3) {
		t.Fatalf("sockets blocking = %v, want all false", bs)
	}
	query(a, 3)
	query(b, 4)
	query(c, 5)
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two blocking sessions again", func() bool { e, b := blockingCounts(srv); return e == 2 && b == 2 })
	if bs := socketsBlocking(t, srv); !allEqual(bs, true, 2) {
		t.Fatalf("sockets blocking = %v, want [true true]", bs)
	}
	query(a, 6)

	// Kill b's backend while both of b's relay threads sit in read(2).
	var pid int
	if err := b.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if err := trustPG.Exec(ctx, "postgres", fmt.Sprintf("SELECT pg_terminate_backend(%d)", pid)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("query succeeded on a terminated backend")
	} else if code := pgCode(err); code != "57P01" && code != "08006" {
		t.Fatalf("error after upstream loss: %v, want 57P01 or 08006", err)
	}
	waitFor(t, "one session left", func() bool { e, b := blockingCounts(srv); return e == 1 && b == 1 })
	query(a, 7)

	// The proxy closing a session whose threads block in read (shutdown
	// wakes them): Server.Close must return and the session end.
	srv.Close()
	srv.waitSessions()
	if e, b := blockingCounts(srv); e != 0 || b != 0 {
		t.Fatalf("after Close: %d established, %d blocking", e, b)
	}
	if _, err := a.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("session survived Server.Close")
	}
}

// TestBlockingModeNotWithTimeouts: idle timeouts need deadlines, which a
// blocking socket ignores, so the sessions stay on the netpoller.
func TestBlockingModeNotWithTimeouts(t *testing.T) {
	needPG(t)
	srv, addr := trustServer(t, &Server{IdleTimeout: time.Hour})
	c := connect(t, trustURL(addr))
	if _, err := c.Exec(context.Background(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "one established session", func() bool { e, _ := blockingCounts(srv); return e == 1 })
	if _, b := blockingCounts(srv); b != 0 {
		t.Fatalf("%d sessions in blocking mode with an idle timeout", b)
	}
}
