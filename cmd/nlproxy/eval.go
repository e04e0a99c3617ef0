package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/nlproxy/nlproxy/internal/askreport"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/eval/dataset"
	"github.com/nlproxy/nlproxy/eval/report"
	"github.com/nlproxy/nlproxy/eval/runner"
	"github.com/nlproxy/nlproxy/internal/pg"
	"github.com/nlproxy/nlproxy/proxy"
)

const evalUsage = `Usage:
  nlproxy eval load    --upstream URL [--dataset sql-eval|bird] [--data DIR] [--db a,b] [--prefix P] [--replace]
  nlproxy eval run     --proxy URL | --upstream URL [flags] [-- serve flags]
  nlproxy eval report  [--html FILE] results.jsonl...
  nlproxy eval compare A.jsonl B.jsonl

load creates the dataset's databases on a Postgres server; run asks every
question through an nlproxy session (--proxy: one already running; --upstream:
one started in this process with serve's configuration and the serve flags
after --) and appends one JSON line per question to --out, resuming where an
earlier run stopped; report prints the summary table and writes the HTML
report; compare lists the questions that flipped between two runs.
Run 'nlproxy eval <subcommand> --help' for its flags.
`

// runEval implements `nlproxy eval SUBCOMMAND`.
func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageErrorf("eval needs a subcommand: load, run, report or compare")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "load":
		return evalLoad(ctx, args, stdout, stderr)
	case "run":
		return evalRun(ctx, args, stdout, stderr)
	case "report":
		return evalReport(args, stdout, stderr)
	case "compare":
		return evalCompare(args, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, evalUsage)
		return nil
	}
	return usageErrorf("unknown eval subcommand %q (want load, run, report or compare)", sub)
}

// datasetFlags are the flags naming the questions.
type datasetFlags struct {
	format, dir, dbs, prefix string
}

func (d *datasetFlags) register(set *flag.FlagSet) {
	set.StringVar(&d.format, "dataset", dataset.FormatSQLEval, "dataset format: sql-eval or bird")
	set.StringVar(&d.dir, "data", "datasets/sql-eval", "dataset directory (sql-eval: questions.csv, idk.csv, databases/<db>/<db>.sql+.json; bird: dev.json, databases/<db>/<db>.sql)")
	set.StringVar(&d.dbs, "db", "", "comma-separated databases to use (default: all)")
	set.StringVar(&d.prefix, "prefix", "", "prefix of the database names on the server")
}

func (d *datasetFlags) open() (*dataset.Dataset, []string, error) {
	ds, err := dataset.Open(d.format, d.dir)
	if errors.Is(err, os.ErrNotExist) {
		// The default directory is the repository's; elsewhere it is not there.
		return nil, nil, fmt.Errorf("%w\nno %s dataset at %s: give its directory with --data DIR (the default, datasets/sql-eval, is relative to the nlproxy repository)", err, d.format, d.dir)
	}
	if err != nil {
		return nil, nil, err
	}
	return ds, splitList(d.dbs), nil
}

func evalLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	set := flag.NewFlagSet("eval load", flag.ContinueOnError)
	var df datasetFlags
	df.register(set)
	upstream := set.String("upstream", "", "libpq URL of the server to create the databases on, as a role that may create databases (required)")
	replace := set.Bool("replace", false, "drop databases of the same name first")
	readers := set.String("reader", "", "comma-separated roles given USAGE and SELECT on the loaded schemas")
	glossary := set.String("glossary-out", "", "write the datasets' glossaries as a YAML file for 'nlproxy serve --glossary'")
	if err := parseFlags(set, args, stdout, stderr, "nlproxy eval load --upstream URL [flags]"); err != nil {
		return err
	}
	if *upstream == "" {
		return usageErrorf("eval load: --upstream is required")
	}
	base, err := pgx.ParseConfig(*upstream)
	if err != nil {
		return fmt.Errorf("--upstream: %w", err)
	}
	ds, dbs, err := df.open()
	if err != nil {
		return err
	}
	if len(dbs) == 0 {
		dbs = ds.DBs()
	}
	connect := func(ctx context.Context, db string) (*pgx.Conn, error) {
		cfg := base.Copy()
		cfg.Database = db
		return pgx.ConnectConfig(ctx, cfg)
	}
	opts := dataset.LoadOptions{Prefix: df.prefix, Replace: *replace, Readers: splitList(*readers),
		URL: func(db string) string { return withDatabase(*upstream, db) }}
	var loaded []dataset.Loaded
	for _, db := range dbs {
		start := time.Now()
		l, err := dataset.Load(ctx, connect, ds, db, opts)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == pg.CodeDuplicateDatabase {
			return fmt.Errorf("%w\nthe database is there from an earlier load: run again with --replace to drop and reload it", err)
		}
		if err != nil {
			return err
		}
		for _, w := range l.Warnings {
			fmt.Fprintf(stderr, "warning: %s: %s\n", l.DB, w)
		}
		loaded = append(loaded, l)
		fmt.Fprintf(stdout, "loaded %s as %s: %d column descriptions (%s)\n", l.DB, l.Target, l.Comments, time.Since(start).Round(time.Millisecond))
	}
	if *glossary != "" {
		if err := os.WriteFile(*glossary, dataset.GlossaryYAML(loaded), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "glossary: %s\n", *glossary)
	}
	return nil
}

