// Package metrics defines nlproxy's Prometheus metrics in one place. A
// Metrics value owns its own registry (never the global default one), so
// two proxies in one process — as in tests — do not share counters.
//
// The relay's byte, message and transaction counters are not updated here
// on the hot path: the proxy keeps per-session atomics and this package
// reads them when Prometheus scrapes (see RelaySource).
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

const ns = "nlproxy"

// RelayTotals is the relay's running totals, summed over live and ended
// sessions.
type RelayTotals struct {
	BytesFromClients, BytesToClients       uint64
	MessagesFromClients, MessagesToClients uint64
	Transactions                           uint64
	Connections                            int // current client connections
}

// RelaySource is read at scrape time (proxy.Server implements it).
type RelaySource interface {
	RelayTotals() RelayTotals
}

// Metrics is every metric nlproxy exports. Methods are safe on a nil
// *Metrics (metrics off) and for concurrent use.
type Metrics struct {
	Registry *prometheus.Registry

	connsTotal     prometheus.Counter
	connsRefused   *prometheus.CounterVec
	upstreamDial   prometheus.Histogram
	asks           *prometheus.CounterVec
	askSeconds     *prometheus.HistogramVec
	stageSeconds   *prometheus.HistogramVec
	cacheLookups   *prometheus.CounterVec
	guardRejects   prometheus.Counter
	llmCalls       *prometheus.CounterVec
	llmTokens      *prometheus.CounterVec
	llmSeconds     *prometheus.HistogramVec
	llmInflight    *prometheus.GaugeVec
	llmHealthy     *prometheus.GaugeVec
	catRefreshes   *prometheus.CounterVec
	catTables      *prometheus.GaugeVec
	catVersion     *prometheus.GaugeVec
	catLastRefresh *prometheus.GaugeVec
	mcpCalls       *prometheus.CounterVec
	mcpSeconds     *prometheus.HistogramVec
}

// New creates the metrics in a fresh registry, with the Go runtime and
// process collectors.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	latency := []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	slow := []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 20, 30, 60, 120}
	m := &Metrics{
		Registry: reg,
		connsTotal: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "client_connections_total",
			Help: "Client connections accepted."}),
		connsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "client_connections_refused_total",
			Help: "Client connections refused before ReadyForQuery, by SQLSTATE sent (53300 too many, 28000 TLS or authentication, 08001 upstream down, ...)."}, []string{"sqlstate"}),
		upstreamDial: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "upstream_connect_seconds",
			Help: "Time to open the upstream connection (TCP or Unix, plus TLS).", Buckets: latency}),
		asks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "asks_total",
			Help: "Natural-language statements answered, by outcome (answered, cached, failed), profile and SQLSTATE (failed only)."}, []string{"outcome", "profile", "sqlstate"}),
		askSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "ask_seconds",
			Help: "Time to answer a question (translation, not the run of the SQL).", Buckets: slow}, []string{"outcome"}),
		stageSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "ask_stage_seconds",
			Help: "Time spent in each engine stage of an ask.", Buckets: slow}, []string{"stage"}),
		cacheLookups: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "translation_cache_lookups_total",
			Help: "Asks answered from the translation cache (hit) or by the model (miss)."}, []string{"result"}),
		guardRejects: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "guard_rejections_total",
			Help: "Asks, answered or failed, in which the guard refused at least one candidate SQL."}),
		llmCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "llm_calls_total",
			Help: "Model calls by model, Ollama server and result (ok, error)."}, []string{"model", "server", "result"}),
		llmTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "llm_tokens_total",
			Help: "Tokens by model, Ollama server and kind (prompt, completion)."}, []string{"model", "server", "kind"}),
		llmSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "llm_call_seconds",
			Help: "Duration of model calls by Ollama server.", Buckets: slow}, []string{"server"}),
		llmInflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "llm_outstanding_calls",
			Help: "Model calls in flight per Ollama server."}, []string{"server"}),
		llmHealthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "llm_server_up",
			Help: "1 when the Ollama server takes requests, 0 while it is skipped as unhealthy."}, []string{"server"}),
		catRefreshes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "catalog_refreshes_total",
			Help: "Catalog checks by database and result (unchanged, rebuilt, functions, loaded from the catalog store, error)."}, []string{"database", "result"}),
		catTables: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "catalog_tables",
			Help: "Tables in the current catalog snapshot."}, []string{"database"}),
		catVersion: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "catalog_snapshot_version",
			Help: "Version of the current catalog snapshot (grows on each rebuild)."}, []string{"database"}),
		catLastRefresh: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "catalog_last_refresh_timestamp_seconds",
			Help: "When the catalog last checked the database's schema successfully."}, []string{"database"}),
		mcpCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "mcp_calls_total",
			Help: "MCP tool calls by tool, outcome (answered, failed) and SQLSTATE (failed only); ask and ask_sql also count in asks_total."}, []string{"tool", "outcome", "sqlstate"}),
		mcpSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "mcp_call_seconds",
			Help: "Time to answer an MCP tool call, the run of its SQL included.", Buckets: slow}, []string{"tool"}),
	}
	reg.MustRegister(m.connsTotal, m.connsRefused, m.upstreamDial, m.asks, m.askSeconds, m.stageSeconds,
		m.cacheLookups, m.guardRejects, m.llmCalls, m.llmTokens, m.llmSeconds, m.llmInflight, m.llmHealthy,
		m.catRefreshes, m.catTables, m.catVersion, m.catLastRefresh, m.mcpCalls, m.mcpSeconds)
	return m
}

