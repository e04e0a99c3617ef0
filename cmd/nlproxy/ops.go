package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/nlproxy/nlproxy/router"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/nlproxy/nlproxy/admin"
	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/verified"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/internal/metrics"
	"github.com/nlproxy/nlproxy/internal/redact"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/workload"
)

// OpsConfig is the operator side: the admin listener and the ask audit log.
type OpsConfig struct {
	// AdminListen enables /metrics, /healthz, /readyz and the admin page;
	// a bare port (":9187" or "9187") binds to localhost only.
	AdminListen string
	// AdminTokenFile holds the admin page's token; without one the page is off.
	AdminTokenFile string
	// AdminRecentAsks is how many asks the page keeps.
	AdminRecentAsks int
	// AuditLog is where ask audit lines go: "" (off), stderr, stdout or a file path.
	AuditLog string
	// AuditRedact lists what every record of an ask withholds (audit log,
	// log lines, admin page): question, literals.
	AuditRedact []string
	// CatalogStore is a Postgres URL where replicas share catalog
	// snapshots, the translation cache and remembered pairs.
	CatalogStore string
	// CatalogStorePoll is how often a replica looks for snapshots another saved.
	CatalogStorePoll Duration
}

func (o OpsConfig) validate() error {
	var errs []error
	for _, r := range o.AuditRedact {
		if r != "question" && r != "literals" {
			errs = append(errs, fmt.Errorf("audit-redact %q: want question or literals", r))
		}
	}
	if o.AdminRecentAsks < 0 {
		errs = append(errs, errors.New("admin-recent-asks must not be negative"))
	}
	if o.AdminTokenFile != "" && o.AdminListen == "" {
		errs = append(errs, errors.New("admin-token-file needs admin-listen"))
	}
	return errors.Join(errs...)
}

// adminAddr makes a bare port local: metrics and the admin page are not
// for the network unless the operator names an interface.
func adminAddr(s string) string {
	if !strings.Contains(s, ":") {
		return "127.0.0.1:" + s
	}
	if strings.HasPrefix(s, ":") {
		return "127.0.0.1" + s
	}
	return s
}

// readToken reads the admin token file; it must not be empty.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if len(t) < 16 {
		return "", fmt.Errorf("admin token in %s is shorter than 16 characters", path)
	}
	return t, nil
}

// redaction is what every record of an ask withholds: the audit log, the
// engine's log lines, the admin page. One policy, applied where each record
// is made (proxy.Server.Redact, engine.Engine.Redact).
func (o OpsConfig) redaction() redact.Policy {
	return redact.Policy{Questions: slices.Contains(o.AuditRedact, "question"), Literals: slices.Contains(o.AuditRedact, "literals")}
}

// openAudit opens the audit sink; close releases a file. Records reach it
// already redacted (proxy.Server.Redact).
func openAudit(o OpsConfig, stdout, stderr io.Writer) (*router.AuditLog, func() error, error) {
	a := &router.AuditLog{}
	switch o.AuditLog {
	case "":
		return nil, func() error { return nil }, nil
	case "stderr", "-":
		a.W = stderr
		return a, func() error { return nil }, nil
	case "stdout":
		a.W = stdout
		return a, func() error { return nil }, nil
	}
	f, err := os.OpenFile(o.AuditLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("audit log: %w", err)
	}
	a.W = f
	return a, f.Close, nil
}

// ops is the operator side of a running proxy.
type ops struct {
	metrics *metrics.Metrics // nil without an admin listener
	recent  *admin.Recent
	audit   *router.AuditLog
	closers []func() error
	ln      net.Listener
	http    *http.Server
	// workload is the admin page's workload section; nil without --learn-workload.
	workload *workload.Collector
}

