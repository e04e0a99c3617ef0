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
	"github.com/nlproxy/nlproxy/engine/bridge"
	"github.com/nlproxy/nlproxy/engine/llm"
)

// Config is everything `nlproxy serve` reads. Precedence, lowest first:
// built-in defaults, the YAML file (--config / NLPROXY_CONFIG), NLPROXY_* environment
// variables, command-line flags.
type Config struct {
	Listen    string          `yaml:"listen"`
	Upstreams []UpstreamEntry `yaml:"upstreams"`
	// UnixSocketDir, when set, also serves on DIR/.s.PGSQL.<listen port>.
	UnixSocketDir string `yaml:"unix_socket_dir"`

	TLSCert    string `yaml:"tls_cert"`
	TLSKey     string `yaml:"tls_key"`
	RequireTLS bool   `yaml:"require_tls"`

	MaxConns                 int      `yaml:"max_conns"`
	HandshakeTimeout         Duration `yaml:"handshake_timeout"`
	IdleTimeout              Duration `yaml:"idle_timeout"`
	IdleInTransactionTimeout Duration `yaml:"idle_in_transaction_timeout"`
	MaxMessageSize           int      `yaml:"max_message_size"`
	ShutdownTimeout          Duration `yaml:"shutdown_timeout"`
	GoroutineRelay           bool     `yaml:"goroutine_relay"`

	LogLevel  string `yaml:"log_level"`
	LogFormat string `yaml:"log_format"`

	Engine EngineConfig `yaml:"engine"`
	Ops    OpsConfig    `yaml:"ops"`
	// workload options (workload.go)
	Workload WorkloadConfig `yaml:"workload"`
}

