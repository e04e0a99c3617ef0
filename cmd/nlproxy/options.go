package main

import (
	"bytes"
	"flag"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/askall"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/engine/optimize"
	"github.com/nlproxy/nlproxy/mcpserver"
	"github.com/nlproxy/nlproxy/proxy"
	"github.com/nlproxy/nlproxy/router"
	"github.com/nlproxy/nlproxy/workload"
)

// option is one setting of `nlproxy serve`. The flag, the environment
// variables, the YAML key, the default, --help and docs/configuration.md all
// come from its entry in options(): adding a setting is adding an entry
// (and the Config field it fills).
type option struct {
	Flag string   // command-line flag, without dashes; "" only with Only
	Env  []string // environment variables; when several are set, the last wins
	YAML string   // dotted path in the configuration file; "" only with Only
	// Default is the value before the file, the environment and flags:
	// a value of the field's type (or its underlying kind), or a
	// func() string computing it; nil: the zero value.
	Default any
	// DefaultDoc describes a default that is computed or decided elsewhere
	// (the text --help and the reference show instead of the value).
	DefaultDoc string
	Help       string
	// EnvForm says how the environment writes a list ("space-separated").
	EnvForm string
	// Only says why the option lacks a flag or a YAML key.
	Only string
	// Field is the option's field in c, as a pointer.
	Field func(c *Config) any

	// flag and env replace the behaviour the field's type gives (repeatable
	// flags that add, lists written in a special form). flag returns what
	// to do after the command line is parsed, or nil.
	flag func(c *Config, fs *flag.FlagSet, name, usage string) (after func())
	env  func(c *Config, v string) error
}

// configOption is the flag and variable naming the YAML file itself; it is
// read before the file, so it has no field in Config.
const configOption = "config"

