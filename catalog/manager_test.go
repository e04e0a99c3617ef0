package catalog_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nlproxy/nlproxy/catalog"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/testkit/pgtest"
	"go.uber.org/zap/zaptest"
)

func newManager(t *testing.T, dir string, interval time.Duration) *catalog.Manager {
	t.Helper()
	m, _ := newCountingManager(t, dir, interval)
	return m
}

// newCountingManager is newManager whose Connect also reports each call on
// the returned channel. A database's checks run one after another, each
// starting with a Connect, so the (n+1)th Connect proves the nth check done.
func newCountingManager(t *testing.T, dir string, interval time.Duration) (*catalog.Manager, <-chan string) {
	t.Helper()
	c := env.cluster(t)
	connects := make(chan string, 1024)
	m := &catalog.Manager{
		DataDir: dir,
		Connect: func(ctx context.Context, db string) (*pgx.Conn, error) {
			select {
			case connects <- db:
			default: // nobody counts beyond the buffer
			}
			return c.Connect(ctx, db)
		},
		Logger: zaptest.NewLogger(t),

		RefreshInterval: interval,
		MinRefreshGap:   -1, // these tests kick checks back to back
	}
	t.Cleanup(func() { _ = m.Close() })
	return m, connects
}

// TestManagerDebouncesDDLRefresh: a burst of DDL, each statement followed by
// the Refresh the proxy makes for it, is answered by one check when the gap
// has passed, not one check per statement. The test holds the gap's timer,
// so nothing here depends on how fast the machine is.
func TestManagerDebouncesDDLRefresh(t *testing.T) {
	ctx := context.Background()
	dbName := pgtest.UniqueName(t, "mgrgap")
	newDB(t, dbName, mgrSetup)
	c := env.cluster(t)
	var checks sync.WaitGroup
	var mu sync.Mutex
	var results []string
	m := &catalog.Manager{
		Connect:       c.Connect,
		Logger:        zaptest.NewLogger(t),
		MinRefreshGap: time.Hour,
		OnCheck: func(_, result string, _ *catalog.Snapshot) {
			mu.Lock()
			results = append(results, result)
			mu.Unlock()
			checks.Done()
		},
	}
	timers := make(chan chan time.Time, 64) // every debounce wait, in order
	catalog.SetRefreshTimer(m, func(time.Duration) <-chan time.Time {
		tc := make(chan time.Time, 1)
		timers <- tc
		return tc
	})
	checks.Add(1)
	if _, err := m.Get(ctx, dbName); err != nil {
		t.Fatal(err)
	}
	checks.Wait() // the first build
	for i := range 20 {
		if err := c.Exec(ctx, dbName, fmt.Sprintf("COMMENT ON TABLE cities IS 'burst %d'", i)); err != nil {
			t.Fatal(err)
		}
		m.Refresh(dbName)
	}
	tc := <-timers // the worker waits for the gap; every kick since coalesced
	mu.Lock()
	n := len(results)
	mu.Unlock()
	if n != 1 {
		t.Fatalf("%d checks before the gap passed, want only the first build: %v", n, results)
	}
	checks.Add(1)
	tc <- time.Now()
	checks.Wait() // the one trailing check
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	// Close waited for the worker: a kick left over from the burst would
	// have started another wait for the gap.
	if len(timers) != 0 {
		t.Errorf("%d more waits for a check after the trailing one; the burst must be answered by one", len(timers))
	}
	if len(results) != 2 {
		t.Errorf("checks: %v, want the first build and one trailing check", results)
	}
	if got := m.Current(dbName); got == nil || got.Schema.Table("cities") == nil {
		t.Fatal("no snapshot after the trailing check")
	}
}

