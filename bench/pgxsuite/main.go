// Command pgxsuite runs pgx's own test suite (the pgx version in go.mod)
// through nlproxy, to show the proxy behaves like Postgres to a demanding
// client. It starts a throwaway cluster set up the way pgx's CI sets up its
// database (testsetup/: roles per auth method, hstore, ltree, the uint64
// domain, pgx's certificates), `nlproxy serve` in front of it on TCP, TLS (pgx's
// localhost certificate, terminated at the proxy) and a Unix socket, points
// every PGX_TEST_* variable at the proxy and runs `go test ./...` in a copy of
// the pgx module. Failures are sorted into the ones inherent to a proxy that
// terminates TLS (listed in expectedFailures, with the reason) and the rest;
// any of the rest makes the exit status non-zero.
//
//	go run ./bench/pgxsuite [-direct] [-out DIR] [-- go test flags, e.g. -run TestConnect]
//
// -direct runs the suite straight against the cluster instead: the baseline
// that tells a proxy problem from a setup problem.
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nlproxy/nlproxy/internal/pgcluster"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// expectedFailures are the pgx tests that cannot pass through a proxy that
// terminates TLS, keyed by package-relative test name.
var expectedFailures = map[string]string{
	"TestConnectTLS/WithChannelBinding":                                       "channel binding (SCRAM-SHA-256-PLUS, channel_binding=require) binds the client's TLS session, which ends at the proxy; nlproxy never offers PLUS",
	"TestConnectTLS":                                                          "parent of TestConnectTLS/WithChannelBinding",
	"TestConnectTLSPasswordProtectedClientCertWithSSLPassword":                "client certificate authentication: the certificate is presented to the proxy, the server never sees it",
	"TestConnectTLSPasswordProtectedClientCertWithGetSSLPasswordConfigOption": "client certificate authentication: the certificate is presented to the proxy, the server never sees it",
}

