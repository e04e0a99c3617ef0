// Package clienttest holds what the end-to-end tests need to drive external
// Postgres clients: finding their binaries and installing node-postgres once.
package clienttest

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/testkit/needs"
)

// RequireBinary returns the path of name, or skips the test when it is not installed.
func RequireBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		needs.Missing(t, "%s not installed: %v", name, err)
	}
	return p
}

// NodeModules installs node-postgres (pg@8) once into the user cache
// directory and returns the node_modules path for NODE_PATH. A file lock keeps
// test packages running in parallel from installing into it at once.
func NodeModules(ctx context.Context, t testing.TB) string {
	t.Helper()
	RequireBinary(t, "node")
	npm := RequireBinary(t, "npm")
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "nlproxy-test", "node")
	modules := filepath.Join(dir, "node_modules")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // released on close anyway
	if _, err := os.Stat(filepath.Join(modules, "pg", "package.json")); err == nil {
		return modules
	}
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"nlproxy-test-clients","private":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "pg@8")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install pg: %v\n%s", err, out)
	}
	return modules
}

// ServeProxy serves srv on a fresh loopback port until the test ends (a
// graceful shutdown, then a hard close) and returns its address.
func ServeProxy(t testing.TB, srv *proxy.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	})
	return ln.Addr().String()
}

// Chromium loads url in headless Chromium with args (e.g. --dump-dom,
// --screenshot=FILE) and returns its stdout and the console messages the
// page logged; it skips the test when chromium is not installed. A browser
// that fails to start or crashes is tried once more (it happens on a loaded
// machine); a page that breaks it breaks it twice.
func Chromium(ctx context.Context, t testing.TB, url string, args ...string) (stdout string, console []string) {
	t.Helper()
	bin := RequireBinary(t, "chromium")
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0"}
	var out, errb bytes.Buffer
	for try := 1; ; try++ {
		out.Reset()
		errb.Reset()
		cmd := exec.CommandContext(ctx, bin, append(append(base, args...), url)...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err == nil {
			break
		}
		if try == 2 || ctx.Err() != nil {
			t.Fatalf("chromium: %v\n%s", err, errb.String())
		}
		t.Logf("chromium failed, trying again: %v\n%s", err, errb.String())
	}
	// Console messages are logged as "CONSOLE(...)" or ":CONSOLE:" lines.
	for _, line := range strings.Split(errb.String(), "\n") {
		if strings.Contains(line, "CONSOLE") {
			console = append(console, line)
		}
	}
	return out.String(), console
}

// NoticeConn is a pgx connection that keeps the notices it receives.
type NoticeConn struct {
	*pgx.Conn
	mu      sync.Mutex
	notices []string
}

// Notices returns the notice messages received so far.
func (c *NoticeConn) Notices() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.notices...)
}

// ConnectNotices opens url with pgx, keeping notices, closed when the test
// ends.
func ConnectNotices(t testing.TB, url string) *NoticeConn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	c := &NoticeConn{}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		c.mu.Lock()
		c.notices = append(c.notices, n.Message)
		c.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect %s: %v", cfg.Host, err)
	}
	c.Conn = conn
	t.Cleanup(func() { conn.Close(context.Background()) })
	return c
}
