package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/prompts"
)

// Config is everything `nlproxy serve` reads. Precedence, lowest first:
// built-in defaults, the YAML file (--config / NLPROXY_CONFIG), NLPROXY_*
// environment variables, command-line flags. Where each field comes from —
// flag, variable, YAML key, default — is its entry in the option table
// (options.go); a field without one fails TestOptionTable.
type Config struct {
	Listen    string
	Upstreams []UpstreamEntry
	// UnixSocketDir, when set, also serves on DIR/.s.PGSQL.<listen port>.
	UnixSocketDir string

	TLSCert    string
	TLSKey     string
	RequireTLS bool

	MaxConns                 int
	HandshakeTimeout         Duration
	IdleTimeout              Duration
	IdleInTransactionTimeout Duration
	MaxMessageSize           int
	ShutdownTimeout          Duration
	GoroutineRelay           bool
	RelayLoop                string

	LogLevel  string
	LogFormat string

	Engine   EngineConfig
	Ops      OpsConfig
	Workload WorkloadConfig
	MCP      MCPConfig
}

// EngineConfig configures natural-language questions.
type EngineConfig struct {
	Disabled   bool
	OllamaHost string
	// LLMAPI is the model servers' API: ollama (default) or openai.
	LLMAPI string
	// LLMAPIKeyFile holds the bearer token for an OpenAI-compatible server
	// (env NLPROXY_LLM_API_KEY gives the token itself).
	LLMAPIKeyFile string
	LLMAPIKey     string
	Model         string // generator
	SmallModel    string // cheap steps; defaults to Model
	EmbedModel    string // optional
	NumCtx        int
	AskTimeout    Duration
	CallTimeout   Duration
	TrialTimeout  Duration
	RunTimeout    Duration
	CacheTTL      Duration
	CacheSize     int
	CatalogDSN    string
	DataDir       string
	RefreshEvery  Duration
	RefreshGap    Duration // least time between DDL-triggered catalog checks
	Glossary      string
	// Schemas narrows the catalog to these schemas; empty: every schema the
	// catalog role may use.
	Schemas []string
	// ValueOwners narrows the value index to relations these roles own;
	// empty: every relation the catalog role may read.
	ValueOwners []string
	// AllowFunctions and DenyFunctions adjust the guard's function rule
	// ("name" or "schema.name", wildcards); the deny-list wins.
	AllowFunctions []string
	DenyFunctions  []string
	// TrialMaxBytes caps the row data a trial run keeps.
	TrialMaxBytes int
	// MaxQuestionBytes caps the text of one question (any ask form).
	MaxQuestionBytes int
	// NoLiteralCorrection keeps string literals as the model wrote them.
	NoLiteralCorrection bool
	// ModelData says what of the data may reach the model: schema, values
	// or rows (engine.ModelData).
	ModelData string
	// MaxAsks and MaxAsksPerClient cap questions answered at once.
	MaxAsks          int
	MaxAsksPerClient int
	// Profile is the proxy's default profile (fast, balanced, max);
	// DatabaseProfiles overrides it per database. An ask names its own with
	// /* ask(max): … */.
	Profile          string
	DatabaseProfiles map[string]string
	// Parallel bounds the model calls one ask makes at once.
	Parallel int
	// OutputCaps overrides the output cap (tokens) of a prompt step.
	OutputCaps map[string]int
	// NoProgress turns off the progress NOTICEs of a running ask.
	NoProgress bool
	// Examples is a file of operator question→SQL pairs (YAML list of
	// {database, question, sql}) shown to the model as few-shot examples.
	Examples string
	// Verified is a file of verified queries (catalog/verified).
	Verified string
	// SemanticModels are dbt semantic manifests and OSI YAML files to import
	// (catalog/semantic).
	SemanticModels []string
	// AskAll configures questions across databases (askall.go).
	AskAll AskAllConfig
	// Optimize tunes optimize: and the max profile's optimizer stage.
	Optimize OptimizeConfig
}

// UpstreamEntry routes clients whose startup database is Database (empty: the
// default route) to the server named by URL (libpq URL or key=value DSN).
type UpstreamEntry struct {
	Database string `yaml:"database"`
	URL      string `yaml:"url"`
}

