package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/nlproxy/nlproxy/internal/pgcluster"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

type logFunc func(format string, a ...any)

// rotate returns xs starting at offset k, so no target always runs first.
func rotate(xs []string, k int) []string {
	if len(xs) == 0 {
		return nil
	}
	k %= len(xs)
	return append(append([]string(nil), xs[k:]...), xs[:k]...)
}

// warmupConfig is the warm-up's pgbench config: as many clients as the
// largest config, so a pooler's server connections (and their TLS
// handshakes) are open before anything is measured, not inside the first
// run that needs them.
func warmupConfig(configs []Config, tls bool) Config {
	c := Config{Clients: 4, Threads: 1, Mode: "simple", TLS: tls}
	for _, x := range configs {
		if x.Clients > c.Clients {
			c.Clients, c.Threads = x.Clients, min(x.Clients, 2)
		}
	}
	return c
}

// runPgbench measures every config, interleaving targets within each config so
// machine drift hits all of them alike. A failed run is recorded, not fatal, so
// one broken target still leaves a report.
func runPgbench(ctx context.Context, o options, pb pgbench, eps map[string]endpoint, rep *Report, logf logFunc) error {
	if o.warmup > 0 {
		for _, tls := range tlsModes(o.configs) {
			for _, t := range o.targets {
				ep, ok := eps[epKey(t, tls)]
				if !ok {
					continue
				}
				logf("warm-up %s (%ds)", epKey(t, tls), o.warmup)
				if _, _, err := pb.Run(ctx, ep.host, ep.port, warmupConfig(o.configs, tls), time.Duration(o.warmup)*time.Second, 0); err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					logf("warm-up %s failed: %s", t, firstLine(err.Error()))
				}
			}
		}
	}
	dur := time.Duration(o.seconds) * time.Second
	for ci, c := range o.configs {
		cr := &ConfigResult{Config: c, Name: c.Name(), Targets: map[string]*TargetStats{}}
		for _, t := range o.targets {
			cr.Targets[t] = &TargetStats{}
		}
		for r := 0; r < o.repeat; r++ {
			for _, t := range rotate(o.targets, ci+r) {
				ep, ok := eps[epKey(t, c.TLS)]
				if !ok {
					// Only targets without a TLS setup, in a TLS config.
					cr.Targets[t].Skipped = "no TLS setup"
					continue
				}
				res, err := measuredRun(ctx, o, pb, ep, c, dur)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				st := cr.Targets[t]
				if err != nil {
					logf("%-26s %-14s ERROR %s", c.Name(), t, strings.ReplaceAll(tailString(err.Error(), 600), "\n", " | "))
					st.Errors = append(st.Errors, err.Error())
					continue
				}
				line := fmt.Sprintf("%-26s %-14s tps %9.0f  latency %.3f ms", c.Name(), t, res.TPS, res.LatencyMS)
				if ep.proc != nil {
					line += fmt.Sprintf("  cpu %6.1f µs/txn  %5.2f cs/txn", res.CPUus, res.Switches)
					if o.syscalls {
						line += fmt.Sprintf("  %5.2f syscalls/txn", res.Syscalls)
					}
				}
				logf("%s", line)
				st.Runs = append(st.Runs, res)
			}
		}
		for _, st := range cr.Targets {
			st.summarize()
		}
		rep.Configs = append(rep.Configs, cr)
	}
	return nil
}

// measuredRun runs pgbench once against ep and, for a proxy, reads the
// proxy's CPU time and context switches from /proc before and after (and
// counts its system calls with perf when asked), per transaction.
func measuredRun(ctx context.Context, o options, pb pgbench, ep endpoint, c Config, dur time.Duration) (PgbenchResult, error) {
	if ep.proc == nil {
		res, _, err := pb.Run(ctx, ep.host, ep.port, c, dur, o.txns)
		return res, err
	}
	pid := ep.proc.Pid()
	var sc *syscallCounter
	if o.syscalls {
		var err error
		if sc, err = startSyscallCounter(ctx, o.perf, pid); err != nil {
			return PgbenchResult{}, err
		}
	}
	before, err := sampleUsage(pid)
	if err != nil {
		return PgbenchResult{}, err
	}
	res, _, err := pb.Run(ctx, ep.host, ep.port, c, dur, o.txns)
	after, uerr := sampleUsage(pid)
	var calls int64
	var serr error
	if sc != nil {
		calls, serr = sc.Stop()
	}
	if err != nil {
		return res, err
	}
	if uerr != nil {
		return res, uerr
	}
	if serr != nil {
		return res, serr
	}
	if res.Txns <= 0 {
		return res, fmt.Errorf("pgbench reported no transactions processed")
	}
	d := after.sub(before)
	n := float64(res.Txns)
	res.CPUus = float64(d.CPU.Microseconds()) / n
	res.Switches = float64(d.Switches) / n
	res.Syscalls = float64(calls) / n
	return res, nil
}

// streamSQL is the large result: about 90 bytes of DataRow per row (the shape
// of g, md5(g), md5(g*7)), but with constant text columns. md5 costs the server
// ~8 s of CPU per 5M rows on the dev box versus ~1.6 s here, and a
// server-bound query would hide whatever the proxy costs.
func streamSQL(rows int) string {
	return fmt.Sprintf("SELECT g, repeat('x', 32) AS a, repeat('y', 32) AS b FROM generate_series(1,%d) g", rows)
}