// withDatabase puts db into a libpq URL or key=value DSN.
func withDatabase(conn, db string) string {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		rest := conn[strings.Index(conn, "://")+3:]
		q := ""
		if i := strings.IndexByte(rest, '?'); i >= 0 {
			rest, q = rest[:i], rest[i:]
		}
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			rest = rest[:i]
		}
		return conn[:strings.Index(conn, "://")+3] + rest + "/" + db + q
	}
	return conn + " dbname='" + strings.ReplaceAll(db, "'", `\'`) + "'"
}

func evalRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var serveArgs []string
	for i, a := range args {
		if a == "--" {
			args, serveArgs = args[:i], args[i+1:]
			break
		}
	}
	set := flag.NewFlagSet("eval run", flag.ContinueOnError)
	var df datasetFlags
	df.register(set)
	proxyURL := set.String("proxy", "", "libpq URL of a running nlproxy (the database name is replaced per question)")
	upstream := set.String("upstream", "", "instead of --proxy: start nlproxy in this process in front of this server (serve flags after --)")
	profile := set.String("profile", "", "engine profile put in the marker, ask-sql(PROFILE): fast, balanced or max (default: the proxy's)")
	out := set.String("out", "eval-results.jsonl", "results file (JSONL); questions already in it for this profile are skipped")
	label := set.String("run", "", "label recorded with each result (e.g. the model name)")
	parallel := set.Int("parallel", 2, "questions asked at once")
	timeout := set.Duration("timeout", 5*time.Minute, "time limit per question (ask and run)")
	stmtTimeout := set.Duration("statement-timeout", time.Minute, "statement_timeout of each run of generated or gold SQL")
	limit := set.Int("limit", 0, "ask at most this many questions (0: all)")
	unanswerable := set.Bool("unanswerable", false, "also ask the unanswerable questions (sql-eval idk.csv); abstaining is their right outcome")
	retry := set.Bool("retry-errors", false, "ask again the questions recorded with outcome error")
	cmp := set.String("compare", "", "comparison rules: sql-eval or bird (default: the dataset's)")
	quiet := set.Bool("quiet", false, "no progress bar")
	convs := set.String("conversations", "", "ask the conversations of this JSON file (e.g. datasets/followups/sql-eval.json) instead of the dataset's questions: each conversation's turns in order in one session, follow-ups read against the turns before")
	if err := parseFlags(set, args, stdout, stderr, "nlproxy eval run --proxy URL | --upstream URL [flags] [-- serve flags]"); err != nil {
		return err
	}
	if (*proxyURL == "") == (*upstream == "") {
		return usageErrorf("eval run: give one of --proxy and --upstream")
	}
	ds, dbs, err := df.open()
	if err != nil {
		return err
	}
	if *convs != "" {
		cs, err := dataset.ReadConversations(*convs)
		if err != nil {
			return err
		}
		ds.Questions = dataset.Questions(cs)
	}
	ds.Filter(dbs, *unanswerable)
	if *limit > 0 && *limit < len(ds.Questions) {
		ds.Questions = ds.Questions[:*limit]
	}
	target := *proxyURL
	var failed *failedAsks
	if *upstream != "" {
		failed = &failedAsks{last: map[uint32]askreport.Report{}}
		addr, stop, err := startEvalProxy(ctx, *upstream, serveArgs, stderr, failed.record)
		if err != nil {
			return err
		}
		defer stop()
		target, err = proxyTarget(*upstream, addr)
		if err != nil {
			return err
		}
	}
	base, err := pgx.ParseConfig(target)
	if err != nil {
		return fmt.Errorf("proxy URL: %w", err)
	}
	connect := func(ctx context.Context, db string) (*pgx.Conn, error) {
		cfg := base.Copy()
		cfg.Database = df.prefix + db
		return pgx.ConnectConfig(ctx, cfg)
	}
	var progress io.Writer
	if !*quiet {
		progress = stderr
	}
	start := time.Now()
	opts := runner.Options{
		Connect: connect, Profile: *profile, Run: *label, Compare: *cmp, Parallel: *parallel,
		Timeout: *timeout, StatementTimeout: *stmtTimeout, Results: *out, RetryErrors: *retry,
		Progress: progress, TTY: isTerminal(stderr),
	}
	if failed != nil {
		opts.FailedAsk = failed.lookup
	}
	results, err := runner.Run(ctx, ds, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d questions in %s; results in %s\n\n", len(results), time.Since(start).Round(time.Second), *out)
	return report.WriteTable(stdout, results)
}