type options struct {
	direct  bool
	out     string
	goTest  []string
	version string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "pgxsuite:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	var o options
	fs := flag.NewFlagSet("pgxsuite", flag.ContinueOnError)
	fs.BoolVar(&o.direct, "direct", false, "run the suite against Postgres directly (baseline), not through nlproxy")
	fs.StringVar(&o.out, "out", "bench/results/pgxsuite", "directory for go test's JSON output and the proxy log (relative to the module root)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.goTest = fs.Args()

	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	if !filepath.IsAbs(o.out) {
		o.out = filepath.Join(root, o.out)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	o.version, err = goOutput(ctx, root, "list", "-m", "-f", "{{.Version}}", "github.com/jackc/pgx/v5")
	if err != nil {
		return err
	}
	logf("pgx %s", o.version)

	tmp, err := os.MkdirTemp("", "pgxsuite-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// The server (running as postgres when we are root) reads the CA from here.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}

	src, err := copyPgx(ctx, root, o.version, filepath.Join(tmp, "pgx"))
	if err != nil {
		return err
	}
	certs, err := decodeCerts(src, filepath.Join(tmp, "certs"))
	if err != nil {
		return err
	}

	logf("starting postgres")
	c, err := pgtest.Start(ctx, pgcluster.Options{AuthMethod: "scram-sha-256", TLS: true})
	if err != nil {
		return err
	}
	defer c.Stop()
	whoami, err := setupCluster(ctx, c, src, certs)
	if err != nil {
		return err
	}

	var env []string
	if o.direct {
		env = suiteEnv(c.Port, c.SocketDir, certs)
	} else {
		logf("building and starting nlproxy")
		proxyDir := filepath.Join(tmp, "proxy")
		if err := os.MkdirAll(proxyDir, 0o755); err != nil {
			return err
		}
		bin := filepath.Join(tmp, "nlproxy")
		if _, err := goOutput(ctx, root, "build", "-o", bin, "./cmd/nlproxy"); err != nil {
			return err
		}
		stopProxy, port, err := startProxy(ctx, bin, c, certs, proxyDir, filepath.Join(o.out, "nlproxy.log"))
		if err != nil {
			return err
		}
		defer stopProxy()
		env = suiteEnv(port, proxyDir, certs)
	}
	logf("PGX_TEST_UNIX_SOCKET_CONN_STRING connects as the OS user %q", whoami)

	jsonPath := filepath.Join(o.out, "gotest.json")
	logf("running go test ./... in the pgx %s copy (output: %s)", o.version, jsonPath)
	start := time.Now()
	results, runErr := runSuite(ctx, src, env, o.goTest, jsonPath)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	logf("go test took %s", time.Since(start).Round(time.Second))
	unexpected := report(os.Stdout, results, o.direct)
	if unexpected > 0 {
		return fmt.Errorf("%d unexpected failures (go test: %v)", unexpected, runErr)
	}
	if runErr != nil && len(results) == 0 {
		return fmt.Errorf("go test: %w", runErr)
	}
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pgxsuite: "+format+"\n", args...)
}

func moduleRoot(ctx context.Context) (string, error) {
	gomod, err := goOutput(ctx, "", "env", "GOMOD")
	if err != nil {
		return "", err
	}
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run inside the nlproxy module")
	}
	return filepath.Dir(gomod), nil
}

func goOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// copyPgx copies the pgx module from the module cache (read-only) to dst.
func copyPgx(ctx context.Context, root, version, dst string) (string, error) {
	out, err := goOutput(ctx, root, "mod", "download", "-json", "github.com/jackc/pgx/v5@"+version)
	if err != nil {
		return "", err
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal([]byte(out), &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("go mod download: no module dir in %q: %v", out, err)
	}
	if err := os.CopyFS(dst, os.DirFS(mod.Dir)); err != nil {
		return "", fmt.Errorf("copy pgx: %w", err)
	}
	return dst, nil
}

// certFiles are pgx's checked-in test certificates, decoded.
type certFiles struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

func decodeCerts(src, dir string) (certFiles, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return certFiles{}, err
	}
	files := certFiles{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "localhost.crt"),
		ServerKey:  filepath.Join(dir, "localhost.key"),
		ClientCert: filepath.Join(dir, "pgx_sslcert.crt"),
		ClientKey:  filepath.Join(dir, "pgx_sslcert.key"),
	}
	for _, f := range []string{files.CA, files.ServerCert, files.ServerKey, files.ClientCert, files.ClientKey} {
		b64, err := os.ReadFile(filepath.Join(src, "testsetup", "certs", filepath.Base(f)+".b64"))
		if err != nil {
			return certFiles{}, err
		}
		pem, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b64)))
		if err != nil {
			return certFiles{}, fmt.Errorf("%s: %w", f, err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(f, ".key") {
			mode = 0o600 // libpq and pgx refuse group/world-readable keys
		}
		if err := os.WriteFile(f, pem, mode); err != nil {
			return certFiles{}, err
		}
	}
	return files, nil
}

// setupCluster makes the cluster look like pgx's CI database: its pg_hba.conf,
// pgx's server certificate and CA, the pgx_test database with
// testsetup/postgresql_setup.sql applied. It returns the OS user name the
// setup script created a role for.
func setupCluster(ctx context.Context, c *pgcluster.Cluster, src string, certs certFiles) (string, error) {
	u, err := user.Current()
	if err != nil {
		return "", err
	}
	// pgtest wrote server.crt/server.key owned by the server's user; keep the
	// files (and their owner and mode), swap the contents for pgx's.
	for dst, from := range map[string]string{"server.crt": certs.ServerCert, "server.key": certs.ServerKey} {
		b, err := os.ReadFile(from)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(c.DataDir, dst), b, 0o600); err != nil {
			return "", err
		}
	}
	hba, err := os.ReadFile(filepath.Join(src, "testsetup", "pg_hba.conf"))
	if err != nil {
		return "", err
	}
	// pgx's CI runs the suite's Unix-socket test as the OS user over a local
	// socket (trust). Through the proxy that session reaches the server over
	// TCP, so the same user gets the same trust on the loopback address.
	hbaText := string(hba) + fmt.Sprintf("host all %q 127.0.0.1/32 trust\n", u.Username)
	if err := os.WriteFile(filepath.Join(c.DataDir, "pg_hba.conf"), []byte(hbaText), 0o600); err != nil {
		return "", err
	}
	for _, sql := range []string{
		fmt.Sprintf("ALTER SYSTEM SET ssl_ca_file = '%s'", certs.CA),
		"SELECT pg_reload_conf()",
		"CREATE DATABASE pgx_test",
	} {
		if err := c.Exec(ctx, "postgres", sql); err != nil {
			return "", err
		}
	}
	// psql, not Exec: the script uses \set and \gexec.
	psql := c.Bin("psql")
	if _, err := os.Stat(psql); err != nil {
		psql = "psql"
	}
	cmd := exec.CommandContext(ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-h", c.SocketDir, "-p", strconv.Itoa(c.Port), "-U", pgtest.Superuser, "-d", "pgx_test",
		"-f", filepath.Join(src, "testsetup", "postgresql_setup.sql"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("postgresql_setup.sql: %w\n%s", err, out)
	}
	// psql reads the script's `\\` inside the tricky role's quoted name as
	// two backslashes; the aclitem test looks for the name with one.
	if err := c.Exec(ctx, "pgx_test", trickyRoleSQL); err != nil {
		return "", err
	}
	// The reload is asynchronous: wait until a hostssl-only role gets in over TLS.
	url := fmt.Sprintf("host=localhost port=%d user=pgx_ssl password=secret dbname=pgx_test sslmode=verify-full sslrootcert=%s", c.Port, certs.CA)
	if err := waitConnect(ctx, url); err != nil {
		return "", fmt.Errorf("cluster setup not effective: %w", err)
	}
	return u.Username, nil
}