// setupOps opens the audit log and the admin listener and hooks them into
// srv (and the engine's parts, when there is an engine). Nothing is served
// until start.
func setupOps(cfg Config, srv *proxy.Server, stdout, stderr io.Writer, logger *zap.Logger) (*ops, error) {
	o := &ops{}
	audit, closeAudit, err := openAudit(cfg.Ops, stdout, stderr)
	if err != nil {
		return nil, err
	}
	o.audit = audit
	o.closers = append(o.closers, closeAudit)
	srv.Redact = cfg.Ops.redaction()
	if cfg.Ops.AdminListen != "" {
		o.metrics = metrics.New()
		o.metrics.WatchRelay(srv)
		srv.Metrics = o.metrics
		o.recent = admin.NewRecent(cfg.Ops.AdminRecentAsks)
		ln, err := net.Listen("tcp", adminAddr(cfg.Ops.AdminListen))
		if err != nil {
			o.Close()
			return nil, fmt.Errorf("admin listen: %w", err)
		}
		o.ln = ln
	}
	if o.audit != nil || o.metrics != nil {
		log := logger.Named("audit")
		srv.OnAsk = func(r *proxy.AskRecord) {
			if o.recent != nil {
				o.recent.Add(r)
			}
			if r.Tool == "" || r.Kind != proxy.MarkerNone { // MCP's ask and ask_sql are asks
				o.metrics.ObserveAsk(askMetrics(r))
			}
			if o.audit != nil {
				if err := o.audit.Record(r); err != nil {
					log.Warn("ask audit line not written", zap.Error(err))
				}
			}
		}
	}
	return o, nil
}

// askMetrics is what metrics record of an ask.
func askMetrics(r *proxy.AskRecord) metrics.Ask {
	a := metrics.Ask{Outcome: r.Outcome(), Duration: r.Duration, Profile: "default"}
	if r.Err != nil {
		a.SQLState = r.Err.Code
	}
	if rep := r.Report; rep != nil {
		if rep.Profile != "" {
			a.Profile = rep.Profile
		}
		cached := rep.Cached
		a.Cached = &cached
		for _, s := range rep.Stages {
			a.Stages = append(a.Stages, metrics.Stage{Name: s.Name, Duration: s.Duration})
			if strings.HasPrefix(s.Note, "guard:") {
				a.Guard = true
			}
		}
	}
	return a
}

// start serves the admin endpoints; readiness checks the upstreams and,
// with an engine, the catalog of each routed database and Ollama.
func (o *ops) start(cfg Config, srv *proxy.Server, parts *engineParts, token string, logger *zap.Logger) {
	if o.ln == nil {
		return
	}
	ver, _ := versionInfo()
	a := &admin.Server{Metrics: o.metrics, Token: token, Sessions: srv.Sessions, Asks: o.recent, Version: ver, Started: time.Now(), Workload: o.workload}
	a.Checks = append(a.Checks,
		admin.Check{Name: "proxy", Check: func(context.Context) error {
			if srv.ShuttingDown() {
				return errors.New("shutting down: draining sessions")
			}
			return nil
		}},
		admin.Check{Name: "upstream", Check: upstreamCheck(srv.Upstreams)})
	if parts != nil {
		a.Catalogs = parts.catalogs.Status
		if all, ok := parts.engine.Verified.(allVerified); ok {
			a.Verified = verifiedRows(all, parts.engine)
		}
		a.Checks = append(a.Checks,
			admin.Check{Name: "catalog", Check: catalogCheck(parts.catalogs, catalogDatabases(cfg))},
			admin.Check{Name: "ollama", Check: parts.ollamaCheck, Notes: parts.llm.Notes})
	}
	o.http = &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second}
	logger.Info("admin endpoints listening", zap.String("addr", o.ln.Addr().String()), zap.Bool("page", token != ""))
	go func() {
		if err := o.http.Serve(o.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("admin listener failed", zap.Error(err))
		}
	}()
}

// Close stops the admin listener and closes the audit sink.
func (o *ops) Close() error {
	var errs []error
	if o.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		errs = append(errs, o.http.Shutdown(ctx))
		cancel()
	} else if o.ln != nil {
		errs = append(errs, o.ln.Close())
	}
	for _, c := range o.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// upstreamCheck dials every upstream as a session does, TLS included, but