// runStream transfers the large result through every target (interleaved,
// -repeat times, median by throughput) while sampling nlproxy's RSS.
func runStream(ctx context.Context, o options, eps map[string]endpoint, nl *proc, rep *Report, logf logFunc) error {
	sql := streamSQL(o.streamRows)
	if o.streamSQL != "" {
		sql = o.streamSQL
	}
	rep.StreamSQL = sql
	var sampler *rssSampler
	if nl != nil {
		sampler = startRSSSampler(nl.Pid(), 20*time.Millisecond)
	}
	// The large result goes over plaintext unless only TLS was asked for.
	tls := o.tls == "on"
	var targets []string
	for _, t := range o.targets {
		if _, ok := eps[epKey(t, tls)]; ok {
			rep.Stream[t] = &StreamStats{}
			targets = append(targets, t)
		}
	}
	for r := 0; r < o.repeat; r++ {
		for _, t := range rotate(targets, r) {
			res, err := streamQuery(ctx, eps[epKey(t, tls)].url, sql)
			if ctx.Err() != nil {
				if sampler != nil {
					sampler.Stop()
				}
				return ctx.Err()
			}
			st := rep.Stream[t]
			if err != nil {
				logf("large result %-9s ERROR %v", t, err)
				st.Errors = append(st.Errors, err.Error())
				continue
			}
			logf("large result %-9s %d rows %.0f MB wire %.2f s %.1f MB/s", t, res.Rows, res.WireMB, res.Seconds, res.MBPerSecond)
			st.Runs = append(st.Runs, res)
		}
	}
	for _, st := range rep.Stream {
		if len(st.Runs) == 0 {
			continue
		}
		// Report the run with the median throughput, keeping its other figures consistent.
		mbs := make([]float64, len(st.Runs))
		for i, r := range st.Runs {
			mbs[i] = r.MBPerSecond
		}
		m := median(mbs)
		best := st.Runs[0]
		for _, r := range st.Runs {
			if abs(r.MBPerSecond-m) < abs(best.MBPerSecond-m) {
				best = r
			}
		}
		st.StreamResult = best
		st.MBPerSecond = m
	}
	if sampler != nil {
		// Sample a little longer: buffers are released after the last row goes out.
		time.Sleep(200 * time.Millisecond)
		rep.NlproxyMaxRSS, rep.NlproxyHWM = sampler.Stop()
	}
	return nil
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func containsTarget(ts []string, t string) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// urlFor is the superuser's URL for a target on port, with TLS required or off.
func urlFor(port int, tls bool) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=%s", pgtest.Superuser, port, sslmode(tls))
}

func sslmode(tls bool) string {
	if tls {
		return "require"
	}
	return "disable"
}

// pgbenchBin prefers the pgbench that matches the server's major version.
func pgbenchBin(c *pgcluster.Cluster) string {
	if p := c.Bin("pgbench"); fileExists(p) {
		return p
	}
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p
	}
	return "pgbench"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// moduleRoot walks up from the working directory to the directory with go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("getwd: %w", err)
	}
	for {
		if fileExists(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory; run from the nlproxy repository")
		}
		dir = parent
	}
}

// hostInfo describes the machine and versions for the report's footer.
func hostInfo(ctx context.Context, c *pgcluster.Cluster, o options) string {
	parts := []string{fmt.Sprintf("%d CPUs %s/%s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)}
	if conn, err := c.Connect(ctx, "postgres"); err == nil {
		var v string
		if conn.QueryRow(ctx, "SHOW server_version").Scan(&v) == nil {
			parts = append(parts, "PostgreSQL "+v)
		}
		conn.Close(ctx)
	}
	if containsTarget(o.targets, targetPgbouncer) {
		if out, err := exec.CommandContext(ctx, o.pgbouncer, "--version").Output(); err == nil {
			parts = append(parts, firstLine(strings.TrimSpace(string(out))))
		}
	}
	if containsTarget(o.targets, targetPgbouncerSrc) {
		if out, err := exec.CommandContext(ctx, o.pgbouncerSrc, "--version").Output(); err == nil {
			parts = append(parts, "pgbouncer-src "+firstLine(strings.TrimSpace(string(out))))
		}
	}
	if containsTarget(o.targets, targetPgdog) {
		if out, err := exec.CommandContext(ctx, o.pgdog, "--version").Output(); err == nil {
			parts = append(parts, firstLine(strings.TrimSpace(string(out))))
		}
	}
	if o.tls != "off" {
		parts = append(parts, "TLS "+o.tls+" (sslmode=require to each target and from each target to Postgres)")
	}
	if containsTarget(o.targets, targetPgpool) {
		if out, err := exec.CommandContext(ctx, o.pgpool, "--version").CombinedOutput(); err == nil {
			parts = append(parts, firstLine(strings.TrimSpace(string(out))))
		}
	}
	return strings.Join(parts, ", ")
}

// loadAvg is the 1-minute load average, which says how shared the machine was.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}
