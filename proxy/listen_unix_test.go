//go:build unix

package proxy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// socketDir is a short temp dir: sun_path allows ~100 bytes, and t.TempDir
// paths embed the test name.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nlpsock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// deadPID returns the PID of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	return cmd.Process.Pid
}

// livePID returns the PID of a process that runs until the test ends.
func livePID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot run sleep: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

func TestListenUnix(t *testing.T) {
	const port = 6543
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir string) // leftovers in dir before ListenUnix
		wantErr string                         // "" = must succeed
	}{
		{name: "clean directory"},
		{name: "stale lock and socket of a dead process", prepare: func(t *testing.T, dir string) {
			writeLock(t, dir, port, strconv.Itoa(deadPID(t)))
			staleSocket(t, SocketPath(dir, port))
		}},
		{name: "stale socket without lock", prepare: func(t *testing.T, dir string) {
			staleSocket(t, SocketPath(dir, port))
		}},
		{name: "lock of a running process", prepare: func(t *testing.T, dir string) {
			writeLock(t, dir, port, strconv.Itoa(livePID(t)))
		}, wantErr: "belongs to running process"},
		{name: "lock naming us, but a server answers", prepare: func(t *testing.T, dir string) {
			ln, err := net.Listen("unix", SocketPath(dir, port))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			writeLock(t, dir, port, strconv.Itoa(os.Getpid()))
		}, wantErr: "a server answers"},
		{name: "corrupt lock", prepare: func(t *testing.T, dir string) {
			writeLock(t, dir, port, "")
		}, wantErr: "empty or corrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := socketDir(t)
			if tc.prepare != nil {
				tc.prepare(t, dir)
			}
			ln, err := ListenUnix(dir, port)
			if tc.wantErr != "" {
				if err == nil {
					ln.Close()
					t.Fatalf("ListenUnix succeeded, want error %q", tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sock := SocketPath(dir, port)
			fi, err := os.Stat(sock)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o777 {
				t.Errorf("socket mode %v, want a socket with 0777", fi.Mode())
			}
			lock, err := os.ReadFile(sock + ".lock")
			if err != nil {
				t.Fatal(err)
			}
			if first, _, _ := strings.Cut(string(lock), "\n"); first != strconv.Itoa(os.Getpid()) {
				t.Errorf("lock file starts with %q, want our pid %d", first, os.Getpid())
			}
			// A second listener on the same socket is refused while we hold it.
			if ln2, err := ListenUnix(dir, port); err == nil {
				ln2.Close()
				t.Error("second ListenUnix on a live socket succeeded")
			}
			accepted := make(chan error, 1)
			go func() {
				c, err := ln.Accept()
				if err == nil {
					c.Close()
				}
				accepted <- err
			}()
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			if err := <-accepted; err != nil {
				t.Fatal(err)
			}
			if err := ln.Close(); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{sock, sock + ".lock"} {
				if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s still there after Close (%v)", p, err)
				}
			}
		})
	}
	t.Run("path too long", func(t *testing.T) {
		_, err := ListenUnix("/tmp/"+strings.Repeat("d", 120), port)
		if err == nil || !strings.Contains(err.Error(), "longer than") {
			t.Fatalf("err = %v", err)
		}
	})
}

func writeLock(t *testing.T, dir string, port int, pid string) {
	t.Helper()
	data := fmt.Sprintf("%s\n\n0\n%d\n%s\n", pid, port, dir)
	if err := os.WriteFile(SocketPath(dir, port)+".lock", []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// staleSocket leaves a socket file that nobody listens on (as after a crash).
func staleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
}

// serveUnix serves srv on a Unix socket in a fresh directory and returns the
// directory and port clients use (host=dir port=port).
func serveUnix(t *testing.T, srv *Server) (string, int) {
	t.Helper()
	dir := socketDir(t)
	const port = 5432
	ln, err := ListenUnix(dir, port)
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
		srv.waitSessions()
		if _, err := os.Lstat(filepath.Join(dir, ".s.PGSQL.5432")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("socket left behind after Close: %v", err)
		}
	})
	return dir, port
}

// TestUnixSocketSession: SCRAM relayed over the proxy's Unix socket; TLS is
// refused there with 'N' even when configured, and RequireTLS (a rule for
// network clients) does not lock local clients out.
func TestUnixSocketSession(t *testing.T) {
	needPG(t)
	tlsCfg, _ := proxyTLS(t)
	srv := &Server{
		Upstreams:  []Upstream{{Address: scramPG.Addr(), TLS: UpstreamTLSDisable}},
		TLSConfig:  tlsCfg,
		RequireTLS: true,
	}
	dir, port := serveUnix(t, srv)

	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=postgres sslmode=disable",
		dir, port, pgtest.Superuser, pgtest.SuperuserPassword))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect over the unix socket: %v", err)
	}
	defer c.Close(context.Background())
	if got := queryInt(t, c, "SELECT $1::int * 2", 21); got != 42 {
		t.Fatalf("got %d", got)
	}
	if c.PgConn().Conn().RemoteAddr().Network() != "unix" {
		t.Fatalf("client connected over %s", c.PgConn().Conn().RemoteAddr().Network())
	}
	if got := uint32(queryInt(t, c, "SELECT pg_backend_pid()")); got != c.PgConn().PID() {
		t.Fatalf("backend pid %d, client pid %d", got, c.PgConn().PID())
	}

	// A wrong password is refused by the upstream, as over TCP.
	bad := cfg.Copy()
	bad.Password = "wrong"
	if _, err := pgx.ConnectConfig(ctx, bad); pgCode(err) != "28P01" {
		t.Fatalf("wrong password: err = %v, want 28P01", err)
	}

	// sslmode=require must fail on the socket: the proxy answers SSLRequest with 'N'.
	raw, err := net.Dial("unix", SocketPath(dir, port))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := raw.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := raw.Read(b[:]); err != nil || b[0] != 'N' {
		t.Fatalf("SSLRequest on the unix socket: reply %q, %v; want 'N'", b[0], err)
	}
	// The startup goes on in plaintext after 'N': the upstream asks for SASL.
	if _, err := raw.Write(encodeStartup(196608, []param{{"user", pgtest.Superuser}, {"database", "postgres"}})); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	n, err := raw.Read(buf)
	if err != nil || n < 9 || buf[0] != 'R' || !strings.Contains(string(buf[9:n]), "SCRAM-SHA-256") {
		t.Fatalf("after 'N': %q, %v; want AuthenticationSASL", buf[:n], err)
	}
}