// options is the table of `nlproxy serve`'s settings, in the order of
// --help and docs/configuration.md. Every default is here: a value some
// package also falls back to when its field is zero is that package's
// exported constant (engine.Default…, proxy.Default…, router.Default…,
// askall.Default…, optimize.Default…, llm.Default…), referred to, not
// repeated; the other values are written only here.
func options() []option {
	return []option{
		{Flag: configOption, Env: env("CONFIG"), Help: "YAML configuration file",
			Only: "names the file itself, so it has no key in it"},
		{Flag: "listen", Env: env("LISTEN"), YAML: "listen", Default: "127.0.0.1:6432",
			Help:  "address to accept clients on",
			Field: func(c *Config) any { return &c.Listen }},
		{Flag: "unix-socket-dir", Env: env("UNIX_SOCKET_DIR"), YAML: "unix_socket_dir",
			Help:  "also accept clients on the Unix socket DIR/.s.PGSQL.<listen port>, as Postgres names it (mode 0777, beside a lock file)",
			Field: func(c *Config) any { return &c.UnixSocketDir }},
		{Flag: "upstream", Env: env("UPSTREAM"), YAML: "upstreams", EnvForm: "space-separated",
			Help:  "upstream Postgres as a libpq URL/DSN, or database=URL to route clients whose startup database is that one; the entry without a route is the default; repeatable",
			Field: func(c *Config) any { return &c.Upstreams },
			flag: func(c *Config, fs *flag.FlagSet, name, usage string) func() {
				var got []UpstreamEntry // the command line's list replaces the others
				fs.Var(upstreamList{&got}, name, usage)
				return func() {
					if len(got) > 0 {
						c.Upstreams = got
					}
				}
			},
			env: func(c *Config, v string) error { return setEntries(&c.Upstreams, v) }},
		{Flag: "tls-cert", Env: env("TLS_CERT"), YAML: "tls_cert",
			Help:  "PEM certificate for client TLS; with --tls-key, clients may use TLS (sslmode=require), which ends at the proxy",
			Field: func(c *Config) any { return &c.TLSCert }},
		{Flag: "tls-key", Env: env("TLS_KEY"), YAML: "tls_key",
			Help:  "PEM private key for client TLS",
			Field: func(c *Config) any { return &c.TLSKey }},
		{Flag: "require-tls", Env: env("REQUIRE_TLS"), YAML: "require_tls",
			Help:  "refuse clients that do not use TLS (28000)",
			Field: func(c *Config) any { return &c.RequireTLS }},
		{Flag: "max-conns", Env: env("MAX_CONNS"), YAML: "max_conns", Default: 1000,
			Help:  "maximum concurrent client connections, 0 = unlimited; beyond it 53300",
			Field: func(c *Config) any { return &c.MaxConns }},
		{Flag: "handshake-timeout", Env: env("HANDSHAKE_TIMEOUT"), YAML: "handshake_timeout", Default: proxy.DefaultHandshakeTimeout,
			Help:  "time allowed for startup and authentication",
			Field: func(c *Config) any { return &c.HandshakeTimeout }},
		{Flag: "idle-timeout", Env: env("IDLE_TIMEOUT"), YAML: "idle_timeout",
			Help:  "close clients idle outside a transaction this long, 0 = never",
			Field: func(c *Config) any { return &c.IdleTimeout }},
		{Flag: "idle-in-transaction-timeout", Env: env("IDLE_IN_TRANSACTION_TIMEOUT"), YAML: "idle_in_transaction_timeout",
			Help:  "close clients idle inside a transaction this long, 0 = never",
			Field: func(c *Config) any { return &c.IdleInTransactionTimeout }},
		{Flag: "max-message-size", Env: env("MAX_MESSAGE_SIZE"), YAML: "max_message_size", Default: proxy.DefaultMaxMessageSize,
			Help:  "largest client message accepted, bytes; a larger one gets 08P01 and the connection is closed",
			Field: func(c *Config) any { return &c.MaxMessageSize }},
		{Flag: "goroutine-relay", Env: env("GOROUTINE_RELAY"), YAML: "goroutine_relay",
			Help:  "relay every session with goroutines on Go's netpoller instead of the event loop that serves sessions (plaintext or TLS) without idle timeouts on Linux (docs/benchmarks.md, Relay)",
			Field: func(c *Config) any { return &c.GoroutineRelay }},
		{Flag: "relay-loop", Env: env("RELAY_LOOP"), YAML: "relay_loop", Default: string(proxy.RelayAuto),
			Help:  "the event loops' I/O on Linux: epoll; io_uring (plaintext sessions; TLS ones stay on epoll), falling back to epoll with a log line where the kernel refuses it; or auto, the same with a quieter fallback (docs/benchmarks.md, io_uring)",
			Field: func(c *Config) any { return &c.RelayLoop }},
		{Flag: "shutdown-timeout", Env: env("SHUTDOWN_TIMEOUT"), YAML: "shutdown_timeout", Default: 30 * time.Second,
			Help:  "on SIGTERM/SIGINT, how long to let sessions drain",
			Field: func(c *Config) any { return &c.ShutdownTimeout }},
		{Flag: "log-level", Env: env("LOG_LEVEL"), YAML: "log_level", Default: "info",
			Help:  "debug, info, warn or error",
			Field: func(c *Config) any { return &c.LogLevel }},
		{Flag: "log-format", Env: env("LOG_FORMAT"), YAML: "log_format", Default: "console",
			Help:  "console or json",
			Field: func(c *Config) any { return &c.LogFormat }},

		// The engine: natural-language questions.
		{Flag: "no-engine", Env: env("NO_ENGINE"), YAML: "engine.disabled",
			Help:  "relay only: answer natural-language statements with an error",
			Field: func(c *Config) any { return &c.Engine.Disabled }},
		{Flag: "ollama-host", Env: []string{"OLLAMA_HOST", "NLPROXY_OLLAMA_HOST"}, YAML: "engine.ollama_host", DefaultDoc: llm.DefaultHost,
			Help:  "Ollama server; several (repeat the flag, or comma-separate) share the model calls",
			Field: func(c *Config) any { return &c.Engine.OllamaHost },
			flag: func(c *Config, fs *flag.FlagSet, name, usage string) func() {
				fs.Var(&hostList{dst: &c.Engine.OllamaHost}, name, usage)
				return nil
			}},
		{Flag: "llm-api", Env: env("LLM_API"), YAML: "engine.llm_api", DefaultDoc: llm.APIOllama,
			Help:  "the model servers' API: ollama, or openai for OpenAI-compatible servers (llama.cpp, vLLM, LM Studio, LocalAI; --ollama-host then names e.g. http://127.0.0.1:8080/v1; docs/real-models.md)",
			Field: func(c *Config) any { return &c.Engine.LLMAPI }},
		{Flag: "llm-api-key-file", Env: env("LLM_API_KEY_FILE"), YAML: "engine.llm_api_key_file",
			Help:  "file holding the bearer token sent to an OpenAI-compatible server (or the token itself in NLPROXY_LLM_API_KEY)",
			Field: func(c *Config) any { return &c.Engine.LLMAPIKeyFile }},
		{Env: env("LLM_API_KEY"),
			Help:  "the bearer token sent to an OpenAI-compatible server",
			Only:  "a secret: a flag would show it in the process list and a key would keep it in the file; use --llm-api-key-file there",
			Field: func(c *Config) any { return &c.Engine.LLMAPIKey }},
		{Flag: "model", Env: env("MODEL"), YAML: "engine.model", Default: "qwen2.5-coder:7b",
			Help:  "Ollama model that writes SQL",
			Field: func(c *Config) any { return &c.Engine.Model }},
		{Flag: "small-model", Env: env("SMALL_MODEL"), YAML: "engine.small_model", DefaultDoc: "--model",
			Help:  "Ollama model for cheap steps such as keyword extraction",
			Field: func(c *Config) any { return &c.Engine.SmallModel }},
		{Flag: "embed-model", Env: env("EMBED_MODEL"), YAML: "engine.embed_model",
			Help:  "optional Ollama embedding model for retrieval",
			Field: func(c *Config) any { return &c.Engine.EmbedModel }},
		{Flag: "num-ctx", Env: env("NUM_CTX"), YAML: "engine.num_ctx", Default: llm.DefaultNumCtx,
			Help:  "context window requested from the model, tokens",
			Field: func(c *Config) any { return &c.Engine.NumCtx }},
		{Flag: "ask-timeout", Env: env("ASK_TIMEOUT"), YAML: "engine.ask_timeout", Default: engine.DefaultAskTimeout,
			Help:  "time allowed for translating one question, all stages, in the fast profile; balanced may take 2×, max 4×",
			Field: func(c *Config) any { return &c.Engine.AskTimeout }},
		// Longer than the model client's own default (llm.DefaultCallTimeout):
		// a 7B model on a CPU needs it for the long generation prompts.
		{Flag: "llm-call-timeout", Env: env("LLM_CALL_TIMEOUT"), YAML: "engine.call_timeout", Default: 90 * time.Second,
			Help:  "time allowed for one model call",
			Field: func(c *Config) any { return &c.Engine.CallTimeout }},
		{Flag: "trial-timeout", Env: env("TRIAL_TIMEOUT"), YAML: "engine.trial_timeout", Default: engine.DefaultTrialTimeout,
			Help:  "statement_timeout of the engine's trial runs",
			Field: func(c *Config) any { return &c.Engine.TrialTimeout }},
		{Flag: "ask-statement-timeout", Env: env("ASK_STATEMENT_TIMEOUT"), YAML: "engine.statement_timeout", Default: router.DefaultStatementTimeout,
			Help:  "statement_timeout of each run of a generated query; 0 = 1m, never unbounded",
			Field: func(c *Config) any { return &c.Engine.RunTimeout }},
		{Flag: "cache-ttl", Env: env("CACHE_TTL"), YAML: "engine.cache_ttl", Default: 10 * time.Minute,
			Help:  "how long a translation is reused for the same question, role and schema; 0 disables",
			Field: func(c *Config) any { return &c.Engine.CacheTTL }},
		{Flag: "cache-size", Env: env("CACHE_SIZE"), YAML: "engine.cache_size", Default: 1000,
			Help:  "translations kept in the cache",
			Field: func(c *Config) any { return &c.Engine.CacheSize }},
		{Flag: "catalog-dsn", Env: env("CATALOG_DSN"), YAML: "engine.catalog_dsn", DefaultDoc: "the upstream URL's",
			Help:  "credentials (user, password) the catalog reads schemas and values with; the password also from PGPASSWORD, PGPASSFILE or ~/.pgpass",
			Field: func(c *Config) any { return &c.Engine.CatalogDSN }},
		{Flag: "data-dir", Env: env("DATA_DIR"), YAML: "engine.data_dir", Default: defaultDataDir,
			DefaultDoc: "nlproxy/catalog in the user's cache directory",
			Help:       "where catalog snapshots are kept (nlproxy catalog build and lookup use the same default); empty keeps them in memory",
			Field:      func(c *Config) any { return &c.Engine.DataDir }},
		{Flag: "catalog-refresh", Env: env("CATALOG_REFRESH"), YAML: "engine.catalog_refresh", Default: 10 * time.Minute,
			Help:  "how often the catalog re-checks the schema; DDL seen by the proxy also triggers it; 0 = only on DDL",
			Field: func(c *Config) any { return &c.Engine.RefreshEvery }},
		{Flag: "catalog-refresh-gap", Env: env("CATALOG_REFRESH_GAP"), YAML: "engine.catalog_refresh_gap", Default: catalog.DefaultMinRefreshGap,
			Help:  "least time between the end of one catalog check and one that DDL seen in traffic triggers: any role's DDL asks for a rescan, so a burst is answered by one rescan now and one when the gap has passed; 0 = no minimum",
			Field: func(c *Config) any { return &c.Engine.RefreshGap }},
		{Flag: "glossary", Env: env("GLOSSARY"), YAML: "engine.glossary",
			Help:  "optional YAML glossary of business terms",
			Field: func(c *Config) any { return &c.Engine.Glossary }},
		{Flag: "schemas", Env: env("SCHEMAS"), YAML: "engine.schemas", DefaultDoc: "every schema the catalog role may use",
			Help:  "comma-separated schemas the catalog covers, spelled as stored (Sales EU, not \"Sales EU\")",
			Field: func(c *Config) any { return &c.Engine.Schemas }},
		{Flag: "value-owners", Env: env("VALUE_OWNERS"), YAML: "engine.value_owners", DefaultDoc: "every owner",
			Help:  "comma-separated roles whose tables the value index reads stored values from; tables of other owners keep their schema but no values (docs/catalog.md)",
			Field: func(c *Config) any { return &c.Engine.ValueOwners }},
		{Flag: "allow-function", Env: env("ALLOW_FUNCTIONS"), YAML: "engine.allow_functions",
			Help:  "comma-separated functions generated SQL may call beyond non-volatile built-ins: name (found through search_path) or schema.name, wildcards allowed; repeatable",
			Field: func(c *Config) any { return &c.Engine.AllowFunctions },
			flag:  appendListFlag(func(c *Config) *[]string { return &c.Engine.AllowFunctions })},
		{Flag: "deny-function", Env: env("DENY_FUNCTIONS"), YAML: "engine.deny_functions",
			Help:  "comma-separated function names generated SQL may never call, in addition to the built-in deny-list; repeatable",
			Field: func(c *Config) any { return &c.Engine.DenyFunctions },
			flag:  appendListFlag(func(c *Config) *[]string { return &c.Engine.DenyFunctions })},
		{Flag: "trial-max-bytes", Env: env("TRIAL_MAX_BYTES"), YAML: "engine.trial_max_bytes", Default: engine.DefaultTrialMaxBytes,
			Help:  "row data a trial run may return before the ask fails with 54000",
			Field: func(c *Config) any { return &c.Engine.TrialMaxBytes }},
		{Flag: "max-question-bytes", Env: env("MAX_QUESTION_BYTES"), YAML: "engine.max_question_bytes", Default: router.DefaultMaxQuestionBytes,
			Help:  "longest question (the text of any ask form, optimize: SQL included) in bytes; longer fails with 54000 before the model, the engine or a log sees it",
			Field: func(c *Config) any { return &c.Engine.MaxQuestionBytes }},
		{Flag: "no-literal-correction", Env: env("NO_LITERAL_CORRECTION"), YAML: "engine.no_literal_correction",
			Help:  "keep string literals as the model wrote them; by default one no row matches becomes the closest stored value, listed in the NOTICE",
			Field: func(c *Config) any { return &c.Engine.NoLiteralCorrection }},
		{Flag: "model-data", Env: env("MODEL_DATA"), YAML: "engine.model_data", Default: string(engine.DefaultModelData),
			Help:  "what of the data may reach the model: schema (names, types, comments, semantic layer; no stored value, no result row), values (adds stored values: value-index hits, common values) or rows (adds result rows for the fixer, selection and ask(all)'s prose); literal correction works locally in every mode",
			Field: func(c *Config) any { return &c.Engine.ModelData }},
		{Flag: "max-asks", Env: env("MAX_ASKS"), YAML: "engine.max_asks", Default: 32,
			Help:  "questions the proxy answers at once; more fail with 53400",
			Field: func(c *Config) any { return &c.Engine.MaxAsks }},
		{Flag: "max-asks-per-client", Env: env("MAX_ASKS_PER_CLIENT"), YAML: "engine.max_asks_per_client", Default: 4,
			Help:  "questions one login role may have answered at once from one client host (other roles on the same host count apart)",
			Field: func(c *Config) any { return &c.Engine.MaxAsksPerClient }},
		{Flag: "profile", Env: env("PROFILE"), YAML: "engine.profile", Default: engine.ProfileFast,
			Help:  "default profile: fast, balanced or max; an ask may name its own, /* ask(max): … */",
			Field: func(c *Config) any { return &c.Engine.Profile }},
		{Flag: "database-profile", Env: env("DATABASE_PROFILES"), YAML: "engine.database_profiles", EnvForm: "comma-separated",
			Help:  "database=profile: the profile for asks on that database; repeatable",
			Field: func(c *Config) any { return &c.Engine.DatabaseProfiles },
			flag: func(c *Config, fs *flag.FlagSet, name, usage string) func() {
				fs.Func(name, usage, func(s string) error { return addDatabaseProfiles(&c.Engine, s) })
				return nil
			},
			env: func(c *Config, v string) error { return addDatabaseProfiles(&c.Engine, v) }},
		{Flag: "llm-output-cap", Env: env("LLM_OUTPUT_CAPS"), YAML: "engine.output_caps", EnvForm: "comma-separated",
			DefaultDoc: "each step's own: keywords 64, direct 320, fixer 768, candidate 1024, …",
			Help:       "step=tokens: the most tokens the model may write for that prompt step (keywords, direct, candidate, fixer, …); each call is also held to what the ask's time left allows at the model's measured speed; repeatable",
			Field:      func(c *Config) any { return &c.Engine.OutputCaps },
			flag: func(c *Config, fs *flag.FlagSet, name, usage string) func() {
				fs.Func(name, usage, func(s string) error { return addOutputCaps(&c.Engine, s) })
				return nil
			},
			env: func(c *Config, v string) error { return addOutputCaps(&c.Engine, v) }},
		{Flag: "no-progress", Env: env("NO_PROGRESS"), YAML: "engine.no_progress",
			Help:  "send no progress NOTICEs (\"nlproxy: generating candidate 2/3 (9 s)\") while an ask runs past 2 s",
			Field: func(c *Config) any { return &c.Engine.NoProgress }},
		{Flag: "llm-parallel", Env: env("LLM_PARALLEL"), YAML: "engine.llm_parallel", Default: engine.DefaultParallel,
			Help:  "model calls one ask makes at once; match Ollama's OLLAMA_NUM_PARALLEL",
			Field: func(c *Config) any { return &c.Engine.Parallel }},
		{Flag: "semantic-model", Env: env("SEMANTIC_MODELS"), YAML: "engine.semantic_models", EnvForm: "comma-separated",
			Help:  "semantic layer to import: a dbt semantic_manifest.json (from dbt parse with MetricFlow semantic models) or an OSI/Ossie YAML file; dimensions, measures and fields describe their columns, metrics become glossary terms with their SQL, entities and relationships join paths; repeatable",
			Field: func(c *Config) any { return &c.Engine.SemanticModels },
			flag:  appendListFlag(func(c *Config) *[]string { return &c.Engine.SemanticModels })},
		{Flag: "verified", Env: env("VERIFIED"), YAML: "engine.verified",
			Help:  "YAML file of verified queries (nlproxy verified add|list|remove|suggest; with --catalog-store also the store's, which win by name): a close match answers the ask with the entry's SQL, guarded and run as the asker; a near miss is a strong example",
			Field: func(c *Config) any { return &c.Engine.Verified }},
		{Flag: "examples", Env: env("EXAMPLES"), YAML: "engine.examples",
			Help:  "YAML file of question→SQL examples per database (a list of {database, question, sql}, each must pass the guard), shown to the model",
			Field: func(c *Config) any { return &c.Engine.Examples }},

		// Questions across databases, ask(all):.
		{Flag: "ask-all-databases", Env: env("ASK_ALL_DATABASES"), YAML: "engine.ask_all.databases", DefaultDoc: "every database the upstream routes name",
			Help:  "comma-separated databases an ask(all): question may use; the asker's own is always included",
			Field: func(c *Config) any { return &c.Engine.AskAll.Databases }},
		{Flag: "authenticator", Env: env("AUTHENTICATOR"), YAML: "engine.ask_all.authenticators", EnvForm: "space-separated",
			Help:  "credentials of the authenticator role for ask(all): on other databases, as a libpq URL/DSN with a user (the password in it, in PGPASSFILE or ~/.pgpass, or PGPASSWORD); database=DSN for one database, a bare DSN for every other; server, port and TLS come from the database's upstream route; repeatable",
			Field: func(c *Config) any { return &c.Engine.AskAll.Authenticators },
			flag: func(c *Config, fs *flag.FlagSet, name, usage string) func() {
				var got []UpstreamEntry // the command line's list replaces the others
				fs.Var(authenticatorList{&got}, name, usage)
				return func() {
					if len(got) > 0 {
						c.Engine.AskAll.Authenticators = got
					}
				}
			},
			env: func(c *Config, v string) error { return setEntries(&c.Engine.AskAll.Authenticators, v) }},
		{Flag: "ask-all-top-k", Env: env("ASK_ALL_TOP_K"), YAML: "engine.ask_all.top_k", Default: askall.DefaultTopK,
			Help:  "candidate databases the selection memory gives the planner",
			Field: func(c *Config) any { return &c.Engine.AskAll.TopK }},
		{Flag: "ask-all-max-steps", Env: env("ASK_ALL_MAX_STEPS"), YAML: "engine.ask_all.max_steps", Default: askall.DefaultMaxSteps,
			Help:  "steps (database queries) one ask(all): question may take",
			Field: func(c *Config) any { return &c.Engine.AskAll.MaxSteps }},

		// The optimizer: optimize: and the max profile's last stage.
		{Flag: "optimize-tolerance", Env: env("OPTIMIZE_TOLERANCE"), YAML: "engine.optimize.tolerance", Default: optimize.DefaultTolerance,
			Help:  "optimizer: consecutive invalid or not-cheaper proposals that end a descent",
			Field: func(c *Config) any { return &c.Engine.Optimize.Tolerance }},
		{Flag: "optimize-runs", Env: env("OPTIMIZE_RUNS"), YAML: "engine.optimize.runs", Default: 1,
			Help:  "optimizer: independent descents pooled per query (LaPuda's k); above 1 the model samples at temperature 0.7",
			Field: func(c *Config) any { return &c.Engine.Optimize.Runs }},
		{Flag: "optimize-max-calls", Env: env("OPTIMIZE_MAX_CALLS"), YAML: "engine.optimize.max_calls", Default: optimize.DefaultMaxCalls,
			Help:  "optimizer: model calls per query, all descents together, two per step; in the max profile its cap also applies",
			Field: func(c *Config) any { return &c.Engine.Optimize.MaxCalls }},
		{Flag: "optimize-timing-runs", Env: env("OPTIMIZE_TIMING_RUNS"), YAML: "engine.optimize.timing_runs", Default: optimize.DefaultTimingRuns,
			Help:  "optimizer: measured runs of the original and of each finalist, compared by medians",
			Field: func(c *Config) any { return &c.Engine.Optimize.TimingRuns }},
		{Flag: "optimize-min-gain", Env: env("OPTIMIZE_MIN_GAIN"), YAML: "engine.optimize.min_gain", Default: optimize.DefaultMinGain,
			Help:  "optimizer: least measured gain that counts as faster, 0.1 = 10%, by the medians and by the median paired ratio",
			Field: func(c *Config) any { return &c.Engine.Optimize.MinGain }},
		{Flag: "optimize-min-saving", Env: env("OPTIMIZE_MIN_SAVING"), YAML: "engine.optimize.min_saving", Default: optimize.DefaultMinSaving,
			Help:  "optimizer: least time per run a rewrite must save to count as faster (smaller differences are round-trip noise); 0 = no floor",
			Field: func(c *Config) any { return &c.Engine.Optimize.MinSaving }},
		{Flag: "optimize-min-cost", Env: env("OPTIMIZE_MIN_COST"), YAML: "engine.optimize.min_cost", Default: float64(engine.DefaultOptimizeMinCost),
			Help:  "max profile: planner cost from which a settled query goes through the optimizer (optimize: always tries)",
			Field: func(c *Config) any { return &c.Engine.Optimize.MinCost }},

		// Operations: the admin listener, the audit log, shared catalogs.
		{Flag: "admin-listen", Env: env("ADMIN_LISTEN"), YAML: "ops.admin_listen",
			Help:  "serve /metrics, /healthz, /readyz and the admin page on this address; a bare port binds to localhost; off when empty",
			Field: func(c *Config) any { return &c.Ops.AdminListen }},
		{Flag: "admin-token-file", Env: env("ADMIN_TOKEN_FILE"), YAML: "ops.admin_token_file",
			Help:  "file holding the admin page's token (16 or more characters); the page is off without one",
			Field: func(c *Config) any { return &c.Ops.AdminTokenFile }},
		{Flag: "admin-recent-asks", Env: env("ADMIN_RECENT_ASKS"), YAML: "ops.admin_recent_asks", Default: 100,
			Help:  "asks the admin page keeps",
			Field: func(c *Config) any { return &c.Ops.AdminRecentAsks }},
		{Flag: "audit-log", Env: env("AUDIT_LOG"), YAML: "ops.audit_log",
			Help:  "one JSON line per ask to stderr, stdout or this file (appended, mode 0600); off when empty",
			Field: func(c *Config) any { return &c.Ops.AuditLog }},
		{Flag: "audit-redact", Env: env("AUDIT_REDACT"), YAML: "ops.audit_redact",
			Help:  "comma-separated: question (a digest instead of the text), literals (constants in the SQL become $1…; quoted text and numbers in the question, errors and notes become ?); applies to the audit log, the engine's log lines and the admin page",
			Field: func(c *Config) any { return &c.Ops.AuditRedact }},
		{Flag: "catalog-store", Env: env("CATALOG_STORE"), YAML: "ops.catalog_store", DefaultDoc: "each proxy keeps its own",
			Help:  "Postgres URL of a catalog store shared by proxy replicas: snapshots (one replica refreshes at a time), translation cache, remembered pairs, verified queries (a store entry replaces the --verified file's of the same name); it holds stored values and SQL with literals in clear, outside --audit-redact: keep other roles from it (docs/deploying.md)",
			Field: func(c *Config) any { return &c.Ops.CatalogStore }},
		{Flag: "catalog-store-poll", Env: env("CATALOG_STORE_POLL"), YAML: "ops.catalog_store_poll", Default: 10 * time.Second,
			Help:  "how often a replica looks in the catalog store for a snapshot another replica saved",
			Field: func(c *Config) any { return &c.Ops.CatalogStorePoll }},

		// AI agents over the Model Context Protocol (docs/mcp.md).
		{Flag: "mcp-listen", Env: env("MCP_LISTEN"), YAML: "mcp.listen",
			Help:  "serve MCP (Streamable HTTP at /mcp) on this address; agents sign in with HTTP Basic as a database role, checked by the upstream; TLS with --tls-cert/--tls-key, required off loopback; off when empty",
			Field: func(c *Config) any { return &c.MCP.Listen }},
		{Flag: "mcp-database", Env: env("MCP_DATABASE"), YAML: "mcp.database", DefaultDoc: "the user's name",
			Help:  "database of an MCP request whose URL names none (/mcp?database=NAME)",
			Field: func(c *Config) any { return &c.MCP.Database }},
		{Flag: "mcp-dsn", Env: env("MCP_DSN"), YAML: "mcp.dsn", DefaultDoc: "the default --upstream URL",
			Help:  "nlproxy mcp --stdio: libpq URL/DSN of the role the agent acts as (the password in it, PGPASSWORD or ~/.pgpass)",
			Field: func(c *Config) any { return &c.MCP.DSN }},
		{Flag: "mcp-max-rows", Env: env("MCP_MAX_ROWS"), YAML: "mcp.max_rows", Default: mcpserver.DefaultMaxRows,
			Help:  "rows an MCP result returns; more are cut off and the result says so",
			Field: func(c *Config) any { return &c.MCP.MaxRows }},
		{Flag: "mcp-max-bytes", Env: env("MCP_MAX_BYTES"), YAML: "mcp.max_bytes", Default: mcpserver.DefaultMaxBytes,
			Help:  "row data an MCP result returns, bytes; more rows are cut off and the result says so",
			Field: func(c *Config) any { return &c.MCP.MaxBytes }},
		{Flag: "mcp-max-sessions", Env: env("MCP_MAX_SESSIONS"), YAML: "mcp.max_sessions", Default: mcpserver.DefaultMaxSessions,
			Help:  "identities (user, database, password) holding an upstream session for MCP at once; beyond it 53300",
			Field: func(c *Config) any { return &c.MCP.MaxSessions }},
		{Flag: "mcp-idle-timeout", Env: env("MCP_IDLE_TIMEOUT"), YAML: "mcp.idle_timeout", Default: mcpserver.DefaultIdleTimeout,
			Help:  "close an MCP session, and its upstream session, unused this long",
			Field: func(c *Config) any { return &c.MCP.IdleTimeout }},

		// Workload learning (docs/workload.md).
		{Flag: "learn-workload", Env: env("LEARN_WORKLOAD"), YAML: "workload.learn",
			Help:  "learn join paths, column use and normalised queries (no literals) from the plain statements relayed; by default every statement is counted, and each distinct text (literals and comments aside; literals too with --workload-deny) is fingerprinted once while it keeps recurring, its repeats counted without a copy or a parse; see docs/workload.md",
			Field: func(c *Config) any { return &c.Workload.Learn }},
		{Flag: "workload-max-queries", Env: env("WORKLOAD_MAX_QUERIES"), YAML: "workload.max_queries", Default: workload.DefaultMaxQueries,
			Help:  "statement fingerprints kept per database; the least recently seen go first",
			Field: func(c *Config) any { return &c.Workload.MaxQueries }},
		{Flag: "workload-max-age", Env: env("WORKLOAD_MAX_AGE"), YAML: "workload.max_age", Default: workload.DefaultMaxAge,
			Help:  "forget fingerprints not seen for this long; 0 keeps them",
			Field: func(c *Config) any { return &c.Workload.MaxAge }},
		{Flag: "workload-deny", Env: env("WORKLOAD_DENY"), YAML: "workload.deny",
			Help:  "regular expression: statements it matches (raw text, literals included) are never learnt from",
			Field: func(c *Config) any { return &c.Workload.Deny }},
		{Flag: "workload-roles", Env: env("WORKLOAD_ROLES"), YAML: "workload.roles", DefaultDoc: "every role",
			Help:  "comma-separated roles whose statements teach (the application's, say): others' traffic is not learnt from, so it cannot steer what every asker is shown; repeatable",
			Field: func(c *Config) any { return &c.Workload.Roles },
			flag:  appendListFlag(func(c *Config) *[]string { return &c.Workload.Roles })},
		{Flag: "workload-sample", Env: env("WORKLOAD_SAMPLE"), YAML: "workload.sample", Default: float64(1),
			Help:  "share of relayed statements captured, in (0, 1]; 1 counts every statement (repeats of a text seen recently cost the relay a hash and an increment), below 1 scales counts down alike",
			Field: func(c *Config) any { return &c.Workload.Sample }},
		{Flag: "workload-queue", Env: env("WORKLOAD_QUEUE"), YAML: "workload.queue", Default: 1024,
			Help:  "new statement texts waiting to be fingerprinted (repeats are counted without queueing); when full, more are dropped, never waited for",
			Field: func(c *Config) any { return &c.Workload.Queue }},
		{Flag: "workload-stat-statements", Env: env("WORKLOAD_STAT_STATEMENTS"), YAML: "workload.stat_statements", DefaultDoc: "off",
			Help:  "also learn from pg_stat_statements, read this often per database through the catalog role (the extension installed; the catalog role's own statements left out); 0 off",
			Field: func(c *Config) any { return &c.Workload.StatStatements }},
		{Flag: "workload-examples", Env: env("WORKLOAD_EXAMPLES"), YAML: "workload.examples", Default: engine.DefaultWorkloadExamples,
			Help:  "model calls an ask in balanced or max may spend turning the workload queries it is offered into remembered question→SQL pairs (each query once); 0 none",
			Field: func(c *Config) any { return &c.Workload.Examples }},
	}
}