// WatchRelay exports src's totals, read at each scrape.
func (m *Metrics) WatchRelay(src RelaySource) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(&relayCollector{src: src})
}

// ConnAccepted counts an accepted client connection.
func (m *Metrics) ConnAccepted() {
	if m != nil {
		m.connsTotal.Inc()
	}
}

// ConnRefused counts a connection ended before ReadyForQuery with sqlstate.
func (m *Metrics) ConnRefused(sqlstate string) {
	if m != nil {
		m.connsRefused.WithLabelValues(sqlstate).Inc()
	}
}

// UpstreamConnect records how long opening an upstream connection took.
func (m *Metrics) UpstreamConnect(d time.Duration) {
	if m != nil {
		m.upstreamDial.Observe(d.Seconds())
	}
}

// Stage is one engine stage of an ask, as metrics see it.
type Stage struct {
	Name     string
	Duration time.Duration
}

// Ask is one finished ask, as metrics see it.
type Ask struct {
	Outcome  string // answered, cached, failed
	Profile  string
	SQLState string // failed only
	Duration time.Duration
	Stages   []Stage
	// Cached is nil when the ask ended before the cache was consulted.
	Cached *bool
	Guard  bool // the guard refused the SQL
}

// ObserveAsk records a finished ask.
func (m *Metrics) ObserveAsk(a Ask) {
	if m == nil {
		return
	}
	state := ""
	if a.Outcome == "failed" {
		state = a.SQLState
	}
	m.asks.WithLabelValues(a.Outcome, a.Profile, state).Inc()
	m.askSeconds.WithLabelValues(a.Outcome).Observe(a.Duration.Seconds())
	for _, s := range a.Stages {
		m.stageSeconds.WithLabelValues(s.Name).Observe(s.Duration.Seconds())
	}
	if a.Cached != nil {
		r := "miss"
		if *a.Cached {
			r = "hit"
		}
		m.cacheLookups.WithLabelValues(r).Inc()
	}
	if a.Guard {
		m.guardRejects.Inc()
	}
}

// LLMCall records one model call made to server.
func (m *Metrics) LLMCall(model, server string, d time.Duration, promptTokens, completionTokens int, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.llmCalls.WithLabelValues(model, server, result).Inc()
	m.llmSeconds.WithLabelValues(server).Observe(d.Seconds())
	if promptTokens > 0 {
		m.llmTokens.WithLabelValues(model, server, "prompt").Add(float64(promptTokens))
	}
	if completionTokens > 0 {
		m.llmTokens.WithLabelValues(model, server, "completion").Add(float64(completionTokens))
	}
}

// LLMOutstanding adds delta to the calls in flight on server.
func (m *Metrics) LLMOutstanding(server string, delta int) {
	if m != nil {
		m.llmInflight.WithLabelValues(server).Add(float64(delta))
	}
}

// LLMServerUp records whether server takes requests.
func (m *Metrics) LLMServerUp(server string, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.llmHealthy.WithLabelValues(server).Set(v)
}

// CatalogRefresh records one catalog check of database; tables and version
// describe the snapshot current afterwards (tables < 0: none yet).
func (m *Metrics) CatalogRefresh(database, result string, tables, version int, at time.Time) {
	if m == nil {
		return
	}
	m.catRefreshes.WithLabelValues(database, result).Inc()
	if result != "error" {
		m.catLastRefresh.WithLabelValues(database).Set(float64(at.UnixNano()) / 1e9)
	}
	if tables >= 0 {
		m.catTables.WithLabelValues(database).Set(float64(tables))
		m.catVersion.WithLabelValues(database).Set(float64(version))
	}
}

