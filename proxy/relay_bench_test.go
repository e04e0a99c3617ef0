package proxy

import (
	"context"
	"fmt"
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

	"github.com/nlproxy/nlproxy/testkit/pgtest"
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
// NLPROXY_RELAY_BENCH_PROCS GOMAXPROCS values to interleave (e.g. "2,1"),
// NLPROXY_RELAY_BENCH_REPEAT the rounds, NLPROXY_RELAY_BENCH_PERF=1 system
// calls by kind per transaction (perf stat),
// NLPROXY_RELAY_BENCH_TXNS the transactions per run (default 20000),
// NLPROXY_RELAY_BENCH_ENGINE=1 sets OnDDL as an enabled engine does.
func TestRelayCost(t *testing.T) {
	if os.Getenv("NLPROXY_RELAY_BENCH") == "" {
		t.Skip("set NLPROXY_RELAY_BENCH=1 to run")
	}
	needPG(t)
	// GOMAXPROCS settings to interleave (0: the default).
	settings := []int{0}
	if v := os.Getenv("NLPROXY_RELAY_BENCH_PROCS"); v != "" {
		settings = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 {
				t.Fatalf("NLPROXY_RELAY_BENCH_PROCS %q", v)
			}
			settings = append(settings, n)
		}
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	repeat := 1
	if v, err := strconv.Atoi(os.Getenv("NLPROXY_RELAY_BENCH_REPEAT")); err == nil && v > 0 {
		repeat = v
	}
	srv := &Server{Logger: zap.NewNop()}
	if os.Getenv("NLPROXY_RELAY_BENCH_ENGINE") != "" {
		srv.OnDDL = func(string, string) {}
	}
	_, addr := trustServer(t, srv)
	bin := trustPG.Bin("pgbench")
	baseFor := func(addr string) []string {
		host, port, _ := net.SplitHostPort(addr)
		return []string{"-h", host, "-p", port, "-U", pgtest.Superuser}
	}
	if out, err := exec.Command(bin, append(baseFor(addr), "-i", "-q", "-s", "1", "postgres")...).CombinedOutput(); err != nil {
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
	for r := 0; r < repeat; r++ {
		for k := range settings {
			i := (k + r) % len(settings)
			procs := settings[i]
			if procs == 0 {
				procs = runtime.NumCPU()
			}
			runtime.GOMAXPROCS(procs)
			runRelayConfigs(t, bin, baseFor(addr), fmt.Sprintf("GOMAXPROCS=%d", procs), configs, txns)
		}
	}
}

func runRelayConfigs(t *testing.T, bin string, base []string, label, configs string, txns int) {
	for _, cfg := range strings.Split(configs, ",") {
		c, mode, _ := strings.Cut(cfg, ":")
		clients, err := strconv.Atoi(c)
		if err != nil {
			t.Fatalf("config %q", cfg)
		}
		args := append(append([]string(nil), base...), "-S", "-n", "-M", mode, "-c", c,
			"-j", strconv.Itoa(min(clients, 2)), "-t", strconv.Itoa(txns/clients), "postgres")
		perf := startPerf(t)
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
		n0 := float64(txns / clients * clients)
		if counts := perf(); counts != "" {
			t.Logf("%s -c %d %s per txn: %s", label, clients, mode, perTxn(counts, n0))
		}
		n := float64(txns / clients * clients)
		cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime) + syscall.TimevalToNsec(ru1.Stime) -
			syscall.TimevalToNsec(ru0.Utime) - syscall.TimevalToNsec(ru0.Stime))
		cs := (ru1.Nvcsw + ru1.Nivcsw) - (ru0.Nvcsw + ru0.Nivcsw)
		t.Logf("%s -c %-2d %-8s %6.0f tps  cpu %5.1f µs/txn (user %4.1f sys %4.1f)  %4.2f cs/txn  %5.2f allocs/txn  %6.1f B/txn  GCs %d",
			label, clients, mode, n/wall.Seconds(), float64(cpu.Microseconds())/n,
			float64(syscall.TimevalToNsec(ru1.Utime)-syscall.TimevalToNsec(ru0.Utime))/1e3/n,
			float64(syscall.TimevalToNsec(ru1.Stime)-syscall.TimevalToNsec(ru0.Stime))/1e3/n,
			float64(cs)/n, float64(ms1.Mallocs-ms0.Mallocs)/n, float64(ms1.TotalAlloc-ms0.TotalAlloc)/n, ms1.NumGC-ms0.NumGC)
	}
}

// startPerf counts this process's system calls by kind and its context
// switches with perf stat when NLPROXY_RELAY_BENCH_PERF is set; the
// returned func stops it and returns perf's CSV output.
func startPerf(t *testing.T) func() string {
	if os.Getenv("NLPROXY_RELAY_BENCH_PERF") == "" {
		return func() string { return "" }
	}
	var out strings.Builder
	// --no-inherit: pgbench, started later as this process's child, would
	// otherwise be counted too (about 4 system calls and a context switch
	// per transaction at -c 1).
	cmd := exec.Command("perf", "stat", "--no-inherit", "-x", ",", "-e",
		"raw_syscalls:sys_enter,syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_futex,syscalls:sys_enter_nanosleep,context-switches",
		"-p", strconv.Itoa(os.Getpid()))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("perf: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // perf attaches asynchronously
	return func() string {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
		return out.String()
	}
}

// perTxn renders perf CSV counts divided by n.
func perTxn(csv string, n float64) string {
	var parts []string
	for _, line := range strings.Split(csv, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		name := strings.TrimPrefix(strings.TrimPrefix(f[2], "syscalls:sys_enter_"), "raw_syscalls:sys_enter")
		if name == "" {
			name = "all syscalls"
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", name, v/n))
	}
	return strings.Join(parts, ", ")
}
