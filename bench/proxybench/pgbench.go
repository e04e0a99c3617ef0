package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
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
}

// Name is the label used in tables, e.g. "-c 16 -j 2 -M prepared".
func (c Config) Name() string {
	if c.Threads > 1 {
		return fmt.Sprintf("-c %d -j %d -M %s", c.Clients, c.Threads, c.Mode)
	}
	return fmt.Sprintf("-c %d -M %s", c.Clients, c.Mode)
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
	args = append(args, "-c", strconv.Itoa(c.Clients), "-j", strconv.Itoa(c.Threads), "-M", c.Mode, p.db)
	var buf bytes.Buffer
	cmd := exec.CommandContext(ctx, p.bin, args...)
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
	return res, out, nil
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
