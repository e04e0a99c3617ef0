package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
)

// replicaProc is one `nlproxy serve` process.
type replicaProc struct {
	addr, admin string
	mu          sync.Mutex
	log         strings.Builder
}

func (r *replicaProc) logs() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.String()
}

// startReplica runs the binary and reads both listen addresses from its log.
func startReplica(t *testing.T, bin string, args ...string) *replicaProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--log-format", "json", "--data-dir", ""}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &replicaProc{}
	addrs := make(chan [2]string, 1)
	go func() {
		listen := regexp.MustCompile(`"msg":"nlproxy listening".*?"addr":"([^"]+)"`)
		admin := regexp.MustCompile(`"msg":"admin endpoints listening".*?"addr":"([^"]+)"`)
		var a, b string
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			r.mu.Lock()
			r.log.WriteString(line + "\n")
			r.mu.Unlock()
			if m := listen.FindStringSubmatch(line); m != nil {
				a = m[1]
			}
			if m := admin.FindStringSubmatch(line); m != nil {
				b = m[1]
			}
			if a != "" && b != "" {
				addrs <- [2]string{a, b}
				a = "" // sent once
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(time.Minute): // hang guard
			_ = cmd.Process.Kill()
			<-done
		}
	})
	select {
	case got := <-addrs:
		r.addr, r.admin = got[0], got[1]
	case <-time.After(2 * time.Minute): // hang guard
		t.Fatalf("replica did not start:\n%s", r.logs())
	}
	return r
}

// metricValue reads one sample from a replica's /metrics.
func metricValue(t *testing.T, admin, sample string) string {
	t.Helper()
	_, text := httpGet(t, "http://"+admin+"/metrics")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestReplicasShareStore runs two proxy processes on one catalog store: a
// DDL passing through one reaches the other's catalog, a translation made by
// one is a cache hit on the other, and a pair one remembers shapes the
// other's prompt.
func TestReplicasShareStore(t *testing.T) {
	bin := buildNLProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := pgtest.New(t, pgcluster.Options{AuthMethod: "scram-sha-256"})
	db, storeDB := pgtest.UniqueName(t, "shop"), pgtest.UniqueName(t, "store")
	for _, d := range []string{db, storeDB} {
		if err := c.CreateDatabase(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Exec(ctx, db, `CREATE TABLE orders (id int PRIMARY KEY, amount numeric NOT NULL);
INSERT INTO orders SELECT g, g * 10 FROM generate_series(1, 7) g;`); err != nil {
		t.Fatal(err)
	}
	fake := fakeollama.New(t, fakeollama.Options{Models: []string{opsModel}})
	fake.SetDefault(&fakeollama.Rule{Name: "scripted", ReplyFunc: func(v fakeollama.ChatView) string {
		if strings.Contains(v.Prompt, "search terms") {
			return `{"keywords": ["orders"], "entities": []}`
		}
		if strings.Contains(v.Prompt, "above 30") {
			return "```sql\nSELECT count(*) FROM orders WHERE amount > 30\n```"
		}
		return "```sql\nSELECT count(*) FROM orders\n```"
	}})
	common := []string{"--upstream", c.DSN(db), "--ollama-host", fake.URL(), "--model", opsModel,
		"--catalog-store", c.DSN(storeDB), "--catalog-store-poll", "100ms", "--catalog-refresh", "0", "--catalog-refresh-gap", "0"}
	p1 := startReplica(t, bin, common...)
	p2 := startReplica(t, bin, common...)
	for _, p := range []*replicaProc{p1, p2} {
		waitReady(t, p.admin)
	}
	tables := `nlproxy_catalog_tables{database="` + db + `"}`
	if v1, v2 := metricValue(t, p1.admin, tables), metricValue(t, p2.admin, tables); v1 != "1" || v2 != "1" {
		t.Fatalf("catalog tables: %q and %q, want 1", v1, v2)
	}
	// One replica built the snapshot, the other loaded it.
	built := strings.Count(p1.logs()+p2.logs(), `"msg":"catalog snapshot built"`)
	loaded := strings.Count(p1.logs()+p2.logs(), `"msg":"catalog snapshot loaded from the store"`)
	if built != 1 || loaded < 1 {
		t.Errorf("snapshot built %d times, loaded from the store %d times; want 1 and at least 1", built, loaded)
	}

	connect := func(p *replicaProc) *pgx.Conn {
		t.Helper()
		conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", pgtest.Superuser, pgtest.SuperuserPassword, p.addr, db))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	c1, c2 := connect(p1), connect(p2)

	// A DDL through replica 1 reaches replica 2's catalog through the store.
	if _, err := c1.Exec(ctx, `CREATE TABLE customers (id int PRIMARY KEY, name text)`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute) // hang guard
	for metricValue(t, p2.admin, tables) != "2" {
		if time.Now().After(deadline) {
			t.Fatalf("replica 2 never saw the new table; replica 1 has %s\n%s", metricValue(t, p1.admin, tables), p2.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}

	ask := func(conn *pgx.Conn, q string) int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, "-- ask: "+q, pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
			t.Fatalf("ask %q: %v", q, err)
		}
		return n
	}
	const q = "how many orders are there"
	// Asked twice on replica 1: the second is a cache hit, which makes the
	// pair an accepted one in the store.
	if ask(c1, q) != 7 || ask(c1, q) != 7 {
		t.Fatal("wrong count")
	}
	// Replica 2 answers the same question from the shared cache.
	before := len(fake.RequestsTo(fakeollama.RouteChat))
	if ask(c2, q) != 7 {
		t.Fatal("wrong count on replica 2")
	}
	if after := len(fake.RequestsTo(fakeollama.RouteChat)); after != before {
		t.Errorf("replica 2 called the model %d times for a question replica 1 answered", after-before)
	}
	if v := metricValue(t, p2.admin, `nlproxy_translation_cache_lookups_total{result="hit"}`); v != "1" {
		t.Errorf("replica 2 cache hits = %q, want 1", v)
	}
	// A related question on replica 2 gets replica 1's accepted pair as an example.
	if ask(c2, "how many orders are above 30") != 4 {
		t.Fatal("wrong count for the related question")
	}
	found := false
	for _, r := range fake.RequestsTo(fakeollama.RouteChat) {
		var prompt strings.Builder
		for _, m := range r.Messages {
			prompt.WriteString(m.Content + "\n")
		}
		p := prompt.String()
		if strings.Contains(p, "above 30") && !strings.Contains(p, "search terms") && strings.Contains(p, q) {
			found = true
		}
	}
	if !found {
		t.Error("replica 2's prompt for the related question lacks the pair remembered through replica 1")
	}
}