// Duration reads "30s"/"5m" in YAML and flags.
type Duration time.Duration

// UnmarshalYAML accepts Go duration strings.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

func (d Duration) String() string { return time.Duration(d).String() }

// Set implements flag.Value.
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// defaultDataDir keeps catalog snapshots in the user's cache directory.
func defaultDataDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "nlproxy", "catalog")
}

// upstreamList is the repeatable --upstream flag: "URL" or "database=URL".
type upstreamList struct{ entries *[]UpstreamEntry }

func (u upstreamList) String() string {
	if u.entries == nil {
		return ""
	}
	parts := make([]string, 0, len(*u.entries))
	for _, e := range *u.entries {
		parts = append(parts, formatUpstream(e))
	}
	return strings.Join(parts, " ")
}

func (u upstreamList) Set(s string) error {
	e, err := parseUpstreamEntry(s)
	if err != nil {
		return err
	}
	*u.entries = append(*u.entries, e)
	return nil
}

func formatUpstream(e UpstreamEntry) string {
	if e.Database == "" {
		return e.URL
	}
	return e.Database + "=" + e.URL
}

// parseUpstreamEntry splits "database=URL". A bare URL or key=value DSN (which
// contains "=" after a space or "://") is the default route.
func parseUpstreamEntry(s string) (UpstreamEntry, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return UpstreamEntry{}, errors.New("empty upstream")
	}
	if i := strings.Index(s, "="); i > 0 {
		route := s[:i]
		rest := s[i+1:]
		firstToken, _, _ := strings.Cut(rest, " ")
		isDSN := strings.HasPrefix(rest, "postgres://") || strings.HasPrefix(rest, "postgresql://") || strings.Contains(firstToken, "=")
		if !strings.ContainsAny(route, " :/") && isDSN {
			return UpstreamEntry{Database: route, URL: rest}, nil
		}
	}
	return UpstreamEntry{URL: s}, nil
}

// loadConfig applies defaults, YAML, environment and flags in that order,
// each as the option table (options.go) describes it.
// getenv is os.Getenv in production; tests pass their own.
func loadConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	return loadConfigWith(args, getenv, stderr, nil)
}

// loadConfigWith is loadConfig with adjust applied after every source and
// before validation (nlproxy mcp derives settings from others).
func loadConfigWith(args []string, getenv func(string) string, stderr io.Writer, adjust func(*Config)) (Config, error) {
	cfg := defaultConfig()

	path := getenv("NLPROXY_CONFIG")
	if p, ok := findFlagValue(args, configOption); ok {
		path = p
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("config file: %w", err)
		}
		if err := decodeYAML(&cfg, data); err != nil {
			return cfg, fmt.Errorf("config file %s: %w", path, err)
		}
	}
	if err := applyEnv(&cfg, getenv); err != nil {
		return cfg, err
	}

	fs := flag.NewFlagSet("nlproxy serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { serveUsage(fs, args) }
	fs.String(configOption, path, lookupOption(configOption).usage())
	after := registerFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		return cfg, flagError(err)
	}
	for _, f := range after {
		f()
	}
	if fs.NArg() > 0 {
		return cfg, usageErrorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if adjust != nil {
		adjust(&cfg)
	}
	return cfg, cfg.validate()
}

// findFlagValue finds -name/--name value or -name=value before the flag set
// exists (the first, where given more than once).
func findFlagValue(args []string, name string) (string, bool) {
	if vs := flagValues(args, name); len(vs) > 0 {
		return vs[0], true
	}
	return "", false
}

// addDatabaseProfiles parses "db=profile[,db2=profile]".
func addDatabaseProfiles(e *EngineConfig, s string) error {
	for _, item := range splitList(s) {
		db, prof, ok := strings.Cut(item, "=")
		if !ok || strings.TrimSpace(db) == "" || strings.TrimSpace(prof) == "" {
			return fmt.Errorf("%q: want database=profile", item)
		}
		if e.DatabaseProfiles == nil {
			e.DatabaseProfiles = map[string]string{}
		}
		e.DatabaseProfiles[strings.TrimSpace(db)] = strings.ToLower(strings.TrimSpace(prof))
	}
	return nil
}