// lookupOption is the option whose flag is name.
func lookupOption(name string) option {
	for _, o := range options() {
		if o.Flag == name {
			return o
		}
	}
	panic("no option " + name) // a mistake in the code, found by any test that loads a config
}

// env names nlproxy's own variable for a setting.
func env(suffix string) []string { return []string{"NLPROXY_" + suffix} }

// usage is the option's flag help: what it does, then where else it is set.
func (o option) usage() string {
	var b strings.Builder
	b.WriteString(o.Help)
	b.WriteString(" (env ")
	b.WriteString(strings.Join(o.Env, " or "))
	if o.EnvForm != "" {
		b.WriteString(", " + o.EnvForm)
	}
	if o.DefaultDoc != "" && o.Default == nil { // else the flag package prints the value
		b.WriteString("; default " + o.DefaultDoc)
	}
	b.WriteString(")")
	return b.String()
}

// defaultConfig is the configuration before the file, the environment and
// flags: every option's Default, nothing else.
func defaultConfig() Config {
	var c Config
	for _, o := range options() {
		if o.Default == nil || o.Field == nil {
			continue
		}
		if err := setDefault(o.Field(&c), o.Default); err != nil {
			panic(fmt.Sprintf("option %s: %v", o.Flag, err)) // a mistake in the table; TestOptionTable finds it
		}
	}
	return c
}

