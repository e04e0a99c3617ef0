// Package pgcluster starts throwaway PostgreSQL clusters: initdb + pg_ctl in a
// temp dir, on a free loopback port, torn down by Stop. The demo, benchmarks
// and (through testkit/pgtest) the tests use it; it does not import
// package testing, so product binaries can link it. Binaries come from PATH or
// /usr/lib/postgresql/*/bin. initdb and postgres refuse to run as root, so as
// root they run as the "postgres" system user via runuser.
package pgcluster

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoPostgres means the server binaries could not be found.
var ErrNoPostgres = errors.New("pgcluster: PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or under /usr/lib/postgresql/*/bin")

// Superuser is the bootstrap superuser of every cluster.
const Superuser = "postgres"

// SuperuserPassword is the superuser's password, set so password auth methods work.
const SuperuserPassword = "pgcluster-secret"

// Options configure a cluster.
type Options struct {
	// AuthMethod is the pg_hba method for TCP connections: "trust" (default),
	// "md5", "scram-sha-256" or "password". Unix-socket connections always use
	// trust so the helper itself can administer the cluster.
	AuthMethod string
	// TLS enables ssl=on with a freshly generated self-signed certificate.
	TLS bool
	// Settings are extra postgresql.conf parameters (name → value, quoted as needed).
	Settings map[string]string
}

// Cluster is a running throwaway PostgreSQL server.
type Cluster struct {
	Host      string // always 127.0.0.1
	Port      int
	DataDir   string
	SocketDir string
	BinDir    string
	// CertPEM is the server certificate when Options.TLS is set (self-signed; use
	// it as the root CA to verify).
	CertPEM []byte

	dir   string
	runAs string
}

// FindBinDir returns the directory holding initdb, pg_ctl and postgres.
func FindBinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	sort.Slice(matches, func(i, j int) bool { return versionOf(matches[i]) > versionOf(matches[j]) })
	for _, m := range matches {
		dir := filepath.Dir(m)
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", ErrNoPostgres
}

