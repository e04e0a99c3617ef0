package workload

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

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

// BenchmarkObserve is the relay's side of capture, the queue drained by
// another goroutine: "queued" the old path (no recently seen table: a copy
// and a non-blocking send per statement), "recent" a repeated shape whose
// literal varies (pgbench -S), counted in the table, and "recent-parallel"
// that on every core, one session per goroutine.
func BenchmarkObserve(b *testing.B) {
	texts := make([][]byte, 1024)
	for i := range texts {
		texts[i] = []byte("SELECT abalance FROM pgbench_accounts WHERE aid = " + strconv.Itoa(i*7919%100000) + ";")
	}
	collector := func(b *testing.B, recent int) *Collector {
		c := NewCollector(NewStore("", Limits{}), CollectorOptions{QueueSize: 1 << 16, Recent: recent})
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
		b.Cleanup(func() { close(done) })
		return c
	}
	for _, tt := range []struct {
		name   string
		recent int
	}{{"queued", -1}, {"recent", 0}} {
		b.Run(tt.name, func(b *testing.B) {
			c := collector(b, tt.recent)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				c.Observe("postgres", "app", 1, texts[i%len(texts)])
				i++
			}
		})
	}
	b.Run("recent-parallel", func(b *testing.B) {
		c := collector(b, 0)
		var session atomic.Uint64
		b.ReportAllocs()
		b.ResetTimer() // not the collector's queue
		b.RunParallel(func(pb *testing.PB) {
			s, i := session.Add(1), 0
			for pb.Next() {
				c.Observe("postgres", "app", s, texts[i%len(texts)])
				i++
			}
		})
	})
}

// BenchmarkCapture is capture's whole cost per statement, the relay's and
// the worker's, in one goroutine: pgbench -S statements observed, the
// worker's drain and collection run every 1000 (as its clock would), with
// and without the recently seen table.
func BenchmarkCapture(b *testing.B) {
	texts := make([][]byte, 1024)
	for i := range texts {
		texts[i] = []byte("SELECT abalance FROM pgbench_accounts WHERE aid = " + strconv.Itoa(i*7919%100000) + ";")
	}
	for _, tt := range []struct {
		name   string
		recent int
	}{{"queued", -1}, {"recent", 0}} {
		b.Run(tt.name, func(b *testing.B) {
			c := NewCollector(NewStore("", Limits{}), CollectorOptions{QueueSize: 2048, Recent: tt.recent})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				c.Observe("postgres", "app", uint64(1+i%8), texts[i%len(texts)])
				if i++; i%1000 == 0 {
					c.drain()
					c.learnRepeats(time.Now())
				}
			}
			if st := c.Stats(); st.Dropped > 0 || st.Learnt == 0 {
				b.Fatalf("%+v", st)
			}
		})
	}
}
