package integration_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestBackendPID: what pgx's own suite relies on — the PID in BackendKeyData
// is the backend's, so pg_terminate_backend(conn.PID()) ends this very
// session and a session's own NOTIFY carries the PID it knows as its own.
func TestBackendPID(t *testing.T) {
	c := newScramCluster(t, nil)
	p := startProxy(t, c, proxyOptions{})
	tg := targetFor(t, p.Addr, "postgres")
	ctx := context.Background()

	t.Run("pg_backend_pid", func(t *testing.T) {
		conn := tg.connectPg(ctx, t)
		if got := upstreamPID(ctx, t, conn); got != conn.PID() {
			t.Fatalf("pg_backend_pid() = %d, BackendKeyData pid = %d", got, conn.PID())
		}
	})

	t.Run("notify from the same session", func(t *testing.T) {
		conn := tg.connect(ctx, t)
		if _, err := conn.Exec(ctx, "LISTEN nlproxy_self; NOTIFY nlproxy_self, 'me'"); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.PID != conn.PgConn().PID() || n.Payload != "me" {
			t.Fatalf("notification %+v, want pid %d (our own)", *n, conn.PgConn().PID())
		}
	})

	t.Run("pg_terminate_backend(PID())", func(t *testing.T) {
		victim := tg.connectPg(ctx, t)
		killer := tg.connect(ctx, t)
		var ok bool
		if err := killer.QueryRow(ctx, "SELECT pg_terminate_backend($1)", int32(victim.PID())).Scan(&ok); err != nil || !ok {
			t.Fatalf("pg_terminate_backend(%d) = %v, %v", victim.PID(), ok, err)
		}
		err := selectOne(ctx, victim)
		var pgErr *pgconn.PgError
		if err == nil {
			t.Fatal("terminated session still answers")
		}
		if errors.As(err, &pgErr) && pgErr.Code != "57P01" {
			t.Errorf("error %v, want 57P01 admin_shutdown (or a closed connection)", err)
		}
		if !victim.IsClosed() {
			t.Error("victim connection still open")
		}
	})
}