// setDefault stores def in the field ptr points to; def may be of the
// field's underlying kind (a time.Duration for a Duration), or a func()
// returning such a value.
func setDefault(ptr any, def any) error {
	if f, ok := def.(func() string); ok {
		def = f()
	}
	dst := reflect.ValueOf(ptr).Elem()
	v := reflect.ValueOf(def)
	switch {
	case v.Type() == dst.Type():
	case v.Kind() == dst.Kind() && v.CanConvert(dst.Type()):
		v = v.Convert(dst.Type())
	default:
		return fmt.Errorf("default %v is a %s, the field a %s", def, v.Type(), dst.Type())
	}
	dst.Set(v)
	return nil
}

// applyEnv reads every option's environment variables into cfg.
// getenv is os.Getenv in production; tests and the demo pass their own.
func applyEnv(cfg *Config, getenv func(string) string) error {
	var firstErr error // the first mistake, as the flag package reports them
	for _, o := range options() {
		if o.Field == nil {
			continue // the file's own name: loadConfig has read it
		}
		for _, key := range o.Env {
			v := getenv(key)
			if v == "" {
				continue
			}
			set := o.env
			if set == nil {
				set = func(c *Config, v string) error { return setText(o.Field(c), v) }
			}
			if err := set(cfg, v); err != nil && firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", key, err)
			}
		}
	}
	return firstErr
}

