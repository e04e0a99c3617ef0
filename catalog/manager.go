package catalog

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nlproxy/nlproxy/catalog/descindex"
	"github.com/nlproxy/nlproxy/catalog/valueindex"
	"go.uber.org/zap"
)

// ErrClosed is returned by Get after Close.
var ErrClosed = errors.New("catalog: manager closed")

// Manager keeps one Snapshot per database: loaded from DataDir at first use,
// checked against the live schema, rebuilt in a background goroutine when
// the fingerprint changed (on Refresh, periodically, or when no snapshot
// exists), saved atomically. Readers keep using the previous snapshot while
// a rebuild runs. Set the fields before first use; do not copy a Manager.
type Manager struct {
	DataDir string // "" keeps snapshots in memory only
	// Connect opens a connection to database for introspection and index
	// builds. When nil, DSN is used with its database replaced.
	Connect func(ctx context.Context, database string) (*pgx.Conn, error)
	DSN     string
	Logger  *zap.Logger
	// RefreshInterval re-checks the fingerprint periodically (0: never; DDL
	// seen by the proxy still triggers Refresh).
	RefreshInterval time.Duration
	// MinRefreshGap is the least time between the end of one check and a
	// check that DDL seen in traffic (Refresh) asks for: any role's DDL
	// kicks a full rescan, so a burst of it is answered by at most one check
	// now and one when the gap has passed (0: DefaultMinRefreshGap; <0: none).
	MinRefreshGap     time.Duration
	IntrospectOptions IntrospectOptions
	ValueOptions      valueindex.Options
	SkipValues        bool
	DescOptions       descindex.Options
	Glossary          []descindex.Doc
	BuildTimeout      time.Duration // per check/build (default 10 minutes)
	// Store, when set, shares snapshots with other replicas: a database's
	// schema is checked by one replica at a time (Store.LockRefresh), the
	// others load what it saved. DataDir is then not used.
	Store Store
	// StorePoll is how often a replica looks for a newer snapshot in Store
	// (default 10s); DDL seen by another replica reaches this one so.
	StorePoll time.Duration
	// OnCheck, when set, is called after each check of a database's schema
	// with its result (unchanged, rebuilt, functions, loaded from the Store,
	// or error) and the
	// snapshot current afterwards (nil if none): metrics.
	OnCheck func(database, result string, snap *Snapshot)

	// after is time.After; tests replace it to hold a debounced check
	// until they release it (export_test.go).
	after func(time.Duration) <-chan time.Time

	mu      sync.Mutex
	dbs     map[string]*dbState
	closed  bool
	stop    context.CancelFunc
	baseCtx context.Context
	wg      sync.WaitGroup
}

type dbState struct {
	snap   atomic.Pointer[Snapshot]
	loaded atomic.Pointer[Snapshot] // the last snapshot taken from the Store, not built here
	kick   chan struct{}            // capacity 1: pending refresh requests coalesce

	mu      sync.Mutex
	lastErr error         // result of the latest attempt while no snapshot exists
	attempt chan struct{} // closed when the current attempt ends
	checked time.Time     // end of the latest attempt
}

// Store keeps snapshots where several proxy replicas share them (package
// catalog/store implements it on Postgres).
type Store interface {
	// LoadSnapshot returns database's latest snapshot; an error wrapping
	// fs.ErrNotExist when there is none.
	LoadSnapshot(ctx context.Context, database string, descOpts descindex.Options) (*Snapshot, error)
	// SaveSnapshot stores snap as database's latest.
	SaveSnapshot(ctx context.Context, snap *Snapshot) error
	// SnapshotVersion is the latest snapshot's version and fingerprint
	// (ok false when there is none): a cheap test for news.
	SnapshotVersion(ctx context.Context, database string) (version int, fingerprint string, ok bool, err error)
	// LockRefresh takes database's refresh lock without waiting; ok false
	// means another replica holds it. release gives it back.
	LockRefresh(ctx context.Context, database string) (release func(), ok bool, err error)
}

// Status is a database's catalog state (admin page).
type Status struct {
	Database    string
	Loaded      bool // a snapshot is current
	Version     int
	Fingerprint string
	Tables      int
	BuiltAt     time.Time
	Checked     time.Time // latest check of the live schema; zero before the first
	Err         error     // the latest check's failure, if it failed
}

// Status describes every database the manager has been asked about.
func (m *Manager) Status() []Status {
	m.mu.Lock()
	names := make([]string, 0, len(m.dbs))
	states := make([]*dbState, 0, len(m.dbs))
	for name, st := range m.dbs {
		names = append(names, name)
		states = append(states, st)
	}
	m.mu.Unlock()
	out := make([]Status, 0, len(names))
	for i, st := range states {
		s := Status{Database: names[i]}
		if snap := st.snap.Load(); snap != nil {
			s.Loaded, s.Version, s.BuiltAt = true, snap.Version, snap.BuiltAt
			s.Fingerprint, s.Tables = snap.Schema.Fingerprint, len(snap.Schema.Tables)
		}
		st.mu.Lock()
		s.Checked, s.Err = st.checked, st.lastErr
		st.mu.Unlock()
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Database, b.Database) })
	return out
}

