package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config is one pgbench client configuration.
type Config struct {
	Clients int    `json:"clients"`
	Threads int    `json:"threads"`
	Mode    string `json:"mode"` // simple or prepared
	// TLS: pgbench connects with sslmode=require to a target that uses TLS
	// to Postgres too; otherwise sslmode=disable.
	TLS bool `json:"tls,omitempty"`
}

// Name is the label used in tables, e.g. "-c 16 -j 2 -M prepared".
func (c Config) Name() string {
	n := fmt.Sprintf("-c %d -M %s", c.Clients, c.Mode)
	if c.Threads > 1 {
		n = fmt.Sprintf("-c %d -j %d -M %s", c.Clients, c.Threads, c.Mode)
	}
	if c.TLS {
		n += " TLS"
	}
	return n
}

// defaultConfigs are the four configurations the issue asks for.
func defaultConfigs() []Config {
	return []Config{
		{Clients: 1, Threads: 1, Mode: "simple"},
		{Clients: 1, Threads: 1, Mode: "prepared"},
		{Clients: 16, Threads: 2, Mode: "simple"},
		{Clients: 16, Threads: 2, Mode: "prepared"},
	}
}

// PgbenchResult is what one pgbench run reported.
type PgbenchResult struct {
	TPS       float64 `json:"tps"`
	LatencyMS float64 `json:"latency_ms"`
	Failed    int64   `json:"failed_transactions"`
	Txns      int64   `json:"transactions"`
	// Latency percentiles from pgbench's per-transaction log (-percentiles).
	P50MS float64 `json:"latency_p50_ms,omitempty"`
	P99MS float64 `json:"latency_p99_ms,omitempty"`
	// The proxy's use over the run, per transaction (0 for direct, or when
	// not measured).
	CPUus    float64 `json:"proxy_cpu_us_per_txn,omitempty"`
	Switches float64 `json:"proxy_ctx_switches_per_txn,omitempty"`
	Syscalls float64 `json:"proxy_syscalls_per_txn,omitempty"`
}

var (
	tpsRe     = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
	latencyRe = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
	failedRe  = regexp.MustCompile(`(?m)^number of failed transactions: ([0-9]+)`)
	txnsRe    = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
)

// errNoTPS means pgbench's output lacked the summary lines (it aborted early).
var errNoTPS = errors.New("pgbench output has no tps/latency summary")

// parsePgbench extracts TPS and average latency from pgbench's summary.
func parsePgbench(out string) (PgbenchResult, error) {
	var r PgbenchResult
	m := tpsRe.FindStringSubmatch(out)
	l := latencyRe.FindStringSubmatch(out)
	if m == nil || l == nil {
		return r, errNoTPS
	}
	var err error
	if r.TPS, err = strconv.ParseFloat(m[1], 64); err != nil {
		return r, fmt.Errorf("parse tps %q: %w", m[1], err)
	}
	if r.LatencyMS, err = strconv.ParseFloat(l[1], 64); err != nil {
		return r, fmt.Errorf("parse latency %q: %w", l[1], err)
	}
	if f := failedRe.FindStringSubmatch(out); f != nil {
		r.Failed, _ = strconv.ParseInt(f[1], 10, 64)
	}
	if f := txnsRe.FindStringSubmatch(out); f != nil {
		r.Txns, _ = strconv.ParseInt(f[1], 10, 64)
	}
	return r, nil
}

// pgbench runs the pgbench binary against one endpoint.
type pgbench struct {
	bin  string
	user string
	db   string
	// logDir, when set, makes Run log every transaction (pgbench -l) there
	// and report latency percentiles from the log.
	logDir string
}

func (p pgbench) baseArgs(host string, port int) []string {
	return []string{"-h", host, "-p", strconv.Itoa(port), "-U", p.user}
}

// Init runs pgbench -i at the given scale.
func (p pgbench) Init(ctx context.Context, host string, port, scale int) error {
	args := append(p.baseArgs(host, port), "-i", "-q", "-s", strconv.Itoa(scale), p.db)
	out, err := exec.CommandContext(ctx, p.bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgbench -i: %w\n%s", err, tailString(string(out), 2000))
	}
	return nil
}

// Run runs the select-only built-in script with config c: txns transactions
// in all (split among the clients) when txns > 0, otherwise for dur.
func (p pgbench) Run(ctx context.Context, host string, port int, c Config, dur time.Duration, txns int) (PgbenchResult, string, error) {
	args := append(p.baseArgs(host, port), "-S", "-n")
	if txns > 0 {
		args = append(args, "-t", strconv.Itoa(max(txns/c.Clients, 1)))
	} else {
		args = append(args, "-T", strconv.Itoa(int(dur.Round(time.Second)/time.Second)))
	}
	args = append(args, "-c", strconv.Itoa(c.Clients), "-j", strconv.Itoa(c.Threads), "-M", c.Mode)
	var logPrefix string
	if p.logDir != "" {
		dir, err := os.MkdirTemp(p.logDir, "run-")
		if err != nil {
			return PgbenchResult{}, "", err
		}
		defer os.RemoveAll(dir)
		logPrefix = filepath.Join(dir, "tx")
		args = append(args, "-l", "--log-prefix", logPrefix)
	}
	args = append(args, p.db)
	var buf bytes.Buffer
	cmd := exec.CommandContext(ctx, p.bin, args...)
	cmd.Env = append(os.Environ(), "PGSSLMODE="+sslmode(c.TLS))
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	out := buf.String()
	res, err := parsePgbench(out)
	if runErr != nil {
		return res, out, fmt.Errorf("pgbench %s: %w\n%s", strings.Join(args, " "), runErr, tailString(out, 1500))
	}
	if err != nil {
		return res, out, fmt.Errorf("pgbench %s: %w\n%s", strings.Join(args, " "), err, tailString(out, 1500))
	}
	if logPrefix != "" {
		if res.P50MS, res.P99MS, err = logPercentiles(logPrefix); err != nil {
			return res, out, fmt.Errorf("pgbench log: %w", err)
		}
	}
	return res, out, nil
}

// logPercentiles reads pgbench's per-transaction logs (prefix.PID[.thread];
// the third field is the latency in µs) and returns p50 and p99 in ms.
func logPercentiles(prefix string) (p50, p99 float64, err error) {
	files, err := filepath.Glob(prefix + ".*")
	if err != nil || len(files) == 0 {
		return 0, 0, fmt.Errorf("no transaction log at %s.*", prefix)
	}
	var lat []float64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, 0, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			if len(fields) < 3 {
				continue
			}
			us, err := strconv.ParseFloat(fields[2], 64)
			if err != nil {
				return 0, 0, fmt.Errorf("%s: %q: %w", f, line, err)
			}
			lat = append(lat, us/1000)
		}
	}
	if len(lat) == 0 {
		return 0, 0, fmt.Errorf("empty transaction log at %s.*", prefix)
	}
	sort.Float64s(lat)
	at := func(q float64) float64 { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	return at(0.50), at(0.99), nil
}

// median of a non-empty slice (mean of the middle two for even lengths).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func tailString(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