const trickyRoleSQL = `DO $$ BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = ' tricky, '' } " \ test user ') THEN
		CREATE ROLE " tricky, ' } "" \ test user " SUPERUSER PASSWORD 'secret';
	END IF;
END $$`

func waitConnect(ctx context.Context, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgconn.Connect(cctx, url)
		if err == nil {
			_, err = conn.Exec(cctx, "SELECT 1").ReadAll()
			conn.Close(cctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startProxy runs `nlproxy serve` on a free port with TLS (pgx's localhost
// certificate) and a Unix socket in sockDir, in front of c over TLS.
func startProxy(ctx context.Context, bin string, c *pgcluster.Cluster, certs certFiles, sockDir, logPath string) (stop func(), port int, err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, 0, err
	}
	port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, 0, err
	}
	upstream := fmt.Sprintf("host=127.0.0.1 port=%d sslmode=verify-full sslrootcert=%s", c.Port, certs.CA)
	cmd := exec.Command(bin, "serve", "--no-engine",
		"--listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		"--unix-socket-dir", sockDir,
		"--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey,
		"--upstream", upstream,
		"--max-conns", "0", "--log-format", "json")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, 0, err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	url := fmt.Sprintf("host=%s port=%d user=pgx_md5 password=secret dbname=pgx_test", sockDir, port)
	if err := waitConnect(ctx, url); err != nil {
		stop()
		b, _ := os.ReadFile(logPath)
		return nil, 0, fmt.Errorf("nlproxy not ready on its unix socket: %w\n%s", err, b)
	}
	return stop, port, nil
}

// suiteEnv is pgx's CI environment (scripts/lib/test_targets.rb) for a
// server at 127.0.0.1:port with its Unix socket in sockDir.
func suiteEnv(port int, sockDir string, certs certFiles) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PGX_") || strings.HasPrefix(k, "PG") {
			continue // a developer's own settings must not leak in
		}
		env = append(env, kv)
	}
	q := func(s string) string { return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'" }
	p := strconv.Itoa(port)
	tcp := "host=127.0.0.1 port=" + p + " user=pgx_md5 password=secret dbname=pgx_test"
	tls := "host=localhost port=" + p + " user=pgx_ssl password=secret sslmode=verify-full sslrootcert=" + q(certs.CA) + " dbname=pgx_test"
	return append(env,
		"PGX_TEST_DATABASE="+tcp,
		"PGX_TEST_UNIX_SOCKET_CONN_STRING=host="+q(sockDir)+" port="+p+" dbname=pgx_test",
		"PGX_TEST_TCP_CONN_STRING="+tcp,
		"PGX_TEST_MD5_PASSWORD_CONN_STRING="+tcp,
		"PGX_TEST_PLAIN_PASSWORD_CONN_STRING=host=127.0.0.1 port="+p+" user=pgx_pw password=secret dbname=pgx_test",
		"PGX_TEST_SCRAM_PASSWORD_CONN_STRING=host=127.0.0.1 port="+p+" user=pgx_scram password=secret dbname=pgx_test channel_binding=disable",
		"PGX_TEST_SCRAM_PLUS_CONN_STRING="+tls+" channel_binding=require",
		"PGX_TEST_TLS_CONN_STRING="+tls+" channel_binding=disable",
		"PGX_TEST_TLS_CLIENT_CONN_STRING=host=localhost port="+p+" user=pgx_sslcert sslmode=verify-full sslrootcert="+q(certs.CA)+
			" sslcert="+q(certs.ClientCert)+" sslkey="+q(certs.ClientKey)+" dbname=pgx_test",
		"PGX_SSL_PASSWORD=certpw",
	)
}