func (m *Manager) logger() *zap.Logger {
	if m.Logger == nil {
		return zap.NewNop()
	}
	return m.Logger
}

// state returns database's state, starting its worker on first use.
func (m *Manager) state(database string) (*dbState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if m.dbs == nil {
		m.dbs = map[string]*dbState{}
		m.baseCtx, m.stop = context.WithCancel(context.Background())
	}
	st, ok := m.dbs[database]
	if !ok {
		st = &dbState{kick: make(chan struct{}, 1), attempt: make(chan struct{})}
		m.dbs[database] = st
		m.wg.Add(1)
		go m.worker(m.baseCtx, database, st)
	}
	return st, nil
}

// Get returns database's snapshot, waiting for the first build when none is
// loaded yet. A failed first build returns its error; the next Get retries.
func (m *Manager) Get(ctx context.Context, database string) (*Snapshot, error) {
	st, err := m.state(database)
	if err != nil {
		return nil, err
	}
	if s := st.snap.Load(); s != nil {
		return s, nil
	}
	st.mu.Lock()
	wait, failed := st.attempt, st.lastErr != nil
	st.mu.Unlock()
	if failed {
		kick(st)
	}
	select {
	case <-wait:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if s := st.snap.Load(); s != nil {
		return s, nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.lastErr == nil {
		return nil, ErrClosed
	}
	return nil, st.lastErr
}

// Current returns database's snapshot without waiting (nil if none yet).
func (m *Manager) Current(database string) *Snapshot {
	m.mu.Lock()
	st := m.dbs[database]
	m.mu.Unlock()
	if st == nil {
		return nil
	}
	return st.snap.Load()
}

// Refresh asks for a fingerprint check of database, and a rebuild if it
// changed. It never blocks; requests made while a check runs coalesce into
// one more check. Unknown databases are ignored (Get builds them).
func (m *Manager) Refresh(database string) {
	m.mu.Lock()
	st := m.dbs[database]
	m.mu.Unlock()
	if st != nil {
		kick(st)
	}
}

func kick(st *dbState) {
	select {
	case st.kick <- struct{}{}:
	default:
	}
}

// Close stops the workers and waits for running builds to abort.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	if m.stop != nil {
		m.stop()
	}
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

func (m *Manager) worker(ctx context.Context, database string, st *dbState) {
	defer m.wg.Done()
	defer func() { // wake waiters on shutdown
		st.mu.Lock()
		close(st.attempt)
		st.mu.Unlock()
	}()
	log := m.logger().With(zap.String("database", database))
	if m.Store != nil {
		if err := m.syncFromStore(ctx, database, st, log); err != nil {
			log.Warn("catalog store unusable, introspecting", zap.Error(err))
		}
	} else if m.DataDir != "" {
		s, err := LoadSnapshot(m.DataDir, database, m.DescOptions)
		switch {
		case err == nil:
			st.snap.Store(s)
			log.Info("catalog snapshot loaded", zap.String("fingerprint", s.Schema.Fingerprint), zap.Int("version", s.Version))
		case errors.Is(err, fs.ErrNotExist):
		default: // corrupt or other format version: rebuilt by the check below
			log.Warn("catalog snapshot unusable, rebuilding", zap.Error(err))
		}
	}
	var tick, poll <-chan time.Time
	if m.RefreshInterval > 0 {
		t := time.NewTicker(m.RefreshInterval)
		defer t.Stop()
		tick = t.C
	}
	if m.Store != nil {
		every := m.StorePoll
		if every <= 0 {
			every = 10 * time.Second
		}
		t := time.NewTicker(every)
		defer t.Stop()
		poll = t.C
	}
	check := true
	for {
		before := st.snap.Load()
		var err error
		if check {
			err = m.check(ctx, database, st, log)
		} else {
			err = m.syncFromStore(ctx, database, st, log)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Warn("catalog refresh failed", zap.Error(err))
		}
		if m.OnCheck != nil {
			after := st.snap.Load()
			m.OnCheck(database, checkResult(before, after, after != nil && after == st.loaded.Load(), err), after)
		}
		st.mu.Lock()
		st.checked = time.Now()
		st.lastErr = err
		close(st.attempt)
		st.attempt = make(chan struct{})
		st.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-st.kick:
			if !m.debounce(ctx, st) {
				return
			}
			check = true
		case <-tick:
			check = true
		case <-poll:
			check = false
		}
	}
}

// DefaultMinRefreshGap is Manager.MinRefreshGap's default.
const DefaultMinRefreshGap = 30 * time.Second

// debounce holds a Refresh-triggered check until MinRefreshGap has passed
// since the previous check ended; the kicks that arrive meanwhile are
// answered by that one check. A database with no snapshot yet (its build
// failed) is retried at once: an ask is waiting for it. It reports false
// when ctx ended.
func (m *Manager) debounce(ctx context.Context, st *dbState) bool {
	gap := m.MinRefreshGap
	if gap == 0 {
		gap = DefaultMinRefreshGap
	}
	st.mu.Lock()
	wait := gap - time.Since(st.checked)
	st.mu.Unlock()
	if gap < 0 || wait <= 0 || st.snap.Load() == nil {
		return true
	}
	after := m.after
	if after == nil {
		after = time.After
	}
	select {
	case <-ctx.Done():
		return false
	case <-after(wait):
	}
	select { // covered by the check about to run
	case <-st.kick:
	default:
	}
	return true
}