// waitFor polls until cond holds; the bound only keeps a broken build from
// hanging the run (a loaded CI machine is slow, never this slow).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const mgrSetup = `
CREATE TABLE cities (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO cities VALUES (1, 'Los Angeles'), (2, 'New York'), (3, 'San Francisco');
COMMENT ON TABLE cities IS 'places we ship to';
`

func TestManagerBuildLoadRefresh(t *testing.T) {
	ctx := context.Background()
	dbName := pgtest.UniqueName(t, "mgr")
	newDB(t, dbName, mgrSetup)
	dir := t.TempDir()

	// First use builds and saves.
	m1 := newManager(t, dir, 0)
	s1, err := m1.Get(ctx, dbName)
	if err != nil {
		t.Fatal(err)
	}
	if s1.Version != 1 || s1.Schema.Table("cities") == nil || s1.Values == nil || s1.Values.Len() != 3 {
		t.Fatalf("first snapshot: version %d tables %v", s1.Version, s1.Schema.Tables)
	}
	if _, err := os.Stat(catalog.SnapshotPath(dir, dbName)); err != nil {
		t.Fatal(err)
	}
	if again, _ := m1.Get(ctx, dbName); again != s1 {
		t.Error("second Get returned a different snapshot")
	}
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m1.Get(ctx, dbName); !errors.Is(err, catalog.ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}

	// A new manager loads the file; an unchanged schema is not rebuilt.
	m2, connects := newCountingManager(t, dir, 0)
	s2, err := m2.Get(ctx, dbName)
	if err != nil {
		t.Fatal(err)
	}
	if !s2.BuiltAt.Equal(s1.BuiltAt) || s2.Schema.Fingerprint != s1.Schema.Fingerprint {
		t.Fatalf("loaded snapshot built %v, want %v", s2.BuiltAt, s1.BuiltAt)
	}
	<-connects         // the check at load
	m2.Refresh(dbName) // no DDL: the check keeps the snapshot
	<-connects         // … that check has started
	m2.Refresh(dbName)
	<-connects // … and ended: the next one has started
	if m2.Current(dbName) != s2 {
		t.Error("refresh without schema change replaced the snapshot")
	}

	// DDL + Refresh ⇒ rebuild, in the background, with a new version on disk.
	if err := env.cluster(t).Exec(ctx, dbName, "ALTER TABLE cities ADD COLUMN state text; COMMENT ON COLUMN cities.state IS 'two-letter code'"); err != nil {
		t.Fatal(err)
	}
	m2.Refresh(dbName)
	m2.Refresh(dbName) // coalesces; never blocks
	waitFor(t, "rebuild after DDL", func() bool { return m2.Current(dbName).Version == 2 })
	s3 := m2.Current(dbName)
	if s3.Schema.Table("cities").Column("state") == nil || s3.Schema.Fingerprint == s1.Schema.Fingerprint {
		t.Fatal("rebuilt snapshot lacks the new column")
	}
	onDisk, err := catalog.LoadSnapshot(dir, dbName, descindex.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if onDisk.Version != 2 || onDisk.Schema.Fingerprint != s3.Schema.Fingerprint {
		t.Errorf("file has version %d", onDisk.Version)
	}
}

func TestManagerRebuildsBadFiles(t *testing.T) {
	ctx := context.Background()
	dbName := pgtest.UniqueName(t, "mgrbad")
	newDB(t, dbName, mgrSetup)
	dir := t.TempDir()
	m := newManager(t, dir, 0)
	orig, err := m.Get(ctx, dbName)
	if err != nil {
		t.Fatal(err)
	}
	_ = m.Close()
	path := catalog.SnapshotPath(dir, dbName)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		mutate func([]byte) []byte
	}{
		{"corrupt", func(b []byte) []byte { b[len(b)-20] ^= 0xff; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }},
		{"format version mismatch", func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], 99); return b }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, tc.mutate(append([]byte(nil), good...)), 0o644); err != nil {
				t.Fatal(err)
			}
			m := newManager(t, dir, 0)
			s, err := m.Get(ctx, dbName)
			if err != nil {
				t.Fatal(err)
			}
			if !s.BuiltAt.After(orig.BuiltAt) || s.Schema.Fingerprint != orig.Schema.Fingerprint {
				t.Fatalf("got snapshot built %v (orig %v): not rebuilt", s.BuiltAt, orig.BuiltAt)
			}
			if _, err := catalog.LoadSnapshot(dir, dbName, descindex.Options{}); err != nil {
				t.Fatalf("rebuilt file unreadable: %v", err)
			}
		})
	}
}

func TestManagerPeriodicRefreshAndErrors(t *testing.T) {
	ctx := context.Background()
	dbName := pgtest.UniqueName(t, "mgrtick")
	newDB(t, dbName, mgrSetup)
	m := newManager(t, "", 100*time.Millisecond) // in-memory only
	s, err := m.Get(ctx, dbName)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.cluster(t).Exec(ctx, dbName, "COMMENT ON COLUMN cities.name IS 'city name as typed'"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "periodic rebuild", func() bool { return m.Current(dbName).Version == s.Version+1 })
	if c := m.Current(dbName).Schema.Table("cities").Column("name").Comment; c != "city name as typed" {
		t.Errorf("comment = %q", c)
	}

	// A database that does not exist: Get fails (and retries on the next Get).
	for range 2 {
		if _, err := m.Get(ctx, "no_such_db"); err == nil {
			t.Fatal("Get of a missing database succeeded")
		}
	}
	// Get honours its context while a build is pending.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	m2 := &catalog.Manager{Connect: func(ctx context.Context, db string) (*pgx.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	if _, err := m2.Get(cctx, "x"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with cancelled context: %v", err)
	}
	_ = m2.Close()
}

func TestManagerConcurrentUse(t *testing.T) {
	ctx := context.Background()
	dbName := pgtest.UniqueName(t, "mgrconc")
	newDB(t, dbName, mgrSetup)
	m := newManager(t, t.TempDir(), 0)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				s, err := m.Get(ctx, dbName)
				if err != nil {
					errs <- err
					return
				}
				if s.Schema.Table("cities") == nil {
					errs <- errors.New("snapshot without cities")
					return
				}
				if i%4 == 0 {
					m.Refresh(dbName)
				}
			}
		}()
	}
	if err := env.cluster(t).Exec(ctx, dbName, "ALTER TABLE cities ADD COLUMN pop int"); err != nil {
		t.Fatal(err)
	}
	m.Refresh(dbName)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitFor(t, "rebuild with the new column", func() bool {
		return m.Current(dbName).Schema.Table("cities").Column("pop") != nil
	})
}
