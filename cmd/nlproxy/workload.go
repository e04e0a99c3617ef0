package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/internal/metrics"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/workload"
)

// WorkloadConfig configures learning from the relayed workload; its
// options are in the option table (options.go).
type WorkloadConfig struct {
	// Learn turns capture on: plain statements relayed are sampled into a
	// bounded queue and learnt from in the background.
	Learn bool
	// MaxQueries is the most fingerprints kept per database.
	MaxQueries int
	// MaxAge drops fingerprints not seen for longer; 0 keeps them.
	MaxAge Duration
	// Deny is a regular expression; statements it matches (raw text,
	// literals included) are never learnt from.
	Deny string
	// Roles, when not empty, are the only roles whose statements teach.
	Roles []string
	// Sample is the share of statements captured, in (0, 1].
	Sample float64
	// Queue bounds the statements waiting to be learnt; more are dropped.
	Queue int
	// StatStatements, when not 0, is how often pg_stat_statements is read
	// (through the catalog role) as a second source.
	StatStatements Duration
	// Examples is how many model calls an ask in balanced or max may spend
	// turning workload queries into remembered pairs; 0 none.
	Examples int
}

func (w WorkloadConfig) validate() error {
	var errs []error
	if w.StatStatements < 0 {
		errs = append(errs, errors.New("workload-stat-statements must not be negative"))
	}
	if w.Examples < 0 {
		errs = append(errs, errors.New("workload-examples must not be negative"))
	}
	if w.MaxQueries <= 0 || w.Queue <= 0 {
		errs = append(errs, errors.New("workload-max-queries and workload-queue must be positive"))
	}
	if w.MaxAge < 0 {
		errs = append(errs, errors.New("workload-max-age must not be negative"))
	}
	if !(w.Sample > 0 && w.Sample <= 1) {
		errs = append(errs, fmt.Errorf("workload-sample %v: want a share in (0, 1]", w.Sample))
	}
	if _, err := regexp.Compile(w.Deny); err != nil {
		errs = append(errs, fmt.Errorf("workload-deny: %w", err))
	}
	return errors.Join(errs...)
}

// examples is Examples as the engine's field reads it (its 0 is the
// default, negative none).
func (w WorkloadConfig) examples() int {
	if w.Examples == 0 {
		return -1
	}
	return w.Examples
}

func (w WorkloadConfig) limits() workload.Limits {
	l := workload.Limits{MaxQueries: w.MaxQueries, MaxAge: time.Duration(w.MaxAge)}
	if l.MaxAge == 0 {
		l.MaxAge = -1 // 0 here keeps them; the package's 0 is its default
	}
	return l
}

// workloadRun is the capture side of a serving proxy.
type workloadRun struct {
	collector *workload.Collector
	stop      func()
}

// startWorkload sets srv's observer and starts the worker when
// --learn-workload is on; profiles live beside the catalog snapshots
// (--data-dir), in memory when there is none. A nil result: off.
func startWorkload(cfg Config, srv *proxy.Server, m *metrics.Metrics, logger *zap.Logger) *workloadRun {
	w := cfg.Workload
	if !w.Learn {
		return nil
	}
	var deny *regexp.Regexp
	if w.Deny != "" {
		deny = regexp.MustCompile(w.Deny) // validated with the config
	}
	log := logger.Named("workload")
	opts := workload.CollectorOptions{QueueSize: w.Queue, Sample: w.Sample, Deny: deny, Roles: w.Roles, Logger: log}
	if w.StatStatements > 0 {
		if connect, err := catalogConnector(cfg); err != nil {
			log.Warn("pg_stat_statements not read: no catalog connection", zap.Error(err))
		} else {
			opts.Stats, opts.StatsEvery = workload.PgStatStatements{Connect: connect}, time.Duration(w.StatStatements)
		}
	}
	c := workload.NewCollector(workload.NewStore(cfg.Engine.DataDir, w.limits()), opts)
	srv.Observer = c
	m.WatchWorkload(c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx) // save failures are logged by the collector
	}()
	log.Info("learning from the relayed workload", zap.String("data_dir", cfg.Engine.DataDir), zap.Float64("sample", w.Sample))
	return &workloadRun{collector: c, stop: func() { cancel(); <-done }}
}

// Close stops the worker, which saves once more.
func (r *workloadRun) Close() {
	if r != nil {
		r.stop()
	}
}

// Collector is nil when learning is off.
func (r *workloadRun) Collector() *workload.Collector {
	if r == nil {
		return nil
	}
	return r.collector
}

const workloadUsage = `Usage:
  nlproxy workload show   [--data-dir D] [--database DB] [--fingerprint FP] [--limit N]
  nlproxy workload forget [--data-dir D] --database DB [--fingerprint FP]

show prints what --learn-workload has learnt per database: each fingerprint
with its count, last use, roles and normalised text (no literals), the join
predicates ranked by use, and the columns filtered, grouped and ordered by.
forget removes one fingerprint, or (without --fingerprint) all of a
database; a running proxy drops it too when it next saves (within a minute).
`