var (
	descBytes = prometheus.NewDesc(ns+"_relayed_bytes_total",
		"Bytes relayed on client connections, by direction (from_client, to_client).", []string{"direction"}, nil)
	descMsgs = prometheus.NewDesc(ns+"_relayed_messages_total",
		"Protocol messages relayed, by direction (from_client, to_client).", []string{"direction"}, nil)
	descXacts = prometheus.NewDesc(ns+"_transactions_total",
		"Transactions completed (ReadyForQuery back to idle), implicit ones included.", nil, nil)
	descConns = prometheus.NewDesc(ns+"_client_connections",
		"Client connections open now (in startup or relaying).", nil, nil)
)

// relayCollector reads the relay's totals at scrape time, so the relay
// itself never touches a Prometheus metric.
type relayCollector struct{ src RelaySource }

func (c *relayCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descBytes
	ch <- descMsgs
	ch <- descXacts
	ch <- descConns
}

func (c *relayCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.src.RelayTotals()
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(t.BytesFromClients), "from_client")
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(t.BytesToClients), "to_client")
	ch <- prometheus.MustNewConstMetric(descMsgs, prometheus.CounterValue, float64(t.MessagesFromClients), "from_client")
	ch <- prometheus.MustNewConstMetric(descMsgs, prometheus.CounterValue, float64(t.MessagesToClients), "to_client")
	ch <- prometheus.MustNewConstMetric(descXacts, prometheus.CounterValue, float64(t.Transactions))
	ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, float64(t.Connections))
}

// WorkloadTotals is workload learning's running totals (--learn-workload).
type WorkloadTotals struct {
	// Captured statements were taken for learning: queued, or, as Repeats
	// of a recently seen text, counted without a copy or a parse. Dropped
	// were not, the queue being full. Denied, Unparsable and Skipped were
	// queued but not learnt from (deny pattern; pg_query could not parse
	// them; not a SELECT). Learnt were added to a profile.
	Captured, Repeats, Dropped, Denied, Unparsable, Skipped, Learnt uint64
	// StatReads and StatFailures count reads of pg_stat_statements that
	// succeeded and failed (extension missing or not readable).
	StatReads, StatFailures uint64
	// Stored is the fingerprints held now, over all databases.
	Stored int
}

// WorkloadSource is read at scrape time (workload.Collector, adapted).
type WorkloadSource interface {
	WorkloadTotals() WorkloadTotals
}

// WatchWorkload exports src's totals, read at each scrape.
func (m *Metrics) WatchWorkload(src WorkloadSource) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(&workloadCollector{src: src})
}

var (
	descWorkloadStatements = prometheus.NewDesc(ns+"_workload_statements_total",
		"Relayed statements seen by workload learning, by outcome: captured (queued or counted), repeat (of the captured: counted as a recently seen text, not parsed again), dropped (queue full), denied, unparsable, skipped (not a SELECT), learnt.", []string{"outcome"}, nil)
	descWorkloadStatReads = prometheus.NewDesc(ns+"_workload_stat_statements_reads_total",
		"Reads of pg_stat_statements by workload learning (--workload-stat-statements), by outcome: ok, failed (extension missing or not readable).", []string{"outcome"}, nil)
	descWorkloadStored = prometheus.NewDesc(ns+"_workload_fingerprints",
		"Statement fingerprints held by workload learning, over all databases.", nil, nil)
)

type workloadCollector struct{ src WorkloadSource }

func (c *workloadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descWorkloadStatements
	ch <- descWorkloadStatReads
	ch <- descWorkloadStored
}

func (c *workloadCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.src.WorkloadTotals()
	for _, o := range []struct {
		name string
		n    uint64
	}{{"captured", t.Captured}, {"repeat", t.Repeats}, {"dropped", t.Dropped}, {"denied", t.Denied}, {"unparsable", t.Unparsable}, {"skipped", t.Skipped}, {"learnt", t.Learnt}} {
		ch <- prometheus.MustNewConstMetric(descWorkloadStatements, prometheus.CounterValue, float64(o.n), o.name)
	}
	ch <- prometheus.MustNewConstMetric(descWorkloadStatReads, prometheus.CounterValue, float64(t.StatReads), "ok")
	ch <- prometheus.MustNewConstMetric(descWorkloadStatReads, prometheus.CounterValue, float64(t.StatFailures), "failed")
	ch <- prometheus.MustNewConstMetric(descWorkloadStored, prometheus.GaugeValue, float64(t.Stored))
}

// ObserveMCPCall records a finished MCP tool call; sqlstate is kept for
// failed calls only.
func (m *Metrics) ObserveMCPCall(tool, outcome, sqlstate string, d time.Duration) {
	if m == nil {
		return
	}
	if outcome != "failed" {
		sqlstate = ""
	}
	m.mcpCalls.WithLabelValues(tool, outcome, sqlstate).Inc()
	m.mcpSeconds.WithLabelValues(tool).Observe(d.Seconds())
}
