package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// proc is a long-running child process (PgBouncer, nlproxy) with its log file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
	tmpDir  string // removed by Stop when set
}

// startProc starts bin with args, logging to logPath. cred, when non-nil, runs it
// as another user (PgBouncer refuses to run as root). The context kills it with
// SIGTERM first, SIGKILL after WaitDelay.
func startProc(ctx context.Context, name, logPath string, cred *syscall.Credential, env []string, bin string, args ...string) (*proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid of the running process.
func (p *proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop asks the process to exit, kills it if it does not within 5 s, and
// removes its private directory.
func (p *proc) Stop() {
	if !p.Exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	if p.tmpDir != "" {
		_ = os.RemoveAll(p.tmpDir)
	}
}

// LogTail is the end of the process's log, for error messages.
func (p *proc) LogTail() string {
	b, _ := os.ReadFile(p.logPath)
	return tailString(string(b), 2000)
}

// waitReady polls until a Postgres connection through url can run SELECT 1, the
// process dies, or the deadline passes.
func waitReady(ctx context.Context, p *proc, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		if p != nil && p.Exited() {
			return fmt.Errorf("%s exited during start (%v):\n%s", p.name, p.waitErr, p.LogTail())
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgconn.Connect(cctx, url)
		if err == nil {
			_, err = conn.Exec(cctx, "SELECT 1").ReadAll()
			conn.Close(cctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(100 * time.Millisecond)
	}
	name := "endpoint"
	tailLog := ""
	if p != nil {
		name, tailLog = p.name, p.LogTail()
	}
	return fmt.Errorf("%s not ready after %s: %w\n%s", name, timeout, lastErr, tailLog)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// postgresCred returns the credentials of the postgres system user when running
// as root (nil otherwise), and chowns dir to it so the child can write there.
func postgresCred(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs the postgres system user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(path, uid, gid)
	}); err != nil {
		return nil, fmt.Errorf("chown %s: %w", dir, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// pgbouncerTLS is PgBouncer's TLS on both sides: the certificate and key it
// offers clients (which must use TLS) and TLS required to the server.
type pgbouncerTLS struct{ cert, key string }

// pgbouncerIni renders a session-pooling config in front of upstream host:port;
// tls, when non-nil, turns on client_tls_* and server_tls_*.
func pgbouncerIni(dir string, listenPort int, upHost string, upPort int, tls *pgbouncerTLS) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[databases]\n* = host=%s port=%d\n\n", upHost, upPort)
	fmt.Fprintf(&b, "[pgbouncer]\n")
	fmt.Fprintf(&b, "listen_addr = 127.0.0.1\nlisten_port = %d\n", listenPort)
	fmt.Fprintf(&b, "unix_socket_dir =\n")
	fmt.Fprintf(&b, "auth_type = trust\nauth_file = %s\n", filepath.Join(dir, "userlist.txt"))
	fmt.Fprintf(&b, "pool_mode = session\nmax_client_conn = 200\ndefault_pool_size = 40\n")
	// pgx and JDBC send these; PgBouncer rejects unknown startup parameters otherwise.
	fmt.Fprintf(&b, "ignore_startup_parameters = extra_float_digits,options\n")
	fmt.Fprintf(&b, "logfile = %s\nlog_connections = 0\nlog_disconnections = 0\n", filepath.Join(dir, "pgbouncer.log"))
	if tls != nil {
		fmt.Fprintf(&b, "client_tls_sslmode = require\nclient_tls_cert_file = %s\nclient_tls_key_file = %s\n", tls.cert, tls.key)
		fmt.Fprintf(&b, "server_tls_sslmode = require\n")
	}
	return b.String()
}

// startPgbouncer writes its config into a fresh temp dir (its own, directly
// under the system temp dir, so the postgres user can reach it when we are
// root) and starts it. Stop removes the dir. name tells the PgBouncers apart
// (Debian's, one built from source); tls, when non-nil, turns on TLS both sides.
func startPgbouncer(ctx context.Context, name, bin, upHost string, upPort int, user string, tls *tlsFiles) (_ *proc, _ int, err error) {
	dir, port, err := peerWorkspace("pgbouncer")
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	var bt *pgbouncerTLS
	if tls != nil {
		bt = &pgbouncerTLS{}
		if bt.cert, bt.key, err = tls.copyTo(dir); err != nil {
			return nil, 0, err
		}
	}
	ini := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(ini, []byte(pgbouncerIni(dir, port, upHost, upPort, bt)), 0o600); err != nil {
		return nil, 0, fmt.Errorf("pgbouncer ini: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(fmt.Sprintf("%q \"\"\n", user)), 0o600); err != nil {
		return nil, 0, fmt.Errorf("pgbouncer userlist: %w", err)
	}
	cred, err := postgresCred(dir)
	if err != nil {
		return nil, 0, err
	}
	// The stdout log is opened by us, so its ownership does not matter.
	p, err := startProc(ctx, name, filepath.Join(dir, "pgbouncer.out"), cred, nil, bin, ini)
	if err != nil {
		return nil, 0, err
	}
	p.tmpDir = dir
	return p, port, nil
}

// buildNlproxy builds the binary at out from ./cmd/nlproxy in repo.
func buildNlproxy(ctx context.Context, repo, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/nlproxy")
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/nlproxy: %w\n%s", err, b)
	}
	return nil
}

// envRe matches a NAME=value word in -nlproxy-args, set in nlproxy's
// environment (GOMAXPROCS=1, GOGC=off) rather than passed as an argument.
var envRe = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)

// startNlproxy runs `nlproxy serve` on a free port in front of upstream.
func startNlproxy(ctx context.Context, parent, name, bin, upstreamURL string, extra []string) (*proc, int, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, 0, fmt.Errorf("nlproxy binary: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, 0, err
	}
	args := []string{"serve", "--listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		"--upstream", upstreamURL, "--log-level", "warn"}
	var env []string
	for _, a := range extra {
		if envRe.MatchString(a) {
			env = append(env, a)
		} else {
			args = append(args, a)
		}
	}
	p, err := startProc(ctx, name, filepath.Join(parent, name+".log"), nil, env, bin, args...)
	if err != nil {
		return nil, 0, err
	}
	return p, port, nil
}

// errNoProc means /proc/PID/status had no such field (process gone or not Linux).
var errNoProc = errors.New("field not in /proc status")

// procStatusKB reads a "Vm…:   N kB" field from /proc/PID/status.
func procStatusKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read status: %w", err)
	}
	return parseStatusKB(string(b), field)
}

func parseStatusKB(status, field string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		rest, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			break
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse %s %q: %w", field, f[0], err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%s: %w", field, errNoProc)
}

// peerWorkspace makes a peer's temporary directory and picks its port; the
// caller removes the directory when the start fails after this.
func peerWorkspace(name string) (dir string, port int, err error) {
	dir, err = os.MkdirTemp("", "proxybench-"+name+"-")
	if err != nil {
		return "", 0, fmt.Errorf("%s dir: %w", name, err)
	}
	if port, err = freePort(); err != nil {
		_ = os.RemoveAll(dir)
		return "", 0, err
	}
	return dir, port, nil
}
