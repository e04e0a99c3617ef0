// Command proxybench compares nlproxy's pass-through performance with a direct
// Postgres connection, PgBouncer (session pooling) and pgpool-II (raw mode, a
// query-aware peer): pgbench select-only TPS, latency and each proxy's CPU time,
// context switches (and optionally system calls) per transaction in four client
// configurations, a multi-hundred-megabyte result streamed with pgx, and
// nlproxy's peak RSS. It starts everything it needs (a throwaway Postgres via
// testkit/pgtest, the proxies) and tears it all down on exit or Ctrl-C.
//
//	go run ./bench/proxybench [-T 20 | -t 20000] [-repeat 5] [-targets direct,pgbouncer,pgpool,nlproxy,nlproxy-engine] [-json FILE]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nlproxy/nlproxy/internal/pgcluster"

	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

type options struct {
	seconds      int
	txns         int
	repeat       int
	warmup       int
	scale        int
	targets      []string
	streamRows   int
	streamSQL    string
	nlproxyBin   string
	nlproxyArgs  []string
	altArgs      []string
	altBin       string
	odyssey      string
	pgcat        string
	pgbouncerSrc string
	pgdog        string
	// tls is off (plaintext only), on (TLS only) or both (every config
	// twice): TLS from pgbench to the target and from the target to Postgres.
	tls         string
	percentiles bool
	build       bool
	pgbouncer   string
	pgpool      string
	syscalls    bool
	perf        string
	jsonPath    string
	maxRSSMB    float64
	configs     []Config
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "proxybench:", err)
		}
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := options{configs: defaultConfigs()}
	fs := flag.NewFlagSet("proxybench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.seconds, "T", 20, "seconds per pgbench run")
	fs.IntVar(&o.txns, "t", 0, "transactions per pgbench run (split among its clients) instead of -T seconds")
	fs.IntVar(&o.repeat, "repeat", 1, "runs per target and config; the median is reported")
	fs.IntVar(&o.warmup, "warmup", 3, "seconds of pgbench warm-up per target before measuring (0 = none)")
	fs.IntVar(&o.scale, "scale", 10, "pgbench -i scale factor")
	targets := fs.String("targets", "direct,pgbouncer,pgpool,nlproxy", "comma-separated endpoints to benchmark: direct, pgbouncer, pgpool, nlproxy, nlproxy-engine (the engine on, Ollama unreachable: plain SQL only), nlproxy-alt (-nlproxy-alt-args), nlproxy-learn (-nlproxy-args plus --learn-workload)")
	fs.IntVar(&o.streamRows, "stream-rows", 5_000_000, "rows in the large-result test (0 = skip it)")
	fs.StringVar(&o.streamSQL, "stream-sql", "", "query for the large-result test instead of the built-in one (e.g. a server-heavy md5 variant)")
	fs.StringVar(&o.nlproxyBin, "nlproxy", "bin/nlproxy", "nlproxy binary (relative to the module root)")
	nlArgs := fs.String("nlproxy-args", "", "extra space-separated arguments for `nlproxy serve`; NAME=value words go to its environment")
	altArgs := fs.String("nlproxy-alt-args", "", "arguments for target nlproxy-alt, a second nlproxy to compare with (e.g. \"--no-engine GOMAXPROCS=1\")")
	fs.StringVar(&o.altBin, "nlproxy-alt-bin", "", "binary for target nlproxy-alt (default: -nlproxy), e.g. a build of another commit for a before/after run")
	fs.StringVar(&o.odyssey, "odyssey", "", "Odyssey binary for target odyssey (default: $ODYSSEY_BIN, else odyssey on PATH); the target is skipped when none is found")
	fs.StringVar(&o.pgcat, "pgcat", "", "PgCat binary for target pgcat (default: $PGCAT_BIN, else pgcat on PATH); the target is skipped when none is found")
	fs.StringVar(&o.pgbouncerSrc, "pgbouncer-src", "", "a second PgBouncer, e.g. the current release built from source, for target pgbouncer-src (default: $PGBOUNCER_SRC_BIN); the target is skipped when none is found")
	fs.StringVar(&o.pgdog, "pgdog", "", "PgDog binary for target pgdog (default: $PGDOG_BIN, else pgdog on PATH); the target is skipped when none is found")
	fs.StringVar(&o.tls, "tls", "off", "off, on or both: with on, pgbench uses sslmode=require and every target offers TLS to clients and uses TLS to Postgres (ssl=on, throwaway certificate); both measures every config in plaintext and in TLS")
	fs.BoolVar(&o.percentiles, "percentiles", false, "log every transaction (pgbench -l) and report latency p50 and p99")
	clients := fs.String("clients", "", "pgbench client counts, e.g. 1,8,32: each with -M simple and -M prepared, -j min(clients, 2) (default: 1,16)")
	fs.BoolVar(&o.build, "build", true, "go build ./cmd/nlproxy into -nlproxy first (it is always built when missing)")
	fs.StringVar(&o.pgbouncer, "pgbouncer", "/usr/sbin/pgbouncer", "PgBouncer binary")
	fs.StringVar(&o.pgpool, "pgpool", "/usr/sbin/pgpool", "pgpool-II binary")
	fs.BoolVar(&o.syscalls, "syscalls", false, "also count each proxy's system calls per transaction with perf stat (adds a little cost per system call)")
	fs.StringVar(&o.perf, "perf", "perf", "perf binary, for -syscalls")
	fs.StringVar(&o.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.Float64Var(&o.maxRSSMB, "max-rss-mb", 64, "nlproxy peak RSS target, MB")
	quick := fs.Bool("quick", false, "only the -c 1 -M simple and -c 16 -j 2 -M prepared configs")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.seconds < 1 || o.repeat < 1 || o.scale < 1 || o.warmup < 0 || o.streamRows < 0 || o.txns < 0 {
		return o, errors.New("-T, -repeat and -scale must be ≥ 1; -t, -warmup and -stream-rows ≥ 0")
	}
	seen := map[string]bool{}
	for _, t := range strings.Split(*targets, ",") {
		t = strings.TrimSpace(t)
		switch t {
		case targetDirect, targetPgbouncer, targetPgpool, targetNlproxy, targetNlproxyEngine, targetNlproxyAlt, targetNlproxyLearn:
		case targetOdyssey:
			if o.odyssey = peerBin(o.odyssey, "ODYSSEY_BIN", "odyssey"); o.odyssey == "" {
				fmt.Fprintln(stderr, "proxybench: no Odyssey binary (-odyssey, $ODYSSEY_BIN or PATH): target odyssey left out")
				continue
			}
		case targetPgcat:
			if o.pgcat = peerBin(o.pgcat, "PGCAT_BIN", "pgcat"); o.pgcat == "" {
				fmt.Fprintln(stderr, "proxybench: no PgCat binary (-pgcat, $PGCAT_BIN or PATH): target pgcat left out")
				continue
			}
		case targetPgbouncerSrc:
			// Not looked up on PATH: that would be Debian's, target pgbouncer.
			if o.pgbouncerSrc = peerBin(o.pgbouncerSrc, "PGBOUNCER_SRC_BIN", ""); o.pgbouncerSrc == "" {
				fmt.Fprintln(stderr, "proxybench: no second PgBouncer binary (-pgbouncer-src or $PGBOUNCER_SRC_BIN): target pgbouncer-src left out")
				continue
			}
		case targetPgdog:
			if o.pgdog = peerBin(o.pgdog, "PGDOG_BIN", "pgdog"); o.pgdog == "" {
				fmt.Fprintln(stderr, "proxybench: no PgDog binary (-pgdog, $PGDOG_BIN or PATH): target pgdog left out")
				continue
			}
		default:
			return o, fmt.Errorf("unknown target %q (want direct, pgbouncer, pgbouncer-src, pgpool, odyssey, pgcat, pgdog, nlproxy, nlproxy-engine, nlproxy-alt, nlproxy-learn)", t)
		}
		if !seen[t] {
			seen[t] = true
			o.targets = append(o.targets, t)
		}
	}
	o.nlproxyArgs = strings.Fields(*nlArgs)
	o.altArgs = strings.Fields(*altArgs)
	if *clients != "" {
		o.configs = nil
		for _, f := range strings.Split(*clients, ",") {
			c, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || c < 1 {
				return o, fmt.Errorf("-clients: bad count %q", f)
			}
			for _, m := range []string{"simple", "prepared"} {
				o.configs = append(o.configs, Config{Clients: c, Threads: min(c, 2), Mode: m})
			}
		}
	}
	if *quick {
		o.configs = []Config{o.configs[0], o.configs[len(o.configs)-1]}
	}
	var modes []bool
	switch o.tls {
	case "off":
		modes = []bool{false}
	case "on":
		modes = []bool{true}
	case "both":
		modes = []bool{false, true}
	default:
		return o, fmt.Errorf("-tls: want off, on or both, not %q", o.tls)
	}
	if o.tls != "off" {
		for _, t := range o.targets {
			if !tlsCapable(t) {
				fmt.Fprintf(stderr, "proxybench: target %s has no TLS setup here: left out of the TLS configs\n", t)
			}
		}
	}
	var cfgs []Config
	for _, tls := range modes {
		for _, c := range o.configs {
			c.TLS = tls
			cfgs = append(cfgs, c)
		}
	}
	o.configs = cfgs
	return o, nil
}

// endpoint is one benchmark target's address.
type endpoint struct {
	name string
	host string
	port int
	url  string
	proc *proc // the proxy process; nil for direct
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}

	tmp, err := os.MkdirTemp("", "proxybench-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)

	if containsTarget(o.targets, targetNlproxy) || containsTarget(o.targets, targetNlproxyEngine) || containsTarget(o.targets, targetNlproxyAlt) || containsTarget(o.targets, targetNlproxyLearn) {
		bin := o.nlproxyBin
		if !filepath.IsAbs(bin) {
			bin = filepath.Join(root, bin)
		}
		o.nlproxyBin = bin
		if _, statErr := os.Stat(bin); o.build || statErr != nil {
			logf("building %s", bin)
			if err := buildNlproxy(ctx, root, bin); err != nil {
				return err
			}
		}
	}

	loadStart := loadAvg()
	logf("starting postgres")
	cluster, err := pgtest.Start(ctx, pgcluster.Options{AuthMethod: "trust", TLS: o.tls != "off", Settings: map[string]string{
		"max_connections": "400",
		"shared_buffers":  "256MB", // scale 10 (~160 MB) stays in shared buffers
	}})
	if err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			logf("stop postgres: %v", err)
		}
	}()

	pb := pgbench{bin: pgbenchBin(cluster), user: pgtest.Superuser, db: "postgres"}
	if o.percentiles {
		pb.logDir = tmp
	}
	logf("pgbench -i -s %d", o.scale)
	if err := pb.Init(ctx, cluster.Host, cluster.Port, o.scale); err != nil {
		return err
	}

	var certs *tlsFiles
	if o.tls != "off" {
		if certs, err = writeTLSFiles(tmp); err != nil {
			return err
		}
	}
	eps := map[string]endpoint{}
	var nlproxyProc *proc
	// Poolers get room for the largest client count: pgpool-II a child per
	// client and some, the others at least 40 server connections.
	need := 8
	for _, c := range o.configs {
		need = max(need, c.Clients+8)
	}
	pool := max(40, need)
	for _, tls := range tlsModes(o.configs) {
		var tc *tlsFiles
		if tls {
			tc = certs
		}
		upstreamURL := upstreamURLFor(cluster.URL(pgtest.Superuser, "", "postgres"), tls)
		for _, t := range o.targets {
			if tls && !tlsCapable(t) {
				continue
			}
			key := epKey(t, tls)
			var p *proc
			var port int
			var err error
			wait := 15 * time.Second
			switch t {
			case targetDirect:
				if tls {
					if err := checkTLS(ctx, key, upstreamURL); err != nil {
						return err
					}
				}
				eps[key] = endpoint{t, cluster.Host, cluster.Port, upstreamURL, nil}
				continue
			case targetPgbouncer:
				p, port, err = startPgbouncer(ctx, t, o.pgbouncer, cluster.Host, cluster.Port, pgtest.Superuser, tc)
			case targetPgbouncerSrc:
				p, port, err = startPgbouncer(ctx, t, o.pgbouncerSrc, cluster.Host, cluster.Port, pgtest.Superuser, tc)
			case targetPgpool:
				p, port, err = startPgpool(ctx, o.pgpool, cluster.Host, cluster.Port, need)
				wait = 30 * time.Second
			case targetOdyssey:
				p, port, err = startOdyssey(ctx, o.odyssey, cluster.Host, cluster.Port, pool)
			case targetPgcat:
				p, port, err = startPgcat(ctx, o.pgcat, cluster.Host, cluster.Port, pgtest.Superuser, "postgres", pool)
			case targetPgdog:
				p, port, err = startPgdog(ctx, o.pgdog, cluster.Host, cluster.Port, pgtest.Superuser, "postgres", pool, tc)
			case targetNlproxy, targetNlproxyEngine, targetNlproxyAlt, targetNlproxyLearn:
				args, bin := o.nlproxyArgs, o.nlproxyBin
				switch t {
				case targetNlproxyEngine:
					args = engineArgs(o.nlproxyArgs)
				case targetNlproxyLearn:
					args = learnArgs(o.nlproxyArgs, filepath.Join(tmp, "learn-"+key))
				case targetNlproxyAlt:
					args = o.altArgs
					if o.altBin != "" {
						bin = o.altBin
					}
				}
				p, port, err = startNlproxy(ctx, tmp, key, bin, upstreamURL, append(nlproxyTLSArgs(tc), args...))
			default:
				continue
			}
			if err != nil {
				return err
			}
			defer p.Stop()
			ep := endpoint{t, "127.0.0.1", port, urlFor(port, tls), p}
			if err := waitReady(ctx, p, ep.url, wait); err != nil {
				return err
			}
			if tls {
				if err := checkTLS(ctx, key, ep.url); err != nil {
					return err
				}
			}
			eps[key] = ep
			// The memory check follows the plaintext nlproxy when there is one.
			if !tls || nlproxyProc == nil {
				if t == targetNlproxy || (nlproxyProc == nil && (t == targetNlproxyEngine || t == targetNlproxyAlt || t == targetNlproxyLearn)) {
					nlproxyProc = p
				}
			}
		}
	}

	rep := &Report{
		Command:  "go run ./bench/proxybench " + strings.Join(args, " "),
		Host:     hostInfo(ctx, cluster, o),
		Duration: runLength(o),
		Repeat:   o.repeat,
		Scale:    o.scale,
		Targets:  o.targets,
		Stream:   map[string]*StreamStats{},
	}
	if err := runPgbench(ctx, o, pb, eps, rep, logf); err != nil {
		return err
	}
	if o.streamRows > 0 {
		if err := runStream(ctx, o, eps, nlproxyProc, rep, logf); err != nil {
			return err
		}
	}
	for _, t := range []string{targetNlproxyAlt, targetNlproxyEngine, targetNlproxyLearn} {
		if ep, ok := eps[epKey(t, o.tls == "on")]; ok {
			if hwm, err := procStatusKB(ep.proc.Pid(), "VmHWM"); err == nil {
				rep.OtherHWM = append(rep.OtherHWM, TargetHWM{t, hwm})
			}
		}
	}
	if p := nlproxyProc; p != nil {
		if hwm, err := procStatusKB(p.Pid(), "VmHWM"); err == nil && hwm > rep.NlproxyHWM {
			rep.NlproxyHWM = hwm
		}
		if p.Exited() {
			logf("warning: nlproxy exited during the benchmark:\n%s", p.LogTail())
		}
	}
	rep.Host += fmt.Sprintf(", load average %s at start, %s at end", loadStart, loadAvg())
	rep.evaluate(o.maxRSSMB)

	fmt.Fprintln(stdout)
	rep.WriteText(stdout)
	fmt.Fprintln(stdout, "\n--- Markdown ---")
	rep.WriteMarkdown(stdout)
	if o.jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return fmt.Errorf("json: %w", err)
		}
		if err := os.WriteFile(o.jsonPath, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write json: %w", err)
		}
	}
	return nil
}

// engineArgs turns the nlproxy arguments into an engine-enabled
// configuration: --no-engine dropped, a model named and Ollama pointed at a
// port nobody listens on. Plain SQL never reaches the engine, so this
// measures what the engine's presence costs the relay (the marker check, DDL
// watching), not translation.
func engineArgs(args []string) []string {
	var out []string
	for _, a := range args {
		if a != "--no-engine" && a != "-no-engine" {
			out = append(out, a)
		}
	}
	return append(out, "--model", "proxybench-none", "--ollama-host", "http://127.0.0.1:9")
}

// learnArgs adds workload learning to the nlproxy arguments: every plain
// statement is captured (sample 1) and learnt into dataDir, so the figures
// are the whole cost — the relay's copy and queue send, and the worker's
// pg_query work competing for the same cores.
func learnArgs(args []string, dataDir string) []string {
	return append(append([]string{}, args...), "--learn-workload", "--data-dir", dataDir)
}

func runLength(o options) string {
	if o.txns > 0 {
		return fmt.Sprintf("%d transactions", o.txns)
	}
	return fmt.Sprintf("%ds", o.seconds)
}
