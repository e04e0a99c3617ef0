package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/needs"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// pgbench 15's summary, verbatim from a run on the dev machine.
const pgbenchOK = `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: <builtin: select only>
scaling factor: 2
query mode: simple
number of clients: 1
number of threads: 1
maximum number of tries: 1
duration: 3 s
number of transactions actually processed: 66030
number of failed transactions: 3 (0.000%)
latency average = 0.045 ms
initial connection time = 2.118 ms
tps = 22011.531232 (without initial connection time)
`

func TestParsePgbench(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    PgbenchResult
		wantErr error
	}{
		{name: "summary", out: pgbenchOK, want: PgbenchResult{TPS: 22011.531232, LatencyMS: 0.045, Failed: 3, Txns: 66030}},
		{name: "aborted", out: "pgbench: error: connection to server failed\npgbench: error: Run was aborted; the above results are incomplete.\n", wantErr: errNoTPS},
		{name: "tps without latency", out: "tps = 5.0 (without initial connection time)\n", wantErr: errNoTPS},
		{name: "including-connections line is not the figure", out: "latency average = 1.0 ms\ntps = 9.0 (including connections establishing)\n", wantErr: errNoTPS},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePgbench(tc.out)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseStatusKB(t *testing.T) {
	status := "Name:\tnlproxy\nVmPeak:\t 1250000 kB\nVmHWM:\t   23456 kB\nVmRSS:\t   20000 kB\n"
	tests := []struct {
		field   string
		want    int64
		wantErr error
	}{
		{"VmHWM", 23456, nil},
		{"VmRSS", 20000, nil},
		{"VmSwap", 0, errNoProc},
	}
	for _, tc := range tests {
		got, err := parseStatusKB(status, tc.field)
		if !errors.Is(err, tc.wantErr) || got != tc.want {
			t.Errorf("%s: got %d, %v; want %d, %v", tc.field, got, err, tc.want, tc.wantErr)
		}
	}
	// Our own process must have a readable, non-zero VmHWM.
	if hwm, err := procStatusKB(os.Getpid(), "VmHWM"); err != nil || hwm <= 0 {
		t.Errorf("own VmHWM = %d, %v", hwm, err)
	}
}

func TestParseProc(t *testing.T) {
	// Field 2 may hold spaces and parentheses; fields 14–17 are the CPU ticks.
	stat := "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 25 3 2 20 0 9 0 100 1000 200\n"
	if got, err := parseStatTicks(stat); err != nil || got != 180 {
		t.Errorf("parseStatTicks = %d, %v; want 180", got, err)
	}
	if got, err := parseStatPPID(stat); err != nil || got != 1 {
		t.Errorf("parseStatPPID = %d, %v; want 1", got, err)
	}
	if _, err := parseStatTicks("4242 (x) S 1"); err == nil {
		t.Error("short stat line accepted")
	}
	perf := "\n12345,,raw_syscalls:sys_enter,1002003,100.00,,\n"
	if got, err := parsePerfCount(perf, "raw_syscalls:sys_enter"); err != nil || got != 12345 {
		t.Errorf("parsePerfCount = %d, %v", got, err)
	}
	if _, err := parsePerfCount("<not counted>,,raw_syscalls:sys_enter,0,0.00,,", "raw_syscalls:sys_enter"); err == nil {
		t.Error("uncounted event accepted")
	}
	// Our own process: CPU is cumulative and we are in our own tree.
	u, err := sampleUsage(os.Getpid())
	if err != nil || u.Procs < 1 || u.Switches <= 0 {
		t.Errorf("own usage = %+v, %v", u, err)
	}
}

func TestMedianAndRotate(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}, {nil, 0}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	ts := []string{"a", "b", "c"}
	for k, want := range []string{"a,b,c", "b,c,a", "c,a,b", "a,b,c"} {
		if got := strings.Join(rotate(ts, k), ","); got != want {
			t.Errorf("rotate(%d) = %s, want %s", k, got, want)
		}
	}
	if strings.Join(ts, ",") != "a,b,c" {
		t.Errorf("rotate modified its input: %v", ts)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-T", "5", "-targets", "direct, pgbouncer,direct", "-quick"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.seconds != 5 || strings.Join(o.targets, ",") != "direct,pgbouncer" || len(o.configs) != 2 {
		t.Errorf("parsed %+v", o)
	}
	// A peer without a binary is left out; -clients makes simple and prepared configs.
	t.Setenv("ODYSSEY_BIN", "")
	t.Setenv("PATH", t.TempDir())
	o, err = parseFlags([]string{"-targets", "direct,odyssey", "-clients", "1,8,32"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.targets, ",") != "direct" || len(o.configs) != 6 || o.configs[5] != (Config{Clients: 32, Threads: 2, Mode: "prepared"}) {
		t.Errorf("parsed %+v", o)
	}
	for _, bad := range [][]string{{"-targets", "direct,pgdogx"}, {"-T", "0"}, {"extra"}, {"-clients", "1,x"}} {
		if _, err := parseFlags(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%v) accepted", bad)
		}
	}
}