// setText parses an environment variable's text into the field ptr points to.
func setText(ptr any, s string) error {
	switch p := ptr.(type) {
	case *string:
		*p = s
	case *int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		*p = n
	case *bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		*p = b
	case *float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return err
		}
		*p = f
	case *Duration:
		return p.Set(s)
	case *[]string:
		*p = splitList(s)
	default:
		return fmt.Errorf("no text form for %T", ptr) // a table entry needs its own env
	}
	return nil
}

// registerFlags defines every option's flag on fs, writing into cfg, and
// returns what to run after parsing.
func registerFlags(fs *flag.FlagSet, cfg *Config) (after []func()) {
	for _, o := range options() {
		if o.Flag == "" || o.Flag == configOption {
			continue
		}
		if o.flag != nil {
			if f := o.flag(cfg, fs, o.Flag, o.usage()); f != nil {
				after = append(after, f)
			}
			continue
		}
		switch p := o.Field(cfg).(type) {
		case *string:
			fs.StringVar(p, o.Flag, *p, o.usage())
		case *int:
			fs.IntVar(p, o.Flag, *p, o.usage())
		case *bool:
			fs.BoolVar(p, o.Flag, *p, o.usage())
		case *float64:
			fs.Float64Var(p, o.Flag, *p, o.usage())
		case *Duration:
			fs.Var(p, o.Flag, o.usage())
		case *[]string:
			fs.Func(o.Flag, o.usage(), func(s string) error { *p = splitList(s); return nil })
		default:
			panic(fmt.Sprintf("option %s: no flag form for %T", o.Flag, p)) // TestOptionTable finds it
		}
	}
	return after
}