// does not log in: the proxy can relay.
func upstreamCheck(ups []proxy.Upstream) func(context.Context) error {
	return func(ctx context.Context) error {
		var errs []error
		for _, u := range ups {
			c, err := u.Dial(ctx)
			if err != nil {
				name := u.Database
				if name == "" {
					name = "default route"
				}
				// The readiness text goes to load balancers and operators,
				// not to database clients: the address helps.
				errs = append(errs, fmt.Errorf("%s (%s) unreachable: %w", name, u.Address, err))
				continue
			}
			c.Close()
		}
		return errors.Join(errs...)
	}
}

// catalogDatabases are the databases the routes name (the default route's
// from its URL): readiness waits for their catalogs.
func catalogDatabases(cfg Config) []string {
	cc, err := newCatalogConns(cfg)
	if err != nil {
		return nil
	}
	var out []string
	for _, u := range cfg.Upstreams {
		d := u.Database
		if d == "" {
			d = cc.routes[""].base.Database
		}
		if d != "" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// catalogCheck passes when every database has a snapshot; the first probe
// starts the builds, so a proxy becomes ready without waiting for a question.
func catalogCheck(m *catalog.Manager, databases []string) func(context.Context) error {
	return func(ctx context.Context) error {
		var errs []error
		for _, d := range databases {
			if m.Current(d) != nil {
				continue
			}
			if _, err := m.Get(ctx, d); err != nil {
				if ctx.Err() != nil {
					err = errors.New("still building")
				}
				errs = append(errs, fmt.Errorf("%s: %w", d, err))
			}
		}
		return errors.Join(errs...)
	}
}

// runHealthcheck implements `nlproxy healthcheck`: GET the readiness URL
// (default: from NLPROXY_ADMIN_LISTEN) and exit 0 on 200. Container images
// without curl use it as their HEALTHCHECK.
func runHealthcheck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	listen := getenv("NLPROXY_ADMIN_LISTEN")
	if listen == "" {
		listen = "9187"
	}
	host, port, err := net.SplitHostPort(adminAddr(listen))
	if err != nil {
		return usageErrorf("NLPROXY_ADMIN_LISTEN %q: %v", listen, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	fs := flag.NewFlagSet("nlproxy healthcheck", flag.ContinueOnError)
	fs.SetOutput(helpOutput(args, stdout, stderr))
	url := fs.String("url", "http://"+net.JoinHostPort(host, port)+"/readyz", "readiness URL to probe; /healthz checks only that the process serves")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	fs.Usage = func() {
		printFlagUsage(fs, args, "nlproxy healthcheck [--url URL] [--timeout D]", []string{"NLPROXY_ADMIN_LISTEN"}, "")
	}
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return usageErrorf("--url: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %s: %s", *url, resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprint(stdout, string(body))
	return nil
}

// hostList is the repeatable --ollama-host flag: the first use on the
// command line replaces the file's or environment's list, later uses add.
type hostList struct {
	dst *string
	set bool
}

func (h *hostList) String() string {
	if h.dst == nil {
		return ""
	}
	return *h.dst
}

func (h *hostList) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("empty host")
	}
	if !h.set || *h.dst == "" {
		*h.dst, h.set = s, true
		return nil
	}
	*h.dst += "," + s
	return nil
}

// allVerified is a source of verified queries that can list them all
// (verified.List, verified.Shared).
type allVerified interface {
	All(ctx context.Context) ([]verified.Entry, error)
}

// verifiedRows lists the verified queries with their use counts for the
// admin page.
func verifiedRows(all allVerified, eng *engine.Engine) func() []admin.VerifiedQuery {
	return func() []admin.VerifiedQuery {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		list, err := all.All(ctx)
		if err != nil {
			// The page still shows the rest; the store's own check says why.
			return nil
		}
		uses := eng.VerifiedUses()
		out := make([]admin.VerifiedQuery, 0, len(list))
		for _, e := range list {
			out = append(out, admin.VerifiedQuery{Database: e.Database, Name: e.Name, Question: e.Question, Roles: e.Roles,
				Uses: uses[e.Database+"/"+e.Name]})
		}
		return out
	}
}