// syncFromStore makes the store's snapshot current when it is newer than
// this replica's.
func (m *Manager) syncFromStore(ctx context.Context, database string, st *dbState, log *zap.Logger) error {
	version, fp, ok, err := m.Store.SnapshotVersion(ctx, database)
	if err != nil || !ok {
		return err
	}
	cur := st.snap.Load()
	if cur != nil && cur.Version >= version && cur.Schema.Fingerprint == fp {
		return nil
	}
	if cur != nil && cur.Version > version {
		return nil // ours is newer; its save will follow or failed (logged)
	}
	snap, err := m.Store.LoadSnapshot(ctx, database, m.DescOptions)
	if err != nil {
		return err
	}
	st.loaded.Store(snap)
	st.snap.Store(snap)
	log.Info("catalog snapshot loaded from the store", zap.String("fingerprint", snap.Schema.Fingerprint), zap.Int("version", snap.Version))
	return nil
}

// checkResult names what a check did, from the snapshots before and after
// (fromStore: after was loaded from the Store, another replica built it).
func checkResult(before, after *Snapshot, fromStore bool, err error) string {
	switch {
	case err != nil:
		return "error"
	case before == after:
		return "unchanged"
	case fromStore:
		return "loaded"
	case before != nil && before.Schema.Fingerprint == after.Schema.Fingerprint:
		return "functions"
	}
	return "rebuilt"
}

// check introspects and rebuilds when the fingerprint differs from the
// current snapshot's.
func (m *Manager) check(ctx context.Context, database string, st *dbState, log *zap.Logger) error {
	timeout := m.BuildTimeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if m.Store != nil {
		release, ok, err := m.Store.LockRefresh(ctx, database)
		if err != nil {
			return err
		}
		if !ok {
			// Another replica is checking; its result arrives by the store.
			return m.syncFromStore(ctx, database, st, log)
		}
		defer release()
		// A replica that held the lock before may have saved a newer
		// snapshot: start from it, so versions only grow.
		if err := m.syncFromStore(ctx, database, st, log); err != nil {
			return err
		}
	}
	conn, err := m.connect(ctx, database)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	start := time.Now()
	s, err := Introspect(ctx, conn, m.IntrospectOptions)
	if err != nil {
		return err
	}
	cur := st.snap.Load()
	if cur != nil && cur.Schema.Fingerprint == s.Fingerprint {
		// Same tables and columns; a view's definition or a function may
		// still have changed, and the guard must judge by the current ones.
		fns, err := LoadFunctions(ctx, conn)
		if err != nil {
			return err
		}
		if fns.Equal(cur.Functions) {
			return nil
		}
		next := *cur
		next.Functions, next.Version = fns, cur.Version+1
		m.publish(st, &next, log)
		log.Info("catalog functions and views refreshed", zap.Int("version", next.Version))
		return nil
	}
	snap, err := BuildFromSchema(ctx, conn, database, s, BuildOptions{
		Introspect: m.IntrospectOptions, Values: m.ValueOptions, SkipValues: m.SkipValues,
		Descriptions: m.DescOptions, Glossary: m.Glossary,
	})
	if err != nil {
		return err
	}
	if cur != nil {
		snap.Version = cur.Version + 1
	}
	m.publish(st, snap, log)
	log.Info("catalog snapshot built", zap.String("fingerprint", s.Fingerprint), zap.Int("version", snap.Version),
		zap.Int("tables", len(s.Tables)), zap.Duration("took", time.Since(start)))
	return nil
}

// publish saves snap (when a data directory is set) and makes it current.
func (m *Manager) publish(st *dbState, snap *Snapshot, log *zap.Logger) {
	if m.Store != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := m.Store.SaveSnapshot(ctx, snap)
		cancel()
		if err != nil {
			log.Error("catalog snapshot not saved to the store", zap.Error(err))
		}
	} else if m.DataDir != "" {
		if err := SaveSnapshot(m.DataDir, snap); err != nil {
			// Serve the fresh snapshot anyway; the next rebuild retries the save.
			log.Error("catalog snapshot not saved", zap.Error(err))
		}
	}
	st.snap.Store(snap)
}

func (m *Manager) connect(ctx context.Context, database string) (*pgx.Conn, error) {
	if m.Connect != nil {
		c, err := m.Connect(ctx, database)
		if err != nil {
			return nil, fmt.Errorf("catalog: connect %s: %w", database, err)
		}
		return c, nil
	}
	if m.DSN == "" {
		return nil, errors.New("catalog: manager has neither Connect nor DSN")
	}
	cfg, err := pgx.ParseConfig(m.DSN)
	if err != nil {
		return nil, fmt.Errorf("catalog: parse DSN: %w", err)
	}
	cfg.Database = database
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("catalog: connect %s: %w", database, err)
	}
	return c, nil
}
