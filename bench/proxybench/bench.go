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

	"github.com/nlproxy/nlproxy/integration/pgtest"
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

// runPgbench measures every config, interleaving targets within each config so
// machine drift hits all of them alike. A failed run is recorded, not fatal, so
// one broken target still leaves a report.
func runPgbench(ctx context.Context, o options, pb pgbench, eps map[string]endpoint, rep *Report, logf logFunc) error {
	if o.warmup > 0 {
		for _, t := range o.targets {
			ep := eps[t]
			logf("warm-up %s (%ds)", t, o.warmup)
			if _, _, err := pb.Run(ctx, ep.host, ep.port, Config{Clients: 4, Threads: 1, Mode: "simple"}, time.Duration(o.warmup)*time.Second); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				logf("warm-up %s failed: %s", t, firstLine(err.Error()))
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
				ep := eps[t]
				cpu0, cpuErr := procCPUTicks(ep.pid)
				res, _, err := pb.Run(ctx, ep.host, ep.port, c, dur)
				if cpu1, err1 := procCPUTicks(ep.pid); err == nil && cpuErr == nil && err1 == nil && ep.pid > 0 && res.TPS > 0 {
					res.ProxyCPUus = float64(cpu1-cpu0) * 1e6 / clockTicks / (res.TPS * dur.Seconds())
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				st := cr.Targets[t]
				if err != nil {
					logf("%-26s %-9s ERROR %s", c.Name(), t, firstLine(err.Error()))
					st.Errors = append(st.Errors, err.Error())
					continue
				}
				logf("%-26s %-9s tps %9.0f  latency %.3f ms", c.Name(), t, res.TPS, res.LatencyMS)
				st.Runs = append(st.Runs, res)
			}
		}
		for _, st := range cr.Targets {
			var tps, lat, cpu []float64
			for _, r := range st.Runs {
				tps = append(tps, r.TPS)
				lat = append(lat, r.LatencyMS)
				if r.ProxyCPUus > 0 {
					cpu = append(cpu, r.ProxyCPUus)
				}
			}
			st.TPS, st.LatencyMS = median(tps), median(lat)
			if len(cpu) > 0 {
				st.ProxyCPUus = median(cpu)
			}
		}
		rep.Configs = append(rep.Configs, cr)
	}
	return nil
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
	for _, t := range o.targets {
		rep.Stream[t] = &StreamStats{}
	}
	for r := 0; r < o.repeat; r++ {
		for _, t := range rotate(o.targets, r) {
			res, err := streamQuery(ctx, eps[t].url, sql)
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

func urlFor(port int) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", pgtest.Superuser, port)
}

// pgbenchBin prefers the pgbench that matches the server's major version.
func pgbenchBin(c *pgtest.Cluster) string {
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
func hostInfo(ctx context.Context, c *pgtest.Cluster, o options) string {
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
	return strings.Join(parts, ", ")
}
