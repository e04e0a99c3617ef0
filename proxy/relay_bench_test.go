package proxy

import (
	"context"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/integration/pgtest"
)

// TestRelayCost measures what the relay costs per pgbench select-only
// transaction: this process's CPU time, context switches and heap
// allocations while pgbench (another process) runs through an in-process
// proxy. With -cpuprofile/-memprofile it yields the relay's profiles, since
// the proxy is all this process does meanwhile. Opt-in:
//
//	NLPROXY_RELAY_BENCH=1 go test -run TestRelayCost -v ./proxy [-cpuprofile cpu.out -memprofile mem.out]
//
// NLPROXY_RELAY_BENCH_CONFIGS picks configs (e.g. "1:simple,16:prepared"),
// NLPROXY_RELAY_BENCH_TXNS the transactions per run (default 20000),
// NLPROXY_RELAY_BENCH_ENGINE=1 sets OnDDL as an enabled engine does.
func TestRelayCost(t *testing.T) {
	if os.Getenv("NLPROXY_RELAY_BENCH") == "" {
		t.Skip("set NLPROXY_RELAY_BENCH=1 to run")
	}
	needPG(t)
	srv := &Server{Logger: zap.NewNop()}
	if os.Getenv("NLPROXY_RELAY_BENCH_ENGINE") != "" {
		srv.OnDDL = func(string, string) {}
	}
	_, addr := trustServer(t, srv)
	host, port, _ := net.SplitHostPort(addr)
	bin := trustPG.Bin("pgbench")
	base := []string{"-h", host, "-p", port, "-U", pgtest.Superuser}
	if out, err := exec.Command(bin, append(base, "-i", "-q", "-s", "1", "postgres")...).CombinedOutput(); err != nil {
		t.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	txns := 20000
	if v, err := strconv.Atoi(os.Getenv("NLPROXY_RELAY_BENCH_TXNS")); err == nil && v > 0 {
		txns = v
	}
	configs := "1:simple,1:prepared,16:simple,16:prepared"
	if v := os.Getenv("NLPROXY_RELAY_BENCH_CONFIGS"); v != "" {
		configs = v
	}
	for _, cfg := range strings.Split(configs, ",") {
		c, mode, _ := strings.Cut(cfg, ":")
		clients, err := strconv.Atoi(c)
		if err != nil {
			t.Fatalf("config %q", cfg)
		}
		args := append(append([]string(nil), base...), "-S", "-n", "-M", mode, "-c", c,
			"-j", strconv.Itoa(min(clients, 2)), "-t", strconv.Itoa(txns/clients), "postgres")
		var ru0, ru1 syscall.Rusage
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
		start := time.Now()
		out, err := exec.CommandContext(context.Background(), bin, args...).CombinedOutput()
		wall := time.Since(start)
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
		runtime.ReadMemStats(&ms1)
		if err != nil {
			t.Fatalf("pgbench: %v\n%s", err, out)
		}
		n := float64(txns / clients * clients)
		cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime) + syscall.TimevalToNsec(ru1.Stime) -
			syscall.TimevalToNsec(ru0.Utime) - syscall.TimevalToNsec(ru0.Stime))
		cs := (ru1.Nvcsw + ru1.Nivcsw) - (ru0.Nvcsw + ru0.Nivcsw)
		t.Logf("-c %-2d %-8s %6.0f tps  cpu %5.1f µs/txn (user %4.1f sys %4.1f)  %4.2f cs/txn  %5.2f allocs/txn  %6.1f B/txn  GCs %d",
			clients, mode, n/wall.Seconds(), float64(cpu.Microseconds())/n,
			float64(syscall.TimevalToNsec(ru1.Utime)-syscall.TimevalToNsec(ru0.Utime))/1e3/n,
			float64(syscall.TimevalToNsec(ru1.Stime)-syscall.TimevalToNsec(ru0.Stime))/1e3/n,
			float64(cs)/n, float64(ms1.Mallocs-ms0.Mallocs)/n, float64(ms1.TotalAlloc-ms0.TotalAlloc)/n, ms1.NumGC-ms0.NumGC)
	}
}
