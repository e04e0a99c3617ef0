package metrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

type fixedRelay RelayTotals

func (f fixedRelay) RelayTotals() RelayTotals { return RelayTotals(f) }

// TestNilMetrics: every recording method is a no-op on nil (metrics off).
func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.WatchRelay(fixedRelay{})
	m.ConnAccepted()
	m.ConnRefused("53300")
	m.UpstreamConnect(time.Millisecond)
	m.ObserveAsk(Ask{Outcome: "failed"})
	m.LLMCall("m", "s", time.Second, 1, 1, nil)
	m.LLMOutstanding("s", 1)
	m.LLMServerUp("s", true)
	m.CatalogRefresh("db", "rebuilt", 3, 1, time.Now())
	m.ObserveMCPCall("query", "failed", "42501", time.Millisecond)
}

func TestRecording(t *testing.T) {
	m := New()
	m.WatchRelay(fixedRelay{BytesFromClients: 10, BytesToClients: 2000, MessagesFromClients: 3, MessagesToClients: 40, Transactions: 5, Connections: 2})
	hit, miss := true, false
	m.ObserveAsk(Ask{Outcome: "answered", Profile: "fast", Duration: time.Second, Cached: &miss, Guard: true,
		Stages: []Stage{{Name: "generate", Duration: time.Second}}})
	m.ObserveAsk(Ask{Outcome: "cached", Profile: "fast", Cached: &hit})
	m.ObserveAsk(Ask{Outcome: "failed", Profile: "max", SQLState: "42N01"})
	m.LLMCall("qwen", "http://a", time.Second, 100, 20, nil)
	m.LLMCall("qwen", "http://a", time.Second, 0, 0, errors.New("down"))
	m.CatalogRefresh("shop", "error", -1, 0, time.Now())
	m.CatalogRefresh("shop", "rebuilt", 7, 2, time.Unix(1700000000, 0))
	m.ObserveMCPCall("query", "answered", "", time.Millisecond)
	m.ObserveMCPCall("query", "failed", "42501", time.Millisecond)
	m.ObserveMCPCall("ask", "answered", "42501", time.Second) // a SQLSTATE only for failures

	want := `
# HELP nlproxy_relayed_bytes_total Bytes relayed on client connections, by direction (from_client, to_client).
# TYPE nlproxy_relayed_bytes_total counter
nlproxy_relayed_bytes_total{direction="from_client"} 10
nlproxy_relayed_bytes_total{direction="to_client"} 2000
# HELP nlproxy_asks_total Natural-language statements answered, by outcome (answered, cached, failed), profile and SQLSTATE (failed only).
# TYPE nlproxy_asks_total counter
nlproxy_asks_total{outcome="answered",profile="fast",sqlstate=""} 1
nlproxy_asks_total{outcome="cached",profile="fast",sqlstate=""} 1
nlproxy_asks_total{outcome="failed",profile="max",sqlstate="42N01"} 1
# HELP nlproxy_llm_calls_total Model calls by model, Ollama server and result (ok, error).
# TYPE nlproxy_llm_calls_total counter
nlproxy_llm_calls_total{model="qwen",result="error",server="http://a"} 1
nlproxy_llm_calls_total{model="qwen",result="ok",server="http://a"} 1
# HELP nlproxy_catalog_tables Tables in the current catalog snapshot.
# TYPE nlproxy_catalog_tables gauge
nlproxy_catalog_tables{database="shop"} 7
# HELP nlproxy_catalog_last_refresh_timestamp_seconds When the catalog last checked the database's schema successfully.
# TYPE nlproxy_catalog_last_refresh_timestamp_seconds gauge
nlproxy_catalog_last_refresh_timestamp_seconds{database="shop"} 1.7e+09
# HELP nlproxy_guard_rejections_total Asks, answered or failed, in which the guard refused at least one candidate SQL.
# TYPE nlproxy_guard_rejections_total counter
nlproxy_guard_rejections_total 1
# HELP nlproxy_translation_cache_lookups_total Asks answered from the translation cache (hit) or by the model (miss).
# TYPE nlproxy_translation_cache_lookups_total counter
nlproxy_translation_cache_lookups_total{result="hit"} 1
nlproxy_translation_cache_lookups_total{result="miss"} 1
# HELP nlproxy_mcp_calls_total MCP tool calls by tool, outcome (answered, failed) and SQLSTATE (failed only); ask and ask_sql also count in asks_total.
# TYPE nlproxy_mcp_calls_total counter
nlproxy_mcp_calls_total{outcome="answered",sqlstate="",tool="ask"} 1
nlproxy_mcp_calls_total{outcome="answered",sqlstate="",tool="query"} 1
nlproxy_mcp_calls_total{outcome="failed",sqlstate="42501",tool="query"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want),
		"nlproxy_relayed_bytes_total", "nlproxy_asks_total", "nlproxy_llm_calls_total", "nlproxy_catalog_tables",
		"nlproxy_catalog_last_refresh_timestamp_seconds", "nlproxy_guard_rejections_total", "nlproxy_translation_cache_lookups_total", "nlproxy_mcp_calls_total"); err != nil {
		t.Error(err)
	}
	// Two registries do not share counters.
	if n, err := testutil.GatherAndCount(New().Registry, "nlproxy_asks_total"); err != nil || n != 0 {
		t.Errorf("a fresh Metrics has %d ask series (%v)", n, err)
	}
}

type fixedWorkload WorkloadTotals

func (f fixedWorkload) WorkloadTotals() WorkloadTotals { return WorkloadTotals(f) }

func TestWorkloadMetrics(t *testing.T) {
	var off *Metrics
	off.WatchWorkload(fixedWorkload{})
	m := New()
	m.WatchWorkload(fixedWorkload{Captured: 10, Repeats: 6, Dropped: 3, Denied: 1, Unparsable: 2, Skipped: 4, Learnt: 3, Stored: 2})
	want := `
# HELP nlproxy_workload_statements_total Relayed statements seen by workload learning, by outcome: captured (queued or counted), repeat (of the captured: counted as a recently seen text, not parsed again), dropped (queue full), denied, unparsable, skipped (not a SELECT), learnt.
# TYPE nlproxy_workload_statements_total counter
nlproxy_workload_statements_total{outcome="captured"} 10
nlproxy_workload_statements_total{outcome="denied"} 1
nlproxy_workload_statements_total{outcome="dropped"} 3
nlproxy_workload_statements_total{outcome="learnt"} 3
nlproxy_workload_statements_total{outcome="repeat"} 6
nlproxy_workload_statements_total{outcome="skipped"} 4
nlproxy_workload_statements_total{outcome="unparsable"} 2
# HELP nlproxy_workload_fingerprints Statement fingerprints held by workload learning, over all databases.
# TYPE nlproxy_workload_fingerprints gauge
nlproxy_workload_fingerprints 2
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "nlproxy_workload_statements_total", "nlproxy_workload_fingerprints"); err != nil {
		t.Error(err)
	}
}