// stats is one run's figures; CPU per transaction falls as TPS rises.
func stats(tps, lat float64) *TargetStats {
	s := &TargetStats{Runs: []PgbenchResult{{TPS: tps, LatencyMS: lat, CPUus: 1000 / tps}}}
	s.summarize()
	return s
}

func TestEvaluate(t *testing.T) {
	cfgs := defaultConfigs()
	rep := &Report{Targets: []string{targetDirect, targetPgbouncer, targetNlproxy}, Stream: map[string]*StreamStats{}}
	// Config 0: nlproxy wins; 1: loses on TPS and latency; 2: a failed run; 3: tie (≥ passes).
	rep.Configs = []*ConfigResult{
		{Config: cfgs[0], Name: cfgs[0].Name(), Targets: map[string]*TargetStats{targetDirect: stats(100, 0.01), targetPgbouncer: stats(50, 0.02), targetNlproxy: stats(60, 0.015)}},
		{Config: cfgs[1], Name: cfgs[1].Name(), Targets: map[string]*TargetStats{targetDirect: stats(100, 0.01), targetPgbouncer: stats(50, 0.02), targetNlproxy: stats(40, 0.025)}},
		{Config: cfgs[2], Name: cfgs[2].Name(), Targets: map[string]*TargetStats{targetDirect: stats(100, 0.01), targetPgbouncer: stats(50, 0.02), targetNlproxy: {Errors: []string{"boom"}}}},
		{Config: cfgs[3], Name: cfgs[3].Name(), Targets: map[string]*TargetStats{targetDirect: stats(100, 0.01), targetPgbouncer: stats(50, 0.02), targetNlproxy: stats(50, 0.02)}},
	}
	rep.Stream[targetDirect] = &StreamStats{StreamResult: StreamResult{MBPerSecond: 100}}
	rep.Stream[targetNlproxy] = &StreamStats{StreamResult: StreamResult{MBPerSecond: 89}}
	rep.NlproxyHWM = 20 * 1024
	rep.evaluate(64)

	// TPS ×4, latency ×2, CPU ×4, streaming, RSS.
	want := []string{"PASS", "MISS", "MISS", "PASS", "PASS", "MISS", "PASS", "MISS", "MISS", "PASS", "MISS", "PASS"}
	if len(rep.Checks) != len(want) {
		t.Fatalf("got %d checks: %+v", len(rep.Checks), rep.Checks)
	}
	for i, c := range rep.Checks {
		if c.Status != want[i] {
			t.Errorf("check %d %q = %s (%s), want %s", i, c.Name, c.Status, c.Detail, want[i])
		}
	}

	var text, md bytes.Buffer
	rep.WriteText(&text)
	rep.WriteMarkdown(&md)
	for _, s := range []string{"nlproxy/pgbouncer TPS", "1.20", "ERR", "0.89× direct", "error -c 16 -j 2 -M simple nlproxy: boom",
		"nlproxy CPU µs/txn", "16.7 (16.7–16.7)", "0.83"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text output lacks %q:\n%s", s, text.String())
		}
	}
	if !strings.Contains(md.String(), "| --- | ---: |") || !strings.Contains(md.String(), "| -c 1 -M simple | 100 | 50 | 60 | 0.60 | 1.20 |") {
		t.Errorf("markdown table malformed:\n%s", md.String())
	}

	// Without nlproxy every nlproxy target is skipped, not failed.
	rep.Targets = []string{targetDirect, targetPgbouncer}
	delete(rep.Stream, targetNlproxy)
	rep.evaluate(64)
	for _, c := range rep.Checks {
		if c.Status != "SKIP" {
			t.Errorf("without nlproxy: %q = %s", c.Name, c.Status)
		}
	}
}

