package proxy

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

// TestStreamCost measures the proxy's CPU cost of relaying a large result:
// process CPU (client + proxy) through the proxy minus direct (client only).
// Opt-in: NLPROXY_STREAM_BENCH=1 go test -run TestStreamCost -v ./proxy
func TestStreamCost(t *testing.T) {
	if os.Getenv("NLPROXY_STREAM_BENCH") == "" {
		t.Skip("set NLPROXY_STREAM_BENCH=1 to run")
	}
	needPG(t)
	_, addr := trustServer(t, &Server{Logger: zap.NewNop()})
	const sql = "SELECT g, repeat('x', 32), repeat('y', 32) FROM generate_series(1, 2000000) g"
	run := func(url string) (time.Duration, time.Duration, int64) {
		ctx := context.Background()
		c, err := pgconn.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		var ru0, ru1 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
		start := time.Now()
		rr := c.ExecParams(ctx, sql, nil, nil, nil, nil)
		var bytes int64
		for rr.NextRow() {
			for _, v := range rr.Values() {
				bytes += int64(len(v))
			}
		}
		if _, err := rr.Close(); err != nil {
			t.Fatal(err)
		}
		wall := time.Since(start)
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
		cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime)+syscall.TimevalToNsec(ru1.Stime)) -
			time.Duration(syscall.TimevalToNsec(ru0.Utime)+syscall.TimevalToNsec(ru0.Stime))
		return wall, cpu, bytes
	}
	for i := 0; i < 2; i++ {
		dw, dc, _ := run(trustPG.URL("postgres", "", "postgres"))
		pw, pc, b := run(trustURL(addr))
		t.Logf("direct wall %v cpu %v | proxy wall %v cpu %v | proxy CPU ≈ %v for %d MB; wall ratio direct/proxy %.2f",
			dw, dc, pw, pc, pc-dc, b>>20, float64(dw)/float64(pw))
	}
}

// TestPgbenchRatio alternates pgbench -S runs direct and through the proxy.
// Opt-in: NLPROXY_PGBENCH=1 go test -run TestPgbenchRatio -v ./proxy
func TestPgbenchRatio(t *testing.T) {
	if os.Getenv("NLPROXY_PGBENCH") == "" {
		t.Skip("set NLPROXY_PGBENCH=1 to run")
	}
	needPG(t)
	_, addr := trustServer(t, &Server{Logger: zap.NewNop()})
	host, port, _ := net.SplitHostPort(addr)
	pgb := trustPG.Bin("pgbench")
	env := append(os.Environ(), "PGUSER=postgres", "PGDATABASE=postgres")
	initCmd := exec.Command(pgb, "-i", "-s", "2", "-q", "-h", trustPG.Host, "-p", fmt.Sprint(trustPG.Port))
	initCmd.Env = env
	if out, err := initCmd.CombinedOutput(); err != nil {
		t.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	tpsRe := regexp.MustCompile(`tps = ([0-9.]+)`)
	run := func(h, p string, args ...string) string {
		cmd := exec.Command(pgb, append([]string{"-S", "-n", "-T", "3", "-h", h, "-p", p}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pgbench: %v\n%s", err, out)
		}
		m := tpsRe.FindSubmatch(out)
		if m == nil {
			t.Fatalf("no tps in %s", out)
		}
		return string(m[1])
	}
	for _, args := range [][]string{{"-c", "1", "-M", "simple"}, {"-c", "16", "-j", "2", "-M", "prepared"}} {
		for i := 0; i < 2; i++ {
			d := run(trustPG.Host, fmt.Sprint(trustPG.Port), args...)
			p := run(host, port, args...)
			t.Logf("%v: direct %s tps, proxy %s tps", args, d, p)
		}
	}
}