// EngineConfig configures natural-language questions.
type EngineConfig struct {
	Disabled   bool   `yaml:"disabled"`
	OllamaHost string `yaml:"ollama_host"`
	// LLMAPI is the model servers' API: ollama (default) or openai.
	LLMAPI string `yaml:"llm_api"`
	// LLMAPIKeyFile holds the bearer token for an OpenAI-compatible server
	// (env NLPROXY_LLM_API_KEY gives the token itself).
	LLMAPIKeyFile string   `yaml:"llm_api_key_file"`
	LLMAPIKey     string   `yaml:"-"`
	Model         string   `yaml:"model"`       // generator
	SmallModel    string   `yaml:"small_model"` // cheap steps; defaults to Model
	EmbedModel    string   `yaml:"embed_model"` // optional
	NumCtx        int      `yaml:"num_ctx"`
	AskTimeout    Duration `yaml:"ask_timeout"`
	CallTimeout   Duration `yaml:"call_timeout"`
	TrialTimeout  Duration `yaml:"trial_timeout"`
	RunTimeout    Duration `yaml:"statement_timeout"`
	CacheTTL      Duration `yaml:"cache_ttl"`
	CacheSize     int      `yaml:"cache_size"`
	CatalogDSN    string   `yaml:"catalog_dsn"`
	DataDir       string   `yaml:"data_dir"`
	RefreshEvery  Duration `yaml:"catalog_refresh"`
	Glossary      string   `yaml:"glossary"`
	// Schemas narrows the catalog to these schemas; empty: every schema the
	// catalog role may use.
	Schemas []string `yaml:"schemas"`
	// AllowFunctions and DenyFunctions adjust the guard's function rule
	// ("name" or "schema.name", wildcards); the deny-list wins.
	AllowFunctions []string `yaml:"allow_functions"`
	DenyFunctions  []string `yaml:"deny_functions"`
	// TrialMaxBytes caps the row data a trial run keeps.
	TrialMaxBytes int `yaml:"trial_max_bytes"`
	// MaxQuestionBytes caps the text of one question (any ask form).
	MaxQuestionBytes int `yaml:"max_question_bytes"`
	// NoLiteralCorrection keeps string literals as the model wrote them.
	NoLiteralCorrection bool `yaml:"no_literal_correction"`
	// MaxAsks and MaxAsksPerClient cap questions answered at once.
	MaxAsks          int `yaml:"max_asks"`
	MaxAsksPerClient int `yaml:"max_asks_per_client"`
	// Profile is the proxy's default profile (fast, balanced, max);
	// DatabaseProfiles overrides it per database. An ask names its own with
	// /* ask(max): … */.
	Profile          string            `yaml:"profile"`
	DatabaseProfiles map[string]string `yaml:"database_profiles"`
	// Parallel bounds the model calls one ask makes at once.
	Parallel int `yaml:"llm_parallel"`
	// Examples is a file of operator question→SQL pairs (YAML list of
	// {database, question, sql}) shown to the model as few-shot examples.
	Examples string `yaml:"examples"`
	// AskAll configures questions across databases (askall.go).
	AskAll AskAllConfig `yaml:"ask_all"`
	// Optimize tunes optimize: and the max profile's optimizer stage.
	Optimize OptimizeConfig `yaml:"optimize"`
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

func defaultConfig() Config {
	return Config{
		Listen:           "127.0.0.1:6432",
		MaxConns:         1000,
		HandshakeTimeout: Duration(30 * time.Second),
		MaxMessageSize:   64 << 20,
		ShutdownTimeout:  Duration(30 * time.Second),
		LogLevel:         "info",
		LogFormat:        "console",
		// Every default is here, so --help shows it.
		Ops: OpsConfig{CatalogStorePoll: Duration(10 * time.Second), AdminRecentAsks: 100},
		// workload options (workload.go)
		Workload: defaultWorkloadConfig(),
		Engine: EngineConfig{
			Model:            "qwen2.5-coder:7b",
			NumCtx:           8192,
			AskTimeout:       Duration(2 * time.Minute),
			CallTimeout:      Duration(90 * time.Second),
			TrialTimeout:     Duration(5 * time.Second),
			TrialMaxBytes:    1 << 20,
			MaxQuestionBytes: bridge.DefaultMaxQuestionBytes,
			MaxAsks:          32,
			MaxAsksPerClient: 4,
			Profile:          engine.ProfileFast,
			Parallel:         2,
			RunTimeout:       Duration(time.Minute),
			CacheTTL:         Duration(10 * time.Minute),
			CacheSize:        1000,
			AskAll:           AskAllConfig{TopK: 3, MaxSteps: 4},
			DataDir:          defaultDataDir(),
			RefreshEvery:     Duration(10 * time.Minute),
			Optimize:         defaultOptimizeConfig(),
		},
	}
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

// loadConfig applies defaults, YAML, environment and flags in that order.
// getenv is os.Getenv in production; tests pass their own.
func loadConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	cfg := defaultConfig()

	path := getenv("NLPROXY_CONFIG")
	if p, ok := findFlagValue(args, "config"); ok {
		path = p
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("config file: %w", err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(data)))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return cfg, fmt.Errorf("config file %s: %w", path, err)
		}
	}
	if err := applyEnv(&cfg, getenv); err != nil {
		return cfg, err
	}

	fs := flag.NewFlagSet("nlproxy serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { serveUsage(fs, args) }
	fs.String("config", path, "YAML configuration file (env NLPROXY_CONFIG)")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address to accept clients on (env NLPROXY_LISTEN)")
	fs.StringVar(&cfg.UnixSocketDir, "unix-socket-dir", cfg.UnixSocketDir, "also accept clients on the Unix socket DIR/.s.PGSQL.<listen port>, as Postgres names it (env NLPROXY_UNIX_SOCKET_DIR)")
	var flagUpstreams []UpstreamEntry
	fs.Var(upstreamList{&flagUpstreams}, "upstream", "upstream Postgres as a libpq URL/DSN, or database=URL to route that database; repeatable (env NLPROXY_UPSTREAM, space-separated)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", cfg.TLSCert, "PEM certificate for client TLS (env NLPROXY_TLS_CERT)")
	fs.StringVar(&cfg.TLSKey, "tls-key", cfg.TLSKey, "PEM private key for client TLS (env NLPROXY_TLS_KEY)")
	fs.BoolVar(&cfg.RequireTLS, "require-tls", cfg.RequireTLS, "refuse clients that do not use TLS (env NLPROXY_REQUIRE_TLS)")
	fs.IntVar(&cfg.MaxConns, "max-conns", cfg.MaxConns, "maximum concurrent client connections, 0 = unlimited (env NLPROXY_MAX_CONNS)")
	fs.Var(&cfg.HandshakeTimeout, "handshake-timeout", "time allowed for startup and authentication (env NLPROXY_HANDSHAKE_TIMEOUT)")
	fs.Var(&cfg.IdleTimeout, "idle-timeout", "close clients idle outside a transaction this long, 0 = never (env NLPROXY_IDLE_TIMEOUT)")
	fs.Var(&cfg.IdleInTransactionTimeout, "idle-in-transaction-timeout", "close clients idle inside a transaction this long, 0 = never (env NLPROXY_IDLE_IN_TRANSACTION_TIMEOUT)")
	fs.IntVar(&cfg.MaxMessageSize, "max-message-size", cfg.MaxMessageSize, "largest client message accepted, bytes (env NLPROXY_MAX_MESSAGE_SIZE)")
	fs.BoolVar(&cfg.GoroutineRelay, "goroutine-relay", cfg.GoroutineRelay, "relay every session with goroutines on Go's netpoller instead of the event loop (env NLPROXY_GOROUTINE_RELAY)")
	fs.Var(&cfg.ShutdownTimeout, "shutdown-timeout", "on SIGTERM/SIGINT, how long to let sessions drain (env NLPROXY_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error (env NLPROXY_LOG_LEVEL)")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "console or json (env NLPROXY_LOG_FORMAT)")
	e := &cfg.Engine
	fs.BoolVar(&e.Disabled, "no-engine", e.Disabled, "relay only: answer natural-language statements with an error (env NLPROXY_NO_ENGINE)")
	fs.Var(&hostList{dst: &e.OllamaHost}, "ollama-host", "Ollama server; several (repeat the flag, or comma-separate) share the model calls (env OLLAMA_HOST or NLPROXY_OLLAMA_HOST; default http://127.0.0.1:11434)")
	fs.StringVar(&e.LLMAPI, "llm-api", e.LLMAPI, "the model servers' API: ollama, or openai for OpenAI-compatible servers (llama.cpp, vLLM, LM Studio, LocalAI; --ollama-host then names e.g. http://127.0.0.1:8080/v1) (env NLPROXY_LLM_API)")
	fs.StringVar(&e.LLMAPIKeyFile, "llm-api-key-file", e.LLMAPIKeyFile, "file holding the bearer token sent to an OpenAI-compatible server (env NLPROXY_LLM_API_KEY_FILE; or the token itself in NLPROXY_LLM_API_KEY)")
	fs.StringVar(&e.Model, "model", e.Model, "Ollama model that writes SQL (env NLPROXY_MODEL)")
	fs.StringVar(&e.SmallModel, "small-model", e.SmallModel, "Ollama model for cheap steps such as keyword extraction; default: --model (env NLPROXY_SMALL_MODEL)")
	fs.StringVar(&e.EmbedModel, "embed-model", e.EmbedModel, "optional Ollama embedding model for retrieval (env NLPROXY_EMBED_MODEL)")
	fs.IntVar(&e.NumCtx, "num-ctx", e.NumCtx, "context window requested from the model, tokens (env NLPROXY_NUM_CTX)")
	fs.Var(&e.AskTimeout, "ask-timeout", "time allowed for translating one question (env NLPROXY_ASK_TIMEOUT)")
	fs.Var(&e.CallTimeout, "llm-call-timeout", "time allowed for one model call (env NLPROXY_LLM_CALL_TIMEOUT)")
	fs.Var(&e.TrialTimeout, "trial-timeout", "statement_timeout of the engine's trial runs (env NLPROXY_TRIAL_TIMEOUT)")
	fs.Var(&e.RunTimeout, "ask-statement-timeout", "statement_timeout of each run of a generated query; 0 = 1m, never unbounded (env NLPROXY_ASK_STATEMENT_TIMEOUT)")
	fs.Var(&e.CacheTTL, "cache-ttl", "how long a translation is reused for the same question, role and schema; 0 disables (env NLPROXY_CACHE_TTL)")
	fs.IntVar(&e.CacheSize, "cache-size", e.CacheSize, "translations kept in the cache (env NLPROXY_CACHE_SIZE)")
	fs.StringVar(&e.CatalogDSN, "catalog-dsn", e.CatalogDSN, "credentials (user, password) the catalog reads schemas and values with; default: the upstream URL's (env NLPROXY_CATALOG_DSN)")
	fs.StringVar(&e.DataDir, "data-dir", e.DataDir, "where catalog snapshots are kept; empty keeps them in memory (env NLPROXY_DATA_DIR)")
	fs.Var(&e.RefreshEvery, "catalog-refresh", "how often the catalog re-checks the schema; DDL seen by the proxy also triggers it; 0 = only on DDL (env NLPROXY_CATALOG_REFRESH)")
	fs.StringVar(&e.Glossary, "glossary", e.Glossary, "optional YAML glossary of business terms (env NLPROXY_GLOSSARY)")
	fs.Func("schemas", "comma-separated schemas the catalog covers, spelled as stored; default: every schema the catalog role may use (env NLPROXY_SCHEMAS)",
		func(s string) error { e.Schemas = splitList(s); return nil })
	fs.Func("allow-function", "comma-separated functions generated SQL may call beyond non-volatile built-ins: name (found through search_path) or schema.name, wildcards allowed; repeatable (env NLPROXY_ALLOW_FUNCTIONS)",
		func(s string) error { e.AllowFunctions = append(e.AllowFunctions, splitList(s)...); return nil })
	fs.Func("deny-function", "comma-separated function names generated SQL may never call, in addition to the built-in deny-list; repeatable (env NLPROXY_DENY_FUNCTIONS)",
		func(s string) error { e.DenyFunctions = append(e.DenyFunctions, splitList(s)...); return nil })
	fs.IntVar(&e.TrialMaxBytes, "trial-max-bytes", e.TrialMaxBytes, "row data a trial run may return before the ask fails with 54000 (env NLPROXY_TRIAL_MAX_BYTES)")
	fs.IntVar(&e.MaxQuestionBytes, "max-question-bytes", e.MaxQuestionBytes, "longest question (the text of any ask form) in bytes; longer fails with 54000 before the model sees it (env NLPROXY_MAX_QUESTION_BYTES)")
	fs.BoolVar(&e.NoLiteralCorrection, "no-literal-correction", e.NoLiteralCorrection, "keep string literals as the model wrote them; by default one no row matches becomes the closest stored value, listed in the NOTICE (env NLPROXY_NO_LITERAL_CORRECTION)")
	fs.IntVar(&e.MaxAsks, "max-asks", e.MaxAsks, "questions the proxy answers at once; more fail with 53400 (env NLPROXY_MAX_ASKS)")
	fs.IntVar(&e.MaxAsksPerClient, "max-asks-per-client", e.MaxAsksPerClient, "questions one client host may have answered at once (env NLPROXY_MAX_ASKS_PER_CLIENT)")
	fs.StringVar(&e.Profile, "profile", e.Profile, "default profile: fast, balanced or max; an ask may name its own, /* ask(max): … */ (env NLPROXY_PROFILE)")
	fs.Func("database-profile", "database=profile: the profile for asks on that database; repeatable (env NLPROXY_DATABASE_PROFILES, comma-separated)",
		func(s string) error { return addDatabaseProfiles(e, s) })
	fs.IntVar(&e.Parallel, "llm-parallel", e.Parallel, "model calls one ask makes at once; match Ollama's OLLAMA_NUM_PARALLEL (env NLPROXY_LLM_PARALLEL)")
	fs.StringVar(&e.Examples, "examples", e.Examples, "YAML file of question→SQL examples per database, shown to the model (env NLPROXY_EXAMPLES)")
	var flagAuth []UpstreamEntry
	askAllFlags(fs, &e.AskAll, &flagAuth)
	registerOptimizeFlags(fs, &e.Optimize)
	registerOpsFlags(fs, &cfg.Ops)
	registerWorkloadFlags(fs, &cfg.Workload) // workload options (workload.go)
	if err := fs.Parse(args); err != nil {
		return cfg, flagError(err)
	}
	if len(flagAuth) > 0 {
		e.AskAll.Authenticators = flagAuth
	}
	if fs.NArg() > 0 {
		return cfg, usageErrorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if len(flagUpstreams) > 0 {
		cfg.Upstreams = flagUpstreams
	}
	return cfg, cfg.validate()
}

