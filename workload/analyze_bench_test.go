package workload

import (
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

const benchSQL = `SELECT abalance FROM pgbench_accounts WHERE aid = 48213`

// BenchmarkAnalyze is the worker's cost for a statement not seen before;
// BenchmarkFingerprint for one whose fingerprint is already held.
func BenchmarkAnalyze(b *testing.B) {
	for b.Loop() {
		if _, err := Analyze(benchSQL); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFingerprint(b *testing.B) {
	for b.Loop() {
		if _, err := pg_query.Fingerprint(benchSQL); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkObserve is the relay's side of capture: a copy and a
// non-blocking send, the queue drained by another goroutine.
func BenchmarkObserve(b *testing.B) {
	c := NewCollector(NewStore("", Limits{}), CollectorOptions{QueueSize: 1 << 16})
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-c.queue:
			case <-done:
				return
			}
		}
	}()
	defer close(done)
	sql := []byte(benchSQL)
	b.ReportAllocs()
	for b.Loop() {
		c.Observe("postgres", "app", 0, sql)
	}
}