// appendListFlag is a repeatable comma-separated flag that adds to the list
// the file or the environment gave.
func appendListFlag(field func(c *Config) *[]string) func(c *Config, fs *flag.FlagSet, name, usage string) func() {
	return func(c *Config, fs *flag.FlagSet, name, usage string) func() {
		p := field(c)
		fs.Func(name, usage, func(s string) error { *p = append(*p, splitList(s)...); return nil })
		return nil
	}
}

// setEntries parses a space-separated list of "URL" or "database=URL".
func setEntries(dst *[]UpstreamEntry, v string) error {
	var entries []UpstreamEntry
	for _, f := range strings.Fields(v) {
		e, err := parseUpstreamEntry(f)
		if err != nil {
			return err
		}
		entries = append(entries, e)
	}
	*dst = entries
	return nil
}

// decodeYAML applies a configuration file to cfg: every key must be an
// option's YAML path (or a section holding some), at most once.
func decodeYAML(cfg *Config, data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	if len(doc.Content) == 0 {
		return nil // an empty file
	}
	leaves := map[string]option{}
	sections := map[string]bool{}
	for _, o := range options() {
		if o.YAML == "" {
			continue
		}
		leaves[o.YAML] = o
		parts := strings.Split(o.YAML, ".")
		for i := 1; i < len(parts); i++ {
			sections[strings.Join(parts[:i], ".")] = true
		}
	}
	return decodeSection(cfg, doc.Content[0], "", leaves, sections)
}

