//go:build !directonly

package integration_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/testkit/clienttest"
	"github.com/nlproxy/nlproxy/testkit/pgtest"

	"github.com/nlproxy/nlproxy/testkit/poll"
)

// TestUnixSocket connects psql and pgx to the proxy's Unix socket the way
// local tools do (host = socket directory, port = the TCP port); the proxy
// relays SCRAM-SHA-256 to a TCP upstream.
func TestUnixSocket(t *testing.T) {
	c := newScramCluster(t, nil)
	p := startProxy(t, c, proxyOptions{UnixSocket: true})
	ctx := context.Background()
	sock := target{Host: p.SocketDir, Port: p.SocketPort, User: pgtest.Superuser, Password: pgtest.SuperuserPassword, Database: "postgres"}

	t.Run("psql", func(t *testing.T) {
		psql := clienttest.RequireBinary(t, "psql")
		out := runClient(ctx, t, sock, nil, psql, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
			"-c", "SELECT current_user, inet_client_addr() IS NOT NULL",
			"-c", "SELECT count(*) FROM pg_stat_activity WHERE pid = pg_backend_pid() AND client_addr IS NOT NULL")
		// The upstream leg is TCP: the server sees a network client.
		assertLines(t, out, []string{"postgres|t", "1"})

		// A wrong password is refused by the upstream's SCRAM check.
		bad := sock
		bad.Password = "wrong"
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, psql, "-X", "-c", "SELECT 1")
		cmd.Env = bad.Env()
		outB, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(outB), "password authentication failed") {
			t.Fatalf("wrong password over the socket: err %v, output %s", err, outB)
		}
	})

	t.Run("pgx", func(t *testing.T) {
		cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=postgres",
			p.SocketDir, p.SocketPort, pgtest.Superuser, pgtest.SuperuserPassword))
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnectTimeout = 10 * time.Second
		for _, mode := range pgxModes {
			t.Run(mode.String(), func(t *testing.T) {
				cfg := cfg.Copy()
				cfg.DefaultQueryExecMode = mode
				conn, err := pgx.ConnectConfig(ctx, cfg)
				if err != nil {
					t.Fatalf("connect: %v", err)
				}
				defer conn.Close(ctx)
				if n := conn.PgConn().Conn().RemoteAddr().Network(); n != "unix" {
					t.Fatalf("connected over %s", n)
				}
				var got int
				var s string
				if err := conn.QueryRow(ctx, "SELECT $1::int + 1, $2::text", 41, "héllo ✓").Scan(&got, &s); err != nil {
					t.Fatal(err)
				}
				if got != 42 || s != "héllo ✓" {
					t.Fatalf("got %d %q", got, s)
				}
			})
		}

		// Cancel over the socket: pgx sends the CancelRequest to the same
		// socket; the proxy forwards it to the upstream over TCP.
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		pid := conn.PgConn().PID()
		errc := make(chan error, 1)
		go func() {
			_, err := conn.Exec(ctx, "SELECT pg_sleep(60)")
			errc <- err
		}()
		admin, err := c.Connect(ctx, "postgres")
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(ctx)
		poll.UntilState(t, 30*time.Second, "pg_sleep running", func() (bool, string) {
			var n int
			_ = admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active'", int32(pid)).Scan(&n)
			return n == 1, "backend " + strconv.Itoa(int(pid)) + " not active"
		})
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := conn.PgConn().CancelRequest(cctx); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; pgErrCode(err) != "57014" {
			t.Fatalf("after cancel over the socket: %v, want 57014", err)
		}
	})
}