// findFlagValue finds -name/--name value or -name=value before the flag set exists.
func findFlagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--" {
			break
		}
		trimmed := strings.TrimLeft(a, "-")
		if trimmed == a {
			continue
		}
		if v, ok := strings.CutPrefix(trimmed, name+"="); ok {
			return v, true
		}
		if trimmed == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func applyEnv(cfg *Config, getenv func(string) string) error {
	str := func(key string, dst *string) {
		if v := getenv(key); v != "" {
			*dst = v
		}
	}
	var firstErr error
	fail := func(key string, err error) {
		if firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", key, err)
		}
	}
	integer := func(key string, dst *int) {
		if v := getenv(key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				fail(key, err)
				return
			}
			*dst = n
		}
	}
	float := func(key string, dst *float64) {
		if v := getenv(key); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				fail(key, err)
				return
			}
			*dst = f
		}
	}
	boolean := func(key string, dst *bool) {
		if v := getenv(key); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				fail(key, err)
				return
			}
			*dst = b
		}
	}
	duration := func(key string, dst *Duration) {
		if v := getenv(key); v != "" {
			if err := dst.Set(v); err != nil {
				fail(key, err)
			}
		}
	}
	str("NLPROXY_LISTEN", &cfg.Listen)
	str("NLPROXY_UNIX_SOCKET_DIR", &cfg.UnixSocketDir)
	if v := getenv("NLPROXY_UPSTREAM"); v != "" {
		var entries []UpstreamEntry
		for _, f := range strings.Fields(v) {
			e, err := parseUpstreamEntry(f)
			if err != nil {
				fail("NLPROXY_UPSTREAM", err)
				break
			}
			entries = append(entries, e)
		}
		cfg.Upstreams = entries
	}
	str("NLPROXY_TLS_CERT", &cfg.TLSCert)
	str("NLPROXY_TLS_KEY", &cfg.TLSKey)
	boolean("NLPROXY_REQUIRE_TLS", &cfg.RequireTLS)
	integer("NLPROXY_MAX_CONNS", &cfg.MaxConns)
	duration("NLPROXY_HANDSHAKE_TIMEOUT", &cfg.HandshakeTimeout)
	duration("NLPROXY_IDLE_TIMEOUT", &cfg.IdleTimeout)
	duration("NLPROXY_IDLE_IN_TRANSACTION_TIMEOUT", &cfg.IdleInTransactionTimeout)
	integer("NLPROXY_MAX_MESSAGE_SIZE", &cfg.MaxMessageSize)
	duration("NLPROXY_SHUTDOWN_TIMEOUT", &cfg.ShutdownTimeout)
	boolean("NLPROXY_GOROUTINE_RELAY", &cfg.GoroutineRelay)
	str("NLPROXY_LOG_LEVEL", &cfg.LogLevel)
	str("NLPROXY_LOG_FORMAT", &cfg.LogFormat)
	e := &cfg.Engine
	boolean("NLPROXY_NO_ENGINE", &e.Disabled)
	str("OLLAMA_HOST", &e.OllamaHost)
	str("NLPROXY_OLLAMA_HOST", &e.OllamaHost)
	str("NLPROXY_LLM_API", &e.LLMAPI)
	str("NLPROXY_LLM_API_KEY_FILE", &e.LLMAPIKeyFile)
	str("NLPROXY_LLM_API_KEY", &e.LLMAPIKey)
	str("NLPROXY_MODEL", &e.Model)
	str("NLPROXY_SMALL_MODEL", &e.SmallModel)
	str("NLPROXY_EMBED_MODEL", &e.EmbedModel)
	integer("NLPROXY_NUM_CTX", &e.NumCtx)
	duration("NLPROXY_ASK_TIMEOUT", &e.AskTimeout)
	duration("NLPROXY_LLM_CALL_TIMEOUT", &e.CallTimeout)
	duration("NLPROXY_TRIAL_TIMEOUT", &e.TrialTimeout)
	duration("NLPROXY_ASK_STATEMENT_TIMEOUT", &e.RunTimeout)
	duration("NLPROXY_CACHE_TTL", &e.CacheTTL)
	integer("NLPROXY_CACHE_SIZE", &e.CacheSize)
	str("NLPROXY_CATALOG_DSN", &e.CatalogDSN)
	str("NLPROXY_DATA_DIR", &e.DataDir)
	duration("NLPROXY_CATALOG_REFRESH", &e.RefreshEvery)
	str("NLPROXY_GLOSSARY", &e.Glossary)
	if v := getenv("NLPROXY_SCHEMAS"); v != "" {
		e.Schemas = splitList(v)
	}
	if v := getenv("NLPROXY_ALLOW_FUNCTIONS"); v != "" {
		e.AllowFunctions = splitList(v)
	}
	if v := getenv("NLPROXY_DENY_FUNCTIONS"); v != "" {
		e.DenyFunctions = splitList(v)
	}
	integer("NLPROXY_TRIAL_MAX_BYTES", &e.TrialMaxBytes)
	integer("NLPROXY_MAX_QUESTION_BYTES", &e.MaxQuestionBytes)
	boolean("NLPROXY_NO_LITERAL_CORRECTION", &e.NoLiteralCorrection)
	integer("NLPROXY_MAX_ASKS", &e.MaxAsks)
	integer("NLPROXY_MAX_ASKS_PER_CLIENT", &e.MaxAsksPerClient)
	str("NLPROXY_PROFILE", &e.Profile)
	if v := getenv("NLPROXY_DATABASE_PROFILES"); v != "" {
		if err := addDatabaseProfiles(e, v); err != nil {
			fail("NLPROXY_DATABASE_PROFILES", err)
		}
	}
	integer("NLPROXY_LLM_PARALLEL", &e.Parallel)
	str("NLPROXY_EXAMPLES", &e.Examples)
	if err := askAllEnv(&e.AskAll, getenv); err != nil {
		fail("ask-all", err)
	}
	o := &e.Optimize
	integer("NLPROXY_OPTIMIZE_TOLERANCE", &o.Tolerance)
	integer("NLPROXY_OPTIMIZE_RUNS", &o.Runs)
	integer("NLPROXY_OPTIMIZE_MAX_CALLS", &o.MaxCalls)
	integer("NLPROXY_OPTIMIZE_TIMING_RUNS", &o.TimingRuns)
	float("NLPROXY_OPTIMIZE_MIN_GAIN", &o.MinGain)
	float("NLPROXY_OPTIMIZE_MIN_COST", &o.MinCost)
	duration("NLPROXY_OPTIMIZE_MIN_SAVING", &o.MinSaving)
	if err := applyOpsEnv(cfg, getenv); err != nil && firstErr == nil {
		firstErr = err
	}
	// workload options (workload.go)
	if err := applyWorkloadEnv(&cfg.Workload, getenv); err != nil && firstErr == nil {
		firstErr = err
	}
	return firstErr
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
	if err := c.Workload.validate(); err != nil { // workload options (workload.go)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