// addOutputCaps parses "step=tokens[,step2=tokens]".
func addOutputCaps(e *EngineConfig, s string) error {
	for _, item := range splitList(s) {
		step, n, ok := strings.Cut(item, "=")
		step = strings.TrimSpace(step)
		tokens, err := strconv.Atoi(strings.TrimSpace(n))
		if !ok || !slices.Contains(prompts.OutputSteps(), step) || err != nil || tokens <= 0 {
			return fmt.Errorf("%q: want step=tokens, a step one of %s", item, strings.Join(prompts.OutputSteps(), ", "))
		}
		if e.OutputCaps == nil {
			e.OutputCaps = map[string]int{}
		}
		e.OutputCaps[step] = tokens
	}
	return nil
}

// splitList splits "a, b,c" into its non-empty, trimmed items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func (c Config) validate() error {
	var errs []error
	if c.Listen == "" {
		errs = append(errs, errors.New("listen address is empty"))
	}
	if len(c.Upstreams) == 0 {
		errs = append(errs, errors.New("no upstream: pass --upstream postgres://user@host:5432/db or set NLPROXY_UPSTREAM"))
	}
	defaults := 0
	seen := map[string]bool{}
	for _, u := range c.Upstreams {
		if u.URL == "" {
			errs = append(errs, fmt.Errorf("upstream for database %q has no url", u.Database))
		}
		if u.Database == "" {
			defaults++
		} else if seen[u.Database] {
			errs = append(errs, fmt.Errorf("database %q is routed twice", u.Database))
		}
		seen[u.Database] = true
	}
	if defaults > 1 {
		errs = append(errs, errors.New("more than one default upstream (give the others a database= route)"))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("tls-cert and tls-key must be given together"))
	}
	if c.RequireTLS && c.TLSCert == "" {
		errs = append(errs, errors.New("require-tls needs tls-cert and tls-key"))
	}
	if c.MaxConns < 0 || c.MaxMessageSize < 0 {
		errs = append(errs, errors.New("max-conns and max-message-size must not be negative"))
	}
	switch c.RelayLoop {
	case "epoll", "io_uring", "auto": // proxy.RelayLoop's

	default:
		errs = append(errs, fmt.Errorf("relay-loop %q: want epoll, io_uring or auto", c.RelayLoop))
	}
	switch c.LogFormat {
	case "console", "json":
	default:
		errs = append(errs, fmt.Errorf("log-format %q: want console or json", c.LogFormat))
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log-level %q: want debug, info, warn or error", c.LogLevel))
	}
	if !c.Engine.Disabled {
		if c.Engine.Model == "" {
			errs = append(errs, errors.New("model is empty (set --model, or --no-engine to relay only)"))
		}
		switch strings.ToLower(c.Engine.LLMAPI) {
		case "", llm.APIOllama, llm.APIOpenAI:
		default:
			errs = append(errs, fmt.Errorf("llm-api %q: want %s or %s", c.Engine.LLMAPI, llm.APIOllama, llm.APIOpenAI))
		}
		if c.Engine.NumCtx < 512 {
			errs = append(errs, fmt.Errorf("num-ctx %d is too small (at least 512)", c.Engine.NumCtx))
		}
		if slices.Contains(c.Engine.Schemas, "") {
			errs = append(errs, errors.New("schemas: empty schema name"))
		}
		known := engine.ProfileNames()
		if c.Engine.Profile != "" && !slices.Contains(known, strings.ToLower(c.Engine.Profile)) {
			errs = append(errs, fmt.Errorf("profile %q: want one of %s", c.Engine.Profile, strings.Join(known, ", ")))
		}
		for db, p := range c.Engine.DatabaseProfiles {
			if !slices.Contains(known, strings.ToLower(p)) {
				errs = append(errs, fmt.Errorf("database-profile %s=%s: want one of %s", db, p, strings.Join(known, ", ")))
			}
		}
		if c.Engine.MaxQuestionBytes <= 0 {
			errs = append(errs, fmt.Errorf("max-question-bytes %d: must be positive", c.Engine.MaxQuestionBytes))
		}
		if err := c.Engine.AskAll.validate(); err != nil {
			errs = append(errs, err)
		}
		if err := c.Engine.Optimize.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Ops.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Workload.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.validateMCP(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