func decodeSection(cfg *Config, n *yaml.Node, prefix string, leaves map[string]option, sections map[string]bool) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // "engine:" with nothing under it
	}
	if n.Kind != yaml.MappingNode {
		where := prefix
		if where == "" {
			where = "the file"
		}
		return fmt.Errorf("line %d: %s: want keys and values", n.Line, where)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := k.Value
		if prefix != "" {
			path = prefix + "." + k.Value
		}
		if seen[path] {
			return fmt.Errorf("line %d: %s is given twice", k.Line, path)
		}
		seen[path] = true
		if o, ok := leaves[path]; ok {
			if err := decodeValue(v, o.Field(cfg)); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			continue
		}
		if sections[path] {
			if err := decodeSection(cfg, v, path, leaves, sections); err != nil {
				return err
			}
			continue
		}
		return fmt.Errorf("line %d: unknown key %s (docs/configuration.md lists the keys)", k.Line, path)
	}
	return nil
}

// decodeValue decodes one option's value; lists of entries and maps are
// decoded strictly, so a misspelt key inside them is an error too.
func decodeValue(n *yaml.Node, dst any) error {
	if n.Kind == yaml.ScalarNode {
		return n.Decode(dst)
	}
	raw, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("at line %d: %w", n.Line, err)
	}
	return nil
}