// startEvalProxy serves nlproxy on a loopback port with serve's
// configuration (environment, --config, the serve flags given).
func startEvalProxy(ctx context.Context, upstream string, serveArgs []string, stderr io.Writer, onAsk func(*proxy.AskRecord)) (string, func(), error) {
	args := append([]string{"--listen", "127.0.0.1:0", "--upstream", upstream, "--log-level", "warn"}, serveArgs...)
	cfg, err := loadConfig(args, os.Getenv, stderr)
	if err != nil {
		return "", nil, err
	}
	logger, err := newLogger(cfg.LogLevel, cfg.LogFormat, stderr)
	if err != nil {
		return "", nil, err
	}
	srv, err := newServer(cfg, logger)
	if err != nil {
		return "", nil, err
	}
	if cfg.Engine.Disabled {
		return "", nil, errors.New("eval run: the engine is disabled (--no-engine)")
	}
	parts, err := buildEngine(cfg, logger)
	if err != nil {
		return "", nil, err
	}
	parts.attach(srv)
	if next := srv.OnAsk; next != nil {
		srv.OnAsk = func(r *proxy.AskRecord) { onAsk(r); next(r) }
	} else {
		srv.OnAsk = onAsk
	}
	parts.checkModels(ctx, logger)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		parts.Close()
		return "", nil, fmt.Errorf("listen: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			logger.Warn("eval proxy: drain incomplete", zap.Error(err))
		}
		<-done
		parts.Close()
		_ = logger.Sync()
	}
	return ln.Addr().String(), stop, nil
}

// failedAsks keeps, per backend PID, the account of the last ask that
// failed there: eval records its model calls and tokens too. The proxy
// reports an ask before the client sees its error.
type failedAsks struct {
	mu   sync.Mutex
	last map[uint32]askreport.Report
}

func (f *failedAsks) record(r *proxy.AskRecord) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Err == nil || r.Report == nil {
		delete(f.last, r.BackendPID)
		return
	}
	f.last[r.BackendPID] = *r.Report
}

func (f *failedAsks) lookup(pid uint32) (calls, prompt, completion int, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rep, ok := f.last[pid]
	delete(f.last, pid)
	return rep.LLMCalls, rep.PromptTokens, rep.CompletionTokens, ok
}

// proxyTarget is the upstream URL pointed at the in-process proxy: the
// same user, password and TLS wishes, the proxy's address.
func proxyTarget(upstream, addr string) (string, error) {
	cfg, err := pgx.ParseConfig(upstream)
	if err != nil {
		return "", fmt.Errorf("--upstream: %w", err)
	}
	host, port, _ := net.SplitHostPort(addr)
	u := fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", urlUser(cfg.User, cfg.Password), net.JoinHostPort(host, port), cfg.Database)
	return u, nil
}

func urlUser(user, password string) string {
	esc := func(s string) string {
		return strings.NewReplacer("%", "%25", "@", "%40", ":", "%3A", "/", "%2F", "?", "%3F", "#", "%23").Replace(s)
	}
	if password == "" {
		return esc(user)
	}
	return esc(user) + ":" + esc(password)
}

// isTerminal reports whether w is a terminal (the progress bar redraws in place).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func readResultFiles(paths []string) ([]runner.Result, error) {
	var all []runner.Result
	for _, p := range paths {
		rs, err := runner.ReadResults(p)
		if err != nil {
			return nil, err
		}
		all = append(all, rs...)
	}
	return all, nil
}

func evalReport(args []string, stdout, stderr io.Writer) error {
	set := flag.NewFlagSet("eval report", flag.ContinueOnError)
	htmlOut := set.String("html", "", "also write a self-contained HTML report to this file")
	title := set.String("title", "nlproxy evaluation", "title of the HTML report")
	note := set.String("note", "", "note shown under the title (e.g. which model and hardware)")
	if err := parseFlags(set, args, stdout, stderr, "nlproxy eval report [--html FILE] results.jsonl..."); err != nil {
		return err
	}
	if set.NArg() == 0 {
		return usageErrorf("eval report: name one or more results files")
	}
	results, err := readResultFiles(set.Args())
	if err != nil {
		return err
	}
	if err := report.WriteTable(stdout, results); err != nil {
		return err
	}
	if *htmlOut == "" {
		return nil
	}
	f, err := os.Create(*htmlOut)
	if err != nil {
		return err
	}
	if err := report.WriteHTML(f, results, report.HTMLOptions{Title: *title, Note: *note}); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nHTML report: %s\n", *htmlOut)
	return nil
}

func evalCompare(args []string, stdout, stderr io.Writer) error {
	set := flag.NewFlagSet("eval compare", flag.ContinueOnError)
	if err := parseFlags(set, args, stdout, stderr, "nlproxy eval compare A.jsonl B.jsonl"); err != nil {
		return err
	}
	if set.NArg() != 2 {
		return usageErrorf("eval compare: name two results files")
	}
	a, err := runner.ReadResults(set.Arg(0))
	if err != nil {
		return err
	}
	b, err := runner.ReadResults(set.Arg(1))
	if err != nil {
		return err
	}
	report.WriteCompare(stdout, filepath.Base(set.Arg(0)), a, filepath.Base(set.Arg(1)), b)
	return nil
}
