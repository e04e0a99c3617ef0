package store_test

import (
	"context"
	"errors"
	"io/fs"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/memory"
	"github.com/nlproxy/nlproxy/catalog/store"
	"github.com/nlproxy/nlproxy/catalog/verified"
	"github.com/nlproxy/nlproxy/engine"
	"github.com/nlproxy/nlproxy/engine/llm"
	"github.com/nlproxy/nlproxy/internal/pgcluster"
	"github.com/nlproxy/nlproxy/testkit/fakeollama"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
	"github.com/nlproxy/nlproxy/testkit/poll"
)

// env is one cluster with a data database and a store database.
type env struct {
	c             *pgcluster.Cluster
	data, storeDB string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := pgtest.New(t, pgcluster.Options{})
	e := &env{c: c, data: pgtest.UniqueName(t, "data"), storeDB: pgtest.UniqueName(t, "store")}
	for _, db := range []string{e.data, e.storeDB} {
		if err := c.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Exec(ctx, e.data, `CREATE TABLE orders (id int PRIMARY KEY, amount numeric)`); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) open(t *testing.T, opts store.Options) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := store.Open(ctx, e.c.DSN(e.storeDB), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// replica is a catalog manager as one proxy replica runs it.
func (e *env) replica(t *testing.T, s *store.Store) *catalog.Manager {
	t.Helper()
	m := &catalog.Manager{Store: s, StorePoll: 20 * time.Millisecond, SkipValues: true, MinRefreshGap: -1,
		Connect: func(ctx context.Context, database string) (*pgx.Conn, error) { return e.c.Connect(ctx, database) }}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestReplicasShareCatalog: what one replica builds the other loads, and
// a DDL refreshed by one reaches the other through the store.
func TestReplicasShareCatalog(t *testing.T) {
	e := newEnv(t)
	sa, sb := e.open(t, store.Options{}), e.open(t, store.Options{})
	if sa.Vector() {
		t.Log("pgvector present: embeddings in a vector column")
	} else {
		t.Log("pgvector absent: embeddings in a plain real[] column (the path CI tests)")
	}
	a, b := e.replica(t, sa), e.replica(t, sb)
	// What replica B's checks report (the catalog_refreshes_total labels).
	var mu sync.Mutex
	resultsB := map[string]int{}
	b.OnCheck = func(database, result string, _ *catalog.Snapshot) {
		mu.Lock()
		resultsB[result]++
		mu.Unlock()
	}
	countB := func(result string) int {
		mu.Lock()
		defer mu.Unlock()
		return resultsB[result]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	snapA, err := a.Get(ctx, e.data)
	if err != nil {
		t.Fatal(err)
	}
	snapB, err := b.Get(ctx, e.data)
	if err != nil {
		t.Fatal(err)
	}
	if snapB.Version != snapA.Version || !snapB.BuiltAt.Equal(snapA.BuiltAt) || snapB.Schema.Fingerprint != snapA.Schema.Fingerprint {
		t.Errorf("replica B built its own snapshot (v%d %s) instead of loading A's (v%d %s)",
			snapB.Version, snapB.BuiltAt, snapA.Version, snapA.BuiltAt)
	}

	if err := e.c.Exec(ctx, e.data, `CREATE TABLE customers (id int PRIMARY KEY, name text)`); err != nil {
		t.Fatal(err)
	}
	a.Refresh(e.data) // A saw the DDL pass through it
	poll.Until(t, "replica A's rebuild", func() bool { s := a.Current(e.data); return s != nil && len(s.Schema.Tables) == 2 })
	poll.Until(t, "replica B to converge", func() bool { s := b.Current(e.data); return s != nil && len(s.Schema.Tables) == 2 })
	if va, vb := a.Current(e.data).Version, b.Current(e.data).Version; va != vb || va <= snapA.Version {
		t.Errorf("versions after the DDL: A %d, B %d (before %d)", va, vb, snapA.Version)
	}
	// B took A's new snapshot from the store: "loaded", never "rebuilt".
	poll.Until(t, "replica B to report the load", func() bool { return countB("loaded") > 0 })
	if n := countB("rebuilt"); n != 0 {
		t.Errorf("replica B reported %d rebuilds; it built nothing", n)
	}
}

func TestSnapshotVersionsOnlyGrow(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, store.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, ok, err := s.SnapshotVersion(ctx, e.data); ok || err != nil {
		t.Fatalf("empty store: ok %v, err %v", ok, err)
	}
	if _, err := s.LoadSnapshot(ctx, e.data, descOpts()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("load from an empty store: %v", err)
	}
	m := e.replica(t, s)
	snap, err := m.Get(ctx, e.data)
	if err != nil {
		t.Fatal(err)
	}
	newer := *snap
	newer.Version = snap.Version + 5
	if err := s.SaveSnapshot(ctx, &newer); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveSnapshot(ctx, snap); err != nil { // older: ignored
		t.Fatal(err)
	}
	v, fp, ok, err := s.SnapshotVersion(ctx, e.data)
	if err != nil || !ok || v != newer.Version || fp != snap.Schema.Fingerprint {
		t.Errorf("version %d %q %v %v, want %d", v, fp, ok, err, newer.Version)
	}
	got, err := s.LoadSnapshot(ctx, e.data, descOpts())
	if err != nil || got.Version != newer.Version || len(got.Schema.Tables) != 1 {
		t.Errorf("loaded %+v, %v", got, err)
	}
}

func TestRefreshLock(t *testing.T) {
	e := newEnv(t)
	s1, s2 := e.open(t, store.Options{}), e.open(t, store.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	release, ok, err := s1.LockRefresh(ctx, "db1")
	if err != nil || !ok {
		t.Fatalf("first lock: %v %v", ok, err)
	}
	if _, ok, err := s2.LockRefresh(ctx, "db1"); err != nil || ok {
		t.Fatalf("second replica got the held lock: %v %v", ok, err)
	}
	if r, ok, err := s2.LockRefresh(ctx, "db2"); err != nil || !ok {
		t.Fatalf("another database's lock: %v %v", ok, err)
	} else {
		r()
	}
	release()
	r2, ok, err := s2.LockRefresh(ctx, "db1")
	if err != nil || !ok {
		t.Fatalf("lock after release: %v %v", ok, err)
	}
	r2()
}

func TestTranslations(t *testing.T) {
	e := newEnv(t)
	s := e.open(t, store.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.PutEntry(ctx, "k1", memory.CacheEntry{SQL: "SELECT 1", Confidence: 0.5}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.PutEntry(ctx, "k2", memory.CacheEntry{SQL: "SELECT 2", Confidence: -1}, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if tr, ok, err := s.GetEntry(ctx, "k1"); err != nil || !ok || !reflect.DeepEqual(tr, memory.CacheEntry{SQL: "SELECT 1", Confidence: 0.5}) {
		t.Errorf("k1: %+v %v %v", tr, ok, err)
	}
	// Unknown confidence is stored as NULL and read back as -1.
	if err := s.PutEntry(ctx, "k3", memory.CacheEntry{SQL: "SELECT 3", Confidence: -1}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if tr, ok, err := s.GetEntry(ctx, "k3"); err != nil || !ok || !reflect.DeepEqual(tr, memory.CacheEntry{SQL: "SELECT 3", Confidence: -1}) {
		t.Errorf("k3: %+v %v %v", tr, ok, err)
	}
	// Literal rewrites come back with the translation.
	rw := []memory.LiteralRewrite{{Table: "public.t", Column: "c", From: "spanish", To: "Spanish", Kind: memory.RewriteCase}}
	if err := s.PutEntry(ctx, "k4", memory.CacheEntry{SQL: "SELECT 4", Confidence: -1, Rewrites: rw}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if tr, ok, err := s.GetEntry(ctx, "k4"); err != nil || !ok || !reflect.DeepEqual(tr, memory.CacheEntry{SQL: "SELECT 4", Confidence: -1, Rewrites: rw}) {
		t.Errorf("k4: %+v %v %v", tr, ok, err)
	}
	if _, ok, err := s.GetEntry(ctx, "k2"); err != nil || ok {
		t.Errorf("expired k2: %v %v", ok, err)
	}
	// Through engine.Cache: two replicas' caches share the store.
	c1, c2 := engine.NewCache(10, time.Hour), engine.NewCache(10, time.Hour)
	c1.Backend, c2.Backend = s, s
	key := engine.CacheKey{Question: "How many orders?", Database: e.data, Fingerprint: "fp", Role: "r"}
	c1.Put(key, memory.CacheEntry{SQL: "SELECT count(*) FROM orders", Confidence: 0.9})
	if tr, ok := c2.Get(engine.CacheKey{Question: "how many  orders", Database: e.data, Fingerprint: "fp", Role: "r"}); !ok || !reflect.DeepEqual(tr, memory.CacheEntry{SQL: "SELECT count(*) FROM orders", Confidence: 0.9}) {
		t.Errorf("replica 2's cache: %+v %v", tr, ok)
	}
	if _, ok := c2.Get(engine.CacheKey{Question: "How many orders?", Database: e.data, Fingerprint: "other", Role: "r"}); ok {
		t.Error("hit for another schema fingerprint")
	}
}

// TestTranslationsBeforeConfidence: a store made before translations had a
// confidence column gains it when a proxy opens it, and its rows read as
// unknown confidence.
func TestTranslationsBeforeConfidence(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.c.Exec(ctx, e.storeDB, `CREATE SCHEMA nlproxy;
CREATE TABLE nlproxy.translations (key text PRIMARY KEY, sql text NOT NULL, expires timestamptz NOT NULL);
INSERT INTO nlproxy.translations VALUES ('old', 'SELECT 1', now() + interval '1 hour');`); err != nil {
		t.Fatal(err)
	}
	s := e.open(t, store.Options{})
	if tr, ok, err := s.GetEntry(ctx, "old"); err != nil || !ok || !reflect.DeepEqual(tr, memory.CacheEntry{SQL: "SELECT 1", Confidence: -1}) {
		t.Fatalf("old row: %+v %v %v", tr, ok, err)
	}
	if err := s.PutEntry(ctx, "new", memory.CacheEntry{SQL: "SELECT 2", Confidence: 0.8}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if tr, ok, err := s.GetEntry(ctx, "new"); err != nil || !ok || tr.Confidence != 0.8 {
		t.Fatalf("new row: %+v %v %v", tr, ok, err)
	}
}

func TestPairs(t *testing.T) {
	e := newEnv(t)
	fake := fakeollama.New(t, fakeollama.Options{Models: []string{"nomic-embed-text"}})
	client, err := llm.New(llm.Config{Host: fake.URL(), Models: map[llm.Role]string{llm.RoleEmbedding: "nomic-embed-text"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, noVector := range []bool{false, true} {
		name := "default"
		if noVector {
			name = "plain column"
		}
		t.Run(name, func(t *testing.T) {
			e.storeDB = pgtest.UniqueName(t, "store")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := e.c.CreateDatabase(ctx, e.storeDB); err != nil {
				t.Fatal(err)
			}
			s := e.open(t, store.Options{Embedder: llm.NewEmbedder(client, "nomic-embed-text"), NoVector: noVector})
			if noVector && s.Vector() {
				t.Fatal("NoVector store uses pgvector")
			}
			at := time.Now().Truncate(time.Millisecond)
			add := func(q, sql, source string) {
				t.Helper()
				if err := s.AddPair(ctx, e.data, memory.Pair{Question: q, SQL: sql, Source: source, At: at}); err != nil {
					t.Fatal(err)
				}
				at = at.Add(time.Second)
			}
			add("How many orders are there?", "SELECT count(*) FROM orders", memory.PairOperator)
			add("how many orders are there", "SELECT 0", memory.PairAccepted) // does not replace the operator's
			add("total amount of orders", "SELECT sum(amount) FROM orders", memory.PairAccepted)
			add("total amount of orders!", "SELECT sum(amount)::int FROM orders", memory.PairAccepted) // replaces
			add("names of customers", "SELECT name FROM customers", memory.PairAccepted)
			ps, err := s.Pairs(ctx, e.data)
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) != 3 || ps[0].SQL != "SELECT count(*) FROM orders" || ps[0].Source != memory.PairOperator {
				t.Fatalf("pairs: %+v", ps)
			}
			if ps[1].Question != "names of customers" || ps[2].SQL != "SELECT sum(amount)::int FROM orders" {
				t.Errorf("newest first after the operator's: %+v", ps[1:])
			}
			// An accepted pair is kept per role: alice's does not replace
			// the same question asked by another role.
			if err := s.AddPair(ctx, e.data, memory.Pair{Question: "names of customers", SQL: "SELECT name FROM customers WHERE vip", Source: memory.PairAccepted, Role: "alice", At: at}); err != nil {
				t.Fatal(err)
			}
			ps, err = s.Pairs(ctx, e.data)
			if err != nil || len(ps) != 4 || ps[0].Source != memory.PairOperator || ps[1].Role != "alice" || ps[2].Role != "" || ps[2].Question != "names of customers" {
				t.Fatalf("pairs with roles: %+v, %v", ps, err)
			}
			if other, err := s.Pairs(ctx, "elsewhere"); err != nil || len(other) != 0 {
				t.Errorf("another database: %v %v", other, err)
			}
			sim, err := s.SimilarPairs(ctx, e.data, "what is the total amount of all orders", 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(sim) != 2 || sim[0].Question != "total amount of orders!" {
				t.Errorf("nearest pairs: %+v", sim)
			}
		})
	}
}

func descOpts() descindex.Options { return descindex.Options{} }

// TestReplicasShareVerified: a verified query one replica's store client
// adds, the other's reads (merged over its file, the store winning by
// name); a replaced entry reads back replaced, a removed one is gone, and
// a malformed entry is refused.
func TestReplicasShareVerified(t *testing.T) {
	e := newEnv(t)
	sa, sb := e.open(t, store.Options{}), e.open(t, store.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	entry := verified.Entry{Name: "orders_in_city", Database: e.data, Question: "orders in {city}",
		SQL: "SELECT count(*) FROM public.orders WHERE city = :city", Params: []verified.Param{{Name: "city", Column: "orders.city"}},
		Roles: []string{"analyst"}}
	if err := sa.PutVerified(ctx, entry); err != nil {
		t.Fatal(err)
	}
	file := verified.List{
		{Name: "orders_in_city", Database: e.data, Question: "orders in the file", SQL: "SELECT 1"},
		{Name: "total", Database: e.data, Question: "total amount", SQL: "SELECT sum(amount) FROM public.orders"},
	}
	got, err := verified.Shared{File: file, Store: sb}.Verified(ctx, e.data)
	if err != nil {
		t.Fatal(err)
	}
	if want := []verified.Entry{entry, file[1]}; !reflect.DeepEqual(got, want) {
		t.Fatalf("replica B sees %+v, want %+v", got, want)
	}
	if other, err := sb.Verified(ctx, "elsewhere"); err != nil || len(other) != 0 {
		t.Errorf("another database: %+v, %v", other, err)
	}
	entry.Question = "orders placed in {city}"
	if err := sb.PutVerified(ctx, entry); err != nil {
		t.Fatal(err)
	}
	if all, err := sa.AllVerified(ctx); err != nil || len(all) != 1 || all[0].Question != entry.Question {
		t.Errorf("after replace: %+v, %v", all, err)
	}
	if err := sa.PutVerified(ctx, verified.Entry{Name: "Bad Name", Database: e.data, Question: "q", SQL: "SELECT 1"}); err == nil {
		t.Error("a malformed entry was stored")
	}
	if ok, err := sa.RemoveVerified(ctx, e.data, entry.Name); err != nil || !ok {
		t.Fatalf("remove: %v, %v", ok, err)
	}
	if ok, err := sb.RemoveVerified(ctx, e.data, entry.Name); err != nil || ok {
		t.Errorf("second remove: %v, %v", ok, err)
	}
	got, err = verified.Shared{File: file, Store: sb}.Verified(ctx, e.data)
	if err != nil || !reflect.DeepEqual(got, []verified.Entry(file)) {
		t.Errorf("after remove: %+v, %v (want the file's)", got, err)
	}
}