// TestHarness drives the real pieces the benchmark uses — Postgres, pgbench,
// PgBouncer as the postgres user, pgx streaming, /proc sampling — briefly.
func TestHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Postgres and PgBouncer")
	}
	if !fileExists("/usr/sbin/pgbouncer") {
		needs.Missing(t, "pgbouncer not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster := pgtest.New(t, pgcluster.Options{AuthMethod: "trust"})
	pb := pgbench{bin: pgbenchBin(cluster), user: pgtest.Superuser, db: "postgres"}
	if err := pb.Init(ctx, cluster.Host, cluster.Port, 1); err != nil {
		t.Fatal(err)
	}

	bouncer, port, err := startPgbouncer(ctx, targetPgbouncer, "/usr/sbin/pgbouncer", cluster.Host, cluster.Port, pgtest.Superuser, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bouncer.Stop()
	if err := waitReady(ctx, bouncer, urlFor(port, false), 15*time.Second); err != nil {
		t.Fatal(err)
	}

	const rows = 20000
	var wantDataRow int64
	for g := 1; g <= rows; g++ {
		wantDataRow += 7 + 4 + int64(len(strconv.Itoa(g))) + 2*(4+32) // g, 32 chars, 32 chars
	}
	for _, ep := range []struct {
		name string
		host string
		port int
	}{{"direct", cluster.Host, cluster.Port}, {"pgbouncer", "127.0.0.1", port}} {
		res, _, err := pb.Run(ctx, ep.host, ep.port, Config{Clients: 2, Threads: 1, Mode: "prepared"}, time.Second, 0)
		if err != nil {
			t.Fatalf("%s pgbench: %v", ep.name, err)
		}
		if res.TPS <= 0 || res.LatencyMS <= 0 {
			t.Errorf("%s pgbench: %+v", ep.name, res)
		}
		sr, err := streamQuery(ctx, urlFor(ep.port, false), streamSQL(rows))
		if err != nil {
			t.Fatalf("%s stream: %v", ep.name, err)
		}
		if sr.Rows != rows || sr.DataRowMB != float64(wantDataRow)/1e6 || sr.WireMB < sr.DataRowMB || sr.MBPerSecond <= 0 {
			t.Errorf("%s stream = %+v, want %d rows and %d DataRow bytes", ep.name, sr, rows, wantDataRow)
		}
	}

	// Latency percentiles from pgbench's per-transaction log.
	logged := pb
	logged.logDir = t.TempDir()
	res, _, err := logged.Run(ctx, cluster.Host, cluster.Port, Config{Clients: 2, Threads: 2, Mode: "simple"}, 0, 400)
	if err != nil {
		t.Fatal(err)
	}
	if res.P50MS <= 0 || res.P99MS < res.P50MS {
		t.Errorf("percentiles: %+v", res)
	}

	// Per-transaction use of PgBouncer (one process) and pgpool-II (a process
	// per client), as the benchmark measures it.
	eps := []endpoint{{targetPgbouncer, "127.0.0.1", port, urlFor(port, false), bouncer}}
	if fileExists("/usr/sbin/pgpool") {
		pool, pport, err := startPgpool(ctx, "/usr/sbin/pgpool", cluster.Host, cluster.Port, 4)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Stop()
		if err := waitReady(ctx, pool, urlFor(pport, false), 30*time.Second); err != nil {
			t.Fatal(err)
		}
		eps = append(eps, endpoint{targetPgpool, "127.0.0.1", pport, urlFor(pport, false), pool})
	}
	for _, ep := range eps {
		o := options{txns: 2000}
		res, err := measuredRun(ctx, o, pb, ep, Config{Clients: 2, Threads: 1, Mode: "simple"}, time.Second)
		if err != nil {
			t.Fatalf("%s: %v", ep.name, err)
		}
		if res.Txns != 2000 || res.CPUus <= 0 || res.Switches <= 0 {
			t.Errorf("%s: %+v, want 2000 transactions with CPU and context switches", ep.name, res)
		}
		if ep.name == targetPgpool {
			if u, err := sampleUsage(ep.proc.Pid()); err != nil || u.Procs < 5 {
				t.Errorf("pgpool tree: %+v, %v; want the parent and 4 children", u, err)
			}
		}
	}

	s := startRSSSampler(bouncer.Pid(), 5*time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if rss, hwm := s.Stop(); rss <= 0 || hwm < rss {
		t.Errorf("pgbouncer rss %d kB, hwm %d kB", rss, hwm)
	}
	bouncer.Stop()
	if !bouncer.Exited() {
		t.Error("pgbouncer still running after Stop")
	}
	if _, err := streamQuery(ctx, urlFor(port, false), "SELECT 1"); err == nil {
		t.Error("connected to a stopped pgbouncer")
	}
	if fileExists(bouncer.tmpDir) {
		t.Errorf("pgbouncer dir %s left behind", bouncer.tmpDir)
	}
}

// TestHarnessTLS runs PgBouncer with TLS on both sides in front of a TLS
// Postgres, as -tls does, and checks that checkTLS tells a TLS session from
// a plaintext one.
func TestHarnessTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Postgres and PgBouncer")
	}
	if !fileExists("/usr/sbin/pgbouncer") {
		needs.Missing(t, "pgbouncer not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster := pgtest.New(t, pgcluster.Options{AuthMethod: "trust", TLS: true})
	pb := pgbench{bin: pgbenchBin(cluster), user: pgtest.Superuser, db: "postgres"}
	if err := pb.Init(ctx, cluster.Host, cluster.Port, 1); err != nil {
		t.Fatal(err)
	}
	certs, err := writeTLSFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	upstream := cluster.URL(pgtest.Superuser, "", "postgres")
	if err := checkTLS(ctx, "direct", upstreamURLFor(upstream, true)); err != nil {
		t.Errorf("direct with TLS: %v", err)
	}
	for _, tls := range []bool{false, true} {
		var tc *tlsFiles
		if tls {
			tc = certs
		}
		bouncer, port, err := startPgbouncer(ctx, epKey(targetPgbouncer, tls), "/usr/sbin/pgbouncer", cluster.Host, cluster.Port, pgtest.Superuser, tc)
		if err != nil {
			t.Fatal(err)
		}
		defer bouncer.Stop()
		if err := waitReady(ctx, bouncer, urlFor(port, tls), 15*time.Second); err != nil {
			t.Fatal(err)
		}
		err = checkTLS(ctx, bouncer.name, urlFor(port, true))
		if tls && err != nil {
			t.Errorf("PgBouncer with TLS: %v", err)
		}
		if !tls && err == nil {
			t.Error("checkTLS accepted a PgBouncer without TLS")
		}
		res, _, err := pb.Run(ctx, "127.0.0.1", port, Config{Clients: 2, Threads: 1, Mode: "prepared", TLS: tls}, 0, 200)
		if err != nil || res.Txns != 200 {
			t.Errorf("pgbench TLS=%v: %+v, %v", tls, res, err)
		}
	}
	if err := checkTLS(ctx, "direct", upstreamURLFor(upstream, false)); err == nil {
		t.Error("checkTLS accepted sslmode=disable")
	}
}