func versionOf(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

// Start creates and starts a cluster. The caller must call Stop.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	binDir, err := FindBinDir()
	if err != nil {
		return nil, err
	}
	if opts.AuthMethod == "" {
		opts.AuthMethod = "trust"
	}
	switch opts.AuthMethod {
	case "trust", "md5", "scram-sha-256", "password":
	default:
		return nil, fmt.Errorf("pgcluster: unsupported auth method %q", opts.AuthMethod)
	}

	dir, err := os.MkdirTemp("", "pgcluster-")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: temp dir: %w", err)
	}
	c := &Cluster{
		Host:      "127.0.0.1",
		DataDir:   filepath.Join(dir, "data"),
		SocketDir: dir,
		BinDir:    binDir,
		dir:       dir,
	}
	if os.Geteuid() == 0 {
		c.runAs = Superuser
	}
	ok := false
	defer func() {
		if !ok {
			// pg_ctl may have started the server before failing or being
			// interrupted; stop it before its directory goes.
			if _, err := os.Stat(filepath.Join(c.DataDir, "postmaster.pid")); err == nil {
				_ = c.stopServer()
			}
			_ = os.RemoveAll(dir)
		}
	}()
	if err := c.chownForServer(dir); err != nil {
		return nil, err
	}

	pwfile := filepath.Join(dir, "pwfile")
	if err := c.writeFile(pwfile, []byte(SuperuserPassword+"\n"), 0o600); err != nil {
		return nil, err
	}
	if out, err := c.run(ctx, "initdb", "-D", c.DataDir, "-U", Superuser, "--pwfile", pwfile,
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, fmt.Errorf("pgcluster: initdb: %w\n%s", err, out)
	}

	var conf strings.Builder
	base := map[string]string{
		"listen_addresses":        "'127.0.0.1'",
		"unix_socket_directories": "'" + dir + "'",
		"fsync":                   "off",
		"synchronous_commit":      "off",
		"full_page_writes":        "off",
		"max_connections":         "200",
		"shared_buffers":          "128MB",
		"log_min_messages":        "warning",
	}
	if opts.AuthMethod == "md5" {
		base["password_encryption"] = "md5"
	}
	if opts.TLS {
		certPEM, keyPEM, err := selfSignedCert()
		if err != nil {
			return nil, err
		}
		c.CertPEM = certPEM
		if err := c.writeFile(filepath.Join(c.DataDir, "server.crt"), certPEM, 0o600); err != nil {
			return nil, err
		}
		if err := c.writeFile(filepath.Join(c.DataDir, "server.key"), keyPEM, 0o600); err != nil {
			return nil, err
		}
		base["ssl"] = "on"
	}
	for k, v := range opts.Settings {
		base[k] = v
	}
	keys := make([]string, 0, len(base))
	for k := range base {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&conf, "%s = %s\n", k, base[k])
	}
	if err := c.appendFile(filepath.Join(c.DataDir, "postgresql.conf"), conf.String()); err != nil {
		return nil, err
	}
	hba := fmt.Sprintf("local all all trust\nhost all all 127.0.0.1/32 %[1]s\nhost all all ::1/128 %[1]s\n", opts.AuthMethod)
	if err := c.writeFile(filepath.Join(c.DataDir, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return nil, err
	}

	keepDescriptorsOwn()
	// A free port can be taken between probe and bind; retry a few times.
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		c.Port = port
		out, err := c.run(ctx, "pg_ctl", "-D", c.DataDir, "-l", filepath.Join(dir, "postgres.log"), "-w", "-t", "60",
			"-o", fmt.Sprintf("-p %d", port), "start")
		if err == nil {
			lastErr = nil
			break
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("pgcluster: pg_ctl start: %w", ctx.Err())
		}
		logTail, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
		lastErr = fmt.Errorf("pgcluster: pg_ctl start: %w\n%s\n%s", err, out, tail(logTail, 2000))
	}
	if lastErr != nil {
		return nil, lastErr
	}
	if opts.AuthMethod == "md5" {
		// initdb stored the password with the default (SCRAM) hashing; md5 auth needs an md5 hash.
		if err := c.Exec(ctx, "postgres", fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", Superuser, SuperuserPassword)); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	ok = true
	return c, nil
}

// Addr is host:port for TCP clients.
func (c *Cluster) Addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

// URL is a libpq connection URL over TCP for the given role and database.
// sslmode=disable unless the caller adds its own parameters.
func (c *Cluster) URL(user, password, database string) string {
	u := url.URL{Scheme: "postgres", Host: c.Addr(), Path: "/" + database}
	if password != "" {
		u.User = url.UserPassword(user, password)
	} else {
		u.User = url.User(user)
	}
	u.RawQuery = "sslmode=disable"
	return u.String()
}

// DSN is the superuser's TCP URL for database.
func (c *Cluster) DSN(database string) string {
	return c.URL(Superuser, SuperuserPassword, database)
}

// SocketConfig is a pgx config for the superuser over the Unix socket (trust auth).
func (c *Cluster) SocketConfig(database string) (*pgx.ConnConfig, error) {
	return pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=%s", c.SocketDir, c.Port, Superuser, database))
}

// Connect opens a superuser connection over the Unix socket.
func (c *Cluster) Connect(ctx context.Context, database string) (*pgx.Conn, error) {
	cfg, err := c.SocketConfig(database)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// Exec runs one or more SQL statements as superuser in database (simple protocol).
func (c *Cluster) Exec(ctx context.Context, database, sql string) error {
	conn, err := c.Connect(ctx, database)
	if err != nil {
		return fmt.Errorf("pgcluster: connect %s: %w", database, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		return fmt.Errorf("pgcluster: exec: %w", err)
	}
	return nil
}

// CreateDatabase creates database (owned by the superuser).
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	return c.Exec(ctx, "postgres", "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
}

// CreateRole creates a login role with a password (hashed per the cluster's
// password_encryption).
func (c *Cluster) CreateRole(ctx context.Context, name, password string, superuser bool) error {
	attrs := "LOGIN"
	if superuser {
		attrs += " SUPERUSER"
	}
	return c.Exec(ctx, "postgres", fmt.Sprintf("CREATE ROLE %s %s PASSWORD '%s'",
		pgx.Identifier{name}.Sanitize(), attrs, strings.ReplaceAll(password, "'", "''")))
}

// Bin returns the path of a server-side binary (pg_dump, pgbench, …) next to initdb.
func (c *Cluster) Bin(name string) string { return filepath.Join(c.BinDir, name) }

// Dir is the cluster's temporary directory (data directory, socket, log);
// Stop removes it.
func (c *Cluster) Dir() string { return c.dir }

// PID is the postmaster's process ID, read from its postmaster.pid file.
func (c *Cluster) PID() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.DataDir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("pgcluster: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("pgcluster: postmaster.pid: %w", err)
	}
	return pid, nil
}

// Stop shuts the server down immediately and removes its files. It does not
// depend on any caller's context: it runs during shutdown, after signals.
func (c *Cluster) Stop() error {
	err := c.stopServer()
	if e := os.RemoveAll(c.dir); e != nil && err == nil {
		err = e
	}
	return err
}

// stopServer stops the postmaster and returns once it has exited: pg_ctl -w
// returns when postmaster.pid is gone, a moment before the process is.
func (c *Cluster) stopServer() error {
	var watch *exitWatch
	if pid, err := c.PID(); err == nil {
		watch = watchExit(pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := c.run(ctx, "pg_ctl", "-D", c.DataDir, "-m", "immediate", "-w", "stop"); err != nil {
		watch.close()
		return fmt.Errorf("pgcluster: pg_ctl stop: %w\n%s", err, out)
	}
	return watch.wait(time.Minute)
}

func (c *Cluster) run(ctx context.Context, bin string, args ...string) ([]byte, error) {
	path := filepath.Join(c.BinDir, bin)
	var cmd *exec.Cmd
	if c.runAs != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", c.runAs, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = c.dir
	// Own process group: a Ctrl-C meant for the demo or a test run must not
	// reach the server directly; Stop shuts it down in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// On cancellation kill the whole group: as root the child is runuser,
	// and killing it alone would leave initdb writing into a directory
	// that is being removed. (pg_ctl start detaches the postmaster into its
	// own session; Start's cleanup stops it through pg_ctl.)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	// pg_ctl start leaves postgres running; don't let it hold our pipes open.
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.Bytes(), err
}

func (c *Cluster) chownForServer(path string) error {
	if c.runAs == "" {
		return nil
	}
	u, err := user.Lookup(c.runAs)
	if err != nil {
		return fmt.Errorf("pgcluster: running as root needs the %q system user: %w", c.runAs, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		return fmt.Errorf("pgcluster: chown %s: %w", path, err)
	}
	return nil
}

func (c *Cluster) writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("pgcluster: write %s: %w", path, err)
	}
	return c.chownForServer(path)
}

func (c *Cluster) appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: open %s: %w", path, err)
	}
	if _, err := f.WriteString("\n# pgcluster\n" + text); err != nil {
		f.Close()
		return fmt.Errorf("pgcluster: append %s: %w", path, err)
	}
	return f.Close()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// selfSignedCert makes a certificate for 127.0.0.1/localhost.
func selfSignedCert() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pgcluster: key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "localhost"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("pgcluster: certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("pgcluster: key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// SelfSignedCert returns a fresh PEM certificate and key for 127.0.0.1/localhost,
// for tests that terminate TLS elsewhere (e.g. at the proxy).
func SelfSignedCert() (certPEM, keyPEM []byte, err error) { return selfSignedCert() }