// runWorkload is `nlproxy workload show|forget`.
func runWorkload(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || helpRequested(args[:1]) {
		fmt.Fprint(helpOutput(args, stdout, stderr), workloadUsage)
		if len(args) == 0 {
			return usageErrorf("workload: want show or forget")
		}
		return nil
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("workload "+sub, flag.ContinueOnError)
	fs.SetOutput(helpOutput(args, stdout, stderr))
	fs.Usage = func() {
		if helpRequested(args) {
			fmt.Fprint(fs.Output(), workloadUsage+"\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	dataDir := fs.String("data-dir", catalogDataDir(os.Getenv), "directory holding the catalog snapshots and workload profiles, the one serve uses (env NLPROXY_DATA_DIR)")
	db := fs.String("database", "", "database; show: default all")
	fp := fs.String("fingerprint", "", "one statement fingerprint (as show prints it)")
	limit := fs.Int("limit", 20, "show: fingerprints, joins and columns listed per database")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *dataDir == "" {
		return errors.New("no data directory: pass --data-dir or set NLPROXY_DATA_DIR")
	}
	switch sub {
	case "show":
		return workloadShow(stdout, *dataDir, *db, *fp, *limit)
	case "forget":
		if *db == "" {
			return usageErrorf("workload forget: --database is required")
		}
		n, err := workload.ForgetInFile(*dataDir, *db, *fp)
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no workload learnt for database %q in %s", *db, *dataDir)
		}
		if err != nil {
			return err
		}
		if *fp != "" && n == 0 {
			fmt.Fprintf(stdout, "fingerprint %s is not stored for %s; a running proxy will still drop it\n", *fp, *db)
			return nil
		}
		fmt.Fprintf(stdout, "forgot %d fingerprint(s) of %s\n", n, *db)
		return nil
	}
	return usageErrorf("workload: unknown subcommand %q (want show or forget)", sub)
}

func workloadShow(w io.Writer, dir, db, fp string, limit int) error {
	dbs := []string{db}
	if db == "" {
		var err error
		if dbs, err = workload.Databases(dir); err != nil {
			return err
		}
		if len(dbs) == 0 {
			fmt.Fprintf(w, "no workload learnt in %s (serve with --learn-workload)\n", dir)
			return nil
		}
	}
	// Age bounds were applied by the proxy that saved; show keeps all.
	lim := workload.Limits{MaxQueries: 1 << 30, MaxAge: -1}
	for _, name := range dbs {
		p, err := workload.ReadProfile(dir, name, lim, time.Now())
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no workload learnt for database %q in %s", name, dir)
		}
		if err != nil {
			return err
		}
		if fp != "" {
			q, ok := p.Query(fp)
			if !ok {
				return fmt.Errorf("fingerprint %s is not stored for %s", fp, name)
			}
			printQuery(w, q)
			fmt.Fprintf(w, "  relations: %s\n  joins: %s\n  filtered: %s\n  grouped: %s\n  ordered: %s\n",
				joinStrings(q.Relations), joinStrings(q.Joins), joinStrings(q.Filtered), joinStrings(q.Grouped), joinStrings(q.Ordered))
			continue
		}
		qs := p.Queries()
		fmt.Fprintf(w, "database %s: %d fingerprint(s)\n", name, len(qs))
		for _, q := range qs[:min(limit, len(qs))] {
			printQuery(w, q)
		}
		if js := p.Joins(); len(js) > 0 {
			fmt.Fprintf(w, " joins (uses, fingerprints):\n")
			for _, j := range js[:min(limit, len(js))] {
				fmt.Fprintf(w, "  %6d %4d  %s\n", j.Count, j.Queries, j.Join)
			}
		}
		if cs := p.Columns(); len(cs) > 0 {
			fmt.Fprintf(w, " columns (filtered, grouped, ordered):\n")
			for _, c := range cs[:min(limit, len(cs))] {
				fmt.Fprintf(w, "  %6d %6d %6d  %s\n", c.Filtered, c.Grouped, c.Ordered, c.Col)
			}
		}
	}
	return nil
}

func printQuery(w io.Writer, q workload.Query) {
	fmt.Fprintf(w, " %s  %6d  %s  %s\n    %s\n", q.Fingerprint, q.Count, q.LastSeen.UTC().Format(time.RFC3339), strings.Join(q.Roles, ","), q.Text)
}

func joinStrings[T fmt.Stringer](xs []T) string {
	if len(xs) == 0 {
		return "—"
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = x.String()
	}
	return strings.Join(parts, ", ")
}