// testResult is the outcome of one test (package-relative name).
type testResult struct {
	Package, Test, Action string
	Output                []string
}

// runSuite runs go test -json in dir and collects per-test outcomes.
func runSuite(ctx context.Context, dir string, env, extra []string, jsonPath string) ([]*testResult, error) {
	args := append([]string{"test", "-count=1", "-json"}, extra...)
	if !hasPackageArg(extra) {
		args = append(args, "./...")
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	jf, err := os.Create(jsonPath)
	if err != nil {
		return nil, err
	}
	defer jf.Close()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	byKey := map[string]*testResult{}
	var order []*testResult
	sc := bufio.NewScanner(io.TeeReader(stdout, jf))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct{ Action, Package, Test, Output string }
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Test == "" {
			continue
		}
		k := ev.Package + " " + ev.Test
		r := byKey[k]
		if r == nil {
			r = &testResult{Package: ev.Package, Test: ev.Test}
			byKey[k] = r
			order = append(order, r)
		}
		switch ev.Action {
		case "output":
			r.Output = append(r.Output, ev.Output)
		case "pass", "fail", "skip":
			r.Action = ev.Action
		}
	}
	return order, cmd.Wait()
}

func hasPackageArg(args []string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, "./") || strings.HasPrefix(a, "github.com/") {
			return true
		}
	}
	return false
}

// report prints counts per package and every failure, and returns how many
// failures are not in expectedFailures.
func report(w io.Writer, results []*testResult, direct bool) int {
	type counts struct{ pass, fail, skip, unfinished int }
	per := map[string]*counts{}
	var pkgs []string
	var failed []*testResult
	for _, r := range results {
		c := per[r.Package]
		if c == nil {
			c = &counts{}
			per[r.Package] = c
			pkgs = append(pkgs, r.Package)
		}
		switch r.Action {
		case "pass":
			c.pass++
		case "skip":
			c.skip++
		case "fail":
			c.fail++
			failed = append(failed, r)
		default:
			c.unfinished++
			failed = append(failed, r)
		}
	}
	sort.Strings(pkgs)
	var total counts
	fmt.Fprintln(w, "| package | pass | fail | skip |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for _, p := range pkgs {
		c := per[p]
		total.pass += c.pass
		total.fail += c.fail + c.unfinished
		total.skip += c.skip
		fmt.Fprintf(w, "| %s | %d | %d | %d |\n", p, c.pass, c.fail+c.unfinished, c.skip)
	}
	fmt.Fprintf(w, "| total (tests and subtests) | %d | %d | %d |\n\n", total.pass, total.fail, total.skip)

	unexpected := 0
	for _, r := range failed {
		reason, ok := expectedFailures[r.Test]
		switch {
		case ok && !direct:
			fmt.Fprintf(w, "FAIL (expected) %s %s: %s\n", r.Package, r.Test, reason)
		default:
			unexpected++
			fmt.Fprintf(w, "FAIL %s %s\n", r.Package, r.Test)
			for _, line := range tail(r.Output, 15) {
				fmt.Fprint(w, "    ", line)
			}
		}
	}
	if !direct {
		seen := map[string]bool{}
		for _, r := range failed {
			seen[r.Test] = true
		}
		var passing []string
		for name := range expectedFailures {
			if !seen[name] {
				passing = append(passing, name)
			}
		}
		sort.Strings(passing)
		for _, name := range passing {
			fmt.Fprintf(w, "note: expected failure %s did not fail (not run, or the limit is gone)\n", name)
		}
	}
	fmt.Fprintf(w, "\n%d failures, %d unexpected\n", len(failed), unexpected)
	return unexpected
}

func tail(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}
