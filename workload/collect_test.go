package workload

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
)

// runCollector runs c's worker until the test ends (or stop is called).
func runCollector(t *testing.T, c *Collector) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// TestObserveDropsWhenFull: with the worker stuck, a full queue makes
// Observe drop and count, never wait.
func TestObserveDropsWhenFull(t *testing.T) {
	const size = 8
	c := NewCollector(NewStore("", Limits{}), CollectorOptions{QueueSize: size})
	entered, release := make(chan struct{}), make(chan struct{})
	first := true
	c.before = func() {
		if first {
			first = false
			close(entered)
			<-release
		}
	}
	stop := runCollector(t, c)
	c.Observe("db", "r", 0, []byte("SELECT a FROM t0"))
	<-entered // the worker holds one statement and waits
	for i := range size + 5 {
		c.Observe("db", "r", 0, []byte("SELECT a FROM t WHERE x = "+strings.Repeat("9", i+1)))
	}
	st := c.Stats()
	if st.Captured != size+1 || st.Dropped != 5 {
		t.Fatalf("captured %d dropped %d, want %d and 5", st.Captured, st.Dropped, size+1)
	}
	close(release)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Everything queued was learnt (the end drains the queue): t0 and one
	// fingerprint for all the t statements.
	if st := c.Stats(); st.Learnt != size+1 || st.Stored != 2 {
		t.Errorf("after stop: %+v", st)
	}
}

// TestNoLiteralReachesStorage feeds hostile statements through the
// collector and searches the saved file's bytes for their literals.
func TestNoLiteralReachesStorage(t *testing.T) {
	dir := t.TempDir()
	store := NewStore(dir, Limits{})
	c := NewCollector(store, CollectorOptions{})
	stop := runCollector(t, c)
	for _, h := range hostile {
		c.Observe("db", "app", 0, []byte(h.sql))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Learnt != uint64(len(hostile)) {
		t.Fatalf("learnt %d of %d: %+v", st.Learnt, len(hostile), st)
	}
	raw, err := os.ReadFile(Path(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	low := strings.ToLower(string(raw))
	for _, h := range hostile {
		for _, sec := range h.secrets {
			if strings.Contains(low, strings.ToLower(sec)) {
				t.Errorf("file holds %q (from %s)", sec, h.sql)
			}
		}
	}
}

func TestCollectorDenyAndFailures(t *testing.T) {
	store := NewStore("", Limits{})
	c := NewCollector(store, CollectorOptions{Deny: regexp.MustCompile(`(?i)\bpayroll\b|secret_`)})
	stop := runCollector(t, c)
	for _, sql := range []string{
		`SELECT * FROM payroll WHERE id = 1`,                  // denied
		`SELECT secret_col FROM t`,                            // denied
		`SELEC broken FROM`,                                   // unparsable
		"SELECT '\xff\xfe' FROM t",                            // not UTF-8: unparsable
		`UPDATE t SET a = 1`,                                  // skipped: not a SELECT
		`SET application_name = 'x'`,                          // skipped
		`SELECT a FROM kept WHERE b = 2; SELECT 1 FROM other`, // two learnt
	} {
		c.Observe("db", "app", 0, []byte(sql))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	want := Stats{Captured: 7, Denied: 2, Unparsable: 2, Skipped: 2, Learnt: 2, Stored: 2}
	if st != want {
		t.Errorf("Stats = %+v, want %+v", st, want)
	}
	p, _ := store.Profile("db")
	for _, q := range p.Queries() {
		for _, r := range q.Relations {
			if r.Name == "payroll" {
				t.Error("a denied statement was learnt")
			}
		}
	}
}

func TestCollectorSampleAndLength(t *testing.T) {
	c := NewCollector(NewStore("", Limits{}), CollectorOptions{Sample: 0.5, QueueSize: 4096})
	for range 2000 {
		c.Observe("db", "", 0, []byte("SELECT 1 FROM t"))
	}
	// Half on average; the bounds are many standard deviations (~22) wide.
	if n := c.Stats().Captured; n < 700 || n > 1300 {
		t.Errorf("captured %d of 2000 at 0.5", n)
	}
	c = NewCollector(NewStore("", Limits{}), CollectorOptions{})
	c.Observe("db", "", 0, []byte("SELECT '"+strings.Repeat("x", MaxLen)+"'"))
	if st := c.Stats(); st.Captured != 0 || st.Skipped != 1 {
		t.Errorf("over-long statement: %+v", st)
	}
}
